#pragma once
// CPU building blocks shared by the op files in csrc/cpu.
#include <ATen/ATen.h>

#include <optional>
#include <tuple>

#include "common/conv_params.h"
#include "shapes.h"  // compute_dtype

namespace myops {

// The transposed convolution (already checked), in compute_dtype, as a contiguous NCHW tensor.
at::Tensor conv_transpose2d_compute(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias,
                                    const ConvTranspose2dParams& p);

// The same in the input's layout (output_memory_format): a channels-last input runs oneDNN's NHWC
// kernels, whose sums differ in order from the NCHW ones; an NCHW one either kernel set, as the
// option cpu_channels_last says (layout_choice.h) (the plain conv and the family's conv step).
at::Tensor conv_transpose2d_in_layout(const at::Tensor& input, const at::Tensor& weight,
                                      const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p);

// The CPU kernels of the BatchNorm chain's two ops, which the one-call op composes.
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_transpose2d_channel_stats_cpu(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation);
at::Tensor batch_norm_tanh_max_pool2d_group_norm_cpu(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& var,
    const std::optional<at::Tensor>& bn_weight, const std::optional<at::Tensor>& bn_bias,
    double bn_eps, at::IntArrayRef kernel_size, at::IntArrayRef pool_stride,
    at::IntArrayRef pool_padding, at::IntArrayRef pool_dilation, int64_t num_groups,
    const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias,
    double gn_eps);

}  // namespace myops
