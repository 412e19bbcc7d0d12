#include "cuda/ops/tensors.h"

#include <ATen/cuda/CUDAContext.h>

#include "cuda/layout/channels_last_input.cuh"

namespace myops {
namespace host {

cuda::DType kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return cuda::DType::F32;
    case at::kDouble: return cuda::DType::F64;
    case at::kHalf: return cuda::DType::F16;
    case at::kBFloat16: return cuda::DType::BF16;
    default: TORCH_CHECK(false, std::string("myops: unsupported dtype ") + c10::toString(t));
  }
}

void check_launch(cudaError_t err, const char* op) {
  TORCH_CHECK(err == cudaSuccess, std::string("myops::") + op + ": CUDA kernel launch failed: " + cudaGetErrorString(err));
}

bool launched_unless_refused(cudaError_t err, const char* op) {
  if (err == cudaErrorInvalidConfiguration) return false;
  check_launch(err, op);
  return true;
}

at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->contiguous() : at::Tensor();
}

std::tuple<int64_t, int64_t, int64_t> n_c_hw(const at::Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1);
  return {N, C, N * C == 0 ? 0 : x.numel() / (N * C)};
}

cuda::Fp32Math fp32_math() {
  // PyTorch's flag for convolutions: TF32 unless torch.backends.cudnn.allow_tf32 is off
  return at::globalContext().allowTF32CuDNN() ? cuda::Fp32Math::TF32 : cuda::Fp32Math::Exact;
}

bool strict_fp32(const at::Tensor& input) {
  return input.scalar_type() == at::kFloat && fp32_math() == cuda::Fp32Math::Exact;
}

std::optional<at::Tensor> try_channels_last_copy(const char* op, const at::Tensor& input, bool round_tf32,
                                                 cudaStream_t stream) {
  const bool channels_last = input.is_contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor src = channels_last ? input : input.contiguous();
  at::Tensor staged = at::empty_like(src, src.options(), at::MemoryFormat::ChannelsLast);
  const auto [N, C, HW] = n_c_hw(src);
  const cudaError_t err = cuda::stage_channels_last_input(src.const_data_ptr(), staged.data_ptr(),
                                                          kernel_dtype(src.scalar_type()), N, C, HW, channels_last,
                                                          round_tf32, stream);
  if (!launched_unless_refused(err, op)) return std::nullopt;
  return staged;
}

at::Tensor channels_last_copy(const char* op, const at::Tensor& input, bool round_tf32, cudaStream_t stream) {
  std::optional<at::Tensor> staged = try_channels_last_copy(op, input, round_tf32, stream);
  MYOPS_CHECK_ARG(staged.has_value(), op, "input", "of shape ", input.sizes(),
                  " has too many channels for the channels-last staging kernel");
  return *staged;
}

at::Tensor contiguous_nchw(const char* op, const at::Tensor& t) {
  if (t.is_contiguous() || t.dim() != 4 || !t.is_contiguous(at::MemoryFormat::ChannelsLast)) return t.contiguous();
  at::Tensor out = at::empty(t.sizes(), t.options());
  const auto [N, C, HW] = n_c_hw(t);
  const cudaError_t err = cuda::unstage_channels_last(t.const_data_ptr(), out.data_ptr(), kernel_dtype(t.scalar_type()),
                                                      N, C, HW, at::cuda::getCurrentCUDAStream());
  return launched_unless_refused(err, op) ? out : t.contiguous();
}

at::Tensor in_output_format(const char* op, const at::Tensor& out, const at::Tensor& input) {
  const at::MemoryFormat format = output_memory_format(input);
  if (format == at::MemoryFormat::ChannelsLast && out.dim() == 4 && out.is_contiguous() &&
      !out.is_contiguous(format)) {
    if (std::optional<at::Tensor> copy = try_channels_last_copy(op, out, false, at::cuda::getCurrentCUDAStream()))
      return *copy;
  }
  return out.contiguous(format);
}

}  // namespace host
}  // namespace myops
