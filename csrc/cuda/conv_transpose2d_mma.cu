#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "cuda/conv_common.cuh"
#include "cuda/conv_transpose2d_mma.cuh"

namespace myops {
namespace cuda {
namespace {

constexpr int kTH = 8, kTW = 16;     // output tile of a phase grid: 8 rows x 16 columns
constexpr int kBN = 64;              // output channels per block
constexpr int kRowsPerStage = 8;     // weight rows per tap and stage (8 fp32 or 8 bf16 pairs)
constexpr int kLdB = kBN + 8;        // words; == 8 mod 32: conflict-free B fragments
constexpr int kLdC = 128 + 4;
constexpr int kMaxSmem = 200 * 1024;
// 4 warps, each 32 pixels (two tile rows) x all 64 channels: every A fragment feeds 8 MMAs
constexpr int kThreads = 128, kWarps = kThreads / 32;

// Channels per stage: the MMA's K (8 for TF32, 16 for 16-bit types).
template <typename T>
constexpr int channels_per_stage() { return std::is_same<T, float>::value ? 8 : 16; }

// Halo geometry of one phase (rows, words per row, words per channel plane).
struct Halo {
  int64_t rows, row_words, plane_words;
};

__host__ __device__ inline Halo halo_of(const PhaseTaps& th, const PhaseTaps& tw, bool pairs) {
  const int64_t rows = kTH + (th.count > 0 ? th.count - 1 : 0) * th.off_step;
  const int64_t cols = kTW + (tw.count > 0 ? tw.count - 1 : 0) * tw.off_step + (pairs ? 1 : 0);
  const int64_t row_words = pairs ? (cols + 1) / 2 : cols;
  int64_t plane = rows * row_words;
  plane += ((8 - plane % 32) + 32) % 32;  // == 8 mod 32: conflict-free A fragments
  return {rows, row_words, plane};
}

struct Geometry {  // worst case over the phases, for sizing
  int64_t max_taps = 0, max_row_words = 0, max_plane_words = 0;
};

Geometry geometry(const ConvTranspose2dParams& p, bool pairs) {
  Geometry g;
  for (int64_t rh = 0; rh < p.sH; ++rh)
    for (int64_t rw = 0; rw < p.sW; ++rw) {
      const PhaseTaps th = phase_taps(rh, p.pH, p.dH, p.sH, p.kH);
      const PhaseTaps tw = phase_taps(rw, p.pW, p.dW, p.sW, p.kW);
      const Halo h = halo_of(th, tw, pairs);
      g.max_taps = std::max(g.max_taps, th.count * tw.count);
      g.max_row_words = std::max(g.max_row_words, h.row_words);
      g.max_plane_words = std::max(g.max_plane_words, h.plane_words);
    }
  return g;
}

template <typename T>
size_t smem_bytes(const ConvTranspose2dParams& p) {
  const Geometry g = geometry(p, !std::is_same<T, float>::value);
  const size_t stage = 4 * (channels_per_stage<T>() * g.max_plane_words + g.max_taps * kRowsPerStage * kLdB);
  return std::max<size_t>(2 * stage, sizeof(float) * kBN * kLdC);
}

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

__device__ inline void cp_async4(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 4 : 0));
}
__device__ inline void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ inline void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ inline uint32_t to_tf32(float f) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(f));
  return r;
}

template <typename T>
__device__ inline void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (std::is_same<T, float>::value) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

struct MmaPhase {
  int64_t rh, rw, OHp, OWp, tile, tap_base;  // tap_base: the phase's first tap in the prepared weight
  PhaseTaps th, tw;
};

