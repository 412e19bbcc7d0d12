// myops::conv_transpose1d: a one-row image through myops::conv_transpose2d ([N, C, L] as
// [N, C, 1, L]), so the same engines and kernels run it. Registered CompositeImplicitAutograd:
// its autograd, autocast and fake impl are conv_transpose2d's.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <vector>

#include "shapes.h"

namespace myops {
namespace {

constexpr const char* kOp = "conv_transpose1d";

// (1 or 0 for the row, the argument's one value for the width)
std::vector<c10::SymInt> with_row(const char* arg, c10::SymIntArrayRef v, int64_t row) {
  MYOPS_CHECK_ARG(v.size() == 1, kOp, arg, "must have 1 element, got ", v.size());
  return {c10::SymInt(row), v[0]};
}

at::Tensor conv_transpose1d(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
                            c10::SymIntArrayRef output_padding, c10::SymInt groups, c10::SymIntArrayRef dilation) {
  MYOPS_CHECK_ARG(input.dim() == 3, kOp, "input", "must be a 3-D tensor [N, C_in, L], got ", input.dim(), "-D");
  MYOPS_CHECK_ARG(weight.dim() == 3, kOp, "weight", "must be a 3-D tensor [C_in, C_out / groups, k], got ",
                  weight.dim(), "-D");
  static const auto conv2d = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("myops::conv_transpose2d", "")
                                 .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                                   c10::SymIntArrayRef, c10::SymIntArrayRef, c10::SymIntArrayRef,
                                                   c10::SymInt, c10::SymIntArrayRef)>();
  return conv2d
      .call(input.unsqueeze(2), weight.unsqueeze(2), bias, with_row("stride", stride, 1),
            with_row("padding", padding, 0), with_row("output_padding", output_padding, 0), groups,
            with_row("dilation", dilation, 1))
      .squeeze(2);
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CompositeImplicitAutograd, m) { m.impl("conv_transpose1d", &conv_transpose1d); }

}  // namespace myops
