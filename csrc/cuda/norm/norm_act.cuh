#pragma once
// Memory-bound kernels: GELU, GroupNorm statistics (from a tensor or from the conv epilogue's
// per-tile partials) and the GroupNorm normalise pass. Every reduction is a fixed-order tree: the
// results do not depend on scheduling (no float atomics).
#include "cuda/common/launch.cuh"

namespace myops {
namespace cuda {

// y = gelu(x) over n elements of dense memory (y may be x).
cudaError_t gelu_forward(const void* x, void* y, int64_t n, DType dtype, GeluApprox approx,
                         cudaStream_t stream);

// (on) Each element read as GELU(x + bias[c]) (bias: its channel's, in the tensor's dtype; nullable),
// the sum and GELU's output rounded to the dtype: the kernels then see the values a stored
// conv-with-bias and GELU output would hold without either being written and read again (strict
// float32's fused op over cuDNN's bias-free conv output, bindings.cpp).
struct PreGelu {
  bool on = false;
  GeluApprox approx = GeluApprox::None;
  const void* bias = nullptr;
};

// x: contiguous [N, C, HW]; mean / rstd: [N * num_groups] float64.
cudaError_t group_norm_stats(const void* x, DType dtype, int64_t N, int64_t C, int64_t HW,
                             int64_t num_groups, double eps, double* mean, double* rstd,
                             cudaStream_t stream);

// (count, mean, M2) of each (n, c) plane of contiguous x [N, C, HW] read through pre, as
// moments [N * C][3] in double for float64 tensors (dtype), else float: the conv epilogue's
// tile-partials layout with one tile, for group_norm_stats_from_tiles / channel_stats_from_tiles.
cudaError_t plane_moments(const void* x, DType dtype, int64_t N, int64_t C, int64_t HW, void* moments,
                          cudaStream_t stream, PreGelu pre = {});

// tile_stats: [N][C][tiles][3] (count, mean, M2) from the conv epilogue, double for float64
// tensors (dtype), else float; combined per (n, group) with Chan's formula in float64.
// mean32 / rstd32 (nullable): the same statistics rounded to float, for callers that return them
// in float32 (one launch fewer than converting the float64 ones afterwards).
cudaError_t group_norm_stats_from_tiles(const void* tile_stats, DType dtype, int64_t N, int64_t C,
                                        int64_t tiles, int64_t num_groups, double eps,
                                        double* mean, double* rstd, cudaStream_t stream,
                                        float* mean32 = nullptr, float* rstd32 = nullptr);

// y = (x - mean) * rstd * gamma + beta over contiguous [N, C, HW] (y may be x; gamma / beta
// nullable, in the tensor's dtype); x read through pre.
cudaError_t group_norm_apply(const void* x, void* y, DType dtype, int64_t N, int64_t C, int64_t HW,
                             int64_t num_groups, const double* mean, const double* rstd,
                             const void* gamma, const void* beta, cudaStream_t stream, PreGelu pre = {});

}  // namespace cuda
}  // namespace myops
