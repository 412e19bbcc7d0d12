#pragma once
// Memory-bound kernels: GELU, GroupNorm statistics (from a tensor or from the conv epilogue's
// per-tile partials) and the GroupNorm normalise pass. Every reduction is a fixed-order tree: the
// results do not depend on scheduling (no float atomics).
#include "cuda/launch.cuh"

namespace myops {
namespace cuda {

// y = gelu(x) over n elements of dense memory (y may be x).
cudaError_t gelu_forward(const void* x, void* y, int64_t n, DType dtype, GeluApprox approx,
                         cudaStream_t stream);

// GELU applied to each element as it is read, rounded to the tensor's dtype: the normalisation
// kernels then see the values a stored GELU output would hold, without that output being written
// and read again (strict float32's fused ops over cuDNN's conv output, bindings.cpp).
struct PreGelu {
  bool on = false;
  GeluApprox approx = GeluApprox::None;
};

// x: contiguous [N, C, HW]; mean / rstd: [N * num_groups] float64.
cudaError_t group_norm_stats(const void* x, DType dtype, int64_t N, int64_t C, int64_t HW,
                             int64_t num_groups, double eps, double* mean, double* rstd,
                             cudaStream_t stream, PreGelu pre = {});

// tile_stats: [N][C][tiles][3] (count, mean, M2) from the conv epilogue, double for float64
// tensors (dtype), else float; combined per (n, group) with Chan's formula in float64.
cudaError_t group_norm_stats_from_tiles(const void* tile_stats, DType dtype, int64_t N, int64_t C,
                                        int64_t tiles, int64_t num_groups, double eps,
                                        double* mean, double* rstd, cudaStream_t stream);

// y = (x - mean) * rstd * gamma + beta over contiguous [N, C, HW] (y may be x; gamma / beta
// nullable, in the tensor's dtype); x read through pre.
cudaError_t group_norm_apply(const void* x, void* y, DType dtype, int64_t N, int64_t C, int64_t HW,
                             int64_t num_groups, const double* mean, const double* rstd,
                             const void* gamma, const void* beta, cudaStream_t stream, PreGelu pre = {});

}  // namespace cuda
}  // namespace myops
