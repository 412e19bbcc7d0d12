#include "aten_activation.h"

#include <ATen/ATen.h>

#include "shapes.h"  // compute_dtype

namespace myops {

at::Tensor aten_activation(const at::Tensor& x, Activation act, double negative_slope, GeluApprox approx) {
  switch (act) {
    case Activation::None: return x;
    case Activation::Gelu: return at::gelu(x, approx == GeluApprox::Tanh ? "tanh" : "none");
    case Activation::Silu: return at::silu(x);
    case Activation::Relu: return at::relu(x);
    case Activation::LeakyRelu: return at::leaky_relu(x, negative_slope);
    case Activation::Tanh: return at::tanh(x);
    case Activation::Sigmoid: return at::sigmoid(x);
  }
  return x;
}

std::pair<at::Tensor, at::Tensor> aten_norm_stats(const at::Tensor& out, NormStats stats, int64_t num_groups) {
  const at::Tensor x = out.to(compute_dtype(out.scalar_type()));
  if (stats == NormStats::Channel) {
    auto [var, mean] = at::var_mean(x, at::IntArrayRef{0, 2, 3}, at::Scalar(0), /*keepdim=*/false);
    return {mean, var};
  }
  if (stats == NormStats::Group) {
    auto [var, mean] = at::var_mean(x.reshape({x.size(0), num_groups, -1}), at::IntArrayRef{2}, at::Scalar(0), /*keepdim=*/false);
    return {mean, var};
  }
  const at::Tensor empty = at::empty({0}, x.options());
  return {empty, empty.clone()};
}

}  // namespace myops
