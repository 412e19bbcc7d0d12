#include "cuda/ops/conv.h"

#include <cstdio>

#include "common/timed_choice.h"

namespace myops {
namespace host {

cuda::ConvPlan conv_plan_for(const ConvTranspose2dParams& p, const at::Tensor& input, bool plain_output) {
  return cuda::conv_plan(p, kernel_dtype(input.scalar_type()), fp32_math(),
                         input.is_contiguous(at::MemoryFormat::ChannelsLast), plain_output);
}

KernelCall kernel_call(const ConvTranspose2dParams& p, const at::Tensor& input, bool plain_output) {
  const int64_t taps = p.kH * p.kW;
  const bool pointwise = p.H == 1 && p.W == 1 && p.pH == 0 && p.pW == 0 && p.opH == 0 && p.opW == 0 &&
                         (p.dH == 1 || p.kH == 1) && (p.dW == 1 || p.kW == 1) && taps > 1 && 16 % taps == 0;
  if (pointwise) {
    ConvTranspose2dParams v = p;
    v.C_out = p.C_out * taps;
    v.C_out_g = p.C_out_g * taps;
    v.kH = v.kW = v.sH = v.sW = v.dH = v.dW = 1;
    v.OH = v.OW = 1;
    const cuda::ConvPlan plan = conv_plan_for(v, input, plain_output);
    if (plan.engine == cuda::ConvEngine::Mma) return {v, plan, static_cast<int>(taps)};
  }
  return {p, conv_plan_for(p, input, plain_output), 1};
}

at::Tensor kernel_input(const char* op, const at::Tensor& input, const cuda::ConvPlan& plan, cuda::DType dtype,
                        cudaStream_t stream) {
  if (plan.engine != cuda::ConvEngine::Wgmma || !plan.wg.nhwc) return contiguous_nchw(op, input);
  const bool channels_last = input.is_contiguous(at::MemoryFormat::ChannelsLast);
  if (channels_last && dtype != cuda::DType::F32 && reinterpret_cast<uintptr_t>(input.const_data_ptr()) % 16 == 0)
    return input;
  return channels_last_copy(op, input, true, stream);
}

at::Tensor conv_forward(const char* op, const at::Tensor& input, const at::Tensor& weight,
                        const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p,
                        const KernelCall& k, cuda::ConvEpilogue epilogue) {
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto dtype = kernel_dtype(input.scalar_type());
  const at::Tensor x = kernel_input(op, input, k.plan, dtype, stream);
  const at::Tensor w = weight.contiguous();
  at::Tensor b = contiguous_or_undefined(bias);
  if (b.defined() && k.channel_fold > 1) b = b.repeat_interleave(k.channel_fold);  // per view channel
  epilogue.channel_fold = k.channel_fold;
  at::Tensor prepared = at::empty({k.plan.prepared_numel}, w.options());
  // the view's memory too
  const int64_t window_rows = epilogue.pool_windows ? cuda::conv_plan_window_rows(k.p, k.plan, dtype) : 0;
  at::Tensor out = window_rows > 0 ? at::empty({p.N, p.C_out, cuda::window_store_rows(p.OH, window_rows), p.OW / 2},
                                               input.options())
                                   : at::empty({p.N, p.C_out, p.OH, p.OW}, input.options());
  // x is a copy made for the kernel (mostly its NHWC staging): the preparation may start under the
  // kernel ahead of it, which it waits for before it ends (safe whatever that kernel is)
  const bool staged = x.const_data_ptr() != input.const_data_ptr();
  check_launch(cuda::conv_prepare_weight(w.const_data_ptr(), prepared.data_ptr(), dtype, k.p, k.plan, staged, stream),
               op);
  check_launch(cuda::conv_transpose2d_forward(x.const_data_ptr(), prepared.const_data_ptr(), ptr_or_null(b),
                                              out.data_ptr(), dtype, fp32_math(), k.p, k.plan, epilogue, stream),
               op);
  return out;
}

at::Tensor cudnn_conv(const char* op, const at::Tensor& input, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p,
                      at::MemoryFormat format) {
  const at::Tensor out = at::conv_transpose2d(input, weight, bias, {p.sH, p.sW}, {p.pH, p.pW}, {p.opH, p.opW},
                                              p.groups, {p.dH, p.dW});
  return format == at::MemoryFormat::Contiguous ? contiguous_nchw(op, out) : out.contiguous(format);
}

at::Tensor cudnn_conv_channels_last(const char* op, const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p) {
  const at::Tensor x = input.is_contiguous(at::MemoryFormat::ChannelsLast)
                           ? input
                           : channels_last_copy(op, input, false, at::cuda::getCurrentCUDAStream());
  return at::conv_transpose2d(x, weight.contiguous(at::MemoryFormat::ChannelsLast), bias, {p.sH, p.sW},
                              {p.pH, p.pW}, {p.opH, p.opW}, p.groups, {p.dH, p.dW})
      .contiguous(at::MemoryFormat::ChannelsLast);
}

at::Tensor conv_by(ConvSource source, const char* op, const at::Tensor& input, const at::Tensor& weight,
                   const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p, const KernelCall& k,
                   const cuda::ConvEpilogue& ep) {
  return source == ConvSource::Myops ? conv_forward(op, input, weight, bias, p, k, ep)
                                     : cudnn_conv(op, input, weight, bias, p);
}

namespace {
bool is_plain_conv(const char* op) { return std::string_view(op) == "conv_transpose2d"; }
}  // namespace

std::vector<ConvSource> conv_source_candidates(const char* op, const at::Tensor& input) {
  if (is_plain_conv(op) && output_memory_format(input) != at::MemoryFormat::ChannelsLast)
    return {ConvSource::Myops, ConvSource::Cudnn, ConvSource::CudnnChannelsLast};
  return {ConvSource::Myops, ConvSource::Cudnn};
}

std::optional<ConvSource> forced_conv_source(const char* op) {
  switch (option(Option::ConvSource)) {
    case kOurs: return ConvSource::Myops;
    case kCudnn: return ConvSource::Cudnn;
    case kCudnnChannelsLast: return is_plain_conv(op) ? ConvSource::CudnnChannelsLast : ConvSource::Cudnn;
    default: return std::nullopt;
  }
}

bool cudnn_may_be_timed() {
  const auto& ctx = at::globalContext();
  return ctx.userEnabledCuDNN() && !ctx.deterministicCuDNN() && !ctx.deterministicAlgorithms();
}

std::string conv_source_key(const char* op, const std::string& extra, const ConvTranspose2dParams& p,
                            const at::Tensor& input, bool has_bias) {
  std::string key = std::string(op) + "|" + extra + conv_params_key(p);
  key += input.is_contiguous(at::MemoryFormat::ChannelsLast) ? "|nhwc" : "|nchw";
  key += has_bias ? "|bias" : "";
  key += std::string("|") + c10::toString(input.scalar_type()) + (strict_fp32(input) ? "|strict" : "");
  return key + "|" + options_key();
}

std::string explain_conv(const char* op, const at::Tensor& input, const std::optional<at::Tensor>& bias,
                         const ConvTranspose2dParams& p, bool plain_output) {
  std::string source;
  const std::vector<ConvSource> candidates = conv_source_candidates(op, input);
  if (const auto forced = forced_conv_source(op)) {
    source = std::string(conv_source_name(*forced)) + " (forced: myops.backends conv_source)";
    if (*forced != ConvSource::Myops) source += "; our passes follow it";
  } else if (!cudnn_may_be_timed()) {
    source = "ours (cuDNN would be timed against ours, but cuDNN is disabled or determinism is asked for)";
  } else {
    source = "the fastest of";
    for (size_t i = 0; i < candidates.size(); ++i)
      source += std::string(i == 0 ? " " : i + 1 == candidates.size() ? " and " : ", ") +
                conv_source_name(candidates[i]);
    source += ", timed at the first call of this shape";
    if (is_plain_conv(op))
      if (const auto chosen = cached_conv_choice(conv_source_key(op, "", p, input, bias.has_value()))) {
        source += std::string(": ") + conv_source_name(chosen->source) + " (median ms:";
        for (const auto& [s, ms] : chosen->ms) {
          char time[32];
          std::snprintf(time, sizeof(time), " %.4g;", ms);
          source += std::string(" ") + conv_source_name(s) + time;
        }
        source.back() = ')';
      }
  }
  const KernelCall k = kernel_call(p, input, plain_output);
  std::string out = "conv source: " + source + "\n";
  if (k.channel_fold > 1)
    out += "view: a 1 x 1 input as one GEMM to C_out x kH x kW channels (" + std::to_string(k.p.C_out) + ")\n";
  return out + cuda::conv_plan_explain(k.p, kernel_dtype(input.scalar_type()), fp32_math(),
                                       input.is_contiguous(at::MemoryFormat::ChannelsLast), plain_output);
}

}  // namespace host
}  // namespace myops
