#pragma once
// Kernels of the BatchNorm chain (ConvT -> BatchNorm -> Tanh -> MaxPool2d -> GroupNorm) beyond the convolution: BatchNorm statistics per channel from the
// conv epilogue's tile partials, and one pass applying batch_norm (given statistics) -> tanh ->
// max_pool2d that also writes GroupNorm partials per (n, c) plane of the pooled tensor. The
// GroupNorm then finishes with group_norm_stats_from_tiles (one "tile" per plane) and
// group_norm_apply (norm_act.cuh).
#include "cuda/common/launch.cuh"

namespace myops {
namespace cuda {

// tile_stats: [N][C][tiles][3] (count, mean, M2) in S (double for float64 tensors (dtype), else
// float); writes per channel the mean and the biased variance over all N and tiles, in S.
cudaError_t channel_stats_from_tiles(const void* tile_stats, DType dtype, int64_t N, int64_t C,
                                     int64_t tiles, void* mean, void* var, cudaStream_t stream);

// x: contiguous [N, C, q.H, q.W] of dtype; mean / var: [C] in S (as above); bn_weight / bn_bias:
// nullable [C] of dtype. y: contiguous [N, C, q.PH, q.PW] = max_pool2d(tanh((x - mean) *
// rsqrt(var + eps) * w + b)); plane_stats: [N * C][3] (count, mean, M2) of y as stored, in S.
cudaError_t batch_norm_tanh_max_pool2d(const void* x, DType dtype, int64_t N, int64_t C,
                                       const Pool2dParams& q, const void* mean, const void* var,
                                       const void* bn_weight, const void* bn_bias, double eps,
                                       void* y, void* plane_stats, cudaStream_t stream);

// MaxPool2d(2, 2): 2 x 2 windows of stride 2, no padding or dilation (the tail's unrolled window,
// and the pool a window-stored conv output can stand for).
inline bool pool_is_2x2(const Pool2dParams& q) {
  return q.kH == 2 && q.kW == 2 && q.sH == 2 && q.sW == 2 && q.pH == 0 && q.pW == 0 && q.dH == 1 && q.dW == 1;
}

// The whole tail in one kernel, one block per (n, group), when the pooled group fits in shared
// memory (see _fits): y = group_norm(max_pool2d(tanh(batch_norm(x)))), with the same arguments as
// above plus GroupNorm's; otherwise the caller runs batch_norm_tanh_max_pool2d and the GroupNorm
// kernels. split_rows > 0: x is the window-stored form (ConvEpilogue::pool_windows) of a conv
// output [N, C, q.H, q.W] whose tiles are split_rows rows tall, [N, C, window_store_rows(q.H,
// split_rows), q.W / 2], and q a 2 x 2 pool of stride 2 without padding or dilation. after_stats:
// the kernel ahead in the stream is channel_stats_from_tiles's and x was written before it (the
// tail may then start under it; Option::EarlyLaunch off turns that off).
bool batch_norm_tanh_max_pool2d_group_norm_fits(DType dtype, int64_t N, int64_t C, int64_t num_groups,
                                                const Pool2dParams& q, int64_t split_rows = 0);
cudaError_t batch_norm_tanh_max_pool2d_group_norm(const void* x, DType dtype, int64_t N, int64_t C,
                                                  const Pool2dParams& q, int64_t split_rows, const void* mean,
                                                  const void* var, const void* bn_weight, const void* bn_bias,
                                                  double bn_eps, int64_t num_groups, const void* gn_weight,
                                                  const void* gn_bias, double gn_eps, void* y, bool after_stats,
                                                  cudaStream_t stream);

}  // namespace cuda
}  // namespace myops
