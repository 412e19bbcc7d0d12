#pragma once
// myops::_explain (myops.explain): what runs a call of one of the conv ops, as text. The parts
// every device shares; each device's kernel adds its own choice (csrc/cpu/explain.cpp,
// csrc/cuda/ops/conv_transpose2d.cpp).
#include <ATen/ATen.h>

#include <string>

#include "shapes.h"

namespace myops {

// The ops whose conv _explain describes; any other name is refused, naming argument 'op'.
void check_explained_op(const std::string& op);

// "myops.<op> on <device>, <dtype> (<math>), <layout> input [N, C, H, W] -> [N, C, OH, OW]\n"
std::string explain_header(const std::string& op, const at::Tensor& input, const ConvTranspose2dParams& p);

}  // namespace myops
