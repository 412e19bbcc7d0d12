#pragma once
// GroupNorm's two passes over a channels-last (NHWC) conv output: cuDNN's transposed convolution
// runs fastest with channels-last tensors (its NCHW calls spend much of their time
// transposing), so the fused op can take its conv output in that layout and still return NCHW:
// the statistics pass reads it in place and the normalise pass transposes while it normalises,
// one read and one write of the output as in the NCHW form.
#include "cuda/common/launch.cuh"
#include "cuda/norm/norm_act.cuh"

namespace myops {
namespace cuda {

// Pixel tiles per (n, channel) for nhwc_channel_moments over maps of HW pixels.
int64_t nhwc_moment_tiles(int64_t HW);

// (count, mean, M2) of each (n, c) over pixel tiles of contiguous x [N, HW, C] read through pre:
// moments [N][C][tiles][3] (float; double for float64), the conv epilogue's tile-partials layout
// that group_norm_stats_from_tiles reduces per group in a fixed order. cudaErrorInvalidConfiguration,
// before any launch, where the grid cannot cover the channels.
cudaError_t nhwc_channel_moments(const void* x, DType dtype, int64_t N, int64_t C, int64_t HW, int64_t tiles,
                                 void* moments, cudaStream_t stream, PreGelu pre = {});

// y = (read(x) - mean) * rstd * gamma + beta with x contiguous [N, HW, C] and y contiguous
// [N, C, HW] (y_channels_last: [N, HW, C]); mean / rstd [N * num_groups] float64; gamma / beta
// nullable, in the tensor's dtype; sms: the device's multiprocessors (the grid's shape).
cudaError_t nhwc_group_norm_apply(const void* x, void* y, bool y_channels_last, DType dtype, int64_t N, int64_t C,
                                  int64_t HW, int64_t num_groups, const double* mean, const double* rstd,
                                  const void* gamma, const void* beta, int sms, cudaStream_t stream,
                                  PreGelu pre = {});

// The same normalisation of x contiguous [N, C, HW] into y contiguous [N, HW, C]: the last pass of
// a channels-last call whose conv wrote NCHW, which then needs no transpose of its own.
// cudaErrorInvalidConfiguration, before any launch, where the grid cannot cover the shape.
cudaError_t nchw_group_norm_apply_to_channels_last(const void* x, void* y, DType dtype, int64_t N, int64_t C,
                                                  int64_t HW, int64_t num_groups, const double* mean,
                                                  const double* rstd, const void* gamma, const void* beta,
                                                  cudaStream_t stream, PreGelu pre = {});

}  // namespace cuda
}  // namespace myops
