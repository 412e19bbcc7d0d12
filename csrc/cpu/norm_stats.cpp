#include "cpu/norm_stats.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <limits>
#include <vector>

#include "cpu/elementwise.h"
#include "cpu/layout_copy.h"
#include "shapes.h"  // compute_dtype

namespace myops {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Slice s of `slices` is `runs` runs of `run` contiguous values, `stride` apart, the first at
// x + first(s): an NCHW channel is N planes, C planes apart; an NCHW (sample, group) one run.
template <typename scalar_t, typename stat_t, typename First>
void slice_stats(const scalar_t* x, int64_t slices, First first, int64_t runs, int64_t run, int64_t stride,
                 stat_t* mean, stat_t* var) {
  const double count = static_cast<double>(runs * run);
  at::parallel_for(0, slices, 1, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      const scalar_t* x0 = x + first(s);
      double sum = 0;
      for (int64_t r = 0; r < runs; ++r) sum += sum_span(x0 + r * stride, run);
      const double mu = count > 0 ? sum / count : kNaN;
      double m2 = 0;
      for (int64_t r = 0; r < runs && count > 0; ++r) m2 += sum_sq_dev_span(x0 + r * stride, run, mu);
      mean[s] = static_cast<stat_t>(mu);
      var[s] = static_cast<stat_t>(count > 0 ? m2 / count : kNaN);
    }
  });
}

// Statistics of NHWC values: `samples` runs of `rows` rows of C contiguous values each, one
// statistic per (sample, group of C / G consecutive channels); per channel: one sample of every
// image's pixels, G = C. Partial sums per channel over fixed blocks of rows (in parallel), then
// added block by block in order (the same result for any thread count); a second pass for the
// squared deviations. The inner loops run over a row's channels with no index arithmetic, so
// that they vectorise.
template <typename scalar_t, typename stat_t>
void row_stats(const scalar_t* x, int64_t samples, int64_t rows, int64_t C, int64_t G, stat_t* mean, stat_t* var) {
  constexpr int64_t kRows = 256;
  const int64_t blocks = (rows + kRows - 1) / kRows, C_g = C / G;
  const double count = static_cast<double>(rows * C_g);
  std::vector<double> partial(samples * blocks * C);
  // per (sample, group): the sum over its values of v, or of (v - centre[sample, channel])^2
  auto reduce = [&](const double* centre) {
    at::parallel_for(0, samples * blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t sb = begin; sb < end; ++sb) {
        const int64_t s = sb / blocks, b = sb % blocks;
        double* acc = partial.data() + sb * C;
        std::fill(acc, acc + C, 0.0);
        const scalar_t* row = x + (s * rows + b * kRows) * C;
        const int64_t n_rows = std::min(rows, (b + 1) * kRows) - b * kRows;
        if (centre == nullptr) {
          for (int64_t r = 0; r < n_rows; ++r, row += C)
            for (int64_t c = 0; c < C; ++c) acc[c] += static_cast<double>(row[c]);
        } else {
          const double* mu = centre + s * C;
          for (int64_t r = 0; r < n_rows; ++r, row += C)
            for (int64_t c = 0; c < C; ++c) {
              const double d = static_cast<double>(row[c]) - mu[c];
              acc[c] += d * d;
            }
        }
      }
    });
    std::vector<double> total(samples * G, 0.0);
    for (int64_t s = 0; s < samples; ++s)
      for (int64_t b = 0; b < blocks; ++b)
        for (int64_t c = 0; c < C; ++c) total[s * G + c / C_g] += partial[(s * blocks + b) * C + c];
    return total;
  };
  const std::vector<double> sum = reduce(nullptr);
  std::vector<double> mu(samples * G, kNaN), mu_channel(samples * C);
  for (int64_t i = 0; i < samples * G && count > 0; ++i) mu[i] = sum[i] / count;
  for (int64_t s = 0; s < samples; ++s)
    for (int64_t c = 0; c < C; ++c) mu_channel[s * C + c] = mu[s * G + c / C_g];
  const std::vector<double> m2 = reduce(mu_channel.data());
  for (int64_t i = 0; i < samples * G; ++i) {
    mean[i] = static_cast<stat_t>(mu[i]);
    var[i] = static_cast<stat_t>(count > 0 ? m2[i] / count : kNaN);
  }
}

template <typename scalar_t, typename stat_t>
void stats_of(const at::Tensor& x, bool nhwc, bool channel, int64_t num_groups, at::Tensor& mean, at::Tensor& var) {
  const int64_t N = x.size(0), C = x.size(1), HW = N * C > 0 ? x.numel() / (N * C) : 0;
  const scalar_t* xp = x.const_data_ptr<scalar_t>();
  stat_t* mp = mean.data_ptr<stat_t>();
  stat_t* vp = var.data_ptr<stat_t>();
  const int64_t G = num_groups, C_g = C / std::max<int64_t>(G, 1);
  if (nhwc) {
    row_stats(xp, channel ? 1 : N, channel ? N * HW : HW, C, channel ? C : G, mp, vp);
  } else if (channel) {
    slice_stats(xp, C, [&](int64_t c) { return c * HW; }, N, HW, C * HW, mp, vp);
  } else {
    slice_stats(xp, N * G, [&](int64_t s) { return s * C_g * HW; }, 1, C_g * HW, 0, mp, vp);
  }
}

}  // namespace

std::pair<at::Tensor, at::Tensor> cpu_norm_stats(const at::Tensor& out, NormStats stats, int64_t num_groups) {
  const auto stat_dtype = compute_dtype(out.scalar_type());
  if (stats == NormStats::None) {
    const at::Tensor empty = at::empty({0}, out.options().dtype(stat_dtype));
    return {empty, empty.clone()};
  }
  const bool nhwc = out.dim() == 4 && !out.is_contiguous() && out.is_contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor x = nhwc ? out : to_memory_format(out, at::MemoryFormat::Contiguous);
  const bool channel = stats == NormStats::Channel;
  at::Tensor mean = at::empty(channel ? std::vector<int64_t>{x.size(1)} : std::vector<int64_t>{x.size(0), num_groups},
                              x.options().dtype(stat_dtype));
  at::Tensor var = at::empty_like(mean);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "myops: normalisation statistics", [&] {
    if (stat_dtype == at::kDouble) {
      stats_of<scalar_t, double>(x, nhwc, channel, num_groups, mean, var);
    } else {
      stats_of<scalar_t, float>(x, nhwc, channel, num_groups, mean, var);
    }
  });
  return {mean, var};
}

}  // namespace myops
