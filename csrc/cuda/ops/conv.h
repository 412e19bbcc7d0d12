#pragma once
// Host code of the transposed convolution shared by every op that starts with one: the plan of a
// call (with the 1 x 1-input GEMM view), our conv run with an epilogue, cuDNN's conv in either
// layout, and the ours-vs-cuDNN choice (conv/cudnn_choice.h) keyed per op.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/options.h"
#include "cuda/conv/conv_transpose2d.cuh"
#include "cuda/conv/cudnn_choice.h"
#include "cuda/ops/tensors.h"

namespace myops {
namespace host {

// plain_output: the call stores the conv's output and nothing else (cuda::conv_plan).
cuda::ConvPlan conv_plan_for(const ConvTranspose2dParams& p, const at::Tensor& input, bool plain_output);

// How the kernels run a call: its parameters (or the pointwise view's) and their plan.
struct KernelCall {
  ConvTranspose2dParams p;
  cuda::ConvPlan plan;
  int channel_fold = 1;  // output channels per channel of the call (ConvEpilogue::channel_fold)
};

// A 1 x 1 input through an unpadded, undilated kernel (a latent vector's first up-sampling layer)
// is one GEMM: output [N, C_out, kH, kW] is the memory of a 1 x 1 transposed convolution to
// C_out * kH * kW channels, weight [C_in, C_out / groups, kH, kW] read as [C_in, C_out / groups *
// kH * kW, 1, 1]. The mma.sync kernel runs that view where kH * kW divides its 16-channel blocks
// (its epilogue folds a channel's kH * kW positions into its statistics): the phase decomposition
// gives every output pixel kH * kW taps there, all but one on the input's zero border (e.g. the
// DCGAN generator's first layer, 100 -> 512 k4 on a 1 x 1 input).
KernelCall kernel_call(const ConvTranspose2dParams& p, const at::Tensor& input, bool plain_output = false);

// The input as the plan's kernel reads it: contiguous NCHW, or (WgmmaTiling::nhwc) contiguous
// NHWC, 16-byte aligned, float32 rounded to TF32: a 16-bit channels-last input as it is, else a
// staged copy.
at::Tensor kernel_input(const char* op, const at::Tensor& input, const cuda::ConvPlan& plan, cuda::DType dtype,
                        cudaStream_t stream);

// The transposed convolution of call p, run as k says, into a new contiguous NCHW tensor, with
// the given epilogue (window-stored where it stores 2 x 2 windows: ConvEpilogue::pool_windows).
at::Tensor conv_forward(const char* op, const at::Tensor& input, const at::Tensor& weight,
                        const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p,
                        const KernelCall& k, cuda::ConvEpilogue epilogue);

// cuDNN's transposed convolution of call p, contiguous in `format` (by default NCHW, the layout
// our passes read; cuDNN answers a channels-last input in channels-last).
at::Tensor cudnn_conv(const char* op, const at::Tensor& input, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p,
                      at::MemoryFormat format = at::MemoryFormat::Contiguous);

// cuDNN's transposed convolution of call p, channels-last: its fastest layout (an NCHW call
// transposes inside); an NCHW input is transposed by our kernel.
at::Tensor cudnn_conv_channels_last(const char* op, const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p);

// The conv of call p by `source`: ours, run as k says with epilogue ep, or cuDNN's (no epilogue:
// callers ask for none then), contiguous NCHW either way.
at::Tensor conv_by(ConvSource source, const char* op, const at::Tensor& input, const at::Tensor& weight,
                   const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p, const KernelCall& k,
                   const cuda::ConvEpilogue& ep);

// The sources timed for a call of op `op` (ours first), so that a call never loses to the stock
// conv that torch.compile would run in its place: cuDNN in the input's layout always (a fused op
// then runs its epilogue as passes of its own, as Inductor would), and for the plain conv of an
// NCHW input also cuDNN's channels-last kernels, both layout copies counted.
std::vector<ConvSource> conv_source_candidates(const char* op, const at::Tensor& input);

// Whether PyTorch's settings allow a timed choice: cuDNN enabled and no determinism asked for (a
// timed choice may differ, and so give other bits, from one process to the next).
bool cudnn_may_be_timed();

// The source myops.backends' conv_source forces, if any (a fused op takes cudnn_channels_last as
// cudnn: its passes read either layout of cuDNN's output).
std::optional<ConvSource> forced_conv_source(const char* op);

// Whose conv runs a call (cudnn_choice.h): the fastest of conv_source_candidates for the call's
// shape (timed at its first call, cached per shape and options), ours where timing is not allowed;
// myops.backends' conv_source forces one. run(source) runs the whole op.
// extra(): the op's own arguments that change its cost, as a string (built only for a timed
// choice: most calls return before the key, and the string is host time before the first kernel).
// The timed choice's key of a call: op, extra (the op's own arguments), shapes, layout, bias,
// dtype, math, options.
std::string conv_source_key(const char* op, const std::string& extra, const ConvTranspose2dParams& p,
                            const at::Tensor& input, bool has_bias);

template <typename Extra, typename Run>
ConvSource conv_source(const char* op, const ConvTranspose2dParams& p, const at::Tensor& input,
                       const std::optional<at::Tensor>& bias, const Extra& extra, const Run& run) {
  if (const auto forced = forced_conv_source(op)) return *forced;
  return timed_conv_source(conv_source_key(op, extra(), p, input, bias.has_value()),
                           at::cuda::getCurrentCUDAStream(), cudnn_may_be_timed(), conv_source_candidates(op, input),
                           [&](ConvSource s) { run(s); });
}

// What runs op `op`'s conv for this call and why (myops.explain): the source rule and, for ours,
// the engine with one line per engine passed over. plain_output as the op passes it to kernel_call.
std::string explain_conv(const char* op, const at::Tensor& input, const std::optional<at::Tensor>& bias,
                         const ConvTranspose2dParams& p, bool plain_output);

// conv_source's extra() for ops with no arguments beyond the conv's
const auto no_extra = [] { return std::string(); };

// conv_source's extra() for the GELU + GroupNorm ops
inline auto gelu_group_norm_extra(c10::string_view approximate, int64_t num_groups) {
  return [=] { return std::string(approximate) + std::to_string(num_groups); };
}

}  // namespace host
}  // namespace myops
