// myops::conv_transpose2d_act_stats on the CPU: the conv in the compute dtype and the input's
// layout, the activation on it, rounded once to the input's dtype (as the CUDA epilogue stores
// it), and the statistics of the stored values.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

#include "aten_activation.h"
#include "cpu/cpu_kernels.h"
#include "cpu/layout_copy.h"
#include "cpu/norm_stats.h"
#include "shapes.h"

namespace myops {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_transpose2d_act_stats_cpu(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation, c10::string_view activation, double negative_slope,
    c10::string_view approximate, c10::string_view stats, int64_t num_groups) {
  constexpr const char* kOp = "conv_transpose2d_act_stats";
  const ConvActStats a = check_conv_transpose2d_act_stats(kOp, input, weight, bias, stride, padding, output_padding,
                                                          groups, dilation, activation, negative_slope, approximate,
                                                          stats, num_groups);
  const at::Tensor conv = conv_transpose2d_in_layout(input, weight, bias, a.conv);
  const at::Tensor out = aten_activation(conv, a.act, negative_slope, a.approx).to(input.scalar_type());
  auto [mean, var] = cpu_norm_stats(out, a.stats, num_groups);
  return {to_memory_format(out, output_memory_format(input)), mean, var};
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("conv_transpose2d_act_stats", &conv_transpose2d_act_stats_cpu);
}

}  // namespace myops
