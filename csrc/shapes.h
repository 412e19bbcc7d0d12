#pragma once
// Output sizes and argument checks for every myops op: the one place where they are written, shared
// by the CPU and CUDA bindings. Every failed check raises a c10::Error whose message starts with
// "myops::<op>: argument '<name>'" so that a user sees which op and which argument were wrong.
#include <ATen/core/Tensor.h>
#include <c10/core/SymIntArrayRef.h>
#include <c10/util/string_view.h>

#include <optional>
#include <string>
#include <utility>

#include "common/conv_params.h"
#include "common/gelu_math.h"
#include "common/norm_act.h"

namespace myops {
namespace detail {

// Messages are assembled here rather than by c10::str: c10::str formats numbers with an
// std::ostream instantiated inside this extension, which crashed (SIGSEGV in
// basic_ostream::_M_insert<long>) on the torch 2.11 + GCC 13 GPU machine. std::to_string and the
// string-returning c10 helpers do not go through an ostream here.
inline void append(std::string& s, const char* v) { s += v; }
inline void append(std::string& s, const std::string& v) { s += v; }
inline void append(std::string& s, int64_t v) { s += std::to_string(v); }
inline void append(std::string& s, int v) { s += std::to_string(v); }
inline void append(std::string& s, size_t v) { s += std::to_string(v); }
inline void append(std::string& s, at::IntArrayRef v) {
  s += "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  s += "]";
}
inline void append(std::string& s, at::ScalarType t) { s += c10::toString(t); }
inline void append(std::string& s, const c10::Device& d) { s += d.str(); }

template <typename... Parts>
[[noreturn]] void fail_arg(const char* op, const char* arg, const Parts&... parts) {
  std::string msg = std::string("myops::") + op + ": argument '" + arg + "' ";
  (append(msg, parts), ...);
  TORCH_CHECK(false, msg);
  __builtin_unreachable();
}

}  // namespace detail
}  // namespace myops

// Raises "myops::<op>: argument '<arg>' <message parts...>" unless cond holds.
#define MYOPS_CHECK_ARG(cond, op, arg, ...)                                  \
  do {                                                                      \
    if (C10_UNLIKELY(!(cond))) ::myops::detail::fail_arg(op, arg, __VA_ARGS__); \
  } while (0)

