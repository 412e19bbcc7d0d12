// myops::normalize_act on CUDA: the family's normalise + activation pass in one kernel.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "cuda/norm/normalize_act.cuh"
#include "cuda/ops/tensors.h"

namespace myops {
namespace host {
namespace {

at::Tensor normalize_act_cuda(const at::Tensor& input, const at::Tensor& mean, const at::Tensor& scale,
                              const at::Tensor& shift, c10::string_view activation, double negative_slope,
                              c10::string_view approximate) {
  constexpr const char* kOp = "normalize_act";
  const NormalizeAct a = check_normalize_act(kOp, input, mean, scale, shift, activation, negative_slope,
                                             approximate);
  const c10::cuda::CUDAGuard guard(input.device());
  at::Tensor out = at::empty_like(a.x);
  cuda::ActivationSpec spec;
  spec.act = a.act;
  spec.approx = a.approx;
  spec.negative_slope = negative_slope;
  check_launch(cuda::normalize_act(a.x.const_data_ptr(), out.data_ptr(), kernel_dtype(a.x.scalar_type()), a.N, a.C,
                                   a.HW, a.channels_last, a.mean.const_data_ptr(), a.scale.const_data_ptr(),
                                   a.shift.const_data_ptr(), spec, at::cuda::getCurrentCUDAStream()),
               kOp);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CUDA, m) { m.impl("normalize_act", &normalize_act_cuda); }

}  // namespace host
}  // namespace myops
