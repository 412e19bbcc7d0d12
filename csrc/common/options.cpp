#include "common/options.h"

#include <array>
#include <atomic>

namespace myops {
namespace {

struct Entry {
  const char* name;
  int default_value;
};

// In Option order.
constexpr Entry kEntries[] = {
    {"conv_source", kAuto},    {"direct", 1},          {"few_channels", 1},   {"mma", 1},
    {"wgmma", 1},              {"force_wgmma", 0},     {"tma", 1},            {"nhwc_staging", kAuto},
    {"wide_tiles", kAuto},     {"winograd", 1},        {"window_stores", 1},  {"gn_followers", kAuto},
    {"bn_stats_blocks", kAuto}, {"bn_tail_prefetch", 1}, {"early_launch", 1}, {"gelu_vectors", kAuto},
    {"hopper", 1},             {"cpu_reference", 0},   {"recompute_conv", 0}, {"cpu_channels_last", kAuto},
    {"aten_training", kAuto},
};
constexpr int kCount = static_cast<int>(Option::kCount);
static_assert(sizeof(kEntries) / sizeof(kEntries[0]) == kCount, "one entry per Option");

struct Table {
  std::array<std::atomic<int>, kCount> values;
  Table() {
    for (int i = 0; i < kCount; ++i) values[i].store(kEntries[i].default_value);
  }
};

std::array<std::atomic<int>, kCount>& table() {
  static Table t;
  return t.values;
}

}  // namespace

int option(Option o) { return table()[static_cast<int>(o)].load(std::memory_order_relaxed); }
void set_option(Option o, int value) { table()[static_cast<int>(o)].store(value, std::memory_order_relaxed); }
const char* option_name(int index) { return index >= 0 && index < kCount ? kEntries[index].name : nullptr; }
std::string options_key() {
  std::array<int, kCount> values;
  for (int i = 0; i < kCount; ++i) values[i] = table()[i].load(std::memory_order_relaxed);
  return std::string(reinterpret_cast<const char*>(values.data()), sizeof(values));
}

}  // namespace myops
