// The few-channels conv_transpose2d kernel (see conv_transpose2d_few_channels.cuh for when and why).
#include <algorithm>
#include <type_traits>

#include "cuda/conv/common/conv_common.cuh"
#include "cuda/conv/few_channels/few_channels.cuh"

namespace myops {
namespace cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kCB = kFewChannels;
constexpr int kRows = kFewChannelsRows;
// Multiply-adds per output value (C_in / groups x a phase's taps) up to which the kernel beats the
// tensor-core kernels in float32 (it wins at 256 and 512, ties at 576 and loses from 1024). Its
// FFMA runs at a fraction of the FMA peak (loads per product); past this
// the tensor cores' throughput outweighs their 3-of-16 row use.
constexpr int64_t kMaxMacsPerOutput = 512;
// A block stages a phase's weights, (taps of the phase) x C_in / groups <= kMaxMacsPerOutput entries
// of kCB values: at most 16 KB (float64), so the MACs bound also bounds shared memory.
static_assert(kMaxMacsPerOutput * kFewChannels * sizeof(double) <= 48 * 1024, "weights fit shared memory");
constexpr int kUnrollChannels = 4;         // input channels whose loads a thread has in flight together

struct FewChannelsGeometry {
  Taps32 rows[kMaxTapTableStride], cols[kMaxTapTableStride];
  int cols_per_block, rows_per_block;  // of a phase grid
  int row_blocks, col_blocks;          // per phase, over the largest phase grid (residue 0)
};

// One (tap, input channel)'s kCB weights from shared memory, as 16-byte loads.
template <typename acc_t>
struct alignas(16) ChannelWeights {
  acc_t w[kCB];
};
template <typename acc_t>
__device__ inline ChannelWeights<acc_t> load_weights(const acc_t* src) {
  static_assert(kCB * sizeof(acc_t) % 16 == 0, "whole 16-byte loads");
  ChannelWeights<acc_t> out;
#pragma unroll
  for (int i = 0; i < static_cast<int>(kCB * sizeof(acc_t) / 16); ++i)
    reinterpret_cast<uint4*>(out.w)[i] = reinterpret_cast<const uint4*>(src)[i];
  return out;
}

// acc[r][c] += v[r] * w[c]: one input channel's values at the thread's rows (kRows registers from
// v, indexed by constants once unrolled), times its weights.
template <typename acc_t>
__device__ inline void accumulate_rows(acc_t (&acc)[kRows][kCB], const acc_t* v, const ChannelWeights<acc_t>& w) {
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int c = 0; c < kCB; ++c) acc[r][c] = fma(v[r], w.w[c], acc[r][c]);
}

// A thread's pixels: phase rows qh0 .. qh0 + kRows - 1 of phase column qw, and the input's sizes.
struct PhasePixels {
  int qh0, qw, H, W, plane, C_in_g;
};

// acc += the contributions of input channels ic .. ic + kU - 1 through every tap of the phase:
// tap (t_h, t_w) of phase pixel (qh, qw) reads input (qh + off0_h - t_h off_step_h, qw + off0_w -
// t_w off_step_w); ws: the phase's weights [tap][C_in / groups][kCB].
template <int kU, typename T, typename acc_t>
__device__ inline void accumulate_channels(acc_t (&acc)[kRows][kCB], const T* __restrict__ x_group, const acc_t* ws,
                                           int ic, const PhasePixels& px, const Taps32& tr, const Taps32& tc) {
  using Traits = DTypeTraits<T>;
  const T* x_chan = x_group + static_cast<int64_t>(ic) * px.plane;
  for (int t_h = 0; t_h < tr.count; ++t_h) {
    const int ih0 = px.qh0 + tr.off0 - t_h * tr.off_step;
    for (int t_w = 0; t_w < tc.count; ++t_w) {
      const int iw = px.qw + tc.off0 - t_w * tc.off_step;
      const bool col_inside = iw >= 0 && iw < px.W;
      // each row's offset in the channel's plane, computed only where the row is inside
      bool inside[kRows];
      int row_off[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        inside[r] = col_inside && ih0 + r >= 0 && ih0 + r < px.H;
        row_off[r] = inside[r] ? (ih0 + r) * px.W + iw : 0;
      }
      acc_t v[kU][kRows];
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int r = 0; r < kRows; ++r) v[u][r] = inside[r] ? Traits::to_acc(x_chan[u * px.plane + row_off[r]]) : acc_t(0);
      const acc_t* wp = ws + ((t_h * tc.count + t_w) * px.C_in_g + ic) * kCB;
#pragma unroll
      for (int u = 0; u < kU; ++u) accumulate_rows(acc, v[u], load_weights(wp + u * kCB));
    }
  }
}

