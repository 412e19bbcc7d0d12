#pragma once
// Integer division by a per-kernel constant, as a multiply by its float reciprocal: a hardware
// integer division is ~20 instructions, and the BatchNorm chain's tail divides per element.

namespace myops {
namespace cuda {

// a / b for 0 <= a < 2^21 and b >= 1, given inv_b = 1.f / b (rounded): (a + 0.5) / b lies at least
// 0.5 / b from an integer, and the float product's relative error (the reciprocal's rounding and
// the product's, 2^-23 together) moves it by at most (a + 0.5) / b x 2^-23 < 0.5 / b.
__device__ __forceinline__ int quotient_small(int a, float inv_b) {
  return static_cast<int>((static_cast<float>(a) + 0.5f) * inv_b);
}

}  // namespace cuda
}  // namespace myops
