#include <ATen/ATen.h>
#include <torch/library.h>

#include "shapes.h"

namespace myops {
namespace {

// ATen's GELU (its vectorised kernel; the fused ops apply their own GELU while the conv output is
// in cache).
at::Tensor gelu_cpu(const at::Tensor& self, c10::string_view approximate) {
  check_floating("gelu", "self", self);
  check_gelu_approximate("gelu", approximate);
  return at::gelu(self, approximate);
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CPU, m) { m.impl("gelu", &gelu_cpu); }

}  // namespace myops
