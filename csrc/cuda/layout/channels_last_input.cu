#include "cuda/layout/channels_last_input.cuh"

#include <algorithm>
#include <cstdint>

#include "cuda/layout/nchw_to_nhwc.cuh"

namespace myops {
namespace cuda {
namespace {

// A channels-last float32 input: the TF32-rounded copy, element by element.
__global__ void round_tf32_copy_kernel(const uint32_t* __restrict__ x, uint32_t* __restrict__ y, int64_t total) {
  allow_dependent_launch();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = to_tf32(__uint_as_float(x[i]));
}

// The staging transpose of elements of Raw's size: copied, or (float32) rounded to TF32.
template <typename Raw>
cudaError_t stage(const void* x, void* y, int64_t N, int64_t C, int64_t HW, bool round, cudaStream_t stream) {
  const auto* src = static_cast<const Raw*>(x);
  auto* dst = static_cast<Raw*>(y);
  if constexpr (sizeof(Raw) == 4) {
    if (round) return transpose_to_channels_last(src, dst, N, C, HW, RoundTf32Values{}, stream);
  }
  return transpose_to_channels_last(src, dst, N, C, HW, CopyValues{}, stream);
}

}  // namespace

cudaError_t stage_channels_last_input(const void* x, void* y, DType dtype, int64_t N, int64_t C, int64_t HW,
                                      bool source_channels_last, bool round_tf32, cudaStream_t stream) {
  const int64_t total = N * C * HW;
  if (total == 0) return cudaSuccess;
  const bool round = round_tf32 && dtype == DType::F32;
  if (source_channels_last) {
    if (!round) return cudaMemcpyAsync(y, x, total * dtype_bytes(dtype), cudaMemcpyDeviceToDevice, stream);
    const int blocks = static_cast<int>(std::min<int64_t>(ceil_div(total, 256), 65535));
    round_tf32_copy_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), total);
    return cudaGetLastError();
  }
  switch (dtype) {
    case DType::F32: return stage<uint32_t>(x, y, N, C, HW, round, stream);
    case DType::F64: return stage<uint64_t>(x, y, N, C, HW, false, stream);
    case DType::F16:
    case DType::BF16: return stage<uint16_t>(x, y, N, C, HW, false, stream);
  }
  return cudaErrorInvalidValue;
}

// [N][HW][C] -> [N][C][HW] is the NCHW -> NHWC transpose of an image of HW "channels" of C "pixels".
cudaError_t unstage_channels_last(const void* x, void* y, DType dtype, int64_t N, int64_t C, int64_t HW,
                                  cudaStream_t stream) {
  return stage_channels_last_input(x, y, dtype, N, HW, C, false, false, stream);
}

}  // namespace cuda
}  // namespace myops
