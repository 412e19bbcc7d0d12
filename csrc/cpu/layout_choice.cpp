#include "cpu/layout_choice.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <vector>

#include "common/options.h"

namespace myops {
namespace {

constexpr int kRounds = 5;

std::mutex& cache_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, CpuLayoutChoice>& cache() {
  static std::map<std::string, CpuLayoutChoice> chosen;
  return chosen;
}

// The key of a timed choice: the conv's shape, dtype, bias, the threads it runs on and the options.
std::string layout_key(const ConvTranspose2dParams& p, const std::string& dtype_name, bool has_bias) {
  std::string key = dtype_name + (has_bias ? "|bias|" : "|") + std::to_string(at::get_num_threads());
  for (const int64_t v : {p.N, p.C_in, p.H, p.W, p.C_out, p.kH, p.kW, p.groups, p.sH, p.sW, p.pH, p.pW, p.opH,
                          p.opW, p.dH, p.dW})
    key += "," + std::to_string(v);
  return key + "|" + options_key();
}

double median(std::vector<double> t) {
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

// One warm-up run each, then kRounds rounds that time each way in turn (a drift of the machine's
// speed falls on both alike); the medians.
CpuLayoutChoice time_layouts(const std::function<void(bool)>& run) {
  std::vector<double> ms[2];
  for (const bool cl : {false, true}) run(cl);
  for (int round = 0; round < kRounds; ++round) {
    for (const bool cl : {false, true}) {
      const auto start = std::chrono::steady_clock::now();
      run(cl);
      ms[cl].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
  }
  CpuLayoutChoice choice;
  choice.nchw_ms = median(ms[0]);
  choice.channels_last_ms = median(ms[1]);
  choice.channels_last = choice.channels_last_ms < choice.nchw_ms;  // a tie keeps NCHW
  return choice;
}

}  // namespace

CpuLayoutChoice cpu_conv_layout(const ConvTranspose2dParams& p, const std::string& dtype_name, bool has_bias,
                                const std::function<void(bool)>& run) {
  const int forced = option(Option::CpuChannelsLast);
  if (forced != kAuto || at::globalContext().deterministicAlgorithms()) {
    CpuLayoutChoice choice;
    choice.channels_last = forced == kAlways;
    return choice;
  }
  const std::string key = layout_key(p, dtype_name, has_bias);
  {
    const std::lock_guard<std::mutex> lock(cache_mutex());
    const auto it = cache().find(key);
    if (it != cache().end()) return it->second;
  }
  const CpuLayoutChoice choice = time_layouts(run);
  const std::lock_guard<std::mutex> lock(cache_mutex());
  return cache().emplace(key, choice).first->second;
}

std::optional<CpuLayoutChoice> cached_cpu_conv_layout(const ConvTranspose2dParams& p, const std::string& dtype_name,
                                                      bool has_bias) {
  const std::lock_guard<std::mutex> lock(cache_mutex());
  const auto it = cache().find(layout_key(p, dtype_name, has_bias));
  if (it == cache().end()) return std::nullopt;
  return it->second;
}

}  // namespace myops
