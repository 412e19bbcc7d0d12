#include "cuda/conv_source.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

namespace myops {
namespace {

// Milliseconds of run(source) on stream: the faster of two timed runs after a warm-up (the
// warm-up takes cuDNN's plan search and the caching allocator's first allocations), or infinity
// where it throws.
float time_source(ConvSource source, cudaStream_t stream, const std::function<void(ConvSource)>& run) {
  cudaEvent_t start, end;
  TORCH_CHECK(cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&end) == cudaSuccess,
              "myops: conv source choice: cudaEventCreate failed");
  float best = std::numeric_limits<float>::infinity();
  try {
    run(source);
    for (int rep = 0; rep < 2; ++rep) {
      cudaEventRecord(start, stream);
      run(source);
      cudaEventRecord(end, stream);
      float ms = 0;
      if (cudaEventSynchronize(end) == cudaSuccess && cudaEventElapsedTime(&ms, start, end) == cudaSuccess)
        best = std::min(best, ms);
    }
  } catch (const std::exception&) {
    best = std::numeric_limits<float>::infinity();
  }
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  return best;
}

}  // namespace

ConvSource timed_conv_source(const std::string& key, cudaStream_t stream, bool may_time,
                             const std::function<void(ConvSource)>& run) {
  const char* forced = std::getenv("MYOPS_CONV_SOURCE");
  if (forced && std::strcmp(forced, "myops") == 0) return ConvSource::Myops;
  if (forced && std::strcmp(forced, "cudnn") == 0) return ConvSource::Cudnn;
  if (!may_time) return ConvSource::Myops;
  int device = 0;
  TORCH_CHECK(cudaGetDevice(&device) == cudaSuccess, "myops: conv source choice: cudaGetDevice failed");
  const std::string device_key = std::to_string(device) + "|" + key;
  static std::mutex mutex;
  static std::map<std::string, ConvSource> chosen;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = chosen.find(device_key);
    if (it != chosen.end()) return it->second;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone)
    return ConvSource::Myops;
  const float ours = time_source(ConvSource::Myops, stream, run);
  const float cudnn = time_source(ConvSource::Cudnn, stream, run);
  const ConvSource source = cudnn < ours ? ConvSource::Cudnn : ConvSource::Myops;
  const std::lock_guard<std::mutex> lock(mutex);
  return chosen.emplace(device_key, source).first->second;
}

}  // namespace myops