__device__ inline MmaPhase decode_mma_tile(int64_t t, const ConvTranspose2dParams& p) {
  int64_t tap_base = 0;
  for (int64_t rh = 0; rh < p.sH; ++rh)
    for (int64_t rw = 0; rw < p.sW; ++rw) {
      const PhaseTaps th = phase_taps(rh, p.pH, p.dH, p.sH, p.kH);
      const PhaseTaps tw = phase_taps(rw, p.pW, p.dW, p.sW, p.kW);
      const int64_t OHp = phase_extent(p.OH, rh, p.sH), OWp = phase_extent(p.OW, rw, p.sW);
      const int64_t tiles = ((OHp + kTH - 1) / kTH) * ((OWp + kTW - 1) / kTW);
      if (t < tiles) return {rh, rw, OHp, OWp, t, tap_base, th, tw};
      t -= tiles;
      tap_base += th.count * tw.count;
    }
  return {};
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 3)
    conv_mma_kernel(const T* __restrict__ x, const uint32_t* __restrict__ wprep,
                    const T* __restrict__ bias, T* __restrict__ out, ConvTranspose2dParams p,
                    ConvEpilogue ep, int64_t n_base, int64_t tiles_per_sample, int64_t stage_words,
                    int64_t a_words, int64_t cin_rows, int64_t cout_pad) {
  constexpr bool kPairs = !std::is_same<T, float>::value;  // 16-bit: two columns per word
  constexpr int kCh = channels_per_stage<T>();
  extern __shared__ __align__(16) uint32_t smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp;  // warp tile: rows 2wm, 2wm+1 of the 8x16 tile, all 64 channels
  const int gq = lane / 4, tq = lane % 4;

  const int64_t n = n_base + blockIdx.z;
  const int64_t col_tiles = (p.C_out_g + kBN - 1) / kBN;
  const int64_t g = blockIdx.y / col_tiles, oc0 = (blockIdx.y % col_tiles) * kBN;
  const MmaPhase ph = decode_mma_tile(blockIdx.x, p);
  const int64_t tiles_w = (ph.OWp + kTW - 1) / kTW;
  const int64_t j0 = (ph.tile / tiles_w) * kTH, i0 = (ph.tile % tiles_w) * kTW;
  const Halo halo = halo_of(ph.th, ph.tw, kPairs);
  const int64_t taps = ph.th.count * ph.tw.count;

  // Halo origin in input coordinates; 16-bit types start at an even column so that each 4-byte
  // copy holds two columns that are both inside or both outside the row (W is even).
  const int64_t row0 = j0 + ph.th.off0 - (ph.th.count - 1) * ph.th.off_step;
  const int64_t col_first = i0 + ph.tw.off0 - (ph.tw.count - 1) * ph.tw.off_step;
  const int64_t col0 = kPairs ? col_first - (col_first & 1) : col_first;
  const int shift = static_cast<int>(col_first - col0);
  const int64_t HW = p.H * p.W;
  const T* x_group = x + (n * p.C_in + g * p.C_in_g) * HW;
  const uint32_t* w_phase = wprep + (g * p.kH * p.kW + ph.tap_base) * cin_rows * cout_pad + oc0;
  const int64_t n_chunks = (p.C_in_g + kCh - 1) / kCh;

  auto issue = [&](int64_t chunk, uint32_t* stage) {
    // A: kCh channel planes x halo rows; one warp per row, one lane per word.
    const int64_t ic0 = chunk * kCh;
    // (nested loops rather than a flat index: a 64-bit division per row cost more than the MMAs)
    const int64_t iw = col0 + (kPairs ? 2 * lane : lane);
    const bool col_ok = lane < halo.row_words && iw >= 0 && iw < p.W;
    if (lane < halo.row_words) {
      for (int k = 0; k < kCh; ++k) {
        const int64_t ic = ic0 + k;
        const T* plane_src = x_group + ic * HW + iw;
        uint32_t* plane_dst = stage + k * halo.plane_words + lane;
        for (int hr = warp; hr < halo.rows; hr += kWarps) {
          const int64_t ih = row0 + hr;
          const bool ok = col_ok && ic < p.C_in_g && ih >= 0 && ih < p.H;
          cp_async4(plane_dst + hr * halo.row_words, ok ? plane_src + ih * p.W : x_group, ok);
        }
      }
    }
    // B: the phase's taps x 8 weight rows x 64 channels, 16 bytes per copy.
    uint32_t* Bs = stage + a_words;
    const int64_t copies = taps * kRowsPerStage * (kBN / 4);
    for (int64_t c = tid; c < copies; c += kThreads) {
      const int64_t q = c % (kBN / 4), row = c / (kBN / 4);
      const int64_t t = row / kRowsPerStage, r = row % kRowsPerStage;
      cp_async16(Bs + row * kLdB + 4 * q, w_phase + (t * cin_rows + chunk * kRowsPerStage + r) * cout_pad + 4 * q);
    }
    cp_async_commit();
  };

  constexpr int kNT = kBN / 8;  // n8 tiles per warp
  float acc[2][kNT][4];
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int b = 0; b < kNT; ++b)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[a][b][e] = 0.f;

  auto compute = [&](const uint32_t* stage) {
    const uint32_t* As = stage;
    const uint32_t* Bs = stage + a_words;
    const unsigned short* Ah = reinterpret_cast<const unsigned short*>(stage);
    // shared-memory indices are small: 32-bit math in the hot loop
    const int cnt_h = static_cast<int>(ph.th.count), cnt_w = static_cast<int>(ph.tw.count);
    const int step_h = static_cast<int>(ph.th.off_step), step_w = static_cast<int>(ph.tw.off_step);
    const int row_words = static_cast<int>(halo.row_words), plane = static_cast<int>(halo.plane_words);
    for (int t_h = 0; t_h < cnt_h; ++t_h) {
      const int dh = (cnt_h - 1 - t_h) * step_h;
      for (int t_w = 0; t_w < cnt_w; ++t_w) {
        const int dw = (cnt_w - 1 - t_w) * step_w + shift;
        const uint32_t* Bt = Bs + (t_h * cnt_w + t_w) * kRowsPerStage * kLdB;
        uint32_t bfrag[kNT][2];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const int col = nt * 8 + gq;
          bfrag[nt][0] = Bt[tq * kLdB + col];
          bfrag[nt][1] = Bt[(tq + 4) * kLdB + col];  // float32 weights are TF32-rounded already
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const int hrow = 2 * wm + mt + dh;
          uint32_t afrag[4];
          if constexpr (!kPairs) {
            const uint32_t* base = As + hrow * row_words + dw + gq;
            afrag[0] = to_tf32(__uint_as_float(base[tq * plane]));
            afrag[1] = to_tf32(__uint_as_float(base[tq * plane + 8]));
            afrag[2] = to_tf32(__uint_as_float(base[(tq + 4) * plane]));
            afrag[3] = to_tf32(__uint_as_float(base[(tq + 4) * plane + 8]));
          } else {
            const int plane_h = 2 * plane;  // in 16-bit units
            const unsigned short* base = Ah + hrow * 2 * row_words + dw + gq;
            auto pack = [&](int k, int col_off) -> uint32_t {
              const uint32_t lo = base[k * plane_h + col_off], hi = base[(k + 1) * plane_h + col_off];
              return lo | (hi << 16);
            };
            afrag[0] = pack(2 * tq, 0);
            afrag[1] = pack(2 * tq, 8);
            afrag[2] = pack(2 * tq + 8, 0);
            afrag[3] = pack(2 * tq + 8, 8);
          }
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) mma<T>(acc[mt][nt], afrag, bfrag[nt]);
        }
      }
    }
  };

  if (taps > 0) {
    issue(0, smem);
    for (int64_t chunk = 0; chunk < n_chunks; ++chunk) {
      if (chunk + 1 < n_chunks) {
        issue(chunk + 1, smem + ((chunk + 1) & 1) * stage_words);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      compute(smem + (chunk & 1) * stage_words);
      __syncthreads();
    }
  }

  // Accumulators -> Cs[channel][pixel], pixel m = row * 16 + column of the tile.
  float* Cs = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int m = (2 * wm + mt) * kTW + gq, c = nt * 8 + 2 * tq;
      Cs[c * kLdC + m] = acc[mt][nt][0];
      Cs[(c + 1) * kLdC + m] = acc[mt][nt][1];
      Cs[c * kLdC + m + 8] = acc[mt][nt][2];
      Cs[(c + 1) * kLdC + m + 8] = acc[mt][nt][3];
    }
  __syncthreads();
  const int rows_valid = static_cast<int>(ph.OHp - j0 < kTH ? ph.OHp - j0 : kTH);
  const int cols_valid = static_cast<int>(ph.OWp - i0 < kTW ? ph.OWp - i0 : kTW);
  conv_epilogue<T, kBN, kThreads>(
      Cs, kLdC, bias, out, p, ep, n, g, oc0, blockIdx.x, tiles_per_sample,
      [=](int m) { return m / kTW < rows_valid && m % kTW < cols_valid; },
      [&](int m) -> TilePixel { return {ph.rh + p.sH * (j0 + m / kTW), ph.rw + p.sW * (i0 + m % kTW)}; });
}

