// The whole BatchNorm chain in one call on the CPU: the two ops' kernels one after the other (the
// conv with its batch statistics in training, else the plain conv; then BN + tanh + max-pool +
// GroupNorm). The one-call op exists for the CUDA kernels' cheaper intermediate (bindings.cpp).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

#include "cpu/cpu_kernels.h"
#include "cpu/layout_copy.h"
#include "shapes.h"

namespace myops {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm_cpu(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation, const std::optional<at::Tensor>& mean,
    const std::optional<at::Tensor>& var, const std::optional<at::Tensor>& bn_weight,
    const std::optional<at::Tensor>& bn_bias, bool training, double bn_eps, at::IntArrayRef kernel_size,
    at::IntArrayRef pool_stride, at::IntArrayRef pool_padding, at::IntArrayRef pool_dilation,
    int64_t num_groups, const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias,
    double gn_eps) {
  const ConvBatchNormChain chain = check_conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
      "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm", input, weight, bias, stride, padding,
      output_padding, groups, dilation, mean, var, bn_weight, bn_bias, training, kernel_size, pool_stride,
      pool_padding, pool_dilation, num_groups, gn_weight, gn_bias);
  at::Tensor out, batch_mean, batch_var;
  if (training) {
    std::tie(out, batch_mean, batch_var) =
        conv_transpose2d_channel_stats_cpu(input, weight, bias, stride, padding, output_padding, groups, dilation);
  } else {
    out = conv_transpose2d_compute(input, weight, bias, chain.conv).to(input.scalar_type());
    batch_mean = at::empty({0}, input.options().dtype(compute_dtype(input.scalar_type())));
    batch_var = at::empty_like(batch_mean);
  }
  at::Tensor y = batch_norm_tanh_max_pool2d_group_norm_cpu(
      out, training ? batch_mean : *mean, training ? batch_var : *var, bn_weight, bn_bias, bn_eps, kernel_size,
      pool_stride, pool_padding, pool_dilation, num_groups, gn_weight, gn_bias, gn_eps);
  return {to_memory_format(y, output_memory_format(input)), batch_mean, batch_var};
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm",
         &conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm_cpu);
}

}  // namespace myops
