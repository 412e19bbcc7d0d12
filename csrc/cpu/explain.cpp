// myops::_explain on the CPU: one kernel per op, no choice to explain.
#include <torch/library.h>

#include "explain.h"

namespace myops {
namespace {

std::string explain_cpu(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                        c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
                        c10::SymInt groups, c10::SymIntArrayRef dilation, c10::string_view op) {
  const std::string name(op);
  const ConvTranspose2dParams p =
      check_explain(name, input, weight, bias, stride, padding, output_padding, std::move(groups), dilation);
  return explain_header(name, input, p) +
         "engine: the CPU kernels (csrc/cpu: one at::mm per (image, group) and a col2im that visits only "
         "the taps that reach each position, then the op's epilogue passes)\n";
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CPU, m) { m.impl("_explain", &explain_cpu); }

}  // namespace myops
