// Generic implicit-GEMM conv_transpose2d. One block = 128 output pixels of one phase of one sample
// x BN output channels of one group. The K loop visits only the taps that reach the block's
// phase (a block-uniform test), C_in / groups in chunks of kBK. Tensor cores through WMMA: TF32
// for float32 (when allowed), bf16 / fp16 with float32 accumulation; float64 and strict float32
// run an FFMA micro-tile. The epilogue adds the bias, optionally applies GELU, writes the output
// and optionally the per-tile GroupNorm partials of its channels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <type_traits>

#include "cuda/conv/common/conv_common.cuh"
#include "cuda/conv/generic/generic.cuh"

namespace myops {
namespace cuda {
namespace {

constexpr int kThreads = kConvThreads;
constexpr int kBM = 128;  // output pixels per block
constexpr int kBK = 16;
constexpr int kPadAB = 8;  // keeps WMMA pointers 32-byte aligned and spreads smem banks
constexpr int kPadC = 4;

struct Phase {
  int64_t rh, rw;      // output residues: oh = rh + sH * j, ow = rw + sW * i
  int64_t OHp, OWp;    // phase grid size
  int64_t tile;        // tile index inside the phase
};

// Finds the phase and in-phase tile of flat tile index t (phases in row-major residue order).
__device__ inline Phase decode_tile(int64_t t, const ConvTranspose2dParams& p) {
  for (int64_t rh = 0; rh < p.sH; ++rh) {
    for (int64_t rw = 0; rw < p.sW; ++rw) {
      const int64_t OHp = phase_extent(p.OH, rh, p.sH), OWp = phase_extent(p.OW, rw, p.sW);
      const int64_t tiles = (OHp * OWp + kBM - 1) / kBM;
      if (t < tiles) return {rh, rw, OHp, OWp, t};
      t -= tiles;
    }
  }
  return {0, 0, 0, 0, 0};
}

template <typename T, bool kTensorCore, int BN>
struct TileConfig {
  using acc_t = typename DTypeTraits<T>::acc_t;
  static constexpr int kLdA = kBM + kPadAB, kLdB = BN + kPadAB, kLdC = kBM + kPadC;
  // two stages of A / B (T, as loaded; TF32 rounding happens in the fragments)
  static constexpr size_t kStageElems = kBK * (kLdA + kLdB);
  static constexpr size_t kBytesAB = 2 * sizeof(T) * kStageElems;
  static constexpr size_t kBytesC = sizeof(acc_t) * BN * kLdC;
  static constexpr size_t kSmem = kBytesAB > kBytesC ? kBytesAB : kBytesC;
  static constexpr int kLoadsA = kBK * kBM / kThreads, kLoadsB = kBK * BN / kThreads;
};

template <typename T, bool kTensorCore, int BN>
__global__ void __launch_bounds__(kThreads, 2)
    conv_transpose2d_kernel(const T* __restrict__ x, const T* __restrict__ wt,
                            const T* __restrict__ bias, T* __restrict__ out,
                            ConvTranspose2dParams p, ConvEpilogue ep, int64_t n_base,
                            int64_t tiles_per_sample) {
  using Cfg = TileConfig<T, kTensorCore, BN>;
  using acc_t = typename Cfg::acc_t;
  using Traits = DTypeTraits<T>;
  constexpr int kLdA = Cfg::kLdA, kLdB = Cfg::kLdB, kLdC = Cfg::kLdC;
  constexpr int kLoadsA = Cfg::kLoadsA, kLoadsB = Cfg::kLoadsB;
  __shared__ __align__(128) unsigned char smem_raw[Cfg::kSmem];
  T* stage0 = reinterpret_cast<T*>(smem_raw);       // per stage: A [kBK][kLdA], then B [kBK][kLdB]
  acc_t* Cs = reinterpret_cast<acc_t*>(smem_raw);   // [BN][kLdC] (epilogue, reuses the stages)

  const int tid = threadIdx.x;
  const int64_t n = n_base + blockIdx.z;
  const int64_t n_col_tiles = (p.C_out_g + BN - 1) / BN;
  const int64_t g = blockIdx.y / n_col_tiles;
  const int64_t oc0 = (blockIdx.y % n_col_tiles) * BN;  // first output channel within the group
  const Phase ph = decode_tile(blockIdx.x, p);
  const int64_t P = ph.OHp * ph.OWp;
  const int64_t m_base = ph.tile * kBM;

  // This thread's pixel (the same for the A loads and the epilogue) and its A rows.
  const int my_m = tid % kBM;
  const int a_k0 = tid / kBM;  // rows a_k0 + (kThreads / kBM) * r
  constexpr int kRowStep = kThreads / kBM;
  const int64_t my_mg = m_base + my_m;
  const bool my_valid = my_mg < P;
  const int64_t my_j = my_valid ? my_mg / ph.OWp : 0, my_i = my_valid ? my_mg % ph.OWp : 0;
  const int64_t HW = p.H * p.W;
  const T* x_group = x + (n * p.C_in + g * p.C_in_g) * HW;
  const T* wt_group = wt + g * p.kH * p.kW * p.C_in_g * p.C_out_g;

  const PhaseTaps th = phase_taps(ph.rh, p.pH, p.dH, p.sH, p.kH);
  const PhaseTaps tw = phase_taps(ph.rw, p.pW, p.dW, p.sW, p.kW);
  const int64_t n_chunks = (p.C_in_g + kBK - 1) / kBK;
  const int64_t n_iter = th.count * tw.count * n_chunks;  // 0: no tap reaches this phase

  T ra[kLoadsA], rb[kLoadsB];
  const T zero = Traits::from_acc(acc_t(0));
  auto load = [&](int64_t it) {  // global -> registers, for K step `it`
    const int64_t chunk = it % n_chunks, tap = it / n_chunks;
    const int64_t t_h = tap / tw.count, t_w = tap % tw.count;
    const int64_t ic0 = chunk * kBK;
    const int64_t ih = my_j + th.off0 - t_h * th.off_step, iw = my_i + tw.off0 - t_w * tw.off_step;
    const bool pix_ok = my_valid && ih >= 0 && ih < p.H && iw >= 0 && iw < p.W;
    const T* xp = x_group + (pix_ok ? ih * p.W + iw : 0);
#pragma unroll
    for (int r = 0; r < kLoadsA; ++r) {
      const int64_t ic = ic0 + a_k0 + kRowStep * r;
      ra[r] = (pix_ok && ic < p.C_in_g) ? xp[ic * HW] : zero;
    }
    const int64_t kh = th.k0 + t_h * th.step, kw = tw.k0 + t_w * tw.step;
    const T* wp = wt_group + (kh * p.kW + kw) * p.C_in_g * p.C_out_g;
#pragma unroll
    for (int r = 0; r < kLoadsB; ++r) {
      const int idx = tid + kThreads * r;
      const int64_t ic = ic0 + idx / BN, oc = oc0 + idx % BN;
      rb[r] = (ic < p.C_in_g && oc < p.C_out_g) ? wp[ic * p.C_out_g + oc] : zero;
    }
  };
  auto store = [&](T* stage) {  // registers -> shared memory
    T* As = stage;
    T* Bs = stage + kBK * kLdA;
#pragma unroll
    for (int r = 0; r < kLoadsA; ++r) As[(a_k0 + kRowStep * r) * kLdA + my_m] = ra[r];
#pragma unroll
    for (int r = 0; r < kLoadsB; ++r) {
      const int idx = tid + kThreads * r;
      Bs[(idx / BN) * kLdB + idx % BN] = rb[r];
    }
  };

  // FFMA micro-tile: thread (tx, ty) owns pixels tx + 16 * a and channels ty + 16 * b.
  constexpr int kTM = kBM / 16, kTN = BN / 16;
  acc_t acc[kTensorCore ? 1 : kTM][kTensorCore ? 1 : kTN];
  // Tensor cores: 8 warps as kWM x kWN, each owning (kBM / kWM) x 32.
  constexpr int kWN = BN / 32, kWM = 8 / kWN, kFragM = kBM / kWM / 16, kFragN = 2;
  using namespace nvcuda;
  using Mma = typename DTypeTraits<T>::template Wmma<kTensorCore>;
  typename Mma::Acc cfrag[kTensorCore ? kFragM : 1][kTensorCore ? kFragN : 1];
  const int warp = tid / 32, wm = warp % kWM, wn = warp / kWM;
  if constexpr (kTensorCore) {
#pragma unroll
    for (int a = 0; a < kFragM; ++a)
#pragma unroll
      for (int b = 0; b < kFragN; ++b) wmma::fill_fragment(cfrag[a][b], 0.0f);
  } else {
#pragma unroll
    for (int a = 0; a < kTM; ++a)
#pragma unroll
      for (int b = 0; b < kTN; ++b) acc[a][b] = acc_t(0);
  }
  auto compute = [&](const T* stage) {
    const T* As = stage;
    const T* Bs = stage + kBK * kLdA;
    if constexpr (kTensorCore) {
#pragma unroll
      for (int kk = 0; kk < kBK; kk += Mma::kK) {
        typename Mma::A afrag[kFragM];
        typename Mma::B bfrag[kFragN];
#pragma unroll
        for (int a = 0; a < kFragM; ++a) {
          wmma::load_matrix_sync(afrag[a], As + kk * kLdA + (wm * kFragM + a) * 16, kLdA);
          Mma::round(afrag[a]);
        }
#pragma unroll
        for (int b = 0; b < kFragN; ++b) {
          wmma::load_matrix_sync(bfrag[b], Bs + kk * kLdB + (wn * kFragN + b) * 16, kLdB);
          Mma::round(bfrag[b]);
        }
#pragma unroll
        for (int a = 0; a < kFragM; ++a)
#pragma unroll
          for (int b = 0; b < kFragN; ++b) wmma::mma_sync(cfrag[a][b], afrag[a], bfrag[b], cfrag[a][b]);
      }
    } else {
      const int tx = tid % 16, ty = tid / 16;
#pragma unroll
      for (int kk = 0; kk < kBK; ++kk) {
        acc_t av[kTM], bv[kTN];
#pragma unroll
        for (int a = 0; a < kTM; ++a) av[a] = Traits::to_acc(As[kk * kLdA + tx + 16 * a]);
#pragma unroll
        for (int b = 0; b < kTN; ++b) bv[b] = Traits::to_acc(Bs[kk * kLdB + ty + 16 * b]);
#pragma unroll
        for (int a = 0; a < kTM; ++a)
#pragma unroll
          for (int b = 0; b < kTN; ++b) acc[a][b] = fma(av[a], bv[b], acc[a][b]);
      }
    }
  };

  // Two-stage pipeline: the global loads of step it + 1 are in flight while step it computes.
  if (n_iter > 0) {
    load(0);
    store(stage0);
    __syncthreads();
    for (int64_t it = 0; it < n_iter; ++it) {
      T* cur = stage0 + (it & 1) * Cfg::kStageElems;
      T* nxt = stage0 + ((it + 1) & 1) * Cfg::kStageElems;
      const bool more = it + 1 < n_iter;
      if (more) load(it + 1);
      compute(cur);
      if (more) store(nxt);
      __syncthreads();
    }
  }

  // Accumulators -> Cs[channel][pixel].
  if constexpr (kTensorCore) {
#pragma unroll
    for (int a = 0; a < kFragM; ++a)
#pragma unroll
      for (int b = 0; b < kFragN; ++b)
        wmma::store_matrix_sync(Cs + (wn * kFragN + b) * 16 * kLdC + (wm * kFragM + a) * 16,
                                cfrag[a][b], kLdC, wmma::mem_col_major);
  } else {
    const int tx = tid % 16, ty = tid / 16;
#pragma unroll
    for (int a = 0; a < kTM; ++a)
#pragma unroll
      for (int b = 0; b < kTN; ++b) Cs[(ty + 16 * b) * kLdC + tx + 16 * a] = acc[a][b];
  }
  __syncthreads();

  const int m_valid = static_cast<int>(P - m_base < kBM ? P - m_base : kBM);
  __shared__ int64_t pix_off[kBM];
  conv_epilogue<T, kBM, BN, kThreads, false>(
      Cs, kLdC, bias, out, p, ep, n, g, oc0, blockIdx.x, tiles_per_sample, 1, kBM,
      EpilogueThreads<>{static_cast<int>(threadIdx.x), pix_off}, [&](int m) -> int64_t {
        if (m >= m_valid) return -1;
        const int64_t mg = m_base + m;
        return (ph.rh + p.sH * (mg / ph.OWp)) * p.OW + ph.rw + p.sW * (mg % ph.OWp);
      });
}

template <typename T>
__global__ void prepare_weight_kernel(const T* __restrict__ w, T* __restrict__ wt,
                                      ConvTranspose2dParams p) {
  const int64_t taps = p.kH * p.kW, total = p.C_in * p.C_out_g * taps;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    // source [C_in][C_out_g][taps] -> destination [groups][taps][C_in_g][C_out_g]
    const int64_t tap = idx % taps, oc = (idx / taps) % p.C_out_g, ic = idx / (taps * p.C_out_g);
    const int64_t g = ic / p.C_in_g, icg = ic % p.C_in_g;
    wt[((g * taps + tap) * p.C_in_g + icg) * p.C_out_g + oc] = w[idx];
  }
}

template <typename T, bool kTensorCore, int BN>
cudaError_t launch(const T* x, const T* wt, const T* bias, T* out, const ConvTranspose2dParams& p,
                   const ConvEpilogue& ep, cudaStream_t stream) {
  const int64_t col_tiles = p.groups * ((p.C_out_g + BN - 1) / BN);
  return launch_conv_grid(conv_transpose2d_kernel<T, kTensorCore, BN>, kThreads, 0, stream,
                          conv_generic_tiles_per_sample(p), col_tiles, p.N, 1, x, wt, bias, out, p, ep);
}

template <typename T, bool kTensorCore>
cudaError_t launch_bn(const void* x, const void* wt, const void* bias, void* out,
                      const ConvTranspose2dParams& p, const ConvEpilogue& ep, cudaStream_t s) {
  // Narrow column tiles when a group has few output channels (less padding work); float64 always
  // takes the narrow tile (its epilogue buffer would not fit 48 KB at 64 channels).
  const bool narrow = p.C_out_g <= 32 || std::is_same<T, double>::value;
  auto* xt = static_cast<const T*>(x);
  auto* wtt = static_cast<const T*>(wt);
  auto* bt = static_cast<const T*>(bias);
  auto* ot = static_cast<T*>(out);
  if (narrow) return launch<T, kTensorCore, 32>(xt, wtt, bt, ot, p, ep, s);
  if constexpr (!std::is_same<T, double>::value) return launch<T, kTensorCore, 64>(xt, wtt, bt, ot, p, ep, s);
  return cudaErrorInvalidValue;
}

}  // namespace

int64_t conv_generic_tiles_per_sample(const ConvTranspose2dParams& p) {
  int64_t tiles = 0;
  for (int64_t rh = 0; rh < p.sH; ++rh)
    for (int64_t rw = 0; rw < p.sW; ++rw)
      tiles += (phase_extent(p.OH, rh, p.sH) * phase_extent(p.OW, rw, p.sW) + kBM - 1) / kBM;
  return tiles;
}

cudaError_t conv_generic_prepare_weight(const void* weight, void* prepared, DType dtype, const ConvTranspose2dParams& p,
                                        cudaStream_t stream) {
  const int64_t total = conv_generic_prepared_weight_numel(p);
  if (total == 0) return cudaSuccess;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    prepare_weight_kernel<<<prepare_blocks(total), 256, 0, stream>>>(static_cast<const T*>(weight),
                                                                     static_cast<T*>(prepared), p);
    return cudaGetLastError();
  });
}

cudaError_t conv_generic_forward(const void* x, const void* prepared_weight, const void* bias, void* out, DType dtype,
                                 Fp32Math fp32_math, const ConvTranspose2dParams& p, const ConvEpilogue& ep,
                                 cudaStream_t stream) {
  switch (dtype) {
    case DType::F32:
      return fp32_math == Fp32Math::TF32
                 ? launch_bn<float, true>(x, prepared_weight, bias, out, p, ep, stream)
                 : launch_bn<float, false>(x, prepared_weight, bias, out, p, ep, stream);
    case DType::F64: return launch_bn<double, false>(x, prepared_weight, bias, out, p, ep, stream);
    case DType::F16: return launch_bn<__half, true>(x, prepared_weight, bias, out, p, ep, stream);
    case DType::BF16: return launch_bn<__nv_bfloat16, true>(x, prepared_weight, bias, out, p, ep, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace myops
