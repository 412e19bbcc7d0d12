#pragma once
// Branch-free float32 exp / GELU that the compiler can vectorise (libm's erff / tanhf are scalar
// calls). Both GELU forms are rewritten so that no step cancels:
//   erf form:  gelu(x) = 0.5 x (1 + erf(x/√2)) = 0.5 x erfc(-x/√2), erfc from a Chebyshev fit
//              (Numerical Recipes' erfcc, fractional error < 1.2e-7 everywhere);
//   tanh form: 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)).
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__GNUC__)
#define VEC_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define VEC_ALWAYS_INLINE inline
#endif

namespace myops {
namespace vec {

VEC_ALWAYS_INLINE float exp_f32(float x) {
  // ternaries and an int conversion instead of fminf / fmaxf / floorf: libm calls block vectorising
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // x = k ln2 + r, |r| <= ln2 / 2 (ln2 split in two for an exact k ln2); the +128 bias keeps the
  // truncation a floor
  const int32_t ki = static_cast<int32_t>(x * 1.44269504088896341f + 128.5f) - 128;
  const float k = static_cast<float>(ki);
  const float r = (x - k * 0.693359375f) + k * 2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (ki + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// erfc(z) for z >= 0.
VEC_ALWAYS_INLINE float erfc_nonneg_f32(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * exp_f32(p - z * z);
}

VEC_ALWAYS_INLINE float gelu_erf_f32(float x) {
  const float z = (x < 0.0f ? -x : x) * 0.70710678118654752f;
  const float c = erfc_nonneg_f32(z);  // erfc(|x|/√2)
  return 0.5f * x * (x >= 0.0f ? 2.0f - c : c);
}

// tanh without a libm call: an odd minimax polynomial for |x| < 0.625 (where 1 - 2 / (e^2x + 1)
// would cancel), the exp form above; both are computed and selected so the loop vectorises.
// Relative error ~1e-7 (Cephes tanhf's coefficients).
VEC_ALWAYS_INLINE float tanh_f32(float x) {
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float a = x < 0.0f ? -x : x;
  const float big = 1.0f - 2.0f / (exp_f32(2.0f * a) + 1.0f);  // exp_f32 clamps: tanh -> 1
  const float large = x < 0.0f ? -big : big;
  return a < 0.625f ? small : large;
}

VEC_ALWAYS_INLINE float gelu_tanh_f32(float x) {
  const float u = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
  return x / (1.0f + exp_f32(-2.0f * u));
}

}  // namespace vec
}  // namespace myops
