#pragma once
// Types shared by the CUDA launch functions (plain CUDA: no torch header, so nvcc builds these
// files on a CPU-only machine).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "common/conv_params.h"
#include "common/gelu_math.h"
#include "common/options.h"
#include "cuda/common/arch.cuh"

namespace myops {
namespace cuda {

enum class DType : int { F32 = 0, F64 = 1, F16 = 2, BF16 = 3 };
inline int dtype_bytes(DType d) { return d == DType::F64 ? 8 : d == DType::F32 ? 4 : 2; }

// float32 convolution math: TF32 tensor cores (PyTorch's default for cuDNN convs) or exact FFMA.
enum class Fp32Math : int { Exact = 0, TF32 = 1 };

// An engine's refusal of a call: sets *why (where asked) to the one-line reason, returns Tiling{}
// (whose zero fields say "not this engine").
template <typename Tiling>
Tiling refuse(std::string* why, const char* reason) {
  if (why != nullptr) *why = reason;
  return Tiling{};
}

// cudaFuncSetAttribute(kernel, MaxDynamicSharedMemorySize, bytes) once per kernel, device and
// size: a driver call on every launch is host time that small layers' kernels wait for. The
// attribute is a ceiling, so a kernel whose ceiling is already high enough needs no call.
inline cudaError_t allow_dynamic_smem(const void* kernel, size_t bytes) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, size_t> ceilings;
  const auto key = std::make_pair(kernel, device);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = ceilings.find(key);
    if (it != ceilings.end() && it->second >= bytes) return cudaSuccess;
  }
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (err != cudaSuccess) return err;
  const std::lock_guard<std::mutex> lock(mutex);
  size_t& ceiling = ceilings[key];
  ceiling = std::max(ceiling, bytes);
  return cudaSuccess;
}

// Whether `stream` is capturing a CUDA graph. A failed query counts as a capture (the callers then
// keep their plain path), its error cleared so that no later launch check reports it.
inline bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

// kernel<<<grid, block, smem, stream>>>(args...) through cudaLaunchKernelEx, with `attribute`
// where given (programmatic dependent launch: launch_early; a cluster size: cluster_dimension).
template <typename... Params, typename... Args>
cudaError_t launch_with(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                        cudaLaunchAttribute* attribute, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = attribute != nullptr ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// kernel<<<grid, block, smem, stream>>>(args...), allowed to start under the kernel ahead of it in
// the stream (programmatic dependent launch, grid_dependency.cuh) where `early`, unless the stream
// is capturing a CUDA graph (there the launch stays plain) and where the kernels lack sm_90 features
// (hopper_features: their wait would compile to nothing). The kernel must wait_for_prior_grid()
// before it reads what that kernel writes, and before it exits if a later plain launch relies on
// it to stand for that kernel's completion too.
template <typename... Params, typename... Args>
cudaError_t launch_early(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                         bool early, Args&&... args) {
  cudaLaunchAttribute start_early{};
  start_early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  start_early.val.programmaticStreamSerializationAllowed = 1;
  const bool start_under = early && hopper_features() && !stream_capturing(stream);
  return launch_with(kernel, grid, block, smem, stream, start_under ? &start_early : nullptr,
                     std::forward<Args>(args)...);
}

// Blocks of `threads` threads and `smem` bytes of dynamic shared memory that the current device
// runs at once (SMs x blocks per SM): a persistent kernel's grid. Cached per kernel, device and
// size (the occupancy query is host time on every launch otherwise).
inline cudaError_t resident_blocks(const void* kernel, int threads, size_t smem, int64_t& blocks) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int, size_t>, int64_t> cache;
  const auto key = std::make_tuple(kernel, device, threads, smem);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) {
      blocks = it->second;
      return cudaSuccess;
    }
  }
  int sms = 0, per_sm = 0;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
  if (err != cudaSuccess) return err;
  blocks = int64_t(sms) * std::max(per_sm, 1);
  const std::lock_guard<std::mutex> lock(mutex);
  cache[key] = blocks;
  return cudaSuccess;
}

}  // namespace cuda
}  // namespace myops
