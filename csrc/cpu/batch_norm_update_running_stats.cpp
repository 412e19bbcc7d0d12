#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include "shapes.h"

namespace myops {
namespace {

void batch_norm_update_running_stats_cpu(const at::Tensor& running_mean, const at::Tensor& running_var, const at::Tensor& mean,
                                         const at::Tensor& var, double momentum, double var_factor,
                                         const std::optional<at::Tensor>& num_batches_tracked) {
  constexpr const char* kOp = "batch_norm_update_running_stats";
  check_batch_norm_update_running_stats(kOp, running_mean, running_var, mean, var, num_batches_tracked);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, running_mean.scalar_type(), "myops::batch_norm_update_running_stats (CPU)", [&] {
    // the buffers' compute dtype (float for 16-bit buffers), as aten's batch_norm updates them
    using acc_t = at::opmath_type<scalar_t>;
    const auto acc = c10::CppTypeToScalarType<acc_t>::value;
    const at::Tensor m = mean.to(acc), v = var.to(acc);
    auto rm = running_mean.accessor<scalar_t, 1>();
    auto rv = running_var.accessor<scalar_t, 1>();
    auto ma = m.accessor<acc_t, 1>();
    auto va = v.accessor<acc_t, 1>();
    const acc_t mom = static_cast<acc_t>(momentum), keep = static_cast<acc_t>(1.0 - momentum),
                factor = static_cast<acc_t>(var_factor);
    for (int64_t c = 0; c < rm.size(0); ++c) {
      rm[c] = static_cast<scalar_t>(mom * ma[c] + keep * static_cast<acc_t>(rm[c]));
      rv[c] = static_cast<scalar_t>(mom * (va[c] * factor) + keep * static_cast<acc_t>(rv[c]));
    }
  });
  if (num_batches_tracked.has_value()) num_batches_tracked->add_(1);
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CPU, m) { m.impl("batch_norm_update_running_stats", &batch_norm_update_running_stats_cpu); }

}  // namespace myops
