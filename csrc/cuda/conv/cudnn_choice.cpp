#include "cuda/conv/cudnn_choice.h"

#include "common/options.h"
#include "cuda/common/launch.cuh"

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

namespace myops {
namespace {

constexpr int kRounds = 5, kRunsPerRound = 2;

// Milliseconds per run of each source on stream, the median of kRounds rounds that time each
// source in turn (a drift of the clocks falls on both alike), each over kRunsPerRound runs queued
// back to back (so that the host time of one run hides behind the previous one on the GPU, as it
// does inside a model), after one warm-up run of each (cuDNN's plan search, the caching
// allocator's first allocations). A source that throws is timed as infinity.
std::array<float, 2> time_sources(cudaStream_t stream, const std::function<void(ConvSource)>& run) {
  constexpr ConvSource kSources[2] = {ConvSource::Myops, ConvSource::Cudnn};
  cudaEvent_t start, end;
  TORCH_CHECK(cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&end) == cudaSuccess,
              "myops: conv source choice: cudaEventCreate failed");
  std::array<bool, 2> ok{true, true};
  std::array<std::vector<float>, 2> times;
  for (int s = 0; s < 2; ++s) {
    try {
      run(kSources[s]);
    } catch (const std::exception&) {
      ok[s] = false;
    }
  }
  for (int round = 0; round < kRounds; ++round) {
    for (int s = 0; s < 2; ++s) {
      if (!ok[s]) continue;
      try {
        cudaEventRecord(start, stream);
        for (int r = 0; r < kRunsPerRound; ++r) run(kSources[s]);
        cudaEventRecord(end, stream);
        float ms = 0;
        if (cudaEventSynchronize(end) == cudaSuccess && cudaEventElapsedTime(&ms, start, end) == cudaSuccess)
          times[s].push_back(ms / kRunsPerRound);
      } catch (const std::exception&) {
        ok[s] = false;
      }
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  std::array<float, 2> median{};
  for (int s = 0; s < 2; ++s) {
    auto& t = times[s];
    if (!ok[s] || t.empty()) {
      median[s] = std::numeric_limits<float>::infinity();
      continue;
    }
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    median[s] = t[t.size() / 2];
  }
  return median;
}

std::mutex& cache_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, ConvSource>& cache() {
  static std::map<std::string, ConvSource> chosen;
  return chosen;
}
std::string device_key(const std::string& key) {
  int device = 0;
  TORCH_CHECK(cudaGetDevice(&device) == cudaSuccess, "myops: conv source choice: cudaGetDevice failed");
  return std::to_string(device) + "|" + key;
}

}  // namespace

std::optional<ConvSource> cached_conv_source(const std::string& key) {
  const std::string k = device_key(key);
  const std::lock_guard<std::mutex> lock(cache_mutex());
  const auto it = cache().find(k);
  if (it == cache().end()) return std::nullopt;
  return it->second;
}

ConvSource timed_conv_source(const std::string& key, cudaStream_t stream, bool may_time,
                             const std::function<void(ConvSource)>& run) {
  if (!may_time) return ConvSource::Myops;
  const std::string dkey = device_key(key);
  std::mutex& mutex = cache_mutex();
  std::map<std::string, ConvSource>& chosen = cache();
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = chosen.find(dkey);
    if (it != chosen.end()) return it->second;
  }
  if (cuda::stream_capturing(stream)) return ConvSource::Myops;
  const auto [ours, cudnn] = time_sources(stream, run);
  const ConvSource source = cudnn < ours ? ConvSource::Cudnn : ConvSource::Myops;
  const std::lock_guard<std::mutex> lock(mutex);
  return chosen.emplace(dkey, source).first->second;
}

}  // namespace myops
