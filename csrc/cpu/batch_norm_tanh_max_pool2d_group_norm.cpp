// batch_norm (given statistics) -> tanh -> max_pool2d -> group_norm on the CPU. BatchNorm folds
// into a per-channel scale / shift; each (sample, channel) plane gets BN + tanh once per element
// (vectorised for float32) into a scratch plane, is max-pooled from it, and the pooled tensor is
// group-normalised into the output dtype.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu/cpu_kernels.h"
#include "cpu/elementwise.h"
#include "cpu/group_norm_groups.h"
#include "cpu/layout_copy.h"
#include "shapes.h"

namespace myops {
namespace {

constexpr const char* kOp = "batch_norm_tanh_max_pool2d_group_norm";

// (scale, shift) per channel: weight * rsqrt(var + eps) and bias - mean * scale, in float64.
std::pair<at::Tensor, at::Tensor> fold_batch_norm(const at::Tensor& mean, const at::Tensor& var,
                                                  const std::optional<at::Tensor>& weight,
                                                  const std::optional<at::Tensor>& bias, double eps) {
  at::Tensor scale = (var.to(at::kDouble) + eps).rsqrt();
  if (weight.has_value()) scale = scale * weight->to(at::kDouble);
  at::Tensor shift = -mean.to(at::kDouble) * scale;
  if (bias.has_value()) shift = shift + bias->to(at::kDouble);
  return {scale.contiguous(), shift.contiguous()};
}

// tanh(x * a + b) over one plane into `act` (compute dtype): float32 / 16-bit inputs through the
// vectorised tanh (map_as_f32 converts 16-bit chunks), float64 through libm.
template <typename scalar_t, typename compute_t>
void affine_tanh_plane(const scalar_t* in, compute_t* act, int64_t n, compute_t a, compute_t b) {
  if constexpr (std::is_same_v<compute_t, float>) {
    map_as_f32(in, act, n, [a, b](const float* x, float* y, int64_t m) { vec::affine_tanh_f32(x, y, m, a, b); });
  } else {
    for (int64_t i = 0; i < n; ++i) act[i] = std::tanh(static_cast<compute_t>(in[i]) * a + b);
  }
}

template <typename scalar_t, typename compute_t>
void bn_tanh_pool(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                  const Pool2dParams& q, at::Tensor& pooled) {
  const int64_t N = x.size(0), C = x.size(1);
  const scalar_t* xp = x.const_data_ptr<scalar_t>();
  compute_t* pp = pooled.data_ptr<compute_t>();
  const double* sc = scale.const_data_ptr<double>();
  const double* sh = shift.const_data_ptr<double>();
  at::parallel_for(0, N * C, 1, [&](int64_t begin, int64_t end) {
    std::vector<compute_t> act(q.H * q.W);  // the plane after BN + tanh, each element once
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t c = plane % C;
      affine_tanh_plane<scalar_t, compute_t>(xp + plane * q.H * q.W, act.data(), q.H * q.W,
                                             static_cast<compute_t>(sc[c]), static_cast<compute_t>(sh[c]));
      compute_t* out = pp + plane * q.PH * q.PW;
      for (int64_t ph = 0; ph < q.PH; ++ph)
        for (int64_t pw = 0; pw < q.PW; ++pw) {
          compute_t best = -std::numeric_limits<compute_t>::infinity();  // padding never wins
          for (int64_t i = 0; i < q.kH; ++i) {
            const int64_t h = ph * q.sH - q.pH + i * q.dH;
            if (h < 0 || h >= q.H) continue;
            for (int64_t j = 0; j < q.kW; ++j) {
              const int64_t w = pw * q.sW - q.pW + j * q.dW;
              if (w < 0 || w >= q.W) continue;
              const compute_t v = act[h * q.W + w];
              if (v > best || std::isnan(v)) best = v;  // NaN propagates, as in max_pool2d
            }
          }
          out[ph * q.PW + pw] = best;
        }
    }
  });
}

}  // namespace

at::Tensor batch_norm_tanh_max_pool2d_group_norm_cpu(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& var,
    const std::optional<at::Tensor>& bn_weight, const std::optional<at::Tensor>& bn_bias,
    double bn_eps, at::IntArrayRef kernel_size, at::IntArrayRef pool_stride,
    at::IntArrayRef pool_padding, at::IntArrayRef pool_dilation, int64_t num_groups,
    const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias,
    double gn_eps) {
  const Pool2dParams q = check_batch_norm_tanh_max_pool2d_group_norm(
      kOp, input, mean, var, bn_weight, bn_bias, kernel_size, pool_stride, pool_padding, pool_dilation,
      num_groups, gn_weight, gn_bias);
  const int64_t C = input.size(1);
  const at::Tensor x = to_memory_format(input, at::MemoryFormat::Contiguous);
  const auto [scale, shift] = fold_batch_norm(mean, var, bn_weight, bn_bias, bn_eps);
  at::Tensor pooled = at::empty({x.size(0), C, q.PH, q.PW}, x.options().dtype(compute_dtype(x.scalar_type())));
  at::Tensor out = at::empty(pooled.sizes(), x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "myops::batch_norm_tanh_max_pool2d_group_norm (CPU)", [&] {
    using compute_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    bn_tanh_pool<scalar_t, compute_t>(x, scale, shift, q, pooled);
    group_norm_groups<compute_t, scalar_t>(pooled, out, num_groups, gn_weight, gn_bias, gn_eps,
                                           [](compute_t*, int64_t) {});
  });
  return to_memory_format(out, output_memory_format(input));
}

TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("batch_norm_tanh_max_pool2d_group_norm", &batch_norm_tanh_max_pool2d_group_norm_cpu);
}

}  // namespace myops
