// conv_transpose2d with the per-channel batch statistics BatchNorm's training mode needs: the
// mean and biased variance over (N, H, W) of the output as stored (rounded to its dtype), in
// float32 (float64 for float64 input): cpu_norm_stats.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

#include "cpu/cpu_kernels.h"
#include "cpu/layout_copy.h"
#include "cpu/norm_stats.h"
#include "shapes.h"

namespace myops {
namespace {

constexpr const char* kOp = "conv_transpose2d_channel_stats";

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_transpose2d_channel_stats_cpu(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation) {
  const ConvTranspose2dParams p = check_conv_transpose2d(kOp, input, weight, bias, stride, padding,
                                                         output_padding, groups, dilation);
  const at::Tensor conv = conv_transpose2d_compute(input, weight, bias, p);
  const at::Tensor out = conv.to(input.scalar_type());  // the stored values define the statistics
  auto [mean, var] = cpu_norm_stats(out, NormStats::Channel, 1);
  return {to_memory_format(out, output_memory_format(input)), mean, var};
}

TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("conv_transpose2d_channel_stats", &conv_transpose2d_channel_stats_cpu);
}

}  // namespace myops
