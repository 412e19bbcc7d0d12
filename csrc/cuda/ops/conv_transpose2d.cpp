// myops::conv_transpose2d on CUDA.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "cuda/ops/conv.h"
#include "explain.h"

namespace myops {
namespace host {
namespace {

at::Tensor conv_transpose2d_cuda(const at::Tensor& input, const at::Tensor& weight,
                                 const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                 c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
                                 c10::SymInt groups, c10::SymIntArrayRef dilation) {
  constexpr const char* kOp = "conv_transpose2d";
  const auto p = check_conv_transpose2d(kOp, input, weight, bias, stride, padding, output_padding, groups, dilation);
  const c10::cuda::CUDAGuard guard(input.device());
  // Every source is a candidate (conv_source_candidates): the output keeps the input's layout
  // whichever runs, so that the timed choice compares like with like.
  const at::MemoryFormat format = output_memory_format(input);
  auto run = [&](ConvSource source) {
    switch (source) {
      case ConvSource::Cudnn: return cudnn_conv(kOp, input, weight, bias, p, format);
      case ConvSource::CudnnChannelsLast:
        return cudnn_conv_channels_last(kOp, input, weight, bias, p).contiguous(format);
      case ConvSource::Myops: break;
    }
    return in_output_format(kOp, conv_forward(kOp, input, weight, bias, p, kernel_call(p, input, true), {}), input);
  };
  return run(conv_source(kOp, p, input, bias, no_extra, run));
}

std::string explain_cuda(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                         c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
                         c10::SymInt groups, c10::SymIntArrayRef dilation, c10::string_view op) {
  const std::string name(op);
  const ConvTranspose2dParams p =
      check_explain(name, input, weight, bias, stride, padding, output_padding, std::move(groups), dilation);
  const c10::cuda::CUDAGuard guard(input.device());
  // (only the plain conv stores nothing but the conv's output: kernel_call's plain_output)
  return explain_header(name, input, p) + explain_conv(name.c_str(), input, bias, p, name == "conv_transpose2d");
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("conv_transpose2d", &conv_transpose2d_cuda);
  m.impl("_explain", &explain_cuda);
}

}  // namespace host
}  // namespace myops
