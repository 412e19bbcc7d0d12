#pragma once
// F.<activation> on device values (the conv epilogue's ConvEpilogue::act on bias + accumulator,
// before the store and the statistics; the normalise + activation pass): F.<name>'s formula in
// the accumulation type, NaN propagating as there. Outputs rounded to 16 bits take the hardware's
// approximate exp2 / tanh (errors far below their rounding); float32 outputs libm's, in calls of
// their own: inlined, their slow paths would raise the register pressure of every epilogue
// (spills in the ping-pong wgmma kernel).
#include <cmath>

#include "common/norm_act.h"
#include "cuda/common/gelu_fast.cuh"

namespace myops {
namespace cuda {

// static: one copy per translation unit (a plain definition in this header is defined again by
// every .cu that includes it, and the extension fails to link)
static __device__ __noinline__ float sigmoid_libm(float v) { return 1.0f / (1.0f + expf(-v)); }
static __device__ __noinline__ float tanh_libm(float v) { return tanhf(v); }

template <typename Out>
__device__ inline float epilogue_sigmoid(float v) {
  constexpr float kLog2e = 1.4426950408889634f;
  if constexpr (sizeof(Out) == 2) return divide_approx(1.0f, 1.0f + exp2_approx(-v * kLog2e));
  else return sigmoid_libm(v);
}
template <typename Out>
__device__ inline double epilogue_sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }
template <typename Out>
__device__ inline float epilogue_tanh(float v) {
  if constexpr (sizeof(Out) == 2) return tanh_to_store<Out>(v);
  else return tanh_libm(v);
}
template <typename Out>
__device__ inline double epilogue_tanh(double v) { return tanh(v); }

// Calls f(act) with act(v) the activation that ep (a ConvEpilogue, or any struct with its act,
// approx and negative_slope fields) names, on acc_t values stored as Out. One instantiation of f
// per activation, so element loops test no mode.
template <typename acc_t, typename Out, typename Spec, typename F>
__device__ inline void with_activation(const Spec& ep, F f) {
  switch (ep.act) {
    case Activation::None: return f([](acc_t v) { return v; });
    case Activation::Gelu:
      if (ep.approx == GeluApprox::Tanh) return f([](acc_t v) { return epilogue_gelu_tanh(v); });
      return f([](acc_t v) { return epilogue_gelu_erf<Out>(v); });
    case Activation::Relu: return f([](acc_t v) { return v <= acc_t(0) ? acc_t(0) : v; });
    case Activation::LeakyRelu: {
      const acc_t slope = static_cast<acc_t>(ep.negative_slope);
      return f([slope](acc_t v) { return v > acc_t(0) ? v : v * slope; });
    }
    case Activation::Silu: return f([](acc_t v) { return v * epilogue_sigmoid<Out>(v); });
    case Activation::Tanh: return f([](acc_t v) { return epilogue_tanh<Out>(v); });
    case Activation::Sigmoid: return f([](acc_t v) { return epilogue_sigmoid<Out>(v); });
  }
}

}  // namespace cuda
}  // namespace myops
