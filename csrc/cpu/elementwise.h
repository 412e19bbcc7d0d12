#pragma once
// Vectorisable CPU inner loops shared by the gelu, group_norm and fused ops.
#include <ATen/OpMathType.h>
#include <c10/macros/Macros.h>

#include <cmath>
#include <cstdint>

#include "common/gelu_math.h"

namespace myops {

// out[i] = gelu(in[i]) in the op-math type (float for half / bfloat16). in == out is allowed.
template <typename in_t, typename out_t>
void gelu_span(const in_t* in, out_t* out, int64_t n, GeluApprox approx) {
  using acc_t = at::opmath_type<in_t>;
  if (approx == GeluApprox::Tanh) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<out_t>(gelu_tanh<acc_t>(acc_t(in[i])));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<out_t>(gelu_erf<acc_t>(acc_t(in[i])));
  }
}

// Mean and 1/sqrt(var + eps) of x[0, n), accumulated in float64 with a two-pass variance.
template <typename in_t>
void mean_rstd(const in_t* x, int64_t n, double eps, double& mean, double& rstd) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
  mean = sum / static_cast<double>(n);
  double m2 = 0;
#pragma omp simd reduction(+ : m2)
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - mean;
    m2 += d * d;
  }
  rstd = 1.0 / std::sqrt(m2 / static_cast<double>(n) + eps);
}

// One (sample, group) slice of group_norm: x and y are [C_g, HW] contiguous; gamma / beta point at
// the group's first channel (or are null). y may alias x.
template <typename in_t, typename out_t, typename acc_t>
void group_norm_slice(const in_t* x, out_t* y, int64_t C_g, int64_t HW, const acc_t* gamma,
                      const acc_t* beta, double eps) {
  double mean, rstd;
  mean_rstd(x, C_g * HW, eps, mean, rstd);
  // (x - mean) * scale + beta rather than x * scale + shift: no cancellation when var << mean^2.
  const acc_t mean_a = static_cast<acc_t>(mean);
  for (int64_t c = 0; c < C_g; ++c) {
    const acc_t scale = static_cast<acc_t>(rstd * (gamma ? static_cast<double>(gamma[c]) : 1.0));
    const acc_t shift = beta ? beta[c] : acc_t(0);
    const in_t* xc = x + c * HW;
    out_t* yc = y + c * HW;
#pragma omp simd
    for (int64_t i = 0; i < HW; ++i) yc[i] = static_cast<out_t>((acc_t(xc[i]) - mean_a) * scale + shift);
  }
}

}  // namespace myops
