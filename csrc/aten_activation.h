#pragma once
// The family's activations and statistics as ATen ops (F.<name>'s own kernels): the CPU op, and
// the CUDA op where cuDNN's conv runs it (no epilogue) or its output is empty.
#include <ATen/core/Tensor.h>

#include "common/gelu_math.h"
#include "common/norm_act.h"

namespace myops {

at::Tensor aten_activation(const at::Tensor& x, Activation act, double negative_slope, GeluApprox approx);

// The statistics of `out` (the activated output as stored) that the op returns: mean and biased
// variance in the compute dtype ([C] per channel, [N, num_groups] per group, empty for none).
std::pair<at::Tensor, at::Tensor> aten_norm_stats(const at::Tensor& out, NormStats stats, int64_t num_groups);

}  // namespace myops
