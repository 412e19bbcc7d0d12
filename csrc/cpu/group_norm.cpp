#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "cpu/cpu_kernels.h"
#include "cpu/group_norm_groups.h"
#include "cpu/layout_copy.h"
#include "shapes.h"

namespace myops {
namespace {

at::Tensor group_norm_cpu(const at::Tensor& input, int64_t num_groups,
                          const std::optional<at::Tensor>& weight,
                          const std::optional<at::Tensor>& bias, double eps) {
  check_group_norm("group_norm", input, num_groups, weight, bias);
  const at::Tensor x = to_memory_format(input, at::MemoryFormat::Contiguous);
  at::Tensor out = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "myops::group_norm (CPU)", [&] {
    group_norm_groups<scalar_t, scalar_t>(x, out, num_groups, weight, bias, eps,
                                          [](scalar_t*, int64_t) {});
  });
  return to_memory_format(out, output_memory_format(input));
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CPU, m) { m.impl("group_norm", &group_norm_cpu); }

}  // namespace myops
