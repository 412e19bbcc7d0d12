#include "cuda/conv/cudnn_choice.h"

#include "common/options.h"
#include "common/timed_choice.h"
#include "cuda/common/launch.cuh"

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

namespace myops {
namespace {

constexpr int kRounds = 5, kRunsPerRound = 2;

// Milliseconds per run of each candidate on stream, the median of kRounds rounds that time each
// candidate in turn (a drift of the clocks falls on all alike), each over kRunsPerRound runs
// queued back to back (so that the host time of one run hides behind the previous one on the GPU,
// as it does inside a model), after one warm-up run of each (cuDNN's plan search, the caching
// allocator's first allocations). A candidate that throws is timed as infinity.
std::vector<float> time_sources(cudaStream_t stream, const std::vector<ConvSource>& candidates,
                                const std::function<void(ConvSource)>& run) {
  const size_t n = candidates.size();
  cudaEvent_t start, end;
  TORCH_CHECK(cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&end) == cudaSuccess,
              "myops: conv source choice: cudaEventCreate failed");
  std::vector<bool> ok(n, true);
  std::vector<std::vector<float>> times(n);
  for (size_t s = 0; s < n; ++s) {
    try {
      run(candidates[s]);
    } catch (const std::exception&) {
      ok[s] = false;
    }
  }
  for (int round = 0; round < kRounds; ++round) {
    for (size_t s = 0; s < n; ++s) {
      if (!ok[s]) continue;
      try {
        cudaEventRecord(start, stream);
        for (int r = 0; r < kRunsPerRound; ++r) run(candidates[s]);
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
  std::vector<float> median(n, std::numeric_limits<float>::infinity());
  for (size_t s = 0; s < n; ++s) {
    if (ok[s] && !times[s].empty()) median[s] = median_of(times[s]);
  }
  return median;
}

ChoiceCache<ConvChoice>& cache() {
  static ChoiceCache<ConvChoice> chosen;
  return chosen;
}
std::string device_key(const std::string& key) {
  int device = 0;
  TORCH_CHECK(cudaGetDevice(&device) == cudaSuccess, "myops: conv source choice: cudaGetDevice failed");
  return std::to_string(device) + "|" + key;
}

}  // namespace

const char* conv_source_name(ConvSource source) {
  switch (source) {
    case ConvSource::Myops: return "ours";
    case ConvSource::Cudnn: return "cuDNN's";
    case ConvSource::CudnnChannelsLast: return "cuDNN's channels-last (with the layout copies)";
  }
  return "?";
}

std::optional<ConvChoice> cached_conv_choice(const std::string& key) { return cache().find(device_key(key)); }

ConvSource timed_conv_source(const std::string& key, cudaStream_t stream, bool may_time,
                             const std::vector<ConvSource>& candidates, const std::function<void(ConvSource)>& run) {
  if (!may_time || candidates.size() < 2) return ConvSource::Myops;
  const std::string dkey = device_key(key);
  if (const auto cached = cache().find(dkey)) return cached->source;
  if (cuda::stream_capturing(stream)) return ConvSource::Myops;
  const std::vector<float> ms = time_sources(stream, candidates, run);
  ConvChoice choice;
  size_t best = 0;  // ties (and all-infinite) keep ours, the first candidate
  for (size_t s = 0; s < candidates.size(); ++s) {
    choice.ms.emplace_back(candidates[s], ms[s]);
    if (ms[s] < ms[best]) best = s;
  }
  choice.source = candidates[best];
  return cache().keep(dkey, std::move(choice)).source;
}

}  // namespace myops
