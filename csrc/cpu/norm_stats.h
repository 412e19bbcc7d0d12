#pragma once
// The statistics a normalisation takes from a tensor as stored (NCHW, or channels-last where it
// lies): mean and biased variance per channel over (N, H, W), or per (sample, group), in float32
// (float64 for float64 input). Two passes in float64, parallel over the slices (or, per channel of
// an NHWC tensor, over fixed blocks of pixels added in order); no elements: NaN, as torch.var_mean.
#include <ATen/ATen.h>

#include <utility>

#include "common/norm_act.h"

namespace myops {

// stats None: two empty tensors.
std::pair<at::Tensor, at::Tensor> cpu_norm_stats(const at::Tensor& out, NormStats stats, int64_t num_groups);

}  // namespace myops
