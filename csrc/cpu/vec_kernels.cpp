#include "cpu/vec_kernels.h"

#include <algorithm>

#include "cpu/vec_math.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CPU_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_MULTIVERSION
#endif

namespace myops {
namespace vec {

CPU_MULTIVERSION void gelu_f32(const float* in, float* out, int64_t n, GeluApprox approx) {
  if (approx == GeluApprox::Tanh) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh_f32(in[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = gelu_erf_f32(in[i]);
  }
}

CPU_MULTIVERSION void sum_f32(const float* x, int64_t n, double& sum) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]);
  sum = s;
}

CPU_MULTIVERSION void sum_sq_dev_f32(const float* x, int64_t n, double center, double& m2) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - center;
    s += d * d;
  }
  m2 = s;
}

CPU_MULTIVERSION void shifted_sums_f32(const float* x, int64_t n, double pivot, double& s1, double& s2) {
  double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - pivot;
    a += d;
    b += d * d;
  }
  s1 = a;
  s2 = b;
}

CPU_MULTIVERSION void affine_tanh_f32(const float* x, float* y, int64_t n, float scale, float shift) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = tanh_f32(x[i] * scale + shift);
}

CPU_MULTIVERSION void normalize_f32(const float* x, float* y, int64_t n, float mean, float scale,
                                      float shift) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * scale + shift;
}

namespace {

template <typename Act>
VEC_ALWAYS_INLINE void normalize_act_loop(const float* x, float* y, int64_t n, const float* mean, const float* scale,
                                          const float* shift, bool per_element, Act act) {
  if (per_element) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = act((x[i] - mean[i]) * scale[i] + shift[i]);
  } else {
    const float m = *mean, s = *scale, b = *shift;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = act((x[i] - m) * s + b);
  }
}

}  // namespace

CPU_MULTIVERSION void normalize_act_f32(const float* x, float* y, int64_t n, const float* mean, const float* scale,
                                        const float* shift, bool per_element, Activation act, float negative_slope,
                                        GeluApprox approx) {
  // (each case inlines its loop here, so that it is compiled for every target of the clones)
  const float slope = negative_slope;
  switch (act) {
    case Activation::None:
      return normalize_act_loop(x, y, n, mean, scale, shift, per_element, [](float v) { return v; });
    case Activation::Gelu:
      if (approx == GeluApprox::Tanh)
        return normalize_act_loop(x, y, n, mean, scale, shift, per_element, [](float v) { return gelu_tanh_f32(v); });
      return normalize_act_loop(x, y, n, mean, scale, shift, per_element, [](float v) { return gelu_erf_f32(v); });
    case Activation::Relu:
      return normalize_act_loop(x, y, n, mean, scale, shift, per_element,
                                [](float v) { return v <= 0.0f ? 0.0f : v; });
    case Activation::LeakyRelu:
      return normalize_act_loop(x, y, n, mean, scale, shift, per_element,
                                [slope](float v) { return v > 0.0f ? v : v * slope; });
    case Activation::Silu:
      return normalize_act_loop(x, y, n, mean, scale, shift, per_element,
                                [](float v) { return v / (1.0f + exp_f32(-v)); });
    case Activation::Tanh:
      return normalize_act_loop(x, y, n, mean, scale, shift, per_element, [](float v) { return tanh_f32(v); });
    case Activation::Sigmoid:
      return normalize_act_loop(x, y, n, mean, scale, shift, per_element,
                                [](float v) { return 1.0f / (1.0f + exp_f32(-v)); });
  }
}

namespace {

template <typename T>
VEC_ALWAYS_INLINE void transpose_rows_loop(const T* src, T* dst, int64_t rows, int64_t cols, int64_t r0,
                                           int64_t r1) {
  for (int64_t c0 = 0; c0 < cols; c0 += kTransposeTile) {
    for (int64_t c = c0, c1 = std::min(cols, c0 + kTransposeTile); c < c1; ++c) {
      T* dst_c = dst + c * rows;
#pragma omp simd
      for (int64_t r = r0; r < r1; ++r) dst_c[r] = src[r * cols + c];
    }
  }
}

}  // namespace

CPU_MULTIVERSION void transpose_rows(const uint16_t* src, uint16_t* dst, int64_t rows, int64_t cols, int64_t r0,
                                     int64_t r1) {
  transpose_rows_loop(src, dst, rows, cols, r0, r1);
}

CPU_MULTIVERSION void transpose_rows(const uint32_t* src, uint32_t* dst, int64_t rows, int64_t cols, int64_t r0,
                                     int64_t r1) {
  transpose_rows_loop(src, dst, rows, cols, r0, r1);
}

CPU_MULTIVERSION void transpose_rows(const uint64_t* src, uint64_t* dst, int64_t rows, int64_t cols, int64_t r0,
                                     int64_t r1) {
  transpose_rows_loop(src, dst, rows, cols, r0, r1);
}

}  // namespace vec
}  // namespace myops
