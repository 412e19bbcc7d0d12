#pragma once
// Host code of the GroupNorm passes shared by the ops that end in one: statistics (from a tensor,
// per plane, or from the conv epilogue's per-tile partials), the normalise pass, and GroupNorm of a
// channels-last tensor where it lies.
#include <ATen/ATen.h>

#include <optional>
#include <utility>

#include "cuda/norm/channels_last_group_norm.cuh"
#include "cuda/norm/norm_act.cuh"
#include "cuda/ops/tensors.h"

namespace myops {
namespace host {

// Normalises contiguous x [N, C, *] (read through pre) into y with freshly computed or given
// statistics.
void group_norm_apply(const char* op, const at::Tensor& x, at::Tensor& y, int64_t num_groups,
                      const at::Tensor& mean, const at::Tensor& rstd,
                      const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                      cuda::PreGelu pre = {});

// GroupNorm's mean / rstd (float64, [N * num_groups]) of contiguous x [N, C, *]; mean32 / rstd32
// the same in float32 where a caller asked for them (else undefined).
struct GroupStats {
  at::Tensor mean, rstd, mean32, rstd32;
  GroupStats(const at::Tensor& like, int64_t count)  // uninitialised, on like's device
      : mean(at::empty({count}, like.options().dtype(at::kDouble))), rstd(at::empty_like(mean)) {}
  GroupStats() = default;
};

GroupStats group_stats(const char* op, const at::Tensor& x, int64_t num_groups, double eps);

// (count, mean, M2) per (n, c) plane of contiguous x [N, C, *] read through pre: [N, C, 1, 3] in
// the statistics dtype, the layout of the conv epilogue's tile partials (one tile per plane).
at::Tensor plane_moments(const char* op, const at::Tensor& x, cuda::PreGelu pre = {});

// The same per (n, c) over pixel tiles of a channels-last x [N, C, H, W] read where it lies:
// [N, C, tiles, 3]; nullopt where the kernel cannot cover the channels (the caller then reads an
// NCHW copy).
std::optional<at::Tensor> nhwc_moments(const char* op, const at::Tensor& x, cuda::PreGelu pre = {});

// GroupNorm's mean / rstd from partials [N, C, tiles, 3] (the conv epilogue's per tile, or one
// per plane), reduced per (n, group) in a fixed order; float32_copy: also as float32.
GroupStats group_stats_from_partials(const char* op, const at::Tensor& partials, int64_t num_groups, double eps,
                                     bool float32_copy = false);

// BatchNorm's per-channel mean and biased variance ([C] each, in the partials' dtype) from partials
// [N, C, tiles, 3] of a non-empty output, reduced per channel in a fixed order.
std::pair<at::Tensor, at::Tensor> channel_stats_from_partials(const char* op, const at::Tensor& partials);

// GroupNorm of x, a contiguous channels-last [N, C, H, W], where it lies: the statistics pass reads
// it as NHWC through pre, and the normalise pass (reading it the same way) writes a new tensor in
// `format` (NCHW: transposing on the way). nullopt where the NHWC kernels' grid cannot take the
// shape (over ~2 M channels; the statistics' kernel refuses it before any launch).
std::optional<at::Tensor> group_norm_nhwc(const char* op, const at::Tensor& x, int64_t num_groups, double eps,
                                          const std::optional<at::Tensor>& gn_weight,
                                          const std::optional<at::Tensor>& gn_bias, at::MemoryFormat format,
                                          cuda::PreGelu pre = {});

}  // namespace host
}  // namespace myops
