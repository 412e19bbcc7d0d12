// myops::normalize_act on the CPU: out = act((x - mean[n, c]) * scale[n, c] + shift[n, c]) in one
// pass, in float32 (float64 for float64 input), in the input's memory format.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>

#include "cpu/elementwise.h"
#include "cpu/vec_kernels.h"
#include "shapes.h"

namespace myops {
namespace {

constexpr int64_t kGrainElements = 1 << 15;

// F.<activation> in float64 (libm), for float64 tensors; float32 and 16-bit ones take
// vec::normalize_act_f32.
template <typename F>
void with_f64_activation(Activation act, double negative_slope, GeluApprox approx, F f) {
  switch (act) {
    case Activation::None: return f([](double v) { return v; });
    case Activation::Gelu:
      if (approx == GeluApprox::Tanh) return f([](double v) { return gelu_tanh(v); });
      return f([](double v) { return gelu_erf(v); });
    case Activation::Relu: return f([](double v) { return v <= 0.0 ? 0.0 : v; });
    case Activation::LeakyRelu: return f([negative_slope](double v) { return v > 0.0 ? v : v * negative_slope; });
    case Activation::Silu: return f([](double v) { return v / (1.0 + std::exp(-v)); });
    case Activation::Tanh: return f([](double v) { return std::tanh(v); });
    case Activation::Sigmoid: return f([](double v) { return 1.0 / (1.0 + std::exp(-v)); });
  }
}

// y[j] = act((x[j] - mean[j']) * scale[j'] + shift[j']) for j < k <= kChunk, j' = j where
// per_element, else 0.
template <typename T, typename acc_t>
void normalize_span(const T* x, T* y, int64_t k, const acc_t* mean, const acc_t* scale, const acc_t* shift,
                    bool per_element, const NormalizeAct& a, double negative_slope) {
  if constexpr (std::is_same_v<T, double>) {
    with_f64_activation(a.act, negative_slope, a.approx, [&](auto act) {
      for (int64_t j = 0; j < k; ++j) {
        const int64_t p = per_element ? j : 0;
        y[j] = act((x[j] - mean[p]) * scale[p] + shift[p]);
      }
    });
  } else {
    map_as_f32(x, y, k, [&](const float* in, float* out, int64_t n) {  // one call: k <= kChunk
      vec::normalize_act_f32(in, out, n, mean, scale, shift, per_element, a.act, static_cast<float>(negative_slope),
                             a.approx);
    });
  }
}

template <typename T, typename acc_t>
void normalize_act_kernel(const T* x, T* y, int64_t N, int64_t C, int64_t HW, bool channels_last,
                          const acc_t* mean, const acc_t* scale, const acc_t* shift, const NormalizeAct& a,
                          double negative_slope) {
  if (!channels_last) {  // [N * C] planes of HW values, one (mean, scale, shift) each
    at::parallel_for(0, N * C, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(HW, 1)),
                     [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane)
        for (int64_t j0 = 0; j0 < HW; j0 += kChunk) {
          const int64_t offset = plane * HW + j0;
          normalize_span(x + offset, y + offset, std::min(kChunk, HW - j0), mean + plane, scale + plane,
                         shift + plane, false, a, negative_slope);
        }
    });
    return;
  }
  // channels-last: [N * HW] rows of C values, the parameters of the row's sample per channel
  at::parallel_for(0, N * HW, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(C, 1)),
                   [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / HW;
      for (int64_t c0 = 0; c0 < C; c0 += kChunk) {
        const int64_t first = n * C + c0, offset = row * C + c0;
        normalize_span(x + offset, y + offset, std::min(kChunk, C - c0), mean + first, scale + first, shift + first,
                       true, a, negative_slope);
      }
    }
  });
}

at::Tensor normalize_act_cpu(const at::Tensor& input, const at::Tensor& mean, const at::Tensor& scale,
                             const at::Tensor& shift, c10::string_view activation, double negative_slope,
                             c10::string_view approximate) {
  constexpr const char* kOp = "normalize_act";
  const NormalizeAct a = check_normalize_act(kOp, input, mean, scale, shift, activation, negative_slope,
                                             approximate);
  at::Tensor out = at::empty_like(a.x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.x.scalar_type(), "myops::normalize_act (CPU)", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    normalize_act_kernel<scalar_t, acc_t>(a.x.const_data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), a.N, a.C, a.HW,
                                          a.channels_last, a.mean.const_data_ptr<acc_t>(),
                                          a.scale.const_data_ptr<acc_t>(), a.shift.const_data_ptr<acc_t>(), a,
                                          negative_slope);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CPU, m) { m.impl("normalize_act", &normalize_act_cpu); }

}  // namespace myops
