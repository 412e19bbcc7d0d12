// myops::conv_transpose2d_act_stats on CUDA: our conv with bias, the activation and the
// normalisation's per-tile partials in its epilogue, reduced per channel or per (sample, group) in
// a fixed order; or cuDNN's conv (where it is timed faster) with passes for them.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>
#include <string>
#include <tuple>

#include "aten_activation.h"
#include "cuda/norm/norm_act.cuh"
#include "cuda/ops/conv.h"
#include "cuda/ops/group_norm.h"

namespace myops {
namespace host {
namespace {

constexpr const char* kOp = "conv_transpose2d_act_stats";

// The statistics from partials [N, C_out, tiles, 3] (the conv epilogue's, or one per plane).
std::pair<at::Tensor, at::Tensor> stats_from_partials(const ConvActStats& a, const at::Tensor& partials,
                                                      const at::Tensor& out, int64_t num_groups) {
  if (out.numel() == 0) return aten_norm_stats(out, a.stats, num_groups);  // NaN statistics, as torch's
  if (a.stats == NormStats::Channel) return channel_stats_from_partials(kOp, partials);
  // float64 mean and 1 / sqrt(var) (eps 0): var = rstd^-2, exact to the statistics' rounding
  const GroupStats g = group_stats_from_partials(kOp, partials, num_groups, 0.0);
  const int64_t N = a.conv.N;
  return {g.mean.view({N, num_groups}).to(partials.scalar_type()),
          g.rstd.pow(-2).view({N, num_groups}).to(partials.scalar_type())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_transpose2d_act_stats_cuda(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation, c10::string_view activation, double negative_slope,
    c10::string_view approximate, c10::string_view stats, int64_t num_groups) {
  const ConvActStats a = check_conv_transpose2d_act_stats(kOp, input, weight, bias, stride, padding, output_padding,
                                                          groups, dilation, activation, negative_slope, approximate,
                                                          stats, num_groups);
  const ConvTranspose2dParams& p = a.conv;
  const c10::cuda::CUDAGuard guard(input.device());
  const bool want_stats = a.stats != NormStats::None;
  auto run = [&](ConvSource source) -> std::tuple<at::Tensor, at::Tensor, at::Tensor> {
    at::Tensor out, partials;
    if (source == ConvSource::Cudnn) {
      // in the input's layout: a channels-last input (as Inductor's graphs hand convs) then runs
      // cuDNN's NHWC kernels with no transpose, and the passes read the output where it lies
      const at::MemoryFormat format = output_memory_format(input);
      out = cudnn_conv(kOp, input, weight, bias, p, format);
      if (a.act == Activation::Gelu) {
        check_launch(cuda::gelu_forward(out.const_data_ptr(), out.data_ptr(), out.numel(),
                                        kernel_dtype(out.scalar_type()), a.approx, at::cuda::getCurrentCUDAStream()),
                     kOp);
      } else if (a.act != Activation::None) {
        out = aten_activation(out, a.act, negative_slope, a.approx).contiguous(format);
      }
      if (want_stats && out.numel() > 0) {
        std::optional<at::Tensor> tiles;
        if (format == at::MemoryFormat::ChannelsLast) tiles = nhwc_moments(kOp, out);
        partials = tiles ? *tiles : plane_moments(kOp, contiguous_nchw(kOp, out));
      }
    } else {
      // (no statistics: a plain output for the engines, the few-channels one included, whatever the activation)
      const KernelCall k = kernel_call(p, input, !want_stats);
      cuda::ConvEpilogue ep;
      ep.act = a.act;
      ep.approx = a.approx;
      ep.negative_slope = negative_slope;
      if (want_stats) {
        partials = at::empty({p.N, p.C_out, k.plan.tiles_per_sample, 3},
                             input.options().dtype(compute_dtype(input.scalar_type())));
        ep.tile_stats = partials.data_ptr();
      }
      out = conv_forward(kOp, input, weight, bias, p, k, ep);
    }
    auto [mean, var] = want_stats ? stats_from_partials(a, partials, out, num_groups)
                                  : aten_norm_stats(out, a.stats, num_groups);
    return {in_output_format(kOp, out, input), mean, var};
  };
  const auto extra = [&] { return std::string(activation) + std::string(approximate) + std::string(stats) +
                                  std::to_string(num_groups); };
  return run(conv_source(kOp, p, input, bias, extra, run));
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("conv_transpose2d_act_stats", &conv_transpose2d_act_stats_cuda);
}

}  // namespace host
}  // namespace myops
