#pragma once
// The wgmma kernel's channels-last input (host side): with it, TMA loads each chunk's halo
// straight into the MMA's operand layout. An NCHW input is transposed once per call; a float32
// input (either layout) is also rounded to TF32 on the way, as the register producer does.
#include "cuda/common/launch.cuh"

namespace myops {
namespace cuda {

// x: contiguous [N, C, H, W] (source_channels_last false) or contiguous [N, H, W, C] (true);
// y: contiguous [N, H, W, C], the same values (float32: rounded to TF32 when round_tf32).
// cudaErrorInvalidConfiguration, before any launch, where the transposes' grid cannot cover the
// shape (over ~2 M channels per image).
cudaError_t stage_channels_last_input(const void* x, void* y, DType dtype, int64_t N, int64_t C, int64_t HW,
                                      bool source_channels_last, bool round_tf32, cudaStream_t stream);

// x: contiguous [N, H, W, C]; y: contiguous [N, C, H, W], the same values (the kernels that read
// NCHW only: mma.sync, direct, the BatchNorm tail). cudaErrorInvalidConfiguration, before any
// launch, where the transposes' grid cannot cover the shape (over ~2 M pixels per image).
cudaError_t unstage_channels_last(const void* x, void* y, DType dtype, int64_t N, int64_t C, int64_t HW,
                                  cudaStream_t stream);

}  // namespace cuda
}  // namespace myops