// The same where the phase has kTH row taps one input row apart (a block-uniform case): a
// thread's rows of every row tap lie in kRows + kTH - 1 input rows, loaded once per (input
// channel, column tap) and shared by the row taps, which the generic loop loads separately (the
// k4 s2 heads' phases: 5 loads per channel and column tap instead of 8).
template <int kTH>
struct RowWindow {
  static constexpr int kSpan = kRows + kTH - 1;
  int offset[kSpan];  // of input row ih_lo + s in a channel's plane where it lies inside, else -1
  __device__ RowWindow(const PhasePixels& px, const Taps32& tr) {
    const int ih_lo = px.qh0 + tr.off0 - (kTH - 1);  // the lowest row any row tap reads
#pragma unroll
    for (int s = 0; s < kSpan; ++s) offset[s] = ih_lo + s >= 0 && ih_lo + s < px.H ? (ih_lo + s) * px.W : -1;
  }
};

template <int kU, int kTH, typename T, typename acc_t>
__device__ inline void accumulate_channels_shared_rows(acc_t (&acc)[kRows][kCB], const T* __restrict__ x_group,
                                                       const acc_t* ws, int ic, const PhasePixels& px,
                                                       const RowWindow<kTH>& rows, const Taps32& tc) {
  using Traits = DTypeTraits<T>;
  constexpr int kSpan = RowWindow<kTH>::kSpan;
  const T* x_chan = x_group + static_cast<int64_t>(ic) * px.plane;
  for (int t_w = 0; t_w < tc.count; ++t_w) {
    const int iw = px.qw + tc.off0 - t_w * tc.off_step;
    const bool col_inside = iw >= 0 && iw < px.W;
    acc_t v[kU][kSpan];
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int s = 0; s < kSpan; ++s)
        v[u][s] = col_inside && rows.offset[s] >= 0 ? Traits::to_acc(x_chan[u * px.plane + rows.offset[s] + iw])
                                                    : acc_t(0);
    // row tap t_h reads window rows kTH - 1 - t_h + r
#pragma unroll
    for (int t_h = 0; t_h < kTH; ++t_h) {
      const acc_t* wp = ws + ((t_h * tc.count + t_w) * px.C_in_g + ic) * kCB;
#pragma unroll
      for (int u = 0; u < kU; ++u) accumulate_rows(acc, v[u] + (kTH - 1 - t_h), load_weights(wp + u * kCB));
    }
  }
}

