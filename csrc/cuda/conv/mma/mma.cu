#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "cuda/conv/common/conv_common.cuh"
#include "cuda/conv/mma/mma.cuh"
#include "cuda/conv/common/conv_tile_geometry.cuh"
#include "cuda/conv/mma/winograd_rows.cuh"

namespace myops {
namespace cuda {
namespace {

constexpr int kPxWarps = 4;                  // warps along the pixels of a tile
constexpr int kWarpPx = 64;                  // pixels per warp: 8 n8 tiles
constexpr int kTilePx = kPxWarps * kWarpPx;  // pixels per block
constexpr int kMaxHalo = 512;                // halo pixels per tile (staged by all threads)
// A halo pixel holds 32 bytes of channels; its row is 48 bytes so that the 8 rows of an ldmatrix
// (8 neighbouring pixels) fall in 8 distinct 16-byte bank groups.
constexpr int kHaloPitch = 12;               // words
constexpr int kFragWords = 128;              // one m16 A fragment for a warp: 32 lanes x 4 words
constexpr size_t kMaxSmem = 200 * 1024;
constexpr size_t kTwoBlocksSmem = 110 * 1024;  // two blocks per SM fit under this
// Winograd rows: a block's 64 row pairs (128 output pixels); the epilogue first gathers the 4
// components of each (channel, pair) in Ms[component][channel][pair], rows kWinoMsLd words apart
// (8 channels apart = 8 banks: the quarter-warps' 8-pair stores fall in distinct banks).
constexpr int kWinoPairs = kTilePx / 4;
constexpr int kWinoMsLd = kWinoPairs + 1;
constexpr int kWinoMsWords = 4 * 64 * kWinoMsLd;

// Prepared-weight taps for `direct_taps` kernel taps (a group's kH * kW, or those before a
// phase): the same, or their Winograd rows. The kernels and the host size the buffer with it.
__host__ __device__ inline int64_t prepared_taps(int64_t direct_taps, bool wino) {
  return wino ? winograd_taps(direct_taps) : direct_taps;
}


template <typename T>
__device__ inline void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same<T, float>::value) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// N consecutive floats from shared memory (16-byte aligned for N >= 4, 8-byte for N = 2) in
// the fewest vector loads.
template <int N>
__device__ inline void load_floats(const float* src, float (&v)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      const float4 q = *reinterpret_cast<const float4*>(src + i);
      v[i] = q.x, v[i + 1] = q.y, v[i + 2] = q.z, v[i + 3] = q.w;
    }
  } else if constexpr (N == 2) {
    const float2 q = *reinterpret_cast<const float2*>(src);
    v[0] = q.x, v[1] = q.y;
  } else {
    v[0] = *src;
  }
}

// Shared-memory layout of a launch (words).
struct SmemLayout {
  int w_stage, t_stage;  // one stage of weights / of the halo
  int c_ld;              // epilogue tile Cs[channel][pixel] row stride
  size_t bytes;
};

SmemLayout smem_layout(const ConvTranspose2dParams& p, const MmaTiling& t) {
  const PhaseMaxima most = phase_maxima(p, t.th, t.tw);
  SmemLayout s;
  if (t.wino) {  // 4 transformed weight rows; 4 transformed halo planes of th / 2 pair rows
    s.w_stage = static_cast<int>(winograd_taps(most.taps)) * t.mt * t.wm * kFragWords;
    s.t_stage = 2 * t.th * most.halo_cols * kHaloPitch;
    s.c_ld = kTilePx / 2 + 8;
    const int pipeline = 2 * (s.w_stage + s.t_stage), epilogue = kWinoMsWords + 16 * t.mt * t.wm * s.c_ld;
    s.bytes = 4 * static_cast<size_t>(std::max(pipeline, epilogue));
    return s;
  }
  s.w_stage = most.taps * t.mt * t.wm * kFragWords;
  s.t_stage = t.tn * most.halo * kHaloPitch;
  s.c_ld = kTilePx + 8;
  const int pipeline = 2 * (s.w_stage + s.t_stage), epilogue = 16 * t.mt * t.wm * s.c_ld;
  s.bytes = 4 * static_cast<size_t>(std::max(pipeline, epilogue));
  return s;
}