namespace myops {

// Kernels take the schema's SymInt types (the unboxing PyTorch defines for SymInt[] / SymInt);
// real kernels only ever see concrete values, converted here.
ConvTranspose2dParams check_conv_transpose2d(const char* op, const at::Tensor& input,
                                             const at::Tensor& weight,
                                             const std::optional<at::Tensor>& bias,
                                             c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
                                             c10::SymIntArrayRef output_padding, c10::SymInt groups,
                                             c10::SymIntArrayRef dilation);

GeluApprox check_gelu_approximate(const char* op, c10::string_view approximate);

// Checks input [N, C, *] against num_groups and the optional affine parameters (names given so
// that the fused op can report 'gn_weight' / 'gn_bias').
void check_group_norm(const char* op, const at::Tensor& input, int64_t num_groups,
                      const std::optional<at::Tensor>& weight,
                      const std::optional<at::Tensor>& bias, const char* weight_name = "weight",
                      const char* bias_name = "bias");

// Same as check_group_norm but for a channel count that is known before the tensor exists
// (the fused op normalises the conv output).
void check_group_norm_channels(const char* op, const at::Tensor& reference, int64_t channels,
                               int64_t num_groups, const std::optional<at::Tensor>& weight,
                               const std::optional<at::Tensor>& bias, const char* weight_name,
                               const char* bias_name);

// All checks of the conv_transpose2d -> gelu -> group_norm ops (the fused op and the one stopping at
// the statistics, whose gn_weight / gn_bias are absent), shared by their CPU and CUDA kernels.
struct ConvGeluGroupNorm {
  ConvTranspose2dParams conv;
  GeluApprox approx;
};
ConvGeluGroupNorm check_conv_transpose2d_gelu_group_norm(
    const char* op, const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation, c10::string_view approximate, int64_t num_groups,
    const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias);

// All checks of conv_transpose2d_act_stats, shared by its CPU and CUDA kernels: the conv's, the
// activation's name (F.<name>), a finite negative_slope, approximate as F.gelu's, the statistics'
// kind ("none", "channel", "group") and, for "group", num_groups dividing the output channels.
// The family's activation arguments (F.<activation>; negative_slope finite, approximate GELU's).
std::pair<Activation, GeluApprox> check_activation(const char* op, c10::string_view activation,
                                                   double negative_slope, c10::string_view approximate);

// myops::normalize_act: input [N, C, *] floating; mean / scale / shift [N, C] in the compute dtype
// (float64 for float64 input, else float32) on input's device. Returns the call as both kernels
// take it: x contiguous, or channels-last where input is (output_memory_format), viewed as
// [N, C, HW] (channels-last: [N, HW, C]); the parameters contiguous.
struct NormalizeAct {
  Activation act;
  GeluApprox approx;
  bool channels_last;
  at::Tensor x, mean, scale, shift;
  int64_t N, C, HW;
};
NormalizeAct check_normalize_act(const char* op, const at::Tensor& input, const at::Tensor& mean,
                                 const at::Tensor& scale, const at::Tensor& shift, c10::string_view activation,
                                 double negative_slope, c10::string_view approximate);

struct ConvActStats {
  ConvTranspose2dParams conv;
  Activation act;
  GeluApprox approx;
  NormStats stats;
};
ConvActStats check_conv_transpose2d_act_stats(
    const char* op, const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation, c10::string_view activation, double negative_slope,
    c10::string_view approximate, c10::string_view stats, int64_t num_groups);

// max_pool2d over an [N, C, H, W] tensor (ceil_mode false): kernel_size, stride, padding,
// dilation are pairs, padding at most half the kernel (as PyTorch requires).
Pool2dParams check_max_pool2d(const char* op, int64_t H, int64_t W, at::IntArrayRef kernel_size,
                              at::IntArrayRef stride, at::IntArrayRef padding,
                              at::IntArrayRef dilation);

// Per-channel statistics given to a batch-norm op: mean / var 1-D floating tensors of `channels`
// elements on the input's device (any floating dtype: batch statistics come as float32, running
// buffers in the module's dtype); the affine weight / bias like the input.
void check_batch_norm_stats(const char* op, const at::Tensor& input, int64_t channels,
                            const at::Tensor& mean, const at::Tensor& var,
                            const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias);

// All checks of batch_norm_update_running_stats (shared by its CPU and CUDA kernels):
// running_mean / running_var 1-D floating buffers of one dtype and length, mean / var (one dtype)
// of that length on the same device, num_batches_tracked (optional) one int64 there too.
void check_batch_norm_update_running_stats(const char* op, const at::Tensor& running_mean,
                                           const at::Tensor& running_var, const at::Tensor& mean,
                                           const at::Tensor& var,
                                           const std::optional<at::Tensor>& num_batches_tracked);

// All checks of batch_norm_tanh_max_pool2d_group_norm (shared by its CPU and CUDA kernels); returns
// the pooling geometry.
Pool2dParams check_batch_norm_tanh_max_pool2d_group_norm(
    const char* op, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& var,
    const std::optional<at::Tensor>& bn_weight, const std::optional<at::Tensor>& bn_bias,
    at::IntArrayRef kernel_size, at::IntArrayRef pool_stride, at::IntArrayRef pool_padding,
    at::IntArrayRef pool_dilation, int64_t num_groups, const std::optional<at::Tensor>& gn_weight,
    const std::optional<at::Tensor>& gn_bias);

// All checks of conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm (the whole BatchNorm chain in
// one op), shared by its CPU and CUDA kernels: the conv's, then the tail's on the conv output's
// shape. In training the batch statistics normalise (mean / var must be None, and the output needs
// more than one value per channel); otherwise mean / var are required.
struct ConvBatchNormChain {
  ConvTranspose2dParams conv;
  Pool2dParams pool;
};
ConvBatchNormChain check_conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
    const char* op, const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation, const std::optional<at::Tensor>& mean,
    const std::optional<at::Tensor>& var, const std::optional<at::Tensor>& bn_weight,
    const std::optional<at::Tensor>& bn_bias, bool training, at::IntArrayRef kernel_size,
    at::IntArrayRef pool_stride, at::IntArrayRef pool_padding, at::IntArrayRef pool_dilation,
    int64_t num_groups, const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias);

// float64 computes in float64; float32, float16 and bfloat16 compute (and accumulate) in float32:
// also the dtype of the batch / group statistics the ops return or keep per tile.
inline at::ScalarType compute_dtype(at::ScalarType dt) { return dt == at::kDouble ? at::kDouble : at::kFloat; }

// Floating dtypes the kernels implement.
void check_floating(const char* op, const char* arg, const at::Tensor& t);

// Layout of every 4-D output: channels_last when the input is channels_last (and not also plain
// contiguous), else contiguous. The Python fake impls apply the same rule (myops/_layout.py).
at::MemoryFormat output_memory_format(const at::Tensor& input);

}  // namespace myops
