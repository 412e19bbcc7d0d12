#pragma once
// CPU inner loops shared by the gelu, group_norm and fused ops. float32 (and float16 / bfloat16,
// converted through float32 in cache-sized chunks) run the vectorised kernels of vec_kernels.h;
// float64 runs plain loops with libm.
#include <ATen/OpMathType.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/gelu_math.h"
#include "cpu/vec_kernels.h"

namespace myops {

constexpr int64_t kChunk = 512;

// Calls f(const float* in, float* out, m) over [0, n) in float32, converting types chunk by chunk.
template <typename in_t, typename out_t, typename F>
void map_as_f32(const in_t* in, out_t* out, int64_t n, F f) {
  if constexpr (std::is_same_v<in_t, float> && std::is_same_v<out_t, float>) {
    f(in, out, n);
  } else {
    float a[kChunk], b[kChunk];
    for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
      const int64_t m = std::min(kChunk, n - i0);
      const float* src = a;
      if constexpr (std::is_same_v<in_t, float>) {
        src = in + i0;
      } else {
        for (int64_t j = 0; j < m; ++j) a[j] = static_cast<float>(in[i0 + j]);
      }
      f(src, b, m);
      for (int64_t j = 0; j < m; ++j) out[i0 + j] = static_cast<out_t>(b[j]);
    }
  }
}

// Calls f(const float* x, m) over [0, n) in float32 chunks.
template <typename in_t, typename F>
void scan_as_f32(const in_t* x, int64_t n, F f) {
  if constexpr (std::is_same_v<in_t, float>) {
    f(x, n);
  } else {
    float a[kChunk];
    for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
      const int64_t m = std::min(kChunk, n - i0);
      for (int64_t j = 0; j < m; ++j) a[j] = static_cast<float>(x[i0 + j]);
      f(a, m);
    }
  }
}

// out[i] = gelu(in[i]). in == out is allowed.
template <typename in_t, typename out_t>
void gelu_span(const in_t* in, out_t* out, int64_t n, GeluApprox approx) {
  if constexpr (std::is_same_v<in_t, double>) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<out_t>(gelu<double>(in[i], approx));
  } else {
    map_as_f32(in, out, n, [approx](const float* a, float* b, int64_t m) { vec::gelu_f32(a, b, m, approx); });
  }
}

// Sum of x[0, n) and sum of squared deviations from `center`, accumulated in float64 (float32 /
// 16-bit inputs through the vectorised kernels).
template <typename in_t>
double sum_span(const in_t* x, int64_t n) {
  double sum = 0;
  if constexpr (std::is_same_v<in_t, double>) {
    for (int64_t i = 0; i < n; ++i) sum += x[i];
  } else {
    scan_as_f32(x, n, [&](const float* a, int64_t m) { double s; vec::sum_f32(a, m, s); sum += s; });
  }
  return sum;
}

template <typename in_t>
double sum_sq_dev_span(const in_t* x, int64_t n, double center) {
  double m2 = 0;
  if constexpr (std::is_same_v<in_t, double>) {
    for (int64_t i = 0; i < n; ++i) m2 += (x[i] - center) * (x[i] - center);
  } else {
    scan_as_f32(x, n, [&](const float* a, int64_t m) { double s; vec::sum_sq_dev_f32(a, m, center, s); m2 += s; });
  }
  return m2;
}

// Mean and 1/sqrt(var + eps) of x[0, n), accumulated in float64: float64 inputs with a two-pass
// variance; float32 / 16-bit ones in one read, as sums of deviations from the first value (a
// float64 sum of float32 values loses nothing that matters unless the spread is ~1e-8 of the
// distance between that value and the mean).
template <typename in_t>
void mean_rstd(const in_t* x, int64_t n, double eps, double& mean, double& rstd) {
  if constexpr (std::is_same_v<in_t, double>) {
    mean = sum_span(x, n) / static_cast<double>(n);
    rstd = 1.0 / std::sqrt(sum_sq_dev_span(x, n, mean) / static_cast<double>(n) + eps);
  } else {
    const double pivot = static_cast<double>(static_cast<float>(x[0]));
    double s1 = 0, s2 = 0;
    scan_as_f32(x, n, [&](const float* a, int64_t m) {
      double a1, a2;
      vec::shifted_sums_f32(a, m, pivot, a1, a2);
      s1 += a1;
      s2 += a2;
    });
    const double shift = s1 / static_cast<double>(n);
    mean = pivot + shift;
    rstd = 1.0 / std::sqrt(std::max(s2 / static_cast<double>(n) - shift * shift, 0.0) + eps);
  }
}

// One (sample, group) slice of group_norm: x and y are [C_g, HW] contiguous; gamma / beta point at
// the group's first channel (or are null). y may alias x.
// (x - mean) * scale + beta rather than x * scale + shift: no cancellation when var << mean^2.
template <typename in_t, typename out_t, typename acc_t>
void group_norm_slice(const in_t* x, out_t* y, int64_t C_g, int64_t HW, const acc_t* gamma,
                      const acc_t* beta, double eps) {
  double mean, rstd;
  mean_rstd(x, C_g * HW, eps, mean, rstd);
  for (int64_t c = 0; c < C_g; ++c) {
    const double scale = rstd * (gamma ? static_cast<double>(gamma[c]) : 1.0);
    const double shift = beta ? static_cast<double>(beta[c]) : 0.0;
    const in_t* xc = x + c * HW;
    out_t* yc = y + c * HW;
    if constexpr (std::is_same_v<in_t, double>) {
      for (int64_t i = 0; i < HW; ++i) yc[i] = static_cast<out_t>((xc[i] - mean) * scale + shift);
    } else {
      map_as_f32(xc, yc, HW, [&](const float* a, float* b, int64_t m) {
        vec::normalize_f32(a, b, m, static_cast<float>(mean), static_cast<float>(scale),
                           static_cast<float>(shift));
      });
    }
  }
}

}  // namespace myops