// MT m16 tiles of output channels per warp, WM warps along the channels (so 16 * MT * WM
// channels per block) x kPxWarps warps along the pixels.
// kFfma (float32 with TF32 off): the same staging with exact float32 operands and an FFMA
// micro-tile per thread instead of mma.sync (8 pixels x 8 channels, see compute_ffma).
// kUnitOutputs: the build for 1 x 1 outputs (the pointwise view: see conv_epilogue).
// kWino (FFMA mode, Winograd rows; MmaTiling::wino): the warps' 4 pixel columns become the 4
// row components, each over all 64 row pairs of the tile.
template <typename T, int MT, int WM, bool kFfma, int kMinBlocks, bool kUnitOutputs, bool kWino>
__global__ void __launch_bounds__(128 * WM, kMinBlocks)
    conv_mma_kernel(const T* __restrict__ x, const uint32_t* __restrict__ wprep,
                    const T* __restrict__ bias, T* __restrict__ out, ConvTranspose2dParams p,
                    ConvEpilogue ep, MmaTiling tl, SmemLayout sl, PhaseTable phases,
                    int64_t n_base, int64_t tiles_per_sample) {
  // blockIdx.z: a group of tl.tn images from n_base
  constexpr bool kF32 = std::is_same<T, float>::value;
  static_assert(!kFfma || (kF32 && MT == 2 && WM == 2), "the FFMA mode is float32, 64 channels, 8 warps");
  static_assert(!kWino || (kFfma && !kUnitOutputs), "Winograd rows are an FFMA mode");
  constexpr int kOutPx = kWino ? 2 * kWinoPairs : kTilePx;  // output pixels of a block's tile
  constexpr int kCh = chunk_channels<T>();
  constexpr int kThreads = 128 * WM, kBM16 = MT * WM, kBN = 16 * kBM16;
  constexpr int kPxPerThread = kMaxHalo / kThreads;  // halo pixels each thread stages per chunk
  using Raw = typename std::conditional<kF32, float, unsigned short>::type;
  extern __shared__ __align__(16) uint32_t smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int warp_m = warp / kPxWarps, warp_n = warp % kPxWarps;
  // FFMA micro-tile: pixels ffma_px0 + 8 j and output channels ffma_ch0 + i of the block (i, j < 8);
  // the 8 lanes of a quarter-warp take neighbouring pixels, the 4 quarter-warps 8 channels each.
  // Winograd rows: row pairs instead of pixels, component warp_n of each.
  const int ffma_px0 = (kWino ? 0 : warp_n * kWarpPx) + lane % 8, ffma_ch0 = warp_m * 32 + (lane / 8) * 8;

  const int64_t n = n_base + int64_t(blockIdx.z) * tl.tn;
  const int images = static_cast<int>(min(static_cast<int64_t>(tl.tn), p.N - n));  // of this tile
  const int64_t col_tiles = (p.C_out_g + kBN - 1) / kBN;
  const int64_t g = blockIdx.y / col_tiles, ct = blockIdx.y % col_tiles, oc0 = ct * kBN;
  const TileOrigin origin = locate_tile(phases, static_cast<int>(blockIdx.x), tl.th, tl.tw);
  const PhaseEntry& ph = phases.e[origin.phase];
  const int j0 = origin.j0, i0 = origin.i0;
  // Winograd rows: a warp walks the width taps of its component alone (one row of taps)
  const int cnt_h = kWino ? 1 : ph.count_h, cnt_w = ph.count_w;
  const int step_h = ph.off_step_h, step_w = ph.off_step_w;
  const int taps = cnt_h * cnt_w, hcols = ph.hcols, hpx = ph.hrows * ph.hcols;
  const int pair_rows = tl.th / 2;  // Winograd rows: of the tile
  const int tile_px = tl.th * tl.tw;  // per image

  // mma: acc[mt][nt] is the C fragment of m16 tile mt x n8 tile nt; FFMA: acc[i / 4][j][i % 4]
  // is output channel i x pixel j of the thread's micro-tile (same 128 registers).
  float acc[MT][8][4];
#pragma unroll
  for (int a = 0; a < MT; ++a)
#pragma unroll
    for (int b = 0; b < 8; ++b)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[a][b][e] = 0.f;

  if (taps > 0) {
    const int64_t HW = p.H * p.W;
    const int64_t n_chunks = (p.C_in_g + kCh - 1) / kCh;
    const int64_t co16 = col_tiles * kBM16;  // m16 blocks per group in the prepared weight
    const int64_t tap_stride = n_chunks * co16 * kFragWords, chunk_stride = co16 * kFragWords;
    // prepared taps of a group, before the phase, and this block copies per chunk
    const int64_t group_taps = prepared_taps(p.kH * p.kW, kWino), phase_tap0 = prepared_taps(ph.tap_base, kWino);
    const int block_taps = kWino ? 4 * cnt_w : taps;
    const uint32_t* w_block = wprep + ((g * group_taps + phase_tap0) * n_chunks * co16 + ct * kBM16) * kFragWords;
    const Raw* x_group = reinterpret_cast<const Raw*>(x) + (n * p.C_in + g * p.C_in_g) * HW;
    // stage s: weights at smem + s * w_stage, halo at smem + 2 * w_stage + s * t_stage
    auto w_stage = [&](int64_t s) { return smem + (s & 1) * sl.w_stage; };
    auto t_stage = [&](int64_t s) { return smem + 2 * sl.w_stage + (s & 1) * sl.t_stage; };

    // The halo pixels this thread stages: offset from the group's first channel plane of image n
    // (the host guarantees (tn * C_in + 16) * H * W < 2^31, so that is 32-bit) and index in the
    // halo (-1: none; images follow each other there). Pixels outside the image load a valid
    // address and are zeroed when stored: the loads carry no branches.
    const int64_t row0 = halo_row0(ph, j0), col0 = halo_col0(ph, i0);
    int src[kPxPerThread], dst[kPxPerThread];
    unsigned inside = 0;
#pragma unroll
    for (int k = 0; k < kPxPerThread; ++k) {
      const int h = tid + k * kThreads, img = h / hpx;
      dst[k] = img < images ? h : -1;
      src[k] = 0;
      if (img < images) {
        const int hr = (h - img * hpx) / hcols, hc = h - img * hpx - hr * hcols;
        const int64_t ih = row0 + hr, iw = col0 + hc;
        if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W) {
          src[k] = static_cast<int>(img * p.C_in * HW + ih * p.W + iw);
          inside |= 1u << k;
        }
      }
    }
    Raw staged[kPxPerThread][kCh];
    int ch_valid = 0;  // channels of the chunk in flight that exist (the rest are zero padding)
    auto load_direct_halo = [&](int64_t chunk) {
      ch_valid = static_cast<int>(min(static_cast<int64_t>(kCh), p.C_in_g - chunk * kCh));
      load_halo_planes(staged, x_group + chunk * kCh * HW, HW, ch_valid, ~0u, src);
    };
    auto store_direct_halo = [&](uint32_t* stage) {
#pragma unroll
      for (int k = 0; k < kPxPerThread; ++k) {
        if (dst[k] < 0) continue;
        const bool in = (inside >> k) & 1u;
        uint32_t w[8];
        if (kF32 && ch_valid == kCh) {  // float32 full chunks: no per-value channel test
          pack_halo_pixel<T, Raw, !kFfma>(staged[k], in, kCh, w);
        } else {  // (16-bit types spill with two copies of the packing)
          pack_halo_pixel<T, Raw, !kFfma>(staged[k], in, ch_valid, w);
        }
        uint4* d = reinterpret_cast<uint4*>(stage + dst[k] * kHaloPitch);
        d[0] = make_uint4(w[0], w[1], w[2], w[3]);
        d[1] = make_uint4(w[4], w[5], w[6], w[7]);
      }
    };
    // Winograd rows: the halo holds 4 transformed planes of pair_rows x hcols pixels. Thread tid
    // stages column wino_col of pair row wino_row, channels 4 wino_half .. + 3 of each chunk:
    // the 4 input rows that pair's transform reads (the host keeps th * hcols <= 256 threads).
    const int wino_half = tid % 2, wino_col = (tid / 2) % hcols, wino_row = tid / 2 / hcols;
    const bool wino_stages = kWino && wino_row < pair_rows;
    int wino_src[4];
    unsigned wino_inside = 0;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t ih = row0 + 2 * wino_row + r, iw = col0 + wino_col;
      const bool in = wino_stages && ih >= 0 && ih < p.H && iw >= 0 && iw < p.W;
      wino_src[r] = in ? static_cast<int>(ih * p.W + iw) : 0;
      wino_inside |= unsigned(in) << r;
    }
    float wino_staged[4][4];
    int wino_ch_valid = 0;  // of the thread's 4 channels (<= 0: none)
    auto load_wino_halo = [&](int64_t chunk) {
      const int64_t ch0 = chunk * kCh + 4 * wino_half;
      wino_ch_valid = static_cast<int>(max(min(int64_t(4), p.C_in_g - ch0), int64_t(0)));
      if (wino_ch_valid > 0)
        load_halo_planes(wino_staged, reinterpret_cast<const float*>(x_group) + ch0 * HW, HW, wino_ch_valid,
                         wino_inside, wino_src);
    };
    auto store_wino_halo = [&](uint32_t* stage) {  // the 4 transformed rows, one plane each
      if constexpr (kWino) {
        if (!wino_stages) return;
        float d[4][4], t[4][4];
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int c = 0; c < 4; ++c) d[r][c] = ((wino_inside >> r) & 1u) && c < wino_ch_valid ? wino_staged[r][c] : 0.f;
        winograd_input_rows(d, t);
        float* dst = reinterpret_cast<float*>(stage) + (wino_row * hcols + wino_col) * kHaloPitch + 4 * wino_half;
        const int plane = pair_rows * hcols * kHaloPitch;
#pragma unroll
        for (int u = 0; u < 4; ++u)
          *reinterpret_cast<float4*>(dst + u * plane) = make_float4(t[u][0], t[u][1], t[u][2], t[u][3]);
      }
    };
    auto load_halo = [&](int64_t chunk) {
      if constexpr (kWino) {
        load_wino_halo(chunk);
      } else {
        load_direct_halo(chunk);
      }
    };
    auto store_halo = [&](uint32_t* stage) {
      if constexpr (kWino) {
        store_wino_halo(stage);
      } else {
        store_direct_halo(stage);
      }
    };
    // kBM16 * 32 16-byte pieces per tap; thread tid copies piece tid % that of every
    // (kThreads / that)-th tap, walking the taps with pointer steps.
    constexpr int kPieces = kBM16 * 32, kTapStep = kThreads / kPieces;
    static_assert(kThreads % kPieces == 0, "weight copy layout");
    const int first_tap = tid / kPieces, my_taps = (block_taps - first_tap + kTapStep - 1) / kTapStep;
    const uint32_t* w_next = w_block + first_tap * tap_stride + 4 * (tid % kPieces);  // of the next chunk
    const int64_t w_tap_step = kTapStep * tap_stride;
    const int dst_w0 = 4 * (tid % kPieces) + first_tap * kBM16 * kFragWords;
    auto load_weights = [&](uint32_t* stage) {  // the chunks in order, from 0
      const uint32_t* src_w = w_next;
      uint32_t* dst_w = stage + dst_w0;
      for (int i = 0; i < my_taps; ++i) {
        cp_async16(dst_w, src_w);
        src_w += w_tap_step;
        dst_w += kTapStep * kBM16 * kFragWords;
      }
      cp_async_commit();
      w_next += chunk_stride;
    };

    // ldmatrix rows this lane addresses: x4 load i covers n8 tiles 2i, 2i+1; lane l gives row
    // l % 8 of matrix l / 8 = (n8 tile 2i + l / 16, channel half (l / 8) % 2).
    // Word offset in a halo stage of tile pixel m's unshifted halo pixel (0 past the tile's images).
    auto halo_word = [&](int m) {
      const int img = m / tile_px, r = (m - img * tile_px) / tl.tw, c = m - img * tile_px - r * tl.tw;
      return (img < tl.tn ? img * hpx + r * hcols + c : 0) * kHaloPitch;
    };
    uint32_t b_off[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      b_off[i] = (halo_word(warp_n * kWarpPx + 8 * (2 * i + lane / 16) + lane % 8) + 4 * ((lane / 8) % 2)) * 4;
    int ffma_off[kFfma ? 8 : 1];
    if constexpr (kFfma) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        // Winograd rows: pairs past the tile's (discarded) read pair 0, inside the halo planes
        const int m = ffma_px0 + 8 * j;
        ffma_off[j] = kWino && m >= pair_rows * tl.tw ? 0 : halo_word(m);
      }
    }
    // Taps in prepared order (t_h major); the halo shift of tap (t_h, t_w) is
    // ((cnt_h - 1 - t_h) * step_h * hcols + (cnt_w - 1 - t_w) * step_w) pixels, stepped here.
    const int shift_first = ((cnt_h - 1) * step_h * hcols + (cnt_w - 1) * step_w) * kHaloPitch * 4;
    const int shift_w = step_w * kHaloPitch * 4, shift_h = (step_h * hcols - cnt_w * step_w) * kHaloPitch * 4;
    auto compute_mma = [&](const uint32_t* halo, const uint32_t* wts) {
      const uint32_t* wt = wts + warp_m * MT * kFragWords + 4 * lane;
      uint32_t b_addr[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) b_addr[i] = smem_addr(halo) + b_off[i] + shift_first;
      int t_w = 0;
      for (int t = 0; t < taps; ++t) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const uint4 q = *reinterpret_cast<const uint4*>(wt + mt * kFragWords);
          a[mt][0] = q.x;
          a[mt][1] = q.y;
          a[mt][2] = q.z;
          a[mt][3] = q.w;
        }
        uint32_t b[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i) ldmatrix_x4(b[i], b_addr[i]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
            mma<T>(acc[mt][nt], a[mt], b[nt / 2][2 * (nt % 2)], b[nt / 2][2 * (nt % 2) + 1]);
        wt += kBM16 * kFragWords;
        const int step = ++t_w == cnt_w ? shift_h + shift_w : shift_w;  // next row of taps: -shift_h
        if (t_w == cnt_w) t_w = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) b_addr[i] -= step;
      }
    };
    // FFMA micro-tile (pixels ffma_px0 + 8 j x channels ffma_ch0 + i). Per kG input channels it
    // reads each pixel's kG values (one 4 / 8 / 16-byte load; 8 neighbouring pixels per quarter-warp
    // fall in distinct banks at the 48-byte pitch) and its 8 channels' weights, broadcast within
    // quarter-warps from the prepared layout [m16 block][input channel][16 channels]. The one-block
    // build takes kG = 2 (219 registers; faster than kG = 1 or 4, or than pixel values
    // double-buffered a group ahead), the two-block build kG = 1 (fits 128 registers; better than
    // kG = 2 with the halo copied by 4-byte cp.async to free the staging registers).
    constexpr int kG = kMinBlocks == 2 ? 1 : 2;
    // Winograd rows: warp_n's component plane of the halo and its width taps' weights
    const int comp_halo = kWino ? warp_n * pair_rows * hcols * kHaloPitch : 0;
    const int comp_weights = kWino ? warp_n * cnt_w * kBM16 * kFragWords : 0;
    auto compute_ffma = [&](const uint32_t* halo, const uint32_t* wts) {
      const float* wt = reinterpret_cast<const float*>(wts) + comp_weights + (ffma_ch0 / 16) * kFragWords + ffma_ch0 % 16;
      const float* hx = reinterpret_cast<const float*>(halo) + comp_halo + shift_first / 4;
      int t_w = 0;
      for (int t = 0; t < taps; ++t) {
#pragma unroll
        for (int kq = 0; kq < kCh / kG; ++kq) {
          float xv[8][kG];
#pragma unroll
          for (int j = 0; j < 8; ++j) load_floats<kG>(hx + ffma_off[j] + kG * kq, xv[j]);
#pragma unroll
          for (int k = 0; k < kG; ++k) {
            float w[8];
            load_floats<8>(wt + 16 * (kG * kq + k), w);
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
              for (int i = 0; i < 8; ++i) acc[i / 4][j][i % 4] = fmaf(xv[j][k], w[i], acc[i / 4][j][i % 4]);
          }
        }
        wt += kBM16 * kFragWords;
        const int step = ++t_w == cnt_w ? shift_h + shift_w : shift_w;
        if (t_w == cnt_w) t_w = 0;
        hx -= step / 4;
      }
    };
    auto compute = [&](const uint32_t* halo, const uint32_t* wts) {
      if constexpr (kFfma) {
        compute_ffma(halo, wts);
      } else {
        compute_mma(halo, wts);
      }
    };

    // Two stages, one barrier per chunk: the halo of chunk c + 1 is loaded into registers while
    // chunk c computes and stored after it; its weights travel by cp.async meanwhile.
    load_halo(0);
    load_weights(w_stage(0));
    store_halo(t_stage(0));
    for (int64_t c = 0; c < n_chunks; ++c) {
      cp_async_wait_all();
      __syncthreads();
      const bool more = c + 1 < n_chunks;
      if (more) {
        load_weights(w_stage(c + 1));
        load_halo(c + 1);
      }
      compute(t_stage(c), w_stage(c));
      if (more) store_halo(t_stage(c + 1));
    }
    __syncthreads();  // the epilogue reuses the pipeline's shared memory
  }

  // Accumulators -> Cs[channel][pixel] (the epilogue synchronises before reading it).
  float* Cs = reinterpret_cast<float*>(smem);
  if constexpr (kWino) {
    // components -> Ms, then each (channel, pair) combined into its two rows of Cs (after Ms)
    float* Ms = Cs;
    Cs += kWinoMsWords;
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        Ms[(warp_n * kBN + ffma_ch0 + i) * kWinoMsLd + ffma_px0 + 8 * j] = acc[i / 4][j][i % 4];
    __syncthreads();
    const int pairs = pair_rows * tl.tw;
    for (int e = tid; e < kBN * kWinoPairs; e += kThreads) {
      const int c = e / kWinoPairs, q = e % kWinoPairs;
      if (q >= pairs) continue;
      const float* m = Ms + c * kWinoMsLd + q;
      const float2 rows = winograd_output_rows(m[0], m[kBN * kWinoMsLd], m[2 * kBN * kWinoMsLd], m[3 * kBN * kWinoMsLd]);
      const int pr = q / tl.tw, col = q - pr * tl.tw;
      Cs[c * sl.c_ld + 2 * pr * tl.tw + col] = rows.x;
      Cs[c * sl.c_ld + (2 * pr + 1) * tl.tw + col] = rows.y;
    }
  } else if constexpr (kFfma) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        Cs[(ffma_ch0 + i) * sl.c_ld + ffma_px0 + 8 * j] = acc[i / 4][j][i % 4];
  } else {
    const int gq = lane / 4, tq = lane % 4;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int c = (warp_m * MT + mt) * 16 + gq, m = warp_n * kWarpPx + nt * 8 + 2 * tq;
        *reinterpret_cast<float2*>(Cs + c * sl.c_ld + m) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
        *reinterpret_cast<float2*>(Cs + (c + 8) * sl.c_ld + m) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
      }
  }
  const int tw = tl.tw;
  __shared__ int64_t pix_off[kTilePx];
  conv_epilogue<T, kOutPx, kBN, kThreads, kUnitOutputs>(
      Cs, sl.c_ld, bias, out, p, ep, n, g, oc0, blockIdx.x, tiles_per_sample, images, tile_px,
      EpilogueThreads<>{static_cast<int>(threadIdx.x), pix_off}, [&](int m) -> int64_t {
        const int img = m / tile_px, r = (m - img * tile_px) / tw, c = m - img * tile_px - r * tw;
        if (img >= images || j0 + r >= ph.OHp || i0 + c >= ph.OWp) return -1;
        return img * p.C_out * p.OH * p.OW + (ph.rh + p.sH * int64_t(j0 + r)) * p.OW + ph.rw +
               p.sW * int64_t(i0 + c);
      });
}

