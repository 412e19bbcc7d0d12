// The direct conv_transpose2d kernel (see conv_transpose2d_direct.cuh for when and why).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/conv/common/conv_common.cuh"
#include "cuda/conv/direct/direct.cuh"

namespace myops {
namespace cuda {
namespace {

constexpr int kThreads = kConvThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kTW = kDirectTileCols;
constexpr double kMaxMacsPerOutput = 32;   // past this the FFMA work outweighs the stores
constexpr size_t kSmemBudget = 72 * 1024;  // three blocks per SM
constexpr int kMaxRows = 16;
constexpr int kHaloBatch = 4;  // halo rows whose loads a warp has in flight together

// The kernel's geometry, computed once on the host.
struct DirectGeometry {
  int th;            // output rows per block
  int hrows, hcols;  // the input halo a block stages: rows / columns from its origin
  Taps32 rows[kMaxTapTableStride], cols[kMaxTapTableStride];
};

__host__ __device__ inline int floor_div(int a, int b) { return a >= 0 ? a / b : -((b - 1 - a) / b); }

// Input rows (or columns) a block reads for its outputs [o0, o0 + extent): from
// floor((o0 + pad - dil * (k - 1)) / s) on, at most halo_extent of them.
__host__ __device__ inline int halo_origin(int o0, int pad, int dil, int k, int s) {
  return floor_div(o0 + pad - dil * (k - 1), s);
}
inline int halo_extent(int extent, int dil, int k, int s) { return (extent - 1 + dil * (k - 1)) / s + 2; }

// The output positions of residue r (mod s) inside [begin, end): the first one and how many.
struct ResidueRange {
  int first, count;
};
__device__ inline ResidueRange residue_range(int begin, int end, int r, int s) {
  const int first = begin + ((r - begin) % s + s) % s;
  return {first, first < end ? (end - first + s - 1) / s : 0};
}

// acc[c] += v * w[c] for the block's channels (w: one input channel's weights in shared memory).
template <int kCB, typename acc_t>
__device__ inline void accumulate(acc_t (&acc)[kCB], acc_t v, const acc_t* w) {
#pragma unroll
  for (int c = 0; c < kCB; ++c) acc[c] = fma(v, w[c], acc[c]);
}

// Block: a th x kTW output tile (all phases) x kCB output channels of one group of image n.
// Shared memory (acc_t): the output tile's accumulators [kCB][th][kTW], the group's weights for
// the block's channels [kH * kW][C_in_g][kCB], and the input halo [C_in_g][hrows][hcols] (zero
// outside the input: no bounds tests per tap).
// kStats: the call wants GroupNorm partials (a separate build: that epilogue's registers would
// otherwise crowd the plain one's).
// Three blocks per SM (80 registers); float64 two (its accumulators are twice the size).
template <typename T, int kCB, bool kStats>
__global__ void __launch_bounds__(kThreads, std::is_same<T, double>::value ? 2 : 3)
    conv_direct_kernel(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias,
                       T* __restrict__ out, ConvTranspose2dParams p, DirectGeometry geo, ConvEpilogue ep,
                       int64_t n_base, int64_t /*grid tiles*/) {
  using Traits = DTypeTraits<T>;
  using acc_t = typename Traits::acc_t;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ acc_t bias_s[kCB];

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int sH = static_cast<int>(p.sH), sW = static_cast<int>(p.sW);
  const int OH = static_cast<int>(p.OH), OW = static_cast<int>(p.OW);
  const int C_in_g = static_cast<int>(p.C_in_g), th = geo.th, hrows = geo.hrows, hcols = geo.hcols;
  const int64_t n = n_base + blockIdx.z;
  const int col_tiles = (OW + kTW - 1) / kTW;
  const int tile_col = static_cast<int>(blockIdx.x % col_tiles);
  const int oh0 = static_cast<int>(blockIdx.x / col_tiles) * th, ow0 = tile_col * kTW;
  const int oh_end = min(oh0 + th, OH), ow_end = min(ow0 + kTW, OW);
  const int ih0 = halo_origin(oh0, static_cast<int>(p.pH), static_cast<int>(p.dH), static_cast<int>(p.kH), sH);
  const int iw0 = halo_origin(ow0, static_cast<int>(p.pW), static_cast<int>(p.dW), static_cast<int>(p.kW), sW);
  const int64_t c_blocks = (p.C_out_g + kCB - 1) / kCB;
  const int64_t g = blockIdx.y / c_blocks, oc0 = (blockIdx.y % c_blocks) * kCB;
  const int c_valid = static_cast<int>(min(static_cast<int64_t>(kCB), p.C_out_g - oc0));
  const int taps = static_cast<int>(p.kH * p.kW), halo_plane = hrows * hcols, ldc = th * kTW;

  acc_t* tile = reinterpret_cast<acc_t*>(smem_raw);
  acc_t* ws = tile + kCB * ldc;
  acc_t* xs = ws + taps * C_in_g * kCB;
  // tapless phases keep these zeros (16-byte stores: the tile is a multiple of 16 bytes)
  for (int i = tid; i < kCB * ldc * static_cast<int>(sizeof(acc_t)) / 16; i += kThreads)
    reinterpret_cast<uint4*>(tile)[i] = make_uint4(0, 0, 0, 0);
  // group-relative offsets fit 32 bits (the host checks it)
  const int C_out_g = static_cast<int>(p.C_out_g), H = static_cast<int>(p.H), W = static_cast<int>(p.W);
  const T* wt_group = wt + g * taps * p.C_in_g * p.C_out_g + oc0;
  for (int idx = tid; idx < taps * C_in_g * kCB; idx += kThreads) {
    const int c = idx % kCB, tap_ic = idx / kCB;  // tap_ic = tap * C_in_g + ic
    ws[idx] = c < c_valid ? Traits::to_acc(wt_group[tap_ic * C_out_g + c]) : acc_t(0);
  }
  if (tid < kCB)
    bias_s[tid] = bias != nullptr && tid < c_valid ? Traits::to_acc(bias[g * p.C_out_g + oc0 + tid]) : acc_t(0);
  // The halo: lanes along a row (coalesced); a warp takes kHaloBatch rows at a time and issues
  // their loads before its stores (one memory latency per batch, not per row).
  const T* x_group = x + (n * p.C_in + g * p.C_in_g) * p.H * p.W;
  const int halo_rows = C_in_g * hrows;
  for (int hc = lane; hc < hcols; hc += 32) {
    const int iw = iw0 + hc;
    const bool col_inside = iw >= 0 && iw < W;
    for (int row0 = warp * kHaloBatch; row0 < halo_rows; row0 += kWarps * kHaloBatch) {
      acc_t v[kHaloBatch];
      int ic = row0 / hrows, hr = row0 - ic * hrows;
#pragma unroll
      for (int b = 0; b < kHaloBatch; ++b) {
        const int ih = ih0 + hr;
        const bool inside = row0 + b < halo_rows && col_inside && ih >= 0 && ih < H;
        v[b] = inside ? Traits::to_acc(x_group[(ic * H + ih) * W + iw]) : acc_t(0);
        if (++hr == hrows) hr = 0, ++ic;
      }
#pragma unroll
      for (int b = 0; b < kHaloBatch; ++b)
        if (row0 + b < halo_rows) xs[(row0 + b) * hcols + hc] = v[b];
    }
  }
  __syncthreads();

  // Work items: (phase, phase row in the tile, 32-pixel segment of it), dealt to warps round
  // robin. A warp's lanes take consecutive pixels of one phase row: the same taps, consecutive
  // halo columns (no bank conflicts), and the weights as shared-memory broadcasts.
  int dealt = 0;
  for (int rh = 0; rh < sH; ++rh) {
    const Taps32 tr = geo.rows[rh];
    const ResidueRange rows = residue_range(oh0, oh_end, rh, sH);
    if (tr.count == 0 || rows.count == 0) continue;
    for (int rw = 0; rw < sW; ++rw) {
      const Taps32 tc = geo.cols[rw];
      const ResidueRange cols = residue_range(ow0, ow_end, rw, sW);
      if (tc.count == 0 || cols.count == 0) continue;
      const int segments = (cols.count + 31) / 32, items = rows.count * segments;
      // halo position of tap (0, 0) for the phase's first pixel in the tile: phase-grid
      // coordinate + offset - halo origin (one step of the phase grid = one halo row / column)
      const int hr_first = (rows.first - rh) / sH + tr.off0 - ih0;
      const int hc_first = (cols.first - rw) / sW + tc.off0 - iw0;
      for (int item = ((warp - dealt) % kWarps + kWarps) % kWarps; item < items; item += kWarps) {
        const int row = segments == 1 ? item : item / segments;
        const int q = (item - row * segments) * 32 + lane;  // the lane's pixel among the phase row's
        const bool in_tile = q < cols.count;
        const int q_safe = min(q, cols.count - 1);
        const int hr0 = hr_first + row, hc0 = hc_first + q_safe;
        const int oh = rows.first + sH * row, ow = cols.first + sW * q_safe;
        acc_t acc[kCB];
#pragma unroll
        for (int c = 0; c < kCB; ++c) acc[c] = acc_t(0);
        for (int t_h = 0; t_h < tr.count; ++t_h) {
          const int kh = tr.k0 + t_h * tr.step;
          const acc_t* x_row = xs + (hr0 - t_h * tr.off_step) * hcols + hc0;
          for (int t_w = 0; t_w < tc.count; ++t_w) {
            const acc_t* xp = x_row - t_w * tc.off_step;
            const acc_t* wp = ws + (kh * static_cast<int>(p.kW) + tc.k0 + t_w * tc.step) * C_in_g * kCB;
#pragma unroll 2
            for (int ic = 0; ic < C_in_g; ++ic) accumulate<kCB>(acc, xp[ic * halo_plane], wp + ic * kCB);
          }
        }
        if (in_tile) {
          acc_t* dst = tile + (oh - oh0) * kTW + (ow - ow0);
#pragma unroll
          for (int c = 0; c < kCB; ++c) dst[c * ldc] = acc[c];
        }
      }
      dealt += items;
    }
  }
  __syncthreads();

  const int rows_out = oh_end - oh0;
  if constexpr (kStats) {
    // With GroupNorm partials: the shared epilogue, one call (= one partials tile) per tile row.
    __shared__ int64_t pix_off[2][kTW];  // double-buffered: a warp may enter the next call early
    for (int r = 0; r < rows_out; ++r) {
      const int64_t oh = oh0 + r;
      conv_epilogue<T, kTW, kCB, kThreads, false>(
          tile + r * kTW, ldc, bias, out, p, ep, n, g, oc0, oh * col_tiles + tile_col, p.OH * col_tiles, 1,
          kTW, EpilogueThreads<>{tid, pix_off[r & 1]},
          [&](int m) -> int64_t { return ow0 + m < OW ? oh * OW + ow0 + m : -1; });
    }
  } else {
    // Plain output: a warp per (tile row, quarter of the channels), lanes along the row
    // (coalesced stores), pointers stepped per channel.
    constexpr int kUnitsPerRow = 4, kChPerUnit = kCB / kUnitsPerRow;
    const int64_t plane = p.OH * p.OW;
    T* out_tile = out + (n * p.C_out + g * p.C_out_g + oc0) * plane + static_cast<int64_t>(oh0) * OW + ow0;
    const bool full_width = ow_end - ow0 == kTW;
    with_activation<acc_t, T>(ep, [&](auto act) {
      for (int unit = warp; unit < rows_out * kUnitsPerRow; unit += kWarps) {
        const int r = unit / kUnitsPerRow, c_begin = (unit % kUnitsPerRow) * kChPerUnit;
        const int c_end = min(c_begin + kChPerUnit, c_valid);
        T* dst = out_tile + c_begin * plane + static_cast<int64_t>(r) * OW;
        const acc_t* src = tile + c_begin * ldc + r * kTW;
        for (int c = c_begin; c < c_end; ++c, dst += plane, src += ldc) {
          const acc_t b = bias_s[c];
          acc_t v[kTW / 32];
#pragma unroll
          for (int j = 0; j < kTW / 32; ++j) v[j] = act(src[lane + 32 * j] + b);
#pragma unroll
          for (int j = 0; j < kTW / 32; ++j)
            if (full_width || ow0 + lane + 32 * j < OW) dst[lane + 32 * j] = Traits::from_acc(v[j]);
        }
      }
    });
  }
}

size_t acc_bytes(DType dtype) { return dtype == DType::F64 ? 8 : 4; }

// Shared memory of a block: output tile, weights, halo.
size_t direct_smem_bytes(const ConvTranspose2dParams& p, DType dtype, int cb, const DirectGeometry& geo) {
  const int64_t words = static_cast<int64_t>(cb) * geo.th * kTW + p.kH * p.kW * p.C_in_g * cb +
                        p.C_in_g * geo.hrows * geo.hcols;
  return static_cast<size_t>(words) * acc_bytes(dtype);
}

// The geometry for th output rows per block (the tap tables are per residue).
DirectGeometry direct_geometry(const ConvTranspose2dParams& p, int th) {
  DirectGeometry geo{};
  geo.th = th;
  geo.hrows = halo_extent(th, static_cast<int>(p.dH), static_cast<int>(p.kH), static_cast<int>(p.sH));
  geo.hcols = halo_extent(kTW, static_cast<int>(p.dW), static_cast<int>(p.kW), static_cast<int>(p.sW));
  phase_taps32(p, geo.rows, geo.cols);
  return geo;
}

// Blocks per image and channel block: th-row x kTW-column tiles of the output.
int64_t grid_tiles(const ConvTranspose2dParams& p, int th) {
  return ceil_div_nonneg(p.OH, th) * ceil_div_nonneg(p.OW, kTW);
}

template <typename T, int kCB, bool kStats>
cudaError_t launch(const void* x, const void* wt, const void* bias, void* out, DType dtype,
                   const ConvTranspose2dParams& p, const DirectTiling& t, const ConvEpilogue& ep,
                   cudaStream_t stream) {
  const DirectGeometry geo = direct_geometry(p, t.th);
  return launch_conv_grid(conv_direct_kernel<T, kCB, kStats>, kThreads, direct_smem_bytes(p, dtype, kCB, geo), stream,
                          grid_tiles(p, t.th), p.groups * ceil_div_nonneg(p.C_out_g, kCB), p.N, 1, static_cast<const T*>(x),
                          static_cast<const T*>(wt), static_cast<const T*>(bias), static_cast<T*>(out), p,
                          geo, ep);
}

}  // namespace

DirectTiling conv_direct_tiling(const ConvTranspose2dParams& p, DType dtype, std::string* why) {
  if (p.sH > kMaxTapTableStride || p.sW > kMaxTapTableStride || p.OH <= 0 || p.OW <= 0)
    return refuse<DirectTiling>(why, "stride beyond its tap table, or an empty output");
  // 32-bit coordinates inside the kernel, and 32-bit offsets inside a group's input and weights
  if (!conv_coordinates_fit_int32(p) || p.C_in_g * p.H * p.W > kInt32CoordLimit ||
      p.kH * p.kW * p.C_in_g * p.C_out_g > kInt32CoordLimit)
    return refuse<DirectTiling>(why, "offsets beyond 32 bits");
  // Multiply-adds per output value, averaged over the phases: the taps spread over sH x sW phases.
  const double macs = static_cast<double>(p.C_in_g) * p.kH * p.kW / static_cast<double>(p.sH * p.sW);
  if (macs > kMaxMacsPerOutput) return refuse<DirectTiling>(why, "too many multiply-adds per output value (> 32)");
  DirectTiling t;
  t.cb = p.C_out_g <= 8 ? 8 : 16;
  // the most rows whose weights, halo and tile fit the budget
  for (t.th = static_cast<int>(std::min<int64_t>(kMaxRows, p.OH)); t.th > 0; --t.th)
    if (direct_smem_bytes(p, dtype, t.cb, direct_geometry(p, t.th)) <= kSmemBudget) break;
  if (t.th == 0) return refuse<DirectTiling>(why, "no row of weights, halo and tile fits shared memory");
  if (grid_tiles(p, t.th) > 0x7fffffff || p.groups * ceil_div_nonneg(p.C_out_g, t.cb) > 65535)
    return refuse<DirectTiling>(why, "grid too large");
  return t;
}

int64_t conv_direct_tiles_per_sample(const ConvTranspose2dParams& p) {
  return p.OH * ceil_div_nonneg(p.OW, kTW);
}

cudaError_t conv_direct_forward(const void* x, const void* prepared_weight, const void* bias, void* out,
                                DType dtype, const ConvTranspose2dParams& p, const DirectTiling& t,
                                const ConvEpilogue& ep, cudaStream_t stream) {
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (ep.tile_stats != nullptr)
      return t.cb == 8 ? launch<T, 8, true>(x, prepared_weight, bias, out, dtype, p, t, ep, stream)
                       : launch<T, 16, true>(x, prepared_weight, bias, out, dtype, p, t, ep, stream);
    return t.cb == 8 ? launch<T, 8, false>(x, prepared_weight, bias, out, dtype, p, t, ep, stream)
                     : launch<T, 16, false>(x, prepared_weight, bias, out, dtype, p, t, ep, stream);
  });
}

}  // namespace cuda
}  // namespace myops
