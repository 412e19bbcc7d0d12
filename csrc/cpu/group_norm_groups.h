#pragma once
// group_norm over a contiguous [N, C, *] tensor, parallel over (sample, group) slices.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <optional>

#include "cpu/elementwise.h"

namespace myops {

// Normalises x into y (both contiguous, same shape; y may be x). Before a slice is normalised,
// prologue(slice_ptr, count) may rewrite it in place: the fused op applies GELU there, so each
// slice is read from memory once while it is still in cache.
template <typename in_t, typename out_t, typename Prologue>
void group_norm_groups(const at::Tensor& x, at::Tensor& y, int64_t num_groups,
                       const std::optional<at::Tensor>& weight,
                       const std::optional<at::Tensor>& bias, double eps, Prologue prologue) {
  using acc_t = at::opmath_type<in_t>;
  const int64_t N = x.size(0), C = x.size(1);
  if (x.numel() == 0) return;
  const int64_t HW = x.numel() / (N * C), C_g = C / num_groups;
  const auto acc_dtype = c10::CppTypeToScalarType<acc_t>::value;
  const at::Tensor gamma = weight.has_value() ? weight->to(acc_dtype).contiguous() : at::Tensor();
  const at::Tensor beta = bias.has_value() ? bias->to(acc_dtype).contiguous() : at::Tensor();
  const acc_t* gamma_ptr = gamma.defined() ? gamma.const_data_ptr<acc_t>() : nullptr;
  const acc_t* beta_ptr = beta.defined() ? beta.const_data_ptr<acc_t>() : nullptr;
  in_t* x_ptr = const_cast<in_t*>(x.const_data_ptr<in_t>());
  out_t* y_ptr = y.data_ptr<out_t>();
  at::parallel_for(0, N * num_groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t slice = begin; slice < end; ++slice) {
      const int64_t g = slice % num_groups;
      const int64_t offset = slice * C_g * HW;
      prologue(x_ptr + offset, C_g * HW);
      group_norm_slice(x_ptr + offset, y_ptr + offset, C_g, HW,
                       gamma_ptr ? gamma_ptr + g * C_g : nullptr,
                       beta_ptr ? beta_ptr + g * C_g : nullptr, eps);
    }
  });
}

}  // namespace myops
