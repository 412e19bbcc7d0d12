// myops::_explain on the CPU: whose conv runs and, for an NCHW input, in which layout.
#include <torch/library.h>

#include "common/options.h"
#include "cpu/layout_choice.h"
#include "explain.h"

namespace myops {
namespace {

// conv_transpose2d_in_layout's callers (the others compute NCHW: their passes read it)
bool follows_layout(const std::string& op) { return op == "conv_transpose2d" || op == "conv_transpose2d_act_stats"; }

std::string layout_line(const std::string& op, const at::Tensor& input, const std::optional<at::Tensor>& bias,
                        const ConvTranspose2dParams& p) {
  const bool cl_input = output_memory_format(input) == at::MemoryFormat::ChannelsLast;
  if (!follows_layout(op))
    return cl_input ? "layout: NCHW (the op's passes read it), the output copied channels-last\n" : "layout: NCHW\n";
  if (cl_input) return "layout: channels-last, as the input\n";
  return explain_cpu_conv_layout(p, c10::toString(input.scalar_type()), bias.has_value());
}

std::string explain_cpu(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                        c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
                        c10::SymInt groups, c10::SymIntArrayRef dilation, c10::string_view op) {
  const std::string name(op);
  const ConvTranspose2dParams p =
      check_explain(name, input, weight, bias, stride, padding, output_padding, std::move(groups), dilation);
  if (option(Option::CpuReference) != 0)
    return explain_header(name, input, p) +
           "engine: the CPU reference (option cpu_reference: one at::mm per (image, group) and a col2im)\n";
  return explain_header(name, input, p) + "engine: ATen's transposed convolution (oneDNN)" +
         (name == "conv_transpose2d" ? "\n" : ", then the op's passes\n") + layout_line(name, input, bias, p);
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CPU, m) { m.impl("_explain", &explain_cpu); }

}  // namespace myops
