#include "explain.h"

#include <array>

namespace myops {

namespace {
constexpr std::array<const char*, 5> kExplainedOps = {
    "conv_transpose2d", "conv_transpose2d_gelu_group_norm", "conv_transpose2d_gelu_group_stats",
    "conv_transpose2d_channel_stats", "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm"};
}  // namespace

void check_explained_op(const std::string& op) {
  std::string known;
  for (const char* name : kExplainedOps) {
    if (op == name) return;
    known += std::string(known.empty() ? "" : ", ") + name;
  }
  MYOPS_CHECK_ARG(false, "explain", "op", "must be one of ", known, ", got '", op, "'");
}

std::string explain_header(const std::string& op, const at::Tensor& input, const ConvTranspose2dParams& p) {
  const bool channels_last = input.dim() == 4 && input.is_contiguous(at::MemoryFormat::ChannelsLast) &&
                             !input.is_contiguous();
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
