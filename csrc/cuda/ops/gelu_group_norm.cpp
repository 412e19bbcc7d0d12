// myops::gelu and myops::group_norm on CUDA.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "cuda/ops/group_norm.h"

namespace myops {
namespace host {
namespace {

at::Tensor gelu_cuda(const at::Tensor& self, c10::string_view approximate) {
  check_floating("gelu", "self", self);
  const GeluApprox approx = check_gelu_approximate("gelu", approximate);
  const c10::cuda::CUDAGuard guard(self.device());
  at::Tensor out = at::empty_like(self);
  const at::Tensor x = self.strides() == out.strides() ? self : at::empty_like(out).copy_(self);
  check_launch(cuda::gelu_forward(x.const_data_ptr(), out.data_ptr(), x.numel(),
                                  kernel_dtype(x.scalar_type()), approx, at::cuda::getCurrentCUDAStream()),
               "gelu");
  return out;
}

at::Tensor group_norm_cuda(const at::Tensor& input, int64_t num_groups,
                           const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias, double eps) {
  check_group_norm("group_norm", input, num_groups, weight, bias);
  const c10::cuda::CUDAGuard guard(input.device());
  // a channels-last input where it lies, not through NCHW copies of the input and the output
  // (those copies cost more than the normalisation itself)
  if (output_memory_format(input) == at::MemoryFormat::ChannelsLast)
    if (std::optional<at::Tensor> out =
            group_norm_nhwc("group_norm", input, num_groups, eps, weight, bias, at::MemoryFormat::ChannelsLast))
      return *out;
  const at::Tensor x = input.contiguous();
  at::Tensor out = at::empty_like(x);
  const GroupStats s = group_stats("group_norm", x, num_groups, eps);
  group_norm_apply("group_norm", x, out, num_groups, s.mean, s.rstd, weight, bias);
  return in_output_format("group_norm", out, input);
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("gelu", &gelu_cuda);
  m.impl("group_norm", &group_norm_cuda);
}

}  // namespace host
}  // namespace myops
