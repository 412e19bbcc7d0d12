#pragma once
// conv_transpose2d as an implicit GEMM in gather form, one output phase (oh mod s_h, ow mod s_w)
// at a time: per phase M = output pixels, N = C_out / groups, K = C_in / groups x (taps that hit
// the phase). Phases that no tap reaches just write the bias.
#include <string>

#include "cuda/conv/direct/direct.cuh"
#include "cuda/conv/generic/generic.cuh"
#include "cuda/conv/mma/mma.cuh"
#include "cuda/conv/few_channels/few_channels.cuh"
#include "cuda/conv/wgmma/wgmma.cuh"
#include "common/norm_act.h"
#include "cuda/common/launch.cuh"
#include "cuda/conv/common/window_store.cuh"

namespace myops {
namespace cuda {

// L2 eviction priorities for a conv that GroupNorm followers normalise behind (group_norm_follow.cuh):
// its input is read about once, its output read back and rewritten soon after, and the followers'
// writes are final. Without hints most follower reads missed L2 and the op moved nearly twice the
// conv's DRAM bytes; with all three below, close to the conv's own (float32 images larger than L2
// still mostly miss). Bit flags:
enum L2Hint : unsigned {
  kL2InputEvictFirst = 1,    // the conv's input boxes (the two-block wgmma kernel's NCHW boxes)
  kL2OutputEvictLast = 2,    // the conv's whole-pair output stores (conv_epilogue_pairs)
  kL2FollowerEvictFirst = 8  // the followers' normalised stores (within-plane pieces)
};

// What the GEMM epilogue does after adding the bias.
struct ConvEpilogue {
  // F.<act> on bias + accumulator, before the store and the statistics (cuda/common/activation.cuh)
  Activation act = Activation::None;
  GeluApprox approx = GeluApprox::None;  // Activation::Gelu's form
  double negative_slope = 0.01;          // Activation::LeakyRelu's; double, as float64 outputs need it
  // If set: per (n, c_out, pixel tile) the (count, mean, M2) of the epilogue's output as stored
  // (after rounding to the output dtype, so that the normalise pass sees the same values), in
  // the accumulation type (double for float64, else float), laid out
  // [N][C_out][ConvPlan::tiles_per_sample][3]; reduced later in a fixed order.
  void* tile_stats = nullptr;
  // If set (with tile_stats; kernels for which conv_plan_counts_tiles): [N] counters, each block
  // adds 1 to its image's once its outputs and tile partials are visible device-wide (the
  // normalise pass that follows the conv: group_norm_follow.cuh)
  unsigned* tiles_done = nullptr;
  // The statistics' channel is channel_fold consecutive output channels of the call (> 1: the
  // pointwise view of a 1 x 1 input, whose channels are (channel, kh, kw): see bindings.cpp);
  // the mma.sync kernel's blocks then hold whole folds (it divides 16).
  int channel_fold = 1;
  // If set (the ping-pong wgmma kernel only: conv_plan_window_rows), each 2 x 2 window of the
  // output (rows 2k, 2k + 1, columns 2i, 2i + 1) is stored as one value: the window's maximum, or
  // its minimum for channels whose window_sign entry is negative (NaN wins either way). A 2 x 2
  // max-pool of stride 2 after a per-channel map monotonic in the value (BatchNorm's x * a + s with
  // a of window_sign's sign, then tanh) sees the same value, from a quarter of the bytes. A window
  // whose rows lie in two tiles is stored as its two rows' values (window_store_row): the reader
  // takes their extreme. out is [N, C_out, window_store_rows(OH, rows), OW / 2]. The statistics
  // still describe every output value.
  bool pool_windows = false;
  const void* window_sign = nullptr;  // nullable [C_out] of the output dtype
  // L2Hint flags (kL2InputEvictFirst, kL2OutputEvictLast): set with tiles_done only
  unsigned l2_hints = 0;
};

// Which engine runs a call (select.cu: the policy, in one place) and what it needs. Engines, in
// order of preference: direct (few multiply-adds per output value), few-channels (plain float32 /
// float64 convs to <= 4 channels per group), wgmma (Hopper, tensor cores), mma.sync (tensor cores
// on sm_80+, and exact FFMA / Winograd rows for strict float32), generic (the rest). Each engine's
// tiling function (its .cuh) says whether it takes the call, and why not. myops.backends options
// (common/options.h) disable or force engines; the plan cache keys on them.
enum class ConvEngine { Generic, Direct, FewChannels, Mma, Wgmma };
struct ConvPlan {
  ConvEngine engine = ConvEngine::Generic;
  DirectTiling direct;            // the direct kernel's (engine Direct)
  FewChannelsTiling few_channels;  // the few-channels kernel's (engine FewChannels)
  MmaTiling tiling;               // the mma kernel's tile shape (engine Mma)
  WgmmaTiling wg;                 // the wgmma kernel's (engine Wgmma)
  int64_t tiles_per_sample = 0;   // sizes ConvEpilogue::tile_stats
  int64_t prepared_numel = 0;     // elements of the prepared weight buffer (input dtype)
};
// input_channels_last: the input is channels-last contiguous (a 16-bit one then costs nothing to
// give the wgmma kernel channels-last). plain_output: the call's epilogue asks for no statistics
// (ConvEpilogue::tile_stats, pool_windows, channel_fold unset), which the few-channels kernel needs.
ConvPlan conv_plan(const ConvTranspose2dParams& p, DType dtype, Fp32Math fp32_math, bool input_channels_last,
                   bool plain_output);
// The same choice as text: the chosen engine (with its tiling) and one line per engine passed
// over, with the reason (myops.explain).
std::string conv_plan_explain(const ConvTranspose2dParams& p, DType dtype, Fp32Math fp32_math,
                              bool input_channels_last, bool plain_output);

// The output rows per tile where the plan's kernel can store 2 x 2 windows
// (ConvEpilogue::pool_windows; the ping-pong wgmma kernel, whose threads hold pairs of
// neighbouring columns and every row of a tile, with stride 1: one output phase), else 0.
// Option::WindowStores off: never.
int conv_plan_window_rows(const ConvTranspose2dParams& p, const ConvPlan& plan, DType dtype);

// Whether the plan's kernel counts finished blocks per image (ConvEpilogue::tiles_done): the
// two-block wgmma kernel; and how many blocks each image has then.
bool conv_plan_counts_tiles(const ConvPlan& plan);
int64_t conv_plan_blocks_per_image(const ConvTranspose2dParams& p, const ConvPlan& plan);

// weight [C_in, C_out / groups, kH, kW] (contiguous) -> the plan's prepared layout.
// after_staging: the input was just copied for the kernel (mostly its NHWC staging): the Hopper
// kernel's preparation may then start under the kernel ahead of it in `stream`, which it waits for
// before it ends, so that the conv after it follows both (safe whatever that kernel is).
cudaError_t conv_prepare_weight(const void* weight, void* prepared, DType dtype,
                                const ConvTranspose2dParams& p, const ConvPlan& plan, bool after_staging,
                                cudaStream_t stream);

// x: contiguous NCHW, or NHWC where plan.wg.nhwc (see there); prepared weight; bias (nullable,
// [C_out]); out: contiguous NCHW.
cudaError_t conv_transpose2d_forward(const void* x, const void* prepared_weight, const void* bias,
                                     void* out, DType dtype, Fp32Math fp32_math,
                                     const ConvTranspose2dParams& p, const ConvPlan& plan,
                                     const ConvEpilogue& epilogue, cudaStream_t stream);

}  // namespace cuda
}  // namespace myops
