#pragma once
// F.gelu's two forms for the conv epilogues in float32, in about half the instructions of
// erff / tanhf (with those, GELU was a large share of a fused conv kernel's instructions). Both are
// one polynomial and one MUFU.EX2, no branches. Exhaustive float32 check on [-40, 40] against float64 (scripts/check_gelu_fast.cu,
// host build with exact exp2): max |error| / max(1, |x|) 1.05e-7 (erf) and 1.21e-7 (tanh), as
// PyTorch's own float32 formulas (1.07e-7, 1.46e-7); relative error on the negative tail 2e-6
// where those lose up to 1.5% to cancellation in 1 + erf / 1 + tanh. Limits as PyTorch: +inf ->
// inf, -inf -> nan, nan -> nan.
#include <cmath>

#include "common/gelu_math.h"

namespace myops {
namespace cuda {

// The host forms exist for scripts/check_gelu_fast.cu, the exhaustive accuracy check.
MYOPS_HD float exp2_approx(float x) {  // 2^x within 2 ulp; 0 below 2^-126
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return std::exp2(x);
#endif
}

MYOPS_HD float divide_approx(float x, float y) {  // 2 ulp; 0 for |y| > 2^126
#if defined(__CUDA_ARCH__)
  return __fdividef(x, y);
#else
  return x / y;
#endif
}

// x * Phi(x). With u = |x|: erfc(u / sqrt 2) = 2^(-u h(u)), h smooth on [0, inf); h is fitted
// (weighted minimax) on [0, 5.5], where erfc(5.5 / sqrt 2) = 4e-8 is below half an ulp of 2, and
// evaluated at min(u, 5.5) beyond (the exponent still grows with u, so the tail still vanishes).
// Then Phi(x) = 1 - e / 2 for x > 0 and e / 2 otherwise; the 1/2 is the "+ 1" in the exponent.
MYOPS_HD float gelu_erf_from_exponent(float x, float u, float h) {
  const float half_e = exp2_approx(-fmaf(u, h, 1.0f));
  return x * (x > 0.0f ? 1.0f - half_e : half_e);
}

// c0 x^n + c1 x^(n-1) + ... + cn by Horner's rule, one FMA per coefficient after the first.
MYOPS_HD float horner(float, float c) { return c; }
template <typename... Rest>
MYOPS_HD float horner(float x, float c, float next, Rest... rest) {
  return horner(x, fmaf(c, x, next), rest...);
}

// float32 outputs: h of degree 9 (the accuracy of PyTorch's float32 formula).
MYOPS_HD float gelu_erf_fast(float x) {
  const float u = fabsf(x);
  const float h = horner(fminf(u, 5.5f), 2.923627918e-08f, -8.608574831e-07f, 1.090667229e-05f, -7.566392014e-05f,
                         2.755692403e-04f, 1.095238986e-05f, -6.962732412e-03f, 5.245317146e-02f, 4.592167437e-01f,
                         1.151104689e+00f);
  return gelu_erf_from_exponent(x, u, h);
}

// Outputs rounded to 16 bits: h of degree 6, relative error of e below 6e-6, about 1% of half a
// float16 ulp (2^-11) and less of a bfloat16's: three fewer FMAs per value.
MYOPS_HD float gelu_erf_fast_16bit(float x) {
  const float u = fabsf(x);
  const float h = horner(fminf(u, 5.5f), 1.734391049e-06f, -5.973178486e-05f, 9.167920216e-04f, -8.457072079e-03f,
                         5.386090279e-02f, 4.585617185e-01f, 1.151210189e+00f);
  return gelu_erf_from_exponent(x, u, h);
}

// 0.5 x (1 + tanh(z)) = x / (1 + e^(-2z)), z = sqrt(2 / pi) (x + 0.044715 x^3).
MYOPS_HD float gelu_tanh_fast(float x) {
  constexpr float k1 = -2.0f * 1.4426950408889634f * 0.7978845608028654f;  // -2 log2(e) sqrt(2/pi)
  constexpr float k3 = k1 * 0.044715f;
  const float e = exp2_approx(x * fmaf(k3, x * x, k1));
  return divide_approx(x, 1.0f + e);
}

// The epilogue's GELU per accumulator type and output type Out: float the forms above, double
// (float64 inputs) the libm formulas.
template <typename Out>
__device__ inline float epilogue_gelu_erf(float v) {
  return sizeof(Out) == 2 ? gelu_erf_fast_16bit(v) : gelu_erf_fast(v);
}
template <typename Out>
__device__ inline double epilogue_gelu_erf(double v) { return gelu_erf<double>(v); }
__device__ inline float epilogue_gelu_tanh(float v) { return gelu_tanh_fast(v); }
__device__ inline double epilogue_gelu_tanh(double v) { return gelu_tanh<double>(v); }

// tanh of a value about to be stored as T. 16-bit T: the hardware's tanh.approx.f32, one MUFU
// instruction against ~20 for tanhf, relative error below 2^-10.9 (PTX ISA): under half a unit in
// the last place of bfloat16, about half of float16's, so a stored value moves by at most one
// unit; the op's error against float64 does not change.
// float32 / float64: tanhf / tanh.
template <typename T, typename A>
__device__ __forceinline__ A tanh_to_store(A v) {
  if constexpr (sizeof(T) == 2) {
    float r;
    asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
  } else {
    return tanh(v);
  }
}

}  // namespace cuda
}  // namespace myops
