#pragma once
// CPU building blocks shared by the op files in csrc/cpu.
#include <ATen/ATen.h>

#include <optional>

#include "common/conv_params.h"
#include "shapes.h"  // compute_dtype

namespace myops {

// The transposed convolution (already checked), in compute_dtype, as a contiguous NCHW tensor.
at::Tensor conv_transpose2d_compute(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias,
                                    const ConvTranspose2dParams& p);

}  // namespace myops
