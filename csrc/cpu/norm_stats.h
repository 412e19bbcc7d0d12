#pragma once
// The statistics a normalisation takes from a contiguous NCHW tensor as stored: mean and biased
// variance per channel over (N, H, W), or per (sample, group), in float32 (float64 for float64
// input). Two passes per slice in float64 (elementwise.h's vectorised spans), parallel over the
// slices; no elements: NaN variance, as torch.var_mean gives.
#include <ATen/ATen.h>

#include <utility>

#include "common/norm_act.h"

namespace myops {

// stats None: two empty tensors.
std::pair<at::Tensor, at::Tensor> cpu_norm_stats(const at::Tensor& out, NormStats stats, int64_t num_groups);

}  // namespace myops
