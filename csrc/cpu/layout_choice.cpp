#include "cpu/layout_choice.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "common/options.h"
#include "common/timed_choice.h"

namespace myops {
namespace {

constexpr int kRounds = 5;

ChoiceCache<CpuLayoutChoice>& cache() {
  static ChoiceCache<CpuLayoutChoice> chosen;
  return chosen;
}

// The key of a timed choice: the conv's shape, dtype, bias, the threads it runs on and the options.
std::string layout_key(const ConvTranspose2dParams& p, const std::string& dtype_name, bool has_bias) {
  return dtype_name + (has_bias ? "|bias|" : "|") + std::to_string(at::get_num_threads()) + conv_params_key(p) + "|" +
         options_key();
}

// Where no timing decides: the option, or PyTorch's deterministic mode (NCHW); why, for explain.
struct Rule {
  bool channels_last;
  const char* why;
};
std::optional<Rule> ruled_layout() {
  const int forced = option(Option::CpuChannelsLast);
  if (forced != kAuto) return Rule{forced == kAlways, "forced"};
  if (at::globalContext().deterministicAlgorithms()) return Rule{false, "deterministic algorithms asked for"};
  return std::nullopt;
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
  choice.nchw_ms = median_of(ms[0]);
  choice.channels_last_ms = median_of(ms[1]);
  choice.channels_last = choice.channels_last_ms < choice.nchw_ms;  // a tie keeps NCHW
  return choice;
}

const char* layout_name(bool channels_last) {
  return channels_last ? "channels-last kernels between layout copies" : "NCHW";
}

}  // namespace

CpuLayoutChoice cpu_conv_layout(const ConvTranspose2dParams& p, const std::string& dtype_name, bool has_bias,
                                const std::function<void(bool)>& run) {
  if (const auto rule = ruled_layout()) {
    CpuLayoutChoice choice;
    choice.channels_last = rule->channels_last;
    return choice;
  }
  const std::string key = layout_key(p, dtype_name, has_bias);
  if (const auto cached = cache().find(key)) return *cached;
  return cache().keep(key, time_layouts(run));
}

std::string explain_cpu_conv_layout(const ConvTranspose2dParams& p, const std::string& dtype_name, bool has_bias) {
  if (const auto rule = ruled_layout())
    return std::string("layout: ") + layout_name(rule->channels_last) + " (" + rule->why + ")\n";
  const auto choice = cache().find(layout_key(p, dtype_name, has_bias));
  if (!choice) return "layout: not chosen yet (the first call of this shape times NCHW and channels-last)\n";
  char line[160];
  std::snprintf(line, sizeof(line), "layout: %s (timed: NCHW %.3f ms, channels-last with its copies %.3f ms)\n",
                layout_name(choice->channels_last), choice->nchw_ms, choice->channels_last_ms);
  return line;
}

}  // namespace myops