// The Winograd weight word of prepared tap `tap` (phases in order, then the 4 row components,
// then the width taps): winograd_weight of the phase's three row taps at that width tap.
__device__ inline uint32_t winograd_weight_word(const float* w, const ConvTranspose2dParams& p, const PhaseTable& tab,
                                                int64_t grp, int64_t icg, int64_t oc, int tap) {
  int pi = 0;
  while (pi + 1 < tab.n && tap >= winograd_taps(tab.e[pi + 1].tap_base)) ++pi;
  const PhaseEntry& e = tab.e[pi];
  const int t = tap - static_cast<int>(winograd_taps(e.tap_base)), comp = t / e.count_w;
  const int kw = e.k0_w + (t - comp * e.count_w) * e.kstep_w;
  float row[3];
#pragma unroll
  for (int t_h = 0; t_h < 3; ++t_h)
    row[t_h] = __uint_as_float(weight_operand_word<float, false>(w, p, grp, icg, oc, e.k0_h + t_h * e.kstep_h, kw));
  return __float_as_uint(winograd_weight(comp, row));
}

// weight [C_in][C_out_g][kH][kW] -> [groups][phase-ordered taps][chunks][m16 blocks][lane][4]:
// each 4-word group is the A fragment a lane passes to mma (rows = output channels, columns =
// the chunk's input channels; float32 rounded to TF32, 16-bit types as pairs), zero padded.
// The FFMA mode keeps the blocks but lays each out [input channel][16 output channels], exact;
// Winograd rows (kWino) hold the transformed taps (winograd_weight_word) in that layout.
template <typename T, typename I, bool kFfma, bool kWino>
__global__ void prepare_mma_weight_kernel(const T* __restrict__ w, uint32_t* __restrict__ wp,
                                          ConvTranspose2dParams p, PhaseTable phases, I n_chunks, I co16,
                                          I total) {
  constexpr bool kF32 = std::is_same<T, float>::value;
  constexpr int kCh = chunk_channels<T>();
  const I taps = static_cast<I>(prepared_taps(p.kH * p.kW, kWino));
  for (I idx = blockIdx.x * I(blockDim.x) + threadIdx.x; idx < total; idx += I(gridDim.x) * blockDim.x) {
    const int word = static_cast<int>(idx % 4), lane = static_cast<int>((idx / 4) % 32);
    const int in_block = static_cast<int>(idx % kFragWords);  // FFMA: input channel * 16 + channel
    I rest = idx / kFragWords;
    const I blk = rest % co16;
    rest /= co16;
    const I chunk = rest % n_chunks;
    rest /= n_chunks;
    const I tap = rest % taps, grp = rest / taps;
    const int64_t oc = int64_t(blk) * 16 + (kFfma ? in_block % 16 : lane / 4 + 8 * (word % 2));
    const int64_t k = kFfma ? in_block / 16 : kF32 ? lane % 4 + 4 * (word / 2) : 2 * (lane % 4) + 8 * (word / 2);
    if constexpr (kWino) {
      wp[idx] = winograd_weight_word(w, p, phases, grp, int64_t(chunk) * kCh + k, oc, static_cast<int>(tap));
    } else {
      int kh, kw;
      phase_ordered_tap(phases, static_cast<int>(tap), kh, kw);
      wp[idx] = weight_operand_word<T, !kFfma>(w, p, grp, int64_t(chunk) * kCh + k, oc, kh, kw);
    }
  }
}

