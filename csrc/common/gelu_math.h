#pragma once
// GELU in one place for the CPU and CUDA kernels: exactly F.gelu's two formulas.
#include <cmath>

#include "common/host_device.h"

namespace myops {

enum class GeluApprox : int { None = 0, Tanh = 1 };

template <typename T>
MYOPS_HD T gelu_erf(T x) {
  constexpr T kInvSqrt2 = T(0.70710678118654752440);
#if defined(__CUDA_ARCH__)
  return T(0.5) * x * (T(1) + erf(x * kInvSqrt2));
#else
  return T(0.5) * x * (T(1) + std::erf(x * kInvSqrt2));
#endif
}

template <typename T>
MYOPS_HD T gelu_tanh(T x) {
  constexpr T kSqrt2OverPi = T(0.79788456080286535588);
  constexpr T kCoeff = T(0.044715);
  T inner = kSqrt2OverPi * (x + kCoeff * x * x * x);
#if defined(__CUDA_ARCH__)
  return T(0.5) * x * (T(1) + tanh(inner));
#else
  return T(0.5) * x * (T(1) + std::tanh(inner));
#endif
}

template <typename T>
MYOPS_HD T gelu(T x, GeluApprox approx) {
  return approx == GeluApprox::Tanh ? gelu_tanh(x) : gelu_erf(x);
}

}  // namespace myops
