// The one kernel-choice policy for our conv engines: which engine runs a call, in a fixed order of
// preference, each engine answering from its own files whether it can (its tiling function, with
// the reason where it cannot). Ours-vs-cuDNN is decided above this, per op (cudnn_choice.h).
#include <array>
#include <map>
#include <mutex>
#include <string>

#include "common/options.h"
#include "cuda/common/arch.cuh"
#include "cuda/conv/conv_transpose2d.cuh"
#include "cuda/conv/generic/generic.cuh"

namespace myops {
namespace cuda {
namespace {

// What myops.backends allows a plan, plus what the call's shape of epilogue allows.
struct PlanOptions {
  bool direct, few_channels, mma, wgmma, force_wgmma, tma, winograd, hopper;
  ChannelsLastInput channels_last;
  WideTiles wide_tiles;
};

PlanOptions plan_options(bool input_channels_last, bool plain_output) {
  PlanOptions o;
  o.direct = option(Option::Direct) != 0;
  o.few_channels = plain_output && option(Option::FewChannels) != 0;  // (it has no statistics epilogue)
  o.mma = option(Option::Mma) != 0;
  o.wgmma = option(Option::Wgmma) != 0;
  o.force_wgmma = option(Option::ForceWgmma) != 0;
  o.tma = option(Option::Tma) != 0;
  o.winograd = option(Option::Winograd) != 0;
  o.hopper = hopper_features();
  // A channels-last input is the Hopper engine's NHWC input as it is (16-bit) or after a rounding
  // copy (float32), which replaces the NCHW copy the other paths make of it.
  const int nhwc = option(Option::NhwcStaging);
  o.channels_last = !o.tma || nhwc == kNever                 ? ChannelsLastInput::Never
                    : nhwc == kAlways || input_channels_last ? ChannelsLastInput::Always
                                                             : ChannelsLastInput::Auto;
  // wide tiles pay for plain convs only (conv_wgmma_tiling)
  const int wide = option(Option::WideTiles);
  o.wide_tiles = wide == kNever    ? WideTiles::Never
                 : wide == kAlways ? WideTiles::Always
                 : plain_output    ? WideTiles::Auto
                                   : WideTiles::Never;
  return o;
}

// One line per engine the policy passed over, "engine: reason".
using Rejections = std::string;
void reject(Rejections* r, const char* engine, const std::string& reason) {
  if (r != nullptr) *r += std::string("  ") + engine + ": " + reason + "\n";
}

// Preference order: direct (few multiply-adds per output: storing is the cost), few-channels
// (plain float32 / float64 convs to <= 4 channels per group), the Hopper engine, mma.sync, and
// the generic kernel, which takes whatever is left.
ConvPlan make_plan(const ConvTranspose2dParams& p, DType dtype, Fp32Math fp32_math, const PlanOptions& o,
                   int device_sm, Rejections* rejected) {
  ConvPlan plan;
  std::string why;  // the last engine's refusal
  const char* disabled = "disabled (myops.backends)";
  const char* forced = "skipped: force_wgmma puts the Hopper engine first";
  // each engine in turn: skipped (with the reason), or asked; taken where it accepts
  const char* skip = !o.direct ? disabled : o.force_wgmma ? forced : nullptr;
  if (skip == nullptr && (plan.direct = conv_direct_tiling(p, dtype, &why)).cb > 0) {
    plan.engine = ConvEngine::Direct;
    plan.tiles_per_sample = conv_direct_tiles_per_sample(p);
    plan.prepared_numel = conv_generic_prepared_weight_numel(p);
    return plan;
  }
  reject(rejected, "direct", skip != nullptr ? skip : why);
  skip = !o.few_channels ? "disabled, or the call stores statistics" : o.force_wgmma ? forced : nullptr;
  if (skip == nullptr && (plan.few_channels = conv_few_channels_tiling(p, dtype, &why)).cols > 0) {
    plan.engine = ConvEngine::FewChannels;
    plan.prepared_numel = conv_generic_prepared_weight_numel(p);
    return plan;
  }
  reject(rejected, "few_channels", skip != nullptr ? skip : why);
  skip = !o.mma || !o.wgmma ? disabled
         : !o.hopper        ? "no sm_90 features (the GPU, a build without sm_90a, or the option hopper off)"
                            : nullptr;
  if (skip == nullptr && (plan.wg = conv_wgmma_tiling(p, dtype, fp32_math, device_sm, o.force_wgmma, o.tma,
                                                      o.channels_last, o.wide_tiles, &why)).q > 0) {
    plan.engine = ConvEngine::Wgmma;
    plan.tiles_per_sample = conv_wgmma_tiles_per_sample(p, plan.wg);
    plan.prepared_numel = conv_wgmma_prepared_weight_numel(p, dtype);
    return plan;
  }
  reject(rejected, "wgmma", skip != nullptr ? skip : why);
  skip = !o.mma ? disabled : nullptr;
  if (skip == nullptr && (plan.tiling = conv_mma_tiling(p, dtype, fp32_math, o.winograd, &why)).mt > 0) {
    plan.engine = ConvEngine::Mma;
    plan.tiles_per_sample = conv_mma_tiles_per_sample(p, plan.tiling);
    plan.prepared_numel = conv_mma_prepared_weight_numel(p, dtype, plan.tiling);
    return plan;
  }
  reject(rejected, "mma", skip != nullptr ? skip : why);
  plan.tiles_per_sample = conv_generic_tiles_per_sample(p);
  plan.prepared_numel = conv_generic_prepared_weight_numel(p);
  return plan;
}

const char* engine_name(ConvEngine e) {
  switch (e) {
    case ConvEngine::Direct: return "direct";
    case ConvEngine::FewChannels: return "few_channels";
    case ConvEngine::Mma: return "mma";
    case ConvEngine::Wgmma: return "wgmma";
    case ConvEngine::Generic: break;
  }
  return "generic";
}

}  // namespace

ConvPlan conv_plan(const ConvTranspose2dParams& p, DType dtype, Fp32Math fp32_math, bool input_channels_last,
                   bool plain_output) {
  const PlanOptions o = plan_options(input_channels_last, plain_output);
  const int device_sm = current_device_sm();
  // The tiling search costs tens to hundreds of microseconds of host time, as much as a small
  // layer's kernels: plans are cached by everything they depend on (not the batch size).
  using Key = std::array<int64_t, 20>;
  const Key key{p.C_in, p.H, p.W, p.C_out, p.kH, p.kW, p.groups, p.sH, p.sW, p.pH, p.pW, p.opH, p.opW,
                p.dH, p.dW, static_cast<int64_t>(dtype) * 2 + static_cast<int64_t>(fp32_math),
                o.mma + 2 * o.wgmma + 4 * o.force_wgmma + 8 * o.direct + 16 * o.tma + 32 * o.few_channels +
                    64 * o.winograd + 128 * o.hopper,
                static_cast<int64_t>(o.channels_last), static_cast<int64_t>(o.wide_tiles), device_sm};
  static std::mutex mutex;
  static std::map<Key, ConvPlan> cache;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  const ConvPlan plan = make_plan(p, dtype, fp32_math, o, device_sm, nullptr);
  const std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() >= 4096) cache.clear();  // bounded: a stream of new shapes cannot grow it forever
  cache.emplace(key, plan);
  return plan;
}

std::string conv_plan_explain(const ConvTranspose2dParams& p, DType dtype, Fp32Math fp32_math,
                              bool input_channels_last, bool plain_output) {
  Rejections rejected;
  const int device_sm = current_device_sm();
  const ConvPlan plan =
      make_plan(p, dtype, fp32_math, plan_options(input_channels_last, plain_output), device_sm, &rejected);
  std::string out = std::string("engine: ") + engine_name(plan.engine);
  if (plan.engine == ConvEngine::Wgmma) {
    out += " (" + std::to_string(plan.wg.rows) + " x " + std::to_string(8 * plan.wg.q) + "-pixel tiles, " +
           std::to_string(plan.wg.stages) + " stages, input " +
           (plan.wg.nhwc ? "staged channels-last" : plan.wg.box_slots > 0 ? "through TMA boxes" : "through registers") +
           (plan.wg.rows == 17 ? ", ping-pong kernel" : ", two blocks per SM") + ")";
  } else if (plan.engine == ConvEngine::Mma) {
    out += std::string(" (") + (plan.tiling.wino ? "Winograd rows, " : "") +
           std::to_string(plan.tiling.th) + " x " + std::to_string(plan.tiling.tw) + "-pixel tiles)";
  }
  out += "\npassed over:\n" + (rejected.empty() ? std::string("  (none)\n") : rejected);
  return out;
}

}  // namespace cuda
}  // namespace myops