// weight [C_in][C_out_g][kH][kW] -> [groups][phase-ordered taps][C_in_g rows][C_out_pad], zero
// padded; 16-bit types store input-channel pairs interleaved ([C_in_g / 2][C_out_pad][2]) so one
// 32-bit shared load gives a B fragment register.
template <typename T>
__global__ void prepare_mma_weight_kernel(const T* __restrict__ w, T* __restrict__ wp,
                                          ConvTranspose2dParams p, int64_t cin_pad, int64_t cout_pad) {
  constexpr bool kPairs = !std::is_same<T, float>::value;
  const int64_t taps = p.kH * p.kW, total = p.C_in * p.C_out_g * taps;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t tap = idx % taps, oc = (idx / taps) % p.C_out_g, ic = idx / (taps * p.C_out_g);
    const int64_t kh = tap / p.kW, kw = tap % p.kW;
    const int64_t g = ic / p.C_in_g, icg = ic % p.C_in_g;
    const int64_t rh = (((kh * p.dH - p.pH) % p.sH) + p.sH) % p.sH;
    const int64_t rw = (((kw * p.dW - p.pW) % p.sW) + p.sW) % p.sW;
    int64_t base = 0;  // taps of the phases before (rh, rw)
    for (int64_t a = 0; a < p.sH; ++a)
      for (int64_t b = 0; b < p.sW; ++b) {
        if (a == rh && b == rw) goto found;
        base += phase_taps(a, p.pH, p.dH, p.sH, p.kH).count * phase_taps(b, p.pW, p.dW, p.sW, p.kW).count;
      }
  found:
    const PhaseTaps th = phase_taps(rh, p.pH, p.dH, p.sH, p.kH);
    const PhaseTaps tw = phase_taps(rw, p.pW, p.dW, p.sW, p.kW);
    const int64_t t = ((kh - th.k0) / th.step) * tw.count + (kw - tw.k0) / tw.step;
    const int64_t tap_row = (g * taps + base + t) * cin_pad;
    const int64_t dst = kPairs ? ((tap_row + (icg & ~int64_t(1))) * cout_pad + 2 * oc + (icg & 1))
                               : (tap_row + icg) * cout_pad + oc;
    if constexpr (kPairs) {
      wp[dst] = w[idx];
    } else {  // round to TF32 once here instead of in every block's fragments
      wp[dst] = __uint_as_float(to_tf32(w[idx]));
    }
  }
}

