#include "explain.h"

#include <array>

namespace myops {

namespace {
constexpr std::array<const char*, 6> kExplainedOps = {
    "conv_transpose2d", "conv_transpose2d_gelu_group_norm", "conv_transpose2d_gelu_group_stats",
    "conv_transpose2d_channel_stats", "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm",
    "conv_transpose2d_act_stats"};
}  // namespace

ConvTranspose2dParams check_explain(const std::string& op, const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                    c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
                                    c10::SymInt groups, c10::SymIntArrayRef dilation) {
  bool known = false;
  std::string names;
  for (const char* name : kExplainedOps) {
    known = known || op == name;
    names += std::string(names.empty() ? "" : ", ") + name;
  }
  MYOPS_CHECK_ARG(known, "explain", "op", "must be one of ", names, ", got '", op, "'");
  return check_conv_transpose2d("explain", input, weight, bias, stride, padding, output_padding, std::move(groups),
                                dilation);
}

std::string explain_header(const std::string& op, const at::Tensor& input, const ConvTranspose2dParams& p) {
  const bool channels_last = output_memory_format(input) == at::MemoryFormat::ChannelsLast;
  std::string math;
  if (input.is_cuda() && input.scalar_type() == at::kFloat)
    math = at::globalContext().allowTF32CuDNN() ? " (TF32 allowed)" : " (strict: TF32 off)";
  const at::ScalarType t = input.scalar_type();
  const char* dtype = t == at::kFloat ? "float32" : t == at::kDouble ? "float64" : t == at::kHalf ? "float16"
                    : t == at::kBFloat16 ? "bfloat16" : c10::toString(t);
  auto dims = [](std::initializer_list<int64_t> v) {
    std::string s = "[";
    for (const int64_t d : v) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
    return s + "]";
  };
  return "myops." + op + " on " + input.device().str() + ", " + dtype + math + ", " +
         (channels_last ? "channels-last" : "NCHW") + " input " + dims({p.N, p.C_in, p.H, p.W}) + " -> " +
         dims({p.N, p.C_out, p.OH, p.OW}) + "\n";
}

}  // namespace myops
