#include "cuda/ops/group_norm.h"

#include <ATen/cuda/CUDAContext.h>

#include "cuda/norm/batch_norm_chain.cuh"  // channel_stats_from_tiles

namespace myops {
namespace host {

void group_norm_apply(const char* op, const at::Tensor& x, at::Tensor& y, int64_t num_groups,
                      const at::Tensor& mean, const at::Tensor& rstd,
                      const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                      cuda::PreGelu pre) {
  const auto [N, C, HW] = n_c_hw(x);
  const at::Tensor gamma = contiguous_or_undefined(weight), beta = contiguous_or_undefined(bias);
  check_launch(cuda::group_norm_apply(x.const_data_ptr(), y.data_ptr(), kernel_dtype(x.scalar_type()), N, C, HW,
                                      num_groups, mean.const_data_ptr<double>(), rstd.const_data_ptr<double>(),
                                      ptr_or_null(gamma), ptr_or_null(beta), at::cuda::getCurrentCUDAStream(), pre),
               op);
}

GroupStats group_stats(const char* op, const at::Tensor& x, int64_t num_groups, double eps) {
  const auto [N, C, HW] = n_c_hw(x);
  GroupStats s(x, N * num_groups);
  check_launch(cuda::group_norm_stats(x.const_data_ptr(), kernel_dtype(x.scalar_type()), N, C, HW, num_groups, eps,
                                      s.mean.data_ptr<double>(), s.rstd.data_ptr<double>(),
                                      at::cuda::getCurrentCUDAStream()),
               op);
  return s;
}

at::Tensor plane_moments(const char* op, const at::Tensor& x, cuda::PreGelu pre) {
  const auto [N, C, HW] = n_c_hw(x);
  at::Tensor moments = at::empty({N, C, 1, 3}, x.options().dtype(compute_dtype(x.scalar_type())));
  check_launch(cuda::plane_moments(x.const_data_ptr(), kernel_dtype(x.scalar_type()), N, C, HW, moments.data_ptr(),
                                   at::cuda::getCurrentCUDAStream(), pre),
               op);
  return moments;
}

GroupStats group_stats_from_partials(const char* op, const at::Tensor& partials, int64_t num_groups, double eps,
                                     bool float32_copy) {
  const int64_t N = partials.size(0);
  GroupStats s(partials, N * num_groups);
  if (float32_copy) {
    s.mean32 = at::empty({N * num_groups}, partials.options().dtype(at::kFloat));
    s.rstd32 = at::empty_like(s.mean32);
  }
  check_launch(cuda::group_norm_stats_from_tiles(partials.const_data_ptr(), kernel_dtype(partials.scalar_type()), N,
                                                 partials.size(1), partials.size(2), num_groups, eps,
                                                 s.mean.data_ptr<double>(), s.rstd.data_ptr<double>(),
                                                 at::cuda::getCurrentCUDAStream(),
                                                 float32_copy ? s.mean32.data_ptr<float>() : nullptr,
                                                 float32_copy ? s.rstd32.data_ptr<float>() : nullptr),
               op);
  return s;
}

std::pair<at::Tensor, at::Tensor> channel_stats_from_partials(const char* op, const at::Tensor& partials) {
  const int64_t C = partials.size(1);
  at::Tensor mean = at::empty({C}, partials.options()), var = at::empty_like(mean);
  check_launch(cuda::channel_stats_from_tiles(partials.const_data_ptr(), kernel_dtype(partials.scalar_type()),
                                              partials.size(0), C, partials.size(2), mean.data_ptr(), var.data_ptr(),
                                              at::cuda::getCurrentCUDAStream()),
               op);
  return {mean, var};
}

std::optional<at::Tensor> nhwc_moments(const char* op, const at::Tensor& x, cuda::PreGelu pre) {
  const auto [N, C, HW] = n_c_hw(x);
  const int64_t tiles = cuda::nhwc_moment_tiles(HW);
  at::Tensor moments = at::empty({N, C, tiles, 3}, x.options().dtype(compute_dtype(x.scalar_type())));
  const cudaError_t err = cuda::nhwc_channel_moments(x.const_data_ptr(), kernel_dtype(x.scalar_type()), N, C, HW,
                                                     tiles, moments.data_ptr(), at::cuda::getCurrentCUDAStream(), pre);
  if (!launched_unless_refused(err, op)) return std::nullopt;
  return moments;
}

std::optional<at::Tensor> group_norm_nhwc(const char* op, const at::Tensor& x, int64_t num_groups, double eps,
                                          const std::optional<at::Tensor>& gn_weight,
                                          const std::optional<at::Tensor>& gn_bias, at::MemoryFormat format,
                                          cuda::PreGelu pre) {
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto dtype = kernel_dtype(x.scalar_type());
  const auto [N, C, HW] = n_c_hw(x);
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const std::optional<at::Tensor> moments = nhwc_moments(op, x, pre);
  if (!moments) return std::nullopt;
  const GroupStats s = group_stats_from_partials(op, *moments, num_groups, eps);
  at::Tensor out = at::empty_like(x, x.options(), format);
  const at::Tensor gamma = contiguous_or_undefined(gn_weight), beta = contiguous_or_undefined(gn_bias);
  check_launch(cuda::nhwc_group_norm_apply(x.const_data_ptr(), out.data_ptr(),
                                           format == at::MemoryFormat::ChannelsLast, dtype, N, C, HW, num_groups,
                                           s.mean.const_data_ptr<double>(), s.rstd.const_data_ptr<double>(),
                                           ptr_or_null(gamma), ptr_or_null(beta), sms, stream, pre),
               op);
  return out;
}

}  // namespace host
}  // namespace myops
