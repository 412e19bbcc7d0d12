// Fused conv_transpose2d -> gelu -> group_norm on the CPU: the convolution is computed once in the
// compute dtype; then each (sample, group) slice gets GELU in place and is normalised while it is
// still in cache, written straight into the output dtype. The chain up to GroupNorm's statistics
// (conv_transpose2d_gelu_group_stats) returns GELU's output as stored and their mean / rstd.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <tuple>
#include <type_traits>

#include "cpu/cpu_kernels.h"
#include "cpu/group_norm_groups.h"
#include "cpu/layout_copy.h"
#include "shapes.h"

namespace myops {
namespace {

constexpr const char* kOp = "conv_transpose2d_gelu_group_norm";

at::Tensor conv_transpose2d_gelu_group_norm_cpu(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation, c10::string_view approximate, int64_t num_groups,
    const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias,
    double eps) {
  const auto [p, approx] = check_conv_transpose2d_gelu_group_norm(
      kOp, input, weight, bias, stride, padding, output_padding, groups, dilation, approximate, num_groups,
      gn_weight, gn_bias);
  at::Tensor conv = conv_transpose2d_compute(input, weight, bias, p);
  at::Tensor out = conv.scalar_type() == input.scalar_type()
                       ? conv
                       : at::empty(conv.sizes(), conv.options().dtype(input.scalar_type()));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "myops::conv_transpose2d_gelu_group_norm (CPU)", [&] {
    using compute_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    group_norm_groups<compute_t, scalar_t>(
        conv, out, num_groups, gn_weight, gn_bias, eps,
        [approx](compute_t* slice, int64_t n) { gelu_span(slice, slice, n, approx); });
  });
  return to_memory_format(out, output_memory_format(input));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_transpose2d_gelu_group_stats_cpu(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation, c10::string_view approximate, int64_t num_groups,
    double eps) {
  constexpr const char* kStatsOp = "conv_transpose2d_gelu_group_stats";
  const auto [p, approx] = check_conv_transpose2d_gelu_group_norm(
      kStatsOp, input, weight, bias, stride, padding, output_padding, groups, dilation, approximate, num_groups,
      std::nullopt, std::nullopt);
  at::Tensor act = conv_transpose2d_compute(input, weight, bias, p);
  AT_DISPATCH_FLOATING_TYPES(act.scalar_type(), "myops::conv_transpose2d_gelu_group_stats (CPU)", [&] {
    scalar_t* data = act.data_ptr<scalar_t>();
    at::parallel_for(0, act.numel(), int64_t(1) << 16,
                     [&](int64_t begin, int64_t end) { gelu_span(data + begin, data + begin, end - begin, approx); });
  });
  // the statistics of the values as stored (rounded to the input dtype), in float64 (biased variance)
  act = act.to(input.scalar_type());
  const auto stats_dtype = compute_dtype(input.scalar_type());
  if (p.N == 0) {
    const at::Tensor none = at::empty({0, num_groups}, input.options().dtype(stats_dtype));
    return {to_memory_format(act, output_memory_format(input)), none, none.clone()};
  }
  const auto [var, mean] =
      at::var_mean(act.reshape({p.N, num_groups, p.C_out / num_groups * p.OH * p.OW}).to(at::kDouble), {2}, 0, false);
  return {to_memory_format(act, output_memory_format(input)), mean.to(stats_dtype), (var + eps).rsqrt().to(stats_dtype)};
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("conv_transpose2d_gelu_group_norm", &conv_transpose2d_gelu_group_norm_cpu);
  m.impl("conv_transpose2d_gelu_group_stats", &conv_transpose2d_gelu_group_stats_cpu);
}

}  // namespace myops
