// Exhaustive float32 accuracy check of the conv epilogues' GELU forms (csrc/cuda/gelu_fast.cuh)
// against float64, next to PyTorch's own float32 formulas, on the host (exact exp2 and division
// stand in for the device's 2-ulp ex2.approx / __fdividef). Run by tests/test_gelu_fast.py:
//   nvcc -std=c++17 -O2 -Icsrc scripts/check_gelu_fast.cu -o check && ./check [stride]
// prints one line per form and exits 1 if a form is less accurate than the bounds below.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda/common/gelu_fast.cuh"

namespace {

struct Errors {
  double abs = 0, rel_tail = 0;  // max |err| / max(1, |x|); max relative error where |y| > 1e-6 |x| (and normal)
  void add(double got, double want, double x) {
    abs = std::fmax(abs, std::fabs(got - want) / std::fmax(1.0, std::fabs(x)));
    if (std::fabs(want) > 1e-6 * std::fabs(x) && std::fabs(want) > 1e-30) rel_tail = std::fmax(rel_tail, std::fabs(got - want) / std::fabs(want));
  }
};

// max_abs, max_rel_tail: the bounds the form must meet
template <typename Fast, typename Torch, typename Ref>
bool check(const char* name, uint32_t stride, Fast fast, Torch torch_f32, Ref ref, double max_abs = 1.25e-7,
           double max_rel_tail = 3e-6) {
  Errors e_fast, e_torch;
  for (uint64_t b = 0; b < 0x80000000u; b += stride) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const uint32_t bits = static_cast<uint32_t>(b) | sign;
      float x;
      std::memcpy(&x, &bits, 4);
      if (!(std::fabs(x) < 40.0f)) continue;
      const double want = ref(static_cast<double>(x));
      e_fast.add(fast(x), want, x);
      e_torch.add(torch_f32(x), want, x);
    }
  }
  // PyTorch's limits: +inf -> inf, -inf -> nan, nan -> nan, +-0 -> +-0
  const float inf = INFINITY;
  const bool limits_ok = fast(inf) == inf && std::isnan(fast(-inf)) && std::isnan(fast(NAN)) && fast(0.0f) == 0.0f &&
              std::signbit(fast(-0.0f));
  const bool ok = limits_ok && e_fast.abs <= max_abs && e_fast.rel_tail <= max_rel_tail;
  std::printf("%s: max |err|/max(1,|x|) %.3g (PyTorch's float32 formula %.3g), tail relative %.3g (%.3g), limits %s: %s\n",
              name, e_fast.abs, e_torch.abs, e_fast.rel_tail, e_torch.rel_tail, limits_ok ? "ok" : "WRONG",
              ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const uint32_t stride = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 1;
  using myops::cuda::gelu_erf_fast;
  using myops::cuda::gelu_tanh_fast;
  const auto torch_erf = [](float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678f)); };
  const auto ref_erf = [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); };
  const bool erf_ok = check("gelu erf", stride, gelu_erf_fast, torch_erf, ref_erf);
  // outputs rounded to 16 bits: within 1e-5, 2% of half a float16 ulp (2^-11)
  const bool erf16_ok =
      check("gelu erf, 16-bit outputs", stride, myops::cuda::gelu_erf_fast_16bit, torch_erf, ref_erf, 1e-5, 1e-5);
  const bool tanh_ok = check(
      "gelu tanh", stride, gelu_tanh_fast,
      [](float x) { return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x))); },
      [](double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); });
  return erf_ok && erf16_ok && tanh_ok ? 0 : 1;
}
