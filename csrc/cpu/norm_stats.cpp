#include "cpu/norm_stats.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <limits>

#include "cpu/elementwise.h"
#include "shapes.h"  // compute_dtype

namespace myops {
namespace {

// Slice s (of `slices`, the first at x + s * slice_step) is `runs` runs of `run` contiguous
// values, `stride` apart: a channel is N planes C planes apart, a (sample, group) one run.
template <typename scalar_t, typename stat_t>
void slice_stats(const scalar_t* x, int64_t slices, int64_t slice_step, int64_t runs, int64_t run, int64_t stride,
                 stat_t* mean, stat_t* var) {
  const double count = static_cast<double>(runs * run);
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  at::parallel_for(0, slices, 1, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      const scalar_t* first = x + s * slice_step;
      double sum = 0;
      for (int64_t r = 0; r < runs; ++r) sum += sum_span(first + r * stride, run);
      const double mu = count > 0 ? sum / count : kNaN;
      double m2 = 0;
      for (int64_t r = 0; r < runs && count > 0; ++r) m2 += sum_sq_dev_span(first + r * stride, run, mu);
      mean[s] = static_cast<stat_t>(mu);
      var[s] = static_cast<stat_t>(count > 0 ? m2 / count : kNaN);
    }
  });
}

}  // namespace

std::pair<at::Tensor, at::Tensor> cpu_norm_stats(const at::Tensor& out, NormStats stats, int64_t num_groups) {
  const auto stat_dtype = compute_dtype(out.scalar_type());
  if (stats == NormStats::None) {
    const at::Tensor empty = at::empty({0}, out.options().dtype(stat_dtype));
    return {empty, empty.clone()};
  }
  const at::Tensor x = out.contiguous();
  const int64_t N = x.size(0), C = x.size(1), HW = N * C > 0 ? x.numel() / (N * C) : 0;
  const bool channel = stats == NormStats::Channel;
  at::Tensor mean = at::empty(channel ? std::vector<int64_t>{C} : std::vector<int64_t>{N, num_groups},
                              x.options().dtype(stat_dtype));
  at::Tensor var = at::empty_like(mean);
  // a channel: N runs of HW values, C * HW apart; a group: one run of C / num_groups planes
  const int64_t slices = channel ? C : N * num_groups;
  const int64_t step = channel ? HW : (C / num_groups) * HW;
  const int64_t runs = channel ? N : 1, run = channel ? HW : step, stride = C * HW;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "myops: normalisation statistics", [&] {
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    if (stat_dtype == at::kDouble) {
      slice_stats<scalar_t, double>(xp, slices, step, runs, run, stride, mean.data_ptr<double>(), var.data_ptr<double>());
    } else {
      slice_stats<scalar_t, float>(xp, slices, step, runs, run, stride, mean.data_ptr<float>(), var.data_ptr<float>());
    }
  });
  return {mean, var};
}

}  // namespace myops