// Block: (phase, row block, column block) x group x image. Shared memory: the phase's weights
// [tap of the phase][C_in / groups][kCB] in the accumulation type, zero past C_out / groups.
// float32 at 64 registers: 8 blocks per SM (72 registers with the shared row windows otherwise: 7)
template <typename T>
__global__ void __launch_bounds__(kThreads, std::is_same<T, float>::value ? 8 : 1)
    conv_few_channels_kernel(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias,
                             T* __restrict__ out, ConvTranspose2dParams p, FewChannelsGeometry geo,
                             ConvEpilogue ep, int64_t n_base, int64_t /*grid tiles*/) {
  using Traits = DTypeTraits<T>;
  using acc_t = typename Traits::acc_t;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  acc_t* ws = reinterpret_cast<acc_t*>(smem_raw);

  const int sH = static_cast<int>(p.sH), sW = static_cast<int>(p.sW);
  const int blocks_per_phase = geo.row_blocks * geo.col_blocks;
  const int phase = static_cast<int>(blockIdx.x) / blocks_per_phase;
  const int in_phase = static_cast<int>(blockIdx.x) - phase * blocks_per_phase;
  const int rh = phase / sW, rw = phase - rh * sW;
  const int ext_h = static_cast<int>(phase_extent(p.OH, rh, sH)), ext_w = static_cast<int>(phase_extent(p.OW, rw, sW));
  const int qh_block = (in_phase / geo.col_blocks) * geo.rows_per_block;
  const int qw_block = (in_phase % geo.col_blocks) * geo.cols_per_block;
  if (qh_block >= ext_h || qw_block >= ext_w) return;  // past this phase's (smaller) grid: block-uniform

  const Taps32 tr = geo.rows[rh], tc = geo.cols[rw];
  const int C_in_g = static_cast<int>(p.C_in_g), C_out_g = static_cast<int>(p.C_out_g);
  const int H = static_cast<int>(p.H), W = static_cast<int>(p.W);
  const int64_t n = n_base + blockIdx.z, g = blockIdx.y;
  const int phase_taps = tr.count * tc.count;

  // The phase's weights: tap (t_h, t_w) is kernel position (k0_h + t_h step_h, k0_w + t_w step_w).
  const T* wt_group = wt + g * p.kH * p.kW * p.C_in_g * p.C_out_g;
  for (int idx = threadIdx.x; idx < phase_taps * C_in_g * kCB; idx += kThreads) {
    const int c = idx % kCB, ic = (idx / kCB) % C_in_g, tap = idx / (kCB * C_in_g);
    const int t_h = tap / tc.count, t_w = tap - t_h * tc.count;
    const int k = (tr.k0 + t_h * tr.step) * static_cast<int>(p.kW) + tc.k0 + t_w * tc.step;
    ws[idx] = c < C_out_g ? Traits::to_acc(wt_group[(static_cast<int64_t>(k) * C_in_g + ic) * C_out_g + c]) : acc_t(0);
  }
  __syncthreads();

  const int col = static_cast<int>(threadIdx.x) % geo.cols_per_block;
  const int qw = qw_block + col;
  const int qh0 = qh_block + (static_cast<int>(threadIdx.x) / geo.cols_per_block) * kRows;
  if (qw >= ext_w || qh0 >= ext_h) return;  // no shared-memory use after this point

  acc_t acc[kRows][kCB];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int c = 0; c < kCB; ++c) acc[r][c] = acc_t(0);

  // group-relative offsets fit 32 bits (the host checks it). Input channels outermost: the taps of
  // a channel re-read the same input rows at once (L1 hits); taps outermost swept the whole
  // channel range between re-reads and missed L1.
  const T* x_group = x + (n * p.C_in + g * p.C_in_g) * p.H * p.W;
  const PhasePixels px{qh0, qw, H, W, H * W, C_in_g};
  auto over_channels = [&](auto accumulate) {
    int ic = 0;
    for (; ic + kUnrollChannels <= C_in_g; ic += kUnrollChannels)
      accumulate(std::integral_constant<int, kUnrollChannels>{}, ic);
    for (; ic < C_in_g; ++ic) accumulate(std::integral_constant<int, 1>{}, ic);
  };
  auto shared_rows = [&](auto th) {
    const RowWindow<decltype(th)::value> rows(px, tr);
    over_channels([&](auto u, int ic) {
      accumulate_channels_shared_rows<decltype(u)::value>(acc, x_group, ws, ic, px, rows, tc);
    });
  };
  // the row-tap patterns of the common heads (k4 s2, k3 s1) share their rows' loads
  if (tr.count == 2 && tr.off_step == 1) {
    shared_rows(std::integral_constant<int, 2>{});
  } else if (tr.count == 3 && tr.off_step == 1) {
    shared_rows(std::integral_constant<int, 3>{});
  } else {
    over_channels([&](auto u, int ic) { accumulate_channels<decltype(u)::value>(acc, x_group, ws, ic, px, tr, tc); });
  }

  // Bias and activation; phases no tap reaches store just that.
  const int64_t out_plane = p.OH * p.OW;
  T* out_px = out + (n * p.C_out + g * p.C_out_g) * out_plane + static_cast<int64_t>(rw) + static_cast<int64_t>(sW) * qw;
  with_activation<acc_t, T>(ep, [&](auto act) {
#pragma unroll
    for (int c = 0; c < kCB; ++c) {
      if (c >= C_out_g) break;
      const acc_t b = bias != nullptr ? Traits::to_acc(bias[g * p.C_out_g + c]) : acc_t(0);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int qh = qh0 + r;
        if (qh < ext_h) out_px[c * out_plane + static_cast<int64_t>(rh + sH * qh) * p.OW] = Traits::from_acc(act(acc[r][c] + b));
      }
    }
  });
}

// The largest number of taps any phase gets, the weights a block stages.
int64_t max_phase_taps(const FewChannelsGeometry& geo, const ConvTranspose2dParams& p) {
  int64_t rows = 0, cols = 0;
  for (int64_t r = 0; r < p.sH; ++r) rows = std::max<int64_t>(rows, geo.rows[r].count);
  for (int64_t r = 0; r < p.sW; ++r) cols = std::max<int64_t>(cols, geo.cols[r].count);
  return rows * cols;
}

