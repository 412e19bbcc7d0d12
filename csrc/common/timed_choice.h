#pragma once
// What the first-call timed choices share (cudnn.benchmark-like: the CUDA ops' ours-vs-cuDNN
// choice, the CPU conv's layout choice): a process-wide cache of choices by key, the conv's shape
// as part of a key, and the median of timed runs. Plain C++ (no torch header).
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/conv_params.h"

namespace myops {

// Choices by key, for the process; thread-safe. The first one stored for a key stays.
template <typename Choice>
class ChoiceCache {
 public:
  std::optional<Choice> find(const std::string& key) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = chosen_.find(key);
    if (it == chosen_.end()) return std::nullopt;
    return it->second;
  }
  // Stores choice unless another thread stored one for key first; returns the one kept.
  Choice keep(const std::string& key, Choice choice) {
    const std::lock_guard<std::mutex> lock(mutex_);
    return chosen_.emplace(key, std::move(choice)).first->second;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, Choice> chosen_;
};

// The call's sizes and conv arguments, comma-separated (the output sizes follow from them).
inline std::string conv_params_key(const ConvTranspose2dParams& p) {
  std::string key;
  for (const int64_t v : {p.N, p.C_in, p.H, p.W, p.C_out, p.kH, p.kW, p.groups, p.sH, p.sW, p.pH, p.pW, p.opH,
                          p.opW, p.dH, p.dW})
    key += "," + std::to_string(v);
  return key;
}

// The median of t (the upper one of an even count).
template <typename T>
T median_of(std::vector<T> t) {
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

}  // namespace myops
