#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "cpu/elementwise.h"
#include "shapes.h"

namespace myops {
namespace {

at::Tensor gelu_cpu(const at::Tensor& self, c10::string_view approximate) {
  check_floating("gelu", "self", self);
  const GeluApprox approx = check_gelu_approximate("gelu", approximate);
  // The output has empty_like's layout (the input's strides when the input is dense); the input is
  // brought to that same layout if needed, so both are walked as flat blocks of memory.
  at::Tensor out = at::empty_like(self);
  const at::Tensor x = self.strides() == out.strides() ? self : at::empty_like(out).copy_(self);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "myops::gelu (CPU)", [&] {
    const scalar_t* in = x.const_data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, x.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
      gelu_span(in + begin, o + begin, end - begin, approx);
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CPU, m) { m.impl("gelu", &gelu_cpu); }

}  // namespace myops