template <typename T>
cudaError_t launch(const void* x, const void* wprep, const void* bias, void* out,
                   const ConvTranspose2dParams& p, const ConvEpilogue& ep, cudaStream_t stream) {
  constexpr bool kPairs = !std::is_same<T, float>::value;
  const int64_t tiles = conv_mma_tiles_per_sample(p);
  const int64_t col_tiles = p.groups * ((p.C_out_g + kBN - 1) / kBN);
  if (tiles == 0 || p.N == 0) return cudaSuccess;
  if (tiles > 0x7fffffff || col_tiles > 65535) return cudaErrorInvalidConfiguration;
  const Geometry geo = geometry(p, kPairs);
  const int64_t a_words = channels_per_stage<T>() * geo.max_plane_words;
  const int64_t stage_words = a_words + geo.max_taps * kRowsPerStage * kLdB;
  const size_t smem = smem_bytes<T>(p);
  cudaError_t err = cudaFuncSetAttribute(conv_mma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const int64_t cin_pad = round_up(p.C_in_g, channels_per_stage<T>());
  const int64_t cin_rows = kPairs ? cin_pad / 2 : cin_pad;  // 32-bit rows per tap
  const int64_t cout_pad_words = round_up(p.C_out_g, kBN);
  for (int64_t n0 = 0; n0 < p.N; n0 += 65535) {
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(col_tiles),
                    static_cast<unsigned>(std::min<int64_t>(65535, p.N - n0)));
    conv_mma_kernel<T><<<grid, kThreads, smem, stream>>>(
        static_cast<const T*>(x), static_cast<const uint32_t*>(wprep), static_cast<const T*>(bias),
        static_cast<T*>(out), p, ep, n0, tiles, stage_words, a_words, cin_rows, cout_pad_words);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace

bool conv_mma_supported(const ConvTranspose2dParams& p, DType dtype, Fp32Math fp32_math) {
  if (dtype == DType::F64 || (dtype == DType::F32 && fp32_math != Fp32Math::TF32)) return false;
  const bool pairs = dtype != DType::F32;
  if (pairs && p.W % 2 != 0) return false;  // 4-byte halo copies hold two columns of one row
  const Geometry g = geometry(p, pairs);
  if (g.max_row_words > 32) return false;  // one warp lane per halo word
  return (pairs ? smem_bytes<__half>(p) : smem_bytes<float>(p)) <= kMaxSmem;
}

int64_t conv_mma_tiles_per_sample(const ConvTranspose2dParams& p) {
  int64_t tiles = 0;
  for (int64_t rh = 0; rh < p.sH; ++rh)
    for (int64_t rw = 0; rw < p.sW; ++rw)
      tiles += ((phase_extent(p.OH, rh, p.sH) + kTH - 1) / kTH) * ((phase_extent(p.OW, rw, p.sW) + kTW - 1) / kTW);
  return tiles;
}

int64_t conv_mma_prepared_weight_numel(const ConvTranspose2dParams& p, DType dtype) {
  const int64_t ch = dtype == DType::F32 ? 8 : 16;
  const int64_t cout = dtype == DType::F32 ? round_up(p.C_out_g, kBN) : 2 * round_up(p.C_out_g, kBN);
  const int64_t rows = dtype == DType::F32 ? round_up(p.C_in_g, ch) : round_up(p.C_in_g, ch) / 2;
  return p.groups * p.kH * p.kW * rows * cout;
}

cudaError_t conv_mma_prepare_weight(const void* weight, void* prepared, DType dtype,
                                    const ConvTranspose2dParams& p, cudaStream_t stream) {
  const int64_t numel = conv_mma_prepared_weight_numel(p, dtype);
  const size_t elem = dtype == DType::F32 ? 4 : 2;
  cudaError_t err = cudaMemsetAsync(prepared, 0, numel * elem, stream);
  if (err != cudaSuccess) return err;
  const int64_t total = p.C_in * p.C_out_g * p.kH * p.kW;
  const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 4096));
  const int64_t ch = dtype == DType::F32 ? 8 : 16;
  const int64_t cin_pad = round_up(p.C_in_g, ch), cout_pad = round_up(p.C_out_g, kBN);
  switch (dtype) {
    case DType::F32: prepare_mma_weight_kernel<<<blocks, 256, 0, stream>>>(static_cast<const float*>(weight), static_cast<float*>(prepared), p, cin_pad, cout_pad); break;
    case DType::F16: prepare_mma_weight_kernel<<<blocks, 256, 0, stream>>>(static_cast<const __half*>(weight), static_cast<__half*>(prepared), p, cin_pad, cout_pad); break;
    case DType::BF16: prepare_mma_weight_kernel<<<blocks, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(weight), static_cast<__nv_bfloat16*>(prepared), p, cin_pad, cout_pad); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t conv_mma_forward(const void* x, const void* prepared_weight, const void* bias, void* out,
                             DType dtype, const ConvTranspose2dParams& p, const ConvEpilogue& ep,
                             cudaStream_t stream) {
  switch (dtype) {
    case DType::F32: return launch<float>(x, prepared_weight, bias, out, p, ep, stream);
    case DType::F16: return launch<__half>(x, prepared_weight, bias, out, p, ep, stream);
    case DType::BF16: return launch<__nv_bfloat16>(x, prepared_weight, bias, out, p, ep, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace myops
