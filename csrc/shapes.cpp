#include "shapes.h"

#include <ATen/ATen.h>

#include <cmath>
#include <tuple>
#include <utility>

namespace myops {
namespace {

void check_pair(const char* op, const char* arg, at::IntArrayRef v) {
  MYOPS_CHECK_ARG(v.size() == 2, op, arg, "must have 2 elements (height, width), got ", v.size());
}

void check_same_device_dtype(const char* op, const char* arg, const at::Tensor& t,
                             const at::Tensor& input) {
  MYOPS_CHECK_ARG(t.device() == input.device(), op, arg, "is on ", t.device(),
                  " but 'input' is on ", input.device());
  MYOPS_CHECK_ARG(t.scalar_type() == input.scalar_type(), op, arg, "has dtype ", t.scalar_type(),
                  " but 'input' has dtype ", input.scalar_type());
}

void check_vector(const char* op, const char* arg, const at::Tensor& t, const at::Tensor& input,
                  int64_t expected_len, const char* what) {
  check_same_device_dtype(op, arg, t, input);
  MYOPS_CHECK_ARG(t.dim() == 1 && t.size(0) == expected_len, op, arg,
                  "must be a 1-D tensor of ", expected_len, " elements (", what, "), got shape ",
                  t.sizes());
}

}  // namespace

void check_floating(const char* op, const char* arg, const at::Tensor& t) {
  const auto dt = t.scalar_type();
  MYOPS_CHECK_ARG(dt == at::kFloat || dt == at::kDouble || dt == at::kHalf || dt == at::kBFloat16,
                  op, arg, "must be float32, float64, float16 or bfloat16, got ", dt);
}

ConvTranspose2dParams check_conv_transpose2d(const char* op, const at::Tensor& input,
                                             const at::Tensor& weight,
                                             const std::optional<at::Tensor>& bias,
                                             c10::SymIntArrayRef stride_sym,
                                             c10::SymIntArrayRef padding_sym,
                                             c10::SymIntArrayRef output_padding_sym,
                                             c10::SymInt groups_sym,
                                             c10::SymIntArrayRef dilation_sym) {
  const at::IntArrayRef stride = C10_AS_INTARRAYREF_SLOW(stride_sym);
  const at::IntArrayRef padding = C10_AS_INTARRAYREF_SLOW(padding_sym);
  const at::IntArrayRef output_padding = C10_AS_INTARRAYREF_SLOW(output_padding_sym);
  const at::IntArrayRef dilation = C10_AS_INTARRAYREF_SLOW(dilation_sym);
  const int64_t groups = groups_sym.guard_int(__FILE__, __LINE__);
  MYOPS_CHECK_ARG(input.dim() == 4, op, "input",
                  "must be a 4-D tensor [N, C_in, H, W], got ", input.dim(), "-D");
  MYOPS_CHECK_ARG(weight.dim() == 4, op, "weight",
                  "must be a 4-D tensor [C_in, C_out / groups, kH, kW], got ", weight.dim(), "-D");
  check_floating(op, "input", input);
  check_same_device_dtype(op, "weight", weight, input);
  check_pair(op, "stride", stride);
  check_pair(op, "padding", padding);
  check_pair(op, "output_padding", output_padding);
  check_pair(op, "dilation", dilation);
  for (int i = 0; i < 2; ++i) {
    MYOPS_CHECK_ARG(stride[i] > 0, op, "stride", "must be positive, got ", stride);
    MYOPS_CHECK_ARG(dilation[i] > 0, op, "dilation", "must be positive, got ", dilation);
    MYOPS_CHECK_ARG(padding[i] >= 0, op, "padding", "must be non-negative, got ", padding);
    MYOPS_CHECK_ARG(output_padding[i] >= 0, op, "output_padding", "must be non-negative, got ",
                    output_padding);
    MYOPS_CHECK_ARG(output_padding[i] < stride[i] || output_padding[i] < dilation[i], op,
                    "output_padding", "must be smaller than either stride or dilation, got ",
                    "output_padding=", output_padding, ", stride=", stride, ", dilation=",
                    dilation);
  }
  MYOPS_CHECK_ARG(groups > 0, op, "groups", "must be positive, got ", groups);

  ConvTranspose2dParams p;
  p.N = input.size(0);
  p.C_in = input.size(1);
  p.H = input.size(2);
  p.W = input.size(3);
  MYOPS_CHECK_ARG(p.C_in > 0 && p.H > 0 && p.W > 0, op, "input",
                  "must have non-zero channel and spatial sizes, got shape ", input.sizes());
  MYOPS_CHECK_ARG(p.C_in % groups == 0, op, "groups", "must divide the ", p.C_in,
                  " input channels, got groups=", groups);
  MYOPS_CHECK_ARG(weight.size(0) == p.C_in, op, "weight", "must have size(0) == C_in = ", p.C_in,
                  " (layout [C_in, C_out / groups, kH, kW]), got shape ", weight.sizes());
  MYOPS_CHECK_ARG(weight.size(1) > 0 && weight.size(2) > 0 && weight.size(3) > 0, op, "weight",
                  "must have non-zero C_out / groups and kernel sizes, got shape ",
                  weight.sizes());
  p.groups = groups;
  p.C_in_g = p.C_in / groups;
  p.C_out_g = weight.size(1);
  p.C_out = p.C_out_g * groups;
  p.kH = weight.size(2);
  p.kW = weight.size(3);
  p.sH = stride[0];
  p.sW = stride[1];
  p.pH = padding[0];
  p.pW = padding[1];
  p.opH = output_padding[0];
  p.opW = output_padding[1];
  p.dH = dilation[0];
  p.dW = dilation[1];
  p.OH = conv_transpose_out_size(p.H, p.kH, p.sH, p.pH, p.opH, p.dH);
  p.OW = conv_transpose_out_size(p.W, p.kW, p.sW, p.pW, p.opW, p.dW);
  MYOPS_CHECK_ARG(p.OH > 0 && p.OW > 0, op, "padding", "is too large: the output size would be ",
                  p.OH, "x", p.OW, " for input ", p.H, "x", p.W, ", kernel ", p.kH, "x", p.kW,
                  ", stride ", stride, ", padding ", padding, ", dilation ", dilation);
  if (bias.has_value()) {
    check_vector(op, "bias", *bias, input, p.C_out, "one per output channel");
  }
  return p;
}

GeluApprox check_gelu_approximate(const char* op, c10::string_view approximate) {
  if (approximate == "none") return GeluApprox::None;
  if (approximate == "tanh") return GeluApprox::Tanh;
  detail::fail_arg(op, "approximate", "must be 'none' or 'tanh', got '",
                   std::string(approximate.data(), approximate.size()), "'");
}

void check_group_norm_channels(const char* op, const at::Tensor& reference, int64_t channels,
                               int64_t num_groups, const std::optional<at::Tensor>& weight,
                               const std::optional<at::Tensor>& bias, const char* weight_name,
                               const char* bias_name) {
  MYOPS_CHECK_ARG(num_groups > 0, op, "num_groups", "must be positive, got ", num_groups);
  MYOPS_CHECK_ARG(channels % num_groups == 0, op, "num_groups", "must divide the ", channels,
                  " channels, got num_groups=", num_groups);
  if (weight.has_value()) {
    check_vector(op, weight_name, *weight, reference, channels, "one per channel");
  }
  if (bias.has_value()) {
    check_vector(op, bias_name, *bias, reference, channels, "one per channel");
  }
}

ConvGeluGroupNorm check_conv_transpose2d_gelu_group_norm(
    const char* op, const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation, c10::string_view approximate, int64_t num_groups,
    const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias) {
  ConvGeluGroupNorm r;
  r.conv = check_conv_transpose2d(op, input, weight, bias, stride, padding, output_padding, groups, dilation);
  r.approx = check_gelu_approximate(op, approximate);
  check_group_norm_channels(op, input, r.conv.C_out, num_groups, gn_weight, gn_bias, "gn_weight", "gn_bias");
  return r;
}

namespace {

std::string str(c10::string_view v) { return std::string(v.data(), v.size()); }

}  // namespace

std::pair<Activation, GeluApprox> check_activation(const char* op, c10::string_view activation,
                                                   double negative_slope, c10::string_view approximate) {
  static const std::pair<const char*, Activation> kActivations[] = {
      {"none", Activation::None}, {"gelu", Activation::Gelu}, {"silu", Activation::Silu},
      {"relu", Activation::Relu}, {"leaky_relu", Activation::LeakyRelu}, {"tanh", Activation::Tanh},
      {"sigmoid", Activation::Sigmoid}};
  Activation act = Activation::None;
  bool known = false;
  for (const auto& [name, a] : kActivations)
    if (activation == name) act = a, known = true;
  MYOPS_CHECK_ARG(known, op, "activation",
                  "must be one of 'none', 'gelu', 'silu', 'relu', 'leaky_relu', 'tanh', 'sigmoid', got '",
                  str(activation), "'");
  MYOPS_CHECK_ARG(std::isfinite(negative_slope), op, "negative_slope", "must be finite, got ",
                  std::to_string(negative_slope));
  return {act, check_gelu_approximate(op, approximate)};
}

NormalizeAct check_normalize_act(const char* op, const at::Tensor& input, const at::Tensor& mean,
                                 const at::Tensor& scale, const at::Tensor& shift, c10::string_view activation,
                                 double negative_slope, c10::string_view approximate) {
  MYOPS_CHECK_ARG(input.dim() >= 2, op, "input", "must have at least 2 dimensions [N, C, *], got ", input.dim(),
                  "-D");
  check_floating(op, "input", input);
  const auto compute = input.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const std::pair<const char*, const at::Tensor*> params[] = {{"mean", &mean}, {"scale", &scale}, {"shift", &shift}};
  for (const auto& [name, t] : params) {
    MYOPS_CHECK_ARG(t->device() == input.device(), op, name, "is on ", t->device(), " but 'input' is on ",
                    input.device());
    MYOPS_CHECK_ARG(t->scalar_type() == compute, op, name, "must have dtype ", compute, " (the compute dtype of ",
                    input.scalar_type(), " input), got ", t->scalar_type());
    MYOPS_CHECK_ARG(t->dim() == 2 && t->size(0) == input.size(0) && t->size(1) == input.size(1), op, name,
                    "must have shape [N, C] = [", input.size(0), ", ", input.size(1), "], got ", t->sizes());
  }
  NormalizeAct r;
  std::tie(r.act, r.approx) = check_activation(op, activation, negative_slope, approximate);
  r.channels_last = output_memory_format(input) == at::MemoryFormat::ChannelsLast;
  r.x = r.channels_last ? input : input.contiguous();
  r.mean = mean.contiguous();
  r.scale = scale.contiguous();
  r.shift = shift.contiguous();
  r.N = input.size(0);
  r.C = input.size(1);
  r.HW = r.N * r.C == 0 ? 0 : input.numel() / (r.N * r.C);
  return r;
}

ConvActStats check_conv_transpose2d_act_stats(
    const char* op, const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation, c10::string_view activation, double negative_slope,
    c10::string_view approximate, c10::string_view stats, int64_t num_groups) {
  ConvActStats r;
  r.conv = check_conv_transpose2d(op, input, weight, bias, stride, padding, output_padding, groups, dilation);
  std::tie(r.act, r.approx) = check_activation(op, activation, negative_slope, approximate);
  if (stats == "none") {
    r.stats = NormStats::None;
  } else if (stats == "channel") {
    r.stats = NormStats::Channel;
  } else if (stats == "group") {
    r.stats = NormStats::Group;
    check_group_norm_channels(op, input, r.conv.C_out, num_groups, std::nullopt, std::nullopt, "", "");
  } else {
    detail::fail_arg(op, "stats", "must be 'none', 'channel' or 'group', got '", str(stats), "'");
  }
  return r;
}

void check_group_norm(const char* op, const at::Tensor& input, int64_t num_groups,
                      const std::optional<at::Tensor>& weight,
                      const std::optional<at::Tensor>& bias, const char* weight_name,
                      const char* bias_name) {
  MYOPS_CHECK_ARG(input.dim() >= 2, op, "input", "must have at least 2 dimensions [N, C, *], got ",
                  input.dim(), "-D");
  check_floating(op, "input", input);
  check_group_norm_channels(op, input, input.size(1), num_groups, weight, bias, weight_name,
                            bias_name);
}

Pool2dParams check_max_pool2d(const char* op, int64_t H, int64_t W, at::IntArrayRef kernel_size,
                              at::IntArrayRef stride, at::IntArrayRef padding,
                              at::IntArrayRef dilation) {
  check_pair(op, "kernel_size", kernel_size);
  check_pair(op, "pool_stride", stride);
  check_pair(op, "pool_padding", padding);
  check_pair(op, "pool_dilation", dilation);
  Pool2dParams q;
  q.kH = kernel_size[0], q.kW = kernel_size[1], q.sH = stride[0], q.sW = stride[1];
  q.pH = padding[0], q.pW = padding[1], q.dH = dilation[0], q.dW = dilation[1];
  q.H = H, q.W = W;
  MYOPS_CHECK_ARG(q.kH > 0 && q.kW > 0, op, "kernel_size", "must be positive, got ", kernel_size);
  MYOPS_CHECK_ARG(q.sH > 0 && q.sW > 0, op, "pool_stride", "must be positive, got ", stride);
  MYOPS_CHECK_ARG(q.dH > 0 && q.dW > 0, op, "pool_dilation", "must be positive, got ", dilation);
  MYOPS_CHECK_ARG(q.pH >= 0 && q.pW >= 0 && 2 * q.pH <= q.kH && 2 * q.pW <= q.kW, op, "pool_padding",
                  "must be non-negative and at most half of kernel_size ", kernel_size, ", got ", padding);
  q.PH = (H + 2 * q.pH - q.dH * (q.kH - 1) - 1) / q.sH + 1;
  q.PW = (W + 2 * q.pW - q.dW * (q.kW - 1) - 1) / q.sW + 1;
  MYOPS_CHECK_ARG(H + 2 * q.pH - q.dH * (q.kH - 1) - 1 >= 0 && W + 2 * q.pW - q.dW * (q.kW - 1) - 1 >= 0,
                  op, "kernel_size", "(dilated) is larger than the padded input of ", H, "x", W);
  return q;
}

// BatchNorm's affine weight / bias: like the input, one per channel.
static void check_batch_norm_affine(const char* op, const at::Tensor& input, int64_t channels,
                                    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias) {
  if (weight.has_value()) check_vector(op, "bn_weight", *weight, input, channels, "one per channel");
  if (bias.has_value()) check_vector(op, "bn_bias", *bias, input, channels, "one per channel");
}

void check_batch_norm_stats(const char* op, const at::Tensor& input, int64_t channels,
                            const at::Tensor& mean, const at::Tensor& var,
                            const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias) {
  for (const auto& [t, name] : {std::pair<const at::Tensor&, const char*>{mean, "mean"}, {var, "var"}}) {
    check_floating(op, name, t);
    MYOPS_CHECK_ARG(t.device() == input.device(), op, name, "is on ", t.device(),
                    " but 'input' is on ", input.device());
    MYOPS_CHECK_ARG(t.dim() == 1 && t.size(0) == channels, op, name, "must be a 1-D tensor of ",
                    channels, " elements (one per channel), got shape ", t.sizes());
  }
  check_batch_norm_affine(op, input, channels, weight, bias);
}

void check_batch_norm_update_running_stats(const char* op, const at::Tensor& running_mean,
                                           const at::Tensor& running_var, const at::Tensor& mean,
                                           const at::Tensor& var,
                                           const std::optional<at::Tensor>& num_batches_tracked) {
  check_floating(op, "running_mean", running_mean);
  MYOPS_CHECK_ARG(running_mean.dim() == 1, op, "running_mean", "must be a 1-D tensor, got shape ",
                  running_mean.sizes());
  const int64_t channels = running_mean.size(0);
  for (const auto& [t, name] : {std::pair<const at::Tensor&, const char*>{running_var, "running_var"},
                                {mean, "mean"}, {var, "var"}}) {
    check_floating(op, name, t);
    MYOPS_CHECK_ARG(t.device() == running_mean.device(), op, name, "is on ", t.device(),
                    " but 'running_mean' is on ", running_mean.device());
    MYOPS_CHECK_ARG(t.dim() == 1 && t.size(0) == channels, op, name, "must be a 1-D tensor of ", channels,
                    " elements (as running_mean), got shape ", t.sizes());
  }
  MYOPS_CHECK_ARG(running_var.scalar_type() == running_mean.scalar_type(), op, "running_var",
                  "must have running_mean's dtype ", running_mean.scalar_type(), ", got ", running_var.scalar_type());
  MYOPS_CHECK_ARG(var.scalar_type() == mean.scalar_type(), op, "var", "must have mean's dtype ",
                  mean.scalar_type(), ", got ", var.scalar_type());
  if (num_batches_tracked.has_value()) {
    const at::Tensor& t = *num_batches_tracked;
    MYOPS_CHECK_ARG(t.scalar_type() == at::kLong && t.numel() == 1, op, "num_batches_tracked",
                    "must be an int64 tensor of one element, got ", t.scalar_type(), " of shape ", t.sizes());
    MYOPS_CHECK_ARG(t.device() == running_mean.device(), op, "num_batches_tracked", "is on ", t.device(),
                    " but 'running_mean' is on ", running_mean.device());
  }
}

Pool2dParams check_batch_norm_tanh_max_pool2d_group_norm(
    const char* op, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& var,
    const std::optional<at::Tensor>& bn_weight, const std::optional<at::Tensor>& bn_bias,
    at::IntArrayRef kernel_size, at::IntArrayRef pool_stride, at::IntArrayRef pool_padding,
    at::IntArrayRef pool_dilation, int64_t num_groups, const std::optional<at::Tensor>& gn_weight,
    const std::optional<at::Tensor>& gn_bias) {
  MYOPS_CHECK_ARG(input.dim() == 4, op, "input", "must be a 4-D tensor [N, C, H, W], got ", input.dim(), "-D");
  check_floating(op, "input", input);
  const int64_t C = input.size(1);
  check_batch_norm_stats(op, input, C, mean, var, bn_weight, bn_bias);
  const Pool2dParams q = check_max_pool2d(op, input.size(2), input.size(3), kernel_size, pool_stride,
                                          pool_padding, pool_dilation);
  check_group_norm_channels(op, input, C, num_groups, gn_weight, gn_bias, "gn_weight", "gn_bias");
  return q;
}

ConvBatchNormChain check_conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
    const char* op, const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation, const std::optional<at::Tensor>& mean,
    const std::optional<at::Tensor>& var, const std::optional<at::Tensor>& bn_weight,
    const std::optional<at::Tensor>& bn_bias, bool training, at::IntArrayRef kernel_size,
    at::IntArrayRef pool_stride, at::IntArrayRef pool_padding, at::IntArrayRef pool_dilation,
    int64_t num_groups, const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias) {
  ConvBatchNormChain r;
  r.conv = check_conv_transpose2d(op, input, weight, bias, stride, padding, output_padding, groups, dilation);
  const ConvTranspose2dParams& p = r.conv;
  if (training) {
    MYOPS_CHECK_ARG(!mean.has_value(), op, "mean", "must be None when training is True (the batch statistics normalise)");
    MYOPS_CHECK_ARG(!var.has_value(), op, "var", "must be None when training is True (the batch statistics normalise)");
    // as torch.nn.functional.batch_norm: one value has no batch variance
    MYOPS_CHECK_ARG(p.N * p.OH * p.OW != 1, op, "input", "expected more than 1 value per channel when training, got a "
                    "conv_transpose2d output of size [", p.N, ", ", p.C_out, ", ", p.OH, ", ", p.OW, "]");
    check_batch_norm_affine(op, input, p.C_out, bn_weight, bn_bias);
  } else {
    MYOPS_CHECK_ARG(mean.has_value(), op, "mean", "is required when training is False");
    MYOPS_CHECK_ARG(var.has_value(), op, "var", "is required when training is False");
    check_batch_norm_stats(op, input, p.C_out, *mean, *var, bn_weight, bn_bias);
  }
  r.pool = check_max_pool2d(op, p.OH, p.OW, kernel_size, pool_stride, pool_padding, pool_dilation);
  check_group_norm_channels(op, input, p.C_out, num_groups, gn_weight, gn_bias, "gn_weight", "gn_bias");
  return r;
}

at::MemoryFormat output_memory_format(const at::Tensor& input) {
  if (input.dim() == 4 && !input.is_contiguous() &&
      input.is_contiguous(at::MemoryFormat::ChannelsLast)) {
    return at::MemoryFormat::ChannelsLast;
  }
  return at::MemoryFormat::Contiguous;
}

}  // namespace myops
