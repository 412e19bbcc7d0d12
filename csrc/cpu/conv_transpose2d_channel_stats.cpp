// conv_transpose2d with the per-channel batch statistics BatchNorm's training mode needs: the
// mean and biased variance over (N, H, W) of the output as stored (rounded to its dtype), in
// float32 (float64 for float64 input). Two passes per channel in float64 (elementwise.h's
// vectorised spans): mean, then M2.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <limits>
#include <tuple>

#include "cpu/cpu_kernels.h"
#include "cpu/elementwise.h"
#include "shapes.h"

namespace myops {
namespace {

constexpr const char* kOp = "conv_transpose2d_channel_stats";

template <typename scalar_t, typename stat_t>
void channel_stats(const at::Tensor& y, at::Tensor& mean, at::Tensor& var) {
  const int64_t N = y.size(0), C = y.size(1), HW = y.size(2) * y.size(3);
  const scalar_t* yp = y.const_data_ptr<scalar_t>();
  stat_t* mp = mean.data_ptr<stat_t>();
  stat_t* vp = var.data_ptr<stat_t>();
  const double count = static_cast<double>(N * HW);
  at::parallel_for(0, C, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      double sum = 0;
      for (int64_t n = 0; n < N; ++n) sum += sum_span(yp + (n * C + c) * HW, HW);
      const double mu = count > 0 ? sum / count : 0.0;
      double m2 = 0;
      for (int64_t n = 0; n < N; ++n) m2 += sum_sq_dev_span(yp + (n * C + c) * HW, HW, mu);
      mp[c] = static_cast<stat_t>(mu);
      // no elements: NaN, as torch.var_mean gives
      vp[c] = static_cast<stat_t>(count > 0 ? m2 / count : std::numeric_limits<double>::quiet_NaN());
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_transpose2d_channel_stats_cpu(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation) {
  const ConvTranspose2dParams p = check_conv_transpose2d(kOp, input, weight, bias, stride, padding,
                                                         output_padding, groups, dilation);
  const at::Tensor conv = conv_transpose2d_compute(input, weight, bias, p);
  const at::Tensor out = conv.to(input.scalar_type());  // the stored values define the statistics
  const auto stat_dtype = compute_dtype(input.scalar_type());
  at::Tensor mean = at::empty({p.C_out}, input.options().dtype(stat_dtype));
  at::Tensor var = at::empty({p.C_out}, input.options().dtype(stat_dtype));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "myops::conv_transpose2d_channel_stats (CPU)", [&] {
    if (stat_dtype == at::kDouble) {
      channel_stats<scalar_t, double>(out, mean, var);
    } else {
      channel_stats<scalar_t, float>(out, mean, var);
    }
  });
  return {out.contiguous(output_memory_format(input)), mean, var};
}

TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("conv_transpose2d_channel_stats", &conv_transpose2d_channel_stats_cpu);
}

}  // namespace myops
