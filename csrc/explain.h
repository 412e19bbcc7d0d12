#pragma once
// myops::_explain (myops.explain): what runs a call of one of the conv ops, as text. The parts
// every device shares; each device's kernel adds its own choice (csrc/cpu/explain.cpp,
// csrc/cuda/ops/conv_transpose2d.cpp).
#include <ATen/ATen.h>

#include <string>

#include "shapes.h"

namespace myops {

// Checks an _explain call: op must name one of the conv ops (else refused, naming argument 'op'),
// the conv arguments as conv_transpose2d's. Returns the conv's parameters.
ConvTranspose2dParams check_explain(const std::string& op, const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                    c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
                                    c10::SymInt groups, c10::SymIntArrayRef dilation);

// "myops.<op> on <device>, <dtype> (<math>), <layout> input [N, C, H, W] -> [N, C, OH, OW]\n"
std::string explain_header(const std::string& op, const at::Tensor& input, const ConvTranspose2dParams& p);

}  // namespace myops