template <typename T, int MT, int WM, bool kFfma = false, int kMinBlocks = 2, bool kWino = false>
cudaError_t launch_mt(const void* x, const void* wprep, const void* bias, void* out,
                      const ConvTranspose2dParams& p, const MmaTiling& t, const ConvEpilogue& ep,
                      cudaStream_t stream) {
  const int64_t tiles = conv_mma_tiles_per_sample(p, t);
  const int64_t col_tiles = p.groups * ((p.C_out_g + 16 * MT * WM - 1) / (16 * MT * WM));
  const SmemLayout sl = smem_layout(p, t);
  auto run = [&](auto unit_outputs) {
    return launch_conv_grid(conv_mma_kernel<T, MT, WM, kFfma, kMinBlocks, decltype(unit_outputs)::value, kWino>, 128 * WM,
                            sl.bytes, stream, tiles, col_tiles, p.N, t.tn, static_cast<const T*>(x),
                            static_cast<const uint32_t*>(wprep), static_cast<const T*>(bias), static_cast<T*>(out),
                            p, ep, t, sl, phase_table(p, t.th, t.tw));
  };
  // 1 x 1 outputs get their own build: its epilogue paths cost the others' registers (spills);
  // Winograd tilings never have them (conv_mma_tiling)
  if constexpr (!kWino) {
    if (p.OH * p.OW == 1) return run(std::true_type{});
  }
  return run(std::false_type{});
}