size_t few_channels_smem_bytes(const FewChannelsGeometry& geo, const ConvTranspose2dParams& p, DType dtype) {
  return static_cast<size_t>(max_phase_taps(geo, p) * p.C_in_g * kCB) * (dtype == DType::F64 ? 8 : 4);
}

FewChannelsGeometry few_channels_geometry(const ConvTranspose2dParams& p, const FewChannelsTiling& t) {
  FewChannelsGeometry geo{};
  phase_taps32(p, geo.rows, geo.cols);
  geo.cols_per_block = t.cols;
  geo.rows_per_block = kThreads / t.cols * kRows;
  // residue 0 has the largest phase grid along each dimension
  geo.row_blocks = static_cast<int>(ceil_div_nonneg(phase_extent(p.OH, 0, p.sH), geo.rows_per_block));
  geo.col_blocks = static_cast<int>(ceil_div_nonneg(phase_extent(p.OW, 0, p.sW), geo.cols_per_block));
  return geo;
}

// Blocks per (group, image): every phase gets the largest phase grid's blocks.
int64_t grid_tiles(const ConvTranspose2dParams& p, const FewChannelsGeometry& geo) {
  return p.sH * p.sW * static_cast<int64_t>(geo.row_blocks) * geo.col_blocks;
}

template <typename T>
cudaError_t launch(const void* x, const void* wt, const void* bias, void* out, DType dtype,
                   const ConvTranspose2dParams& p, const FewChannelsTiling& t, const ConvEpilogue& ep,
                   cudaStream_t stream) {
  const FewChannelsGeometry geo = few_channels_geometry(p, t);
  const size_t smem = few_channels_smem_bytes(geo, p, dtype);
  return launch_conv_grid(conv_few_channels_kernel<T>, kThreads, smem, stream, grid_tiles(p, geo), p.groups, p.N, 1,
                          static_cast<const T*>(x), static_cast<const T*>(wt), static_cast<const T*>(bias),
                          static_cast<T*>(out), p, geo, ep);
}

}  // namespace

FewChannelsTiling conv_few_channels_tiling(const ConvTranspose2dParams& p, DType dtype, std::string* why) {
  using T = FewChannelsTiling;
  // 16-bit types: the tensor cores' bf16 / fp16 rate matched or beat this kernel on image heads
  if (dtype != DType::F32 && dtype != DType::F64) return refuse<T>(why, "16-bit: the tensor-core engines win");
  if (p.C_out_g < 1 || p.C_out_g > kCB || p.OH <= 0 || p.OW <= 0)
    return refuse<T>(why, "more than 4 output channels per group, or an empty output");
  if (p.sH > kMaxTapTableStride || p.sW > kMaxTapTableStride || p.groups > 65535)
    return refuse<T>(why, "stride beyond its tap table, or too many groups");
  // 32-bit coordinates and group-relative input offsets (rows past the grid included)
  if (!conv_coordinates_fit_int32(p) || (p.C_in_g + 1) * p.H * p.W + kRows * p.W > kInt32CoordLimit)
    return refuse<T>(why, "offsets beyond 32 bits");
  FewChannelsTiling t;
  const int64_t ext_w = phase_extent(p.OW, 0, p.sW);
  t.cols = ext_w <= 8 ? 8 : ext_w <= 16 ? 16 : 32;
  const FewChannelsGeometry geo = few_channels_geometry(p, t);
  if (max_phase_taps(geo, p) * p.C_in_g > kMaxMacsPerOutput || grid_tiles(p, geo) > 0x7fffffff)
    return refuse<T>(why, "too many multiply-adds per output value (> 512), or grid too large");
  return t;
}

cudaError_t conv_few_channels_forward(const void* x, const void* prepared_weight, const void* bias, void* out,
                                      DType dtype, const ConvTranspose2dParams& p, const FewChannelsTiling& t,
                                      const ConvEpilogue& ep, cudaStream_t stream) {
  if (ep.tile_stats != nullptr || ep.pool_windows || ep.channel_fold != 1) return cudaErrorInvalidValue;
  // the plan takes float32 / float64 only (conv_few_channels_tiling): no 16-bit builds
  if (dtype == DType::F32) return launch<float>(x, prepared_weight, bias, out, dtype, p, t, ep, stream);
  if (dtype == DType::F64) return launch<double>(x, prepared_weight, bias, out, dtype, p, t, ep, stream);
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace myops
