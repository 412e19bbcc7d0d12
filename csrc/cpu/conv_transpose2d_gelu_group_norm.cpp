// Fused conv_transpose2d -> gelu -> group_norm on the CPU: the convolution is computed once in the
// compute dtype; then each (sample, group) slice gets GELU in place and is normalised while it is
// still in cache, written straight into the output dtype.
#include <torch/library.h>

#include <type_traits>

#include "cpu/cpu_kernels.h"
#include "cpu/group_norm_groups.h"
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
  const ConvTranspose2dParams p = check_conv_transpose2d(kOp, input, weight, bias, stride, padding,
                                                         output_padding, groups, dilation);
  const GeluApprox approx = check_gelu_approximate(kOp, approximate);
  check_group_norm_channels(kOp, input, p.C_out, num_groups, gn_weight, gn_bias, "gn_weight",
                            "gn_bias");
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
  return out.contiguous(output_memory_format(input));
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("conv_transpose2d_gelu_group_norm", &conv_transpose2d_gelu_group_norm_cpu);
}

}  // namespace myops