template <typename T>
cudaError_t launch(const void* x, const void* wprep, const void* bias, void* out,
                   const ConvTranspose2dParams& p, const MmaTiling& t, const ConvEpilogue& ep,
                   cudaStream_t stream) {
  constexpr bool kF32 = std::is_same<T, float>::value;
  if (t.ffma) {
    if constexpr (kF32) {
      // Winograd rows: the one-block build always (the two-block build spills at 128 registers
      // and is slower). Direct taps: two blocks per SM (the 128-register build) where their
      // shared memory fits.
      if (t.mt == 2 && t.wm == 2) {
        if (t.wino) return launch_mt<T, 2, 2, true, 1, true>(x, wprep, bias, out, p, t, ep, stream);
        return smem_layout(p, t).bytes <= kTwoBlocksSmem
                   ? launch_mt<T, 2, 2, true, 2>(x, wprep, bias, out, p, t, ep, stream)
                   : launch_mt<T, 2, 2, true, 1>(x, wprep, bias, out, p, t, ep, stream);
      }
    }
    return cudaErrorInvalidValue;
  }
  switch (t.mt * 10 + t.wm) {
    case 11: return launch_mt<T, 1, 1>(x, wprep, bias, out, p, t, ep, stream);
    case 21: return launch_mt<T, 2, 1>(x, wprep, bias, out, p, t, ep, stream);
    case 41: if constexpr (!kF32) return launch_mt<T, 4, 1>(x, wprep, bias, out, p, t, ep, stream); break;
    case 22: if constexpr (kF32) return launch_mt<T, 2, 2>(x, wprep, bias, out, p, t, ep, stream); break;
    default: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

// Images per tile when one tile covers a whole phase grid: as many as fill the block's pixels
// and halo and keep the halo offsets 32-bit (fewer, fuller blocks: the same work per block).
int images_per_tile(const ConvTranspose2dParams& p, const MmaTiling& t) {
  const int max_halo = std::max(1, phase_maxima(p, t.th, t.tw).halo);
  int64_t tn = std::min<int64_t>({kTilePx / (t.th * t.tw), kMaxHalo / max_halo, p.N});
  while (tn > 1 && (tn * p.C_in + 16) * p.H * p.W > 0x7fffffff) --tn;
  return static_cast<int>(std::max<int64_t>(tn, 1));
}

// The tiling cost model's mainloop term: warp instructions of a block over one chunk of input
// channels when each warp walks `taps` taps (the per-tap fragment loads and MMAs / FFMAs).
static double mainloop_cost(int64_t taps, int mt, int wm) {
  return static_cast<double>(taps) * (8 + 11 * mt) * kPxWarps * wm;
}

// Whether every phase has 3 row taps one input row apart (k3 s1 d1, k6 s2 d1, ...): Winograd
// rows apply, and the outputs are not 1 x 1 (their build has no Winograd form).
static bool winograd_rows_apply(const ConvTranspose2dParams& p) {
  if (p.OH * p.OW == 1) return false;
  for (int64_t rh = 0; rh < p.sH; ++rh) {
    const PhaseTaps t = phase_taps(rh, p.pH, p.dH, p.sH, p.kH);
    if (t.count != 3 || t.off_step != 1) return false;
  }
  return true;
}

// The FFMA mode's Winograd tiling: th x tw outputs (th even) of 64 row pairs at most, the tile
// width chosen by the mma cost model's terms (per warp one row of taps; the staged halo is 4
// transformed planes); {} when nothing fits.
static MmaTiling winograd_tiling(const ConvTranspose2dParams& p, int64_t OHmax, int64_t OWmax) {
  MmaTiling best;
  double best_cost = 0;
  int64_t last_tw = -1;
  const int64_t s0 = ceil_div(OWmax, kWinoPairs);  // the first split into columns that fits
  for (int64_t s = s0; s < s0 + 64; ++s) {
    const int64_t tw = ceil_div(OWmax, s);
    if (tw == last_tw) continue;
    last_tw = tw;
    const int64_t th = 2 * std::min<int64_t>(kWinoPairs / tw, ceil_div(OHmax, 2));
    MmaTiling cand{2, 2, static_cast<int>(th), static_cast<int>(tw)};
    cand.ffma = cand.wino = true;
    const PhaseMaxima most = phase_maxima(p, cand.th, cand.tw);
    if (th * most.halo_cols > kConvThreads || smem_layout(p, cand).bytes > kMaxSmem ||
        !phase_table_fits(p, cand.th, cand.tw))
      continue;
    double cost = 0;
    for (int64_t rw = 0; rw < p.sW; ++rw)
      for (int64_t rh = 0; rh < p.sH; ++rh) {
        const PhaseTile ph = phase_tile(p, cand.th, cand.tw, rh, rw);
        // a warp walks one row of taps; the staged halo is 4 planes of th / 2 rows
        cost += static_cast<double>(ph.tiles) * (mainloop_cost(ph.tw.count, cand.mt, cand.wm) + 2 * th * ph.hcols);
      }
    cost *= tw % 8 == 0 ? 1.0 : 1.05;
    if (best.mt == 0 || cost < best_cost) {
      best = cand;
      best_cost = cost;
    }
    if (tw <= 8) break;
  }
  return best;
}

MmaTiling conv_mma_tiling(const ConvTranspose2dParams& p, DType dtype, Fp32Math fp32_math, bool allow_winograd,
                          std::string* why) {
  // Strict float32 takes the FFMA mode (64-channel blocks only: narrower groups stay on the
  // generic kernel, whose 32-channel tile wastes less).
  const bool ffma = dtype == DType::F32 && fp32_math != Fp32Math::TF32;
  if (dtype == DType::F64) return refuse<MmaTiling>(why, "float64 has no tensor cores");
  if (ffma && p.C_out_g <= 32) return refuse<MmaTiling>(why, "strict float32 with 32 or fewer output channels per group");
  const int64_t OHmax = phase_extent(p.OH, 0, p.sH), OWmax = phase_extent(p.OW, 0, p.sW);
  if (OHmax == 0 || OWmax == 0 || p.C_out_g == 0) return {1, 1, 1, 1};  // nothing to compute
  if (16 * p.H * p.W > 0x7fffffff)  // halo offsets over a chunk's planes are 32-bit
    return refuse<MmaTiling>(why, "input planes too large for 32-bit halo offsets");
  if (ffma && allow_winograd && winograd_rows_apply(p)) {
    const MmaTiling wino = winograd_tiling(p, OHmax, OWmax);
    if (wino.mt > 0) return wino;
  }
  // Cost model, per chunk of input channels and block (warp instructions): the mainloop's
  // per-tap fragment loads and MMAs, plus the halo staging (~1 per halo pixel); a tiling
  // that leaves one block per SM pays for the lost overlap.
  MmaTiling best;
  double best_cost = 0;
  // Block shapes (mt, wm) by output channels: 16, 32, 64. For 64, float32 is faster with
  // 8 warps of 32 channels (more warps to hide latency), 16-bit types with 4 warps of 64
  // (the 8-warp build spills there).
  const int shapes[3][2] = {{1, 1}, {2, 1}, {dtype == DType::F32 ? 2 : 4, dtype == DType::F32 ? 2 : 1}};
  for (const auto& shape : shapes) {
    const int mt = shape[0], wm = shape[1], m16 = mt * wm;
    if (ffma && (mt != 2 || wm != 2)) continue;
    if (m16 > 1 && 8 * m16 >= p.C_out_g) continue;  // a smaller block already covers C_out / groups
    const int64_t col_tiles = p.groups * ceil_div(p.C_out_g, 16 * m16);
    int64_t last_tw = -1;
    for (int64_t s = 1; s <= 64; ++s) {
      const int64_t tw = ceil_div(OWmax, s);
      if (tw == last_tw || tw > kTilePx) continue;
      last_tw = tw;
      const int64_t th = std::min<int64_t>(kTilePx / tw, OHmax);
      MmaTiling cand{mt, wm, static_cast<int>(th), static_cast<int>(tw)};
      cand.ffma = ffma;
      if (th == OHmax && tw == OWmax) cand.tn = images_per_tile(p, cand);
      double cost = 0;
      bool fits = true;
      for (int64_t rh = 0; rh < p.sH; ++rh)
        for (int64_t rw = 0; rw < p.sW; ++rw) {
          const PhaseTile ph = phase_tile(p, cand.th, cand.tw, rh, rw);
          const int64_t taps = ph.th.count * ph.tw.count;
          if (taps > 0 && cand.tn * ph.hrows * ph.hcols > kMaxHalo) fits = false;
          cost += static_cast<double>(ph.tiles) *
                  (mainloop_cost(taps, mt, wm) + (taps > 0 ? cand.tn * ph.hrows * ph.hcols : 0));
        }
      cost *= static_cast<double>(ceil_div(p.N, cand.tn));
      const size_t smem = smem_layout(p, cand).bytes;
      if (!fits || smem > kMaxSmem || !phase_table_fits(p, cand.th, cand.tw)) continue;
      // one 4-warp block alone on an SM starves it (8-warp blocks keep 8 warps, and beat two
      // 4-warp blocks of 32 channels)
      const bool starved = smem > kTwoBlocksSmem && wm == 1;
      cost *= static_cast<double>(col_tiles) * (starved ? 1.5 : 1.0) * (tw % 8 == 0 ? 1.0 : 1.05);
      if (best.mt == 0 || cost < best_cost) {
        best = cand;
        best_cost = cost;
      }
      if (tw <= 8) break;
    }
  }
  if (best.mt == 0) return refuse<MmaTiling>(why, "no tile's halo and weights fit shared memory");
  return best;
}

int64_t conv_mma_tiles_per_sample(const ConvTranspose2dParams& p, const MmaTiling& t) {
  return phase_tiles_per_sample(p, t.th, t.tw);
}

// In elements of the input dtype (the buffer is allocated with the weight's dtype).
int64_t conv_mma_prepared_weight_numel(const ConvTranspose2dParams& p, DType dtype, const MmaTiling& t) {
  const int64_t ch = chunk_channels(dtype);
  const int64_t co16 = ceil_div(p.C_out_g, 16 * t.mt * t.wm) * t.mt * t.wm;
  const int64_t words = p.groups * prepared_taps(p.kH * p.kW, t.wino) * ceil_div(p.C_in_g, ch) * co16 * kFragWords;
  return dtype == DType::F32 ? words : 2 * words;
}

cudaError_t conv_mma_prepare_weight(const void* weight, void* prepared, DType dtype,
                                    const ConvTranspose2dParams& p, const MmaTiling& t,
                                    cudaStream_t stream) {
  const int64_t n_chunks = ceil_div(p.C_in_g, chunk_channels(dtype));
  const int64_t co16 = ceil_div(p.C_out_g, 16 * t.mt * t.wm) * t.mt * t.wm;
  const int64_t total = p.groups * prepared_taps(p.kH * p.kW, t.wino) * n_chunks * co16 * kFragWords;
  if (total == 0) return cudaSuccess;
  uint32_t* wp = static_cast<uint32_t*>(prepared);
  const PhaseTable phases = phase_table(p, t.th, t.tw);
  return dispatch_tensor_core_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    return dispatch_prepare_index(total, [&](auto index) {
      using I = decltype(index);
      auto run = [&](auto ffma, auto wino) {
        prepare_mma_weight_kernel<T, I, decltype(ffma)::value, decltype(wino)::value>
            <<<prepare_blocks(total), 256, 0, stream>>>(static_cast<const T*>(weight), wp, p, phases, I(n_chunks),
                                                        I(co16), I(total));
        return cudaGetLastError();
      };
      if constexpr (std::is_same<T, float>::value) {
        if (t.wino) return run(std::true_type{}, std::true_type{});
        if (t.ffma) return run(std::true_type{}, std::false_type{});
      }
      return run(std::false_type{}, std::false_type{});
    });
  });
}

cudaError_t conv_mma_forward(const void* x, const void* prepared_weight, const void* bias, void* out,
                             DType dtype, const ConvTranspose2dParams& p, const MmaTiling& t,
                             const ConvEpilogue& ep, cudaStream_t stream) {
  return dispatch_tensor_core_dtype(dtype, [&](auto tag) {
    return launch<decltype(tag)>(x, prepared_weight, bias, out, p, t, ep, stream);
  });
}

}  // namespace cuda
}  // namespace myops
