// CUDA dispatch-key registrations: argument checks (csrc/shapes.h), device guard, allocation,
// current stream, dtype mapping, launch-error checks. The kernels live in the .cu files.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>
#include <tuple>
#include <vector>

#include "cuda/batch_norm_chain.cuh"
#include "cuda/channels_last_group_norm.cuh"
#include "cuda/channels_last_input.cuh"
#include "cuda/conv_source.h"
#include "cuda/conv_transpose2d.cuh"
#include "cuda/group_norm_follow.cuh"
#include "cuda/norm_act.cuh"
#include "cuda/running_stats.cuh"
#include "shapes.h"

namespace myops {
namespace {

cuda::DType kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return cuda::DType::F32;
    case at::kDouble: return cuda::DType::F64;
    case at::kHalf: return cuda::DType::F16;
    case at::kBFloat16: return cuda::DType::BF16;
    default: TORCH_CHECK(false, std::string("myops: unsupported dtype ") + c10::toString(t));
  }
}

void check_launch(cudaError_t err, const char* op) {
  TORCH_CHECK(err == cudaSuccess, std::string("myops::") + op + ": CUDA kernel launch failed: " + cudaGetErrorString(err));
}

// For the launchers that may refuse a shape their grid cannot cover: false where the launcher
// refused it before any launch (cudaErrorInvalidConfiguration; the caller then falls back), true
// where the kernel was launched; any other error throws.
bool launched_unless_refused(cudaError_t err, const char* op) {
  if (err == cudaErrorInvalidConfiguration) return false;
  check_launch(err, op);
  return true;
}

const void* ptr_or_null(const at::Tensor& t) { return t.defined() ? t.const_data_ptr() : nullptr; }

at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->contiguous() : at::Tensor();
}

// An [N, C, *] tensor as [N, C, HW] (the normalisation kernels' view).
std::tuple<int64_t, int64_t, int64_t> n_c_hw(const at::Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1);
  return {N, C, N * C == 0 ? 0 : x.numel() / (N * C)};
}

cuda::Fp32Math fp32_math() {
  // PyTorch's flag for convolutions: TF32 unless torch.backends.cudnn.allow_tf32 is off
  return at::globalContext().allowTF32CuDNN() ? cuda::Fp32Math::TF32 : cuda::Fp32Math::Exact;
}

// Strict float32: a float32 call with TF32 off (exact FFMA products).
bool strict_fp32(const at::Tensor& input) {
  return input.scalar_type() == at::kFloat && fp32_math() == cuda::Fp32Math::Exact;
}

// plain_output: the call stores the conv's output and nothing else (cuda::conv_plan).
cuda::ConvPlan conv_plan_for(const ConvTranspose2dParams& p, const at::Tensor& input, bool plain_output) {
  return cuda::conv_plan(p, kernel_dtype(input.scalar_type()), fp32_math(),
                         input.is_contiguous(at::MemoryFormat::ChannelsLast), plain_output);
}

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
// gives every output pixel kH * kW taps there, all but one on the input's zero border (H100, the
// DCGAN demo's 100 -> 512 k4 layer, fused op under ncu: its conv kernel 110 -> 54 us).
KernelCall kernel_call(const ConvTranspose2dParams& p, const at::Tensor& input, bool plain_output = false) {
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

// A contiguous channels-last copy of input [N, C, H, W] by our staging kernel (PyTorch's copy ran
// at ~1 TB/s on the H100), float32 rounded to TF32 where round_tf32; nullopt (nothing launched)
// where the kernel's grid cannot cover the shape (over ~2 M channels).
std::optional<at::Tensor> try_channels_last_copy(const char* op, const at::Tensor& input, bool round_tf32,
                                                 cudaStream_t stream) {
  const bool channels_last = input.is_contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor src = channels_last ? input : input.contiguous();
  at::Tensor staged = at::empty_like(src, src.options(), at::MemoryFormat::ChannelsLast);
  const auto [N, C, HW] = n_c_hw(src);
  const cudaError_t err = cuda::stage_channels_last_input(src.const_data_ptr(), staged.data_ptr(),
                                                          kernel_dtype(src.scalar_type()), N, C, HW, channels_last,
                                                          round_tf32, stream);
  if (!launched_unless_refused(err, op)) return std::nullopt;
  return staged;
}

at::Tensor channels_last_copy(const char* op, const at::Tensor& input, bool round_tf32, cudaStream_t stream) {
  std::optional<at::Tensor> staged = try_channels_last_copy(op, input, round_tf32, stream);
  MYOPS_CHECK_ARG(staged.has_value(), op, "input", "of shape ", input.sizes(),
                  " has too many channels for the channels-last staging kernel");
  return *staged;
}

// t as a contiguous NCHW tensor: a channels-last one transposed by our kernel, not PyTorch's
// contiguous() (which moved ~0.7 TB/s on the H100); PyTorch's copy only where our grid refuses
// the shape (over ~2 M pixels per image).
at::Tensor contiguous_nchw(const char* op, const at::Tensor& t) {
  if (t.is_contiguous() || t.dim() != 4 || !t.is_contiguous(at::MemoryFormat::ChannelsLast)) return t.contiguous();
  at::Tensor out = at::empty(t.sizes(), t.options());
  const auto [N, C, HW] = n_c_hw(t);
  const cudaError_t err = cuda::unstage_channels_last(t.const_data_ptr(), out.data_ptr(), kernel_dtype(t.scalar_type()),
                                                      N, C, HW, at::cuda::getCurrentCUDAStream());
  return launched_unless_refused(err, op) ? out : t.contiguous();
}

// An op's result `out` (contiguous NCHW, as our kernels write it) in the input's memory format
// (output_memory_format): a channels-last one by the staging kernel, not PyTorch's contiguous()
// (H100, the L2_11 chain with a channels-last input: 0.63 -> 0.60 ms a call in bfloat16, 1.10 ->
// 1.06 in float32).
at::Tensor in_output_format(const char* op, const at::Tensor& out, const at::Tensor& input) {
  const at::MemoryFormat format = output_memory_format(input);
  if (format == at::MemoryFormat::ChannelsLast && out.dim() == 4 && out.is_contiguous() &&
      !out.is_contiguous(format)) {
    if (std::optional<at::Tensor> copy = try_channels_last_copy(op, out, false, at::cuda::getCurrentCUDAStream()))
      return *copy;
  }
  return out.contiguous(format);
}

// The input as the plan's kernel reads it: contiguous NCHW, or (WgmmaTiling::nhwc) contiguous
// NHWC, 16-byte aligned, float32 rounded to TF32: a 16-bit channels-last input as it is, else a
// staged copy.
at::Tensor kernel_input(const char* op, const at::Tensor& input, const cuda::ConvPlan& plan, cuda::DType dtype,
                        cudaStream_t stream) {
  if (plan.engine != cuda::ConvEngine::Wgmma || !plan.wg.nhwc) return contiguous_nchw(op, input);
  const bool channels_last = input.is_contiguous(at::MemoryFormat::ChannelsLast);
  if (channels_last && dtype != cuda::DType::F32 && reinterpret_cast<uintptr_t>(input.const_data_ptr()) % 16 == 0)
    return input;
  return channels_last_copy(op, input, true, stream);
}

// The transposed convolution of call p, run as k says, into a new contiguous NCHW tensor, with
// the given epilogue (window-stored where it stores 2 x 2 windows: ConvEpilogue::pool_windows).
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

// cuDNN's transposed convolution of call p, contiguous in `format` (by default NCHW, the layout
// our passes read; cuDNN answers a channels-last input in channels-last).
at::Tensor cudnn_conv(const char* op, const at::Tensor& input, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p,
                      at::MemoryFormat format = at::MemoryFormat::Contiguous) {
  const at::Tensor out = at::conv_transpose2d(input, weight, bias, {p.sH, p.sW}, {p.pH, p.pW}, {p.opH, p.opW},
                                              p.groups, {p.dH, p.dW});
  return format == at::MemoryFormat::Contiguous ? contiguous_nchw(op, out) : out.contiguous(format);
}

// cuDNN's transposed convolution of call p without bias, channels-last: its fastest layout (H100:
// the VAE demo's k4 s2 layer 0.18 ms against 0.29 for an NCHW call, which transposes inside);
// an NCHW input is transposed by our kernel.
at::Tensor cudnn_conv_channels_last(const char* op, const at::Tensor& input, const at::Tensor& weight,
                                    const ConvTranspose2dParams& p) {
  const at::Tensor x = input.is_contiguous(at::MemoryFormat::ChannelsLast)
                           ? input
                           : channels_last_copy(op, input, false, at::cuda::getCurrentCUDAStream());
  return at::conv_transpose2d(x, weight.contiguous(at::MemoryFormat::ChannelsLast), std::nullopt, {p.sH, p.sW},
                              {p.pH, p.pW}, {p.opH, p.opW}, p.groups, {p.dH, p.dW})
      .contiguous(at::MemoryFormat::ChannelsLast);
}

// The conv of call p by `source`: ours, run as k says with epilogue ep, or cuDNN's (no epilogue:
// callers ask for none then), contiguous NCHW either way.
at::Tensor conv_by(ConvSource source, const char* op, const at::Tensor& input, const at::Tensor& weight,
                   const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p, const KernelCall& k,
                   const cuda::ConvEpilogue& ep) {
  return source == ConvSource::Cudnn ? cudnn_conv(op, input, weight, bias, p)
                                     : conv_forward(op, input, weight, bias, p, k, ep);
}

// Whose conv runs a call (conv_source.h): ours, except for float32 with TF32 off and (cudnn_pays:
// the op's cuDNN form is the channels-last one) every call, where the faster of ours and cuDNN's
// for the call's shape unless cuDNN is off or determinism is asked for; run(source) runs the whole
// op. extra(): the op's own arguments that change its cost, as a string (built only for a timed
// choice: most calls return before the key, and the string is host time before the first kernel).
template <typename Extra, typename Run>
ConvSource conv_source(const char* op, const ConvTranspose2dParams& p, const at::Tensor& input,
                       const std::optional<at::Tensor>& bias, const Extra& extra, bool cudnn_pays, const Run& run) {
  const bool strict = strict_fp32(input);
  if (!strict && !cudnn_pays) return ConvSource::Myops;
  std::string key = std::string(op) + "|" + extra();
  for (const int64_t v : {p.N, p.C_in, p.H, p.W, p.C_out, p.kH, p.kW, p.groups, p.sH, p.sW, p.pH, p.pW, p.opH,
                          p.opW, p.dH, p.dW})
    key += "," + std::to_string(v);
  key += input.is_contiguous(at::MemoryFormat::ChannelsLast) ? "|nhwc" : "|nchw";
  key += bias.has_value() ? "|bias" : "";
  key += std::string("|") + c10::toString(input.scalar_type()) + (strict ? "|strict" : "");
  const auto& ctx = at::globalContext();
  const bool may_time = ctx.userEnabledCuDNN() && !ctx.deterministicCuDNN() && !ctx.deterministicAlgorithms();
  return timed_conv_source(key, at::cuda::getCurrentCUDAStream(), may_time, [&](ConvSource s) { run(s); });
}

// conv_source's extra() for ops with no arguments beyond the conv's
const auto no_extra = [] { return std::string(); };

// conv_source's extra() for the GELU + GroupNorm ops
auto gelu_group_norm_extra(c10::string_view approximate, int64_t num_groups) {
  return [=] { return std::string(approximate) + std::to_string(num_groups); };
}

at::Tensor conv_transpose2d_cuda(const at::Tensor& input, const at::Tensor& weight,
                                 const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                 c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
                                 c10::SymInt groups, c10::SymIntArrayRef dilation) {
  constexpr const char* kOp = "conv_transpose2d";
  const auto p = check_conv_transpose2d(kOp, input, weight, bias, stride, padding, output_padding, groups, dilation);
  const c10::cuda::CUDAGuard guard(input.device());
  // A channels-last input times cuDNN too (conv_source), which then returns its channels-last
  // output as it is: its channels-last kernels beat ours plus the output's transpose on such
  // inputs (H100, L1_57 channels-last: ours 2.30 ms in bfloat16 and 6.5 in float32, eager 1.34 and
  // 2.97; the op now 1.34 / 2.97).
  const at::MemoryFormat format = output_memory_format(input);
  auto run = [&](ConvSource source) {
    return source == ConvSource::Cudnn
               ? cudnn_conv(kOp, input, weight, bias, p, format)
               : in_output_format(kOp, conv_forward(kOp, input, weight, bias, p, kernel_call(p, input, true), {}),
                                  input);
  };
  return run(conv_source(kOp, p, input, bias, no_extra, format == at::MemoryFormat::ChannelsLast, run));
}

at::Tensor gelu_cuda(const at::Tensor& self, c10::string_view approximate) {
  check_floating("gelu", "self", self);
  const GeluApprox approx = check_gelu_approximate("gelu", approximate);
  const c10::cuda::CUDAGuard guard(self.device());
  at::Tensor out = at::empty_like(self);
  const at::Tensor x = self.strides() == out.strides() ? self : at::empty_like(out).copy_(self);
  check_launch(cuda::gelu_forward(x.const_data_ptr(), out.data_ptr(), x.numel(),
                                  kernel_dtype(x.scalar_type()), approx, at::cuda::getCurrentCUDAStream()),
               "gelu");
  return out;
}

// Normalises contiguous x [N, C, *] (read through pre) into y with freshly computed or given
// statistics.
void group_norm_apply(const char* op, const at::Tensor& x, at::Tensor& y, int64_t num_groups,
                      const at::Tensor& mean, const at::Tensor& rstd,
                      const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                      cuda::PreGelu pre = {}) {
  const auto [N, C, HW] = n_c_hw(x);
  const at::Tensor gamma = contiguous_or_undefined(weight), beta = contiguous_or_undefined(bias);
  check_launch(cuda::group_norm_apply(x.const_data_ptr(), y.data_ptr(), kernel_dtype(x.scalar_type()), N, C, HW,
                                      num_groups, mean.const_data_ptr<double>(), rstd.const_data_ptr<double>(),
                                      ptr_or_null(gamma), ptr_or_null(beta), at::cuda::getCurrentCUDAStream(), pre),
               op);
}

// GroupNorm's mean / rstd (float64, [N * num_groups]) of contiguous x [N, C, *]; mean32 / rstd32
// the same in float32 where a caller asked for them (else undefined).
struct GroupStats {
  at::Tensor mean, rstd, mean32, rstd32;
  GroupStats(const at::Tensor& like, int64_t count)  // uninitialised, on like's device
      : mean(at::empty({count}, like.options().dtype(at::kDouble))), rstd(at::empty_like(mean)) {}
  GroupStats() = default;
};
GroupStats group_stats(const char* op, const at::Tensor& x, int64_t num_groups, double eps) {
  const auto [N, C, HW] = n_c_hw(x);
  GroupStats s(x, N * num_groups);
  check_launch(cuda::group_norm_stats(x.const_data_ptr(), kernel_dtype(x.scalar_type()), N, C, HW, num_groups, eps,
                                      s.mean.data_ptr<double>(), s.rstd.data_ptr<double>(),
                                      at::cuda::getCurrentCUDAStream()),
               op);
  return s;
}

// (count, mean, M2) per (n, c) plane of contiguous x [N, C, *] read through pre: [N, C, 1, 3] in
// the statistics dtype, the layout of the conv epilogue's tile partials (one tile per plane).
at::Tensor plane_moments(const char* op, const at::Tensor& x, cuda::PreGelu pre = {}) {
  const auto [N, C, HW] = n_c_hw(x);
  at::Tensor moments = at::empty({N, C, 1, 3}, x.options().dtype(compute_dtype(x.scalar_type())));
  check_launch(cuda::plane_moments(x.const_data_ptr(), kernel_dtype(x.scalar_type()), N, C, HW, moments.data_ptr(),
                                   at::cuda::getCurrentCUDAStream(), pre),
               op);
  return moments;
}

// GroupNorm's mean / rstd from partials [N, C, tiles, 3] (the conv epilogue's per tile, or one
// per plane), reduced per (n, group) in a fixed order; float32_copy: also as float32.
GroupStats group_stats_from_partials(const char* op, const at::Tensor& partials, int64_t num_groups, double eps,
                                     bool float32_copy = false) {
  const int64_t N = partials.size(0);
  GroupStats s(partials, N * num_groups);
  if (float32_copy) {
    s.mean32 = at::empty({N * num_groups}, partials.options().dtype(at::kFloat));
    s.rstd32 = at::empty_like(s.mean32);
  }
  check_launch(cuda::group_norm_stats_from_tiles(partials.const_data_ptr(), kernel_dtype(partials.scalar_type()), N,
                                                 partials.size(1), partials.size(2), num_groups, eps,
                                                 s.mean.data_ptr<double>(), s.rstd.data_ptr<double>(),
                                                 at::cuda::getCurrentCUDAStream(),
                                                 float32_copy ? s.mean32.data_ptr<float>() : nullptr,
                                                 float32_copy ? s.rstd32.data_ptr<float>() : nullptr),
               op);
  return s;
}

// GroupNorm of x, a contiguous channels-last [N, C, H, W], where it lies: the statistics pass reads
// it as NHWC through pre, and the normalise pass (reading it the same way) writes a new tensor in
// `format` (NCHW: transposing on the way). nullopt where the NHWC kernels' grid cannot take the
// shape (over ~2 M channels; the statistics' kernel refuses it before any launch).
std::optional<at::Tensor> group_norm_nhwc(const char* op, const at::Tensor& x, int64_t num_groups, double eps,
                                          const std::optional<at::Tensor>& gn_weight,
                                          const std::optional<at::Tensor>& gn_bias, at::MemoryFormat format,
                                          cuda::PreGelu pre = {}) {
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto dtype = kernel_dtype(x.scalar_type());
  const auto [N, C, HW] = n_c_hw(x);
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t tiles = cuda::nhwc_moment_tiles(HW);
  at::Tensor moments = at::empty({N, C, tiles, 3}, x.options().dtype(compute_dtype(x.scalar_type())));
  const cudaError_t err = cuda::nhwc_channel_moments(x.const_data_ptr(), dtype, N, C, HW, tiles, moments.data_ptr(),
                                                     stream, pre);
  if (!launched_unless_refused(err, op)) return std::nullopt;
  const GroupStats s = group_stats_from_partials(op, moments, num_groups, eps);
  at::Tensor out = at::empty_like(x, x.options(), format);
  const at::Tensor gamma = contiguous_or_undefined(gn_weight), beta = contiguous_or_undefined(gn_bias);
  check_launch(cuda::nhwc_group_norm_apply(x.const_data_ptr(), out.data_ptr(),
                                           format == at::MemoryFormat::ChannelsLast, dtype, N, C, HW, num_groups,
                                           s.mean.const_data_ptr<double>(), s.rstd.const_data_ptr<double>(),
                                           ptr_or_null(gamma), ptr_or_null(beta), sms, stream, pre),
               op);
  return out;
}

at::Tensor group_norm_cuda(const at::Tensor& input, int64_t num_groups,
                           const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias, double eps) {
  check_group_norm("group_norm", input, num_groups, weight, bias);
  const c10::cuda::CUDAGuard guard(input.device());
  // a channels-last input where it lies, not through NCHW copies of the input and the output
  // (H100, [128, 64, 258, 258] channels-last: 6.84 -> 1.45 ms a call in bfloat16, 8.9 -> 2.42 in
  // float32; eager 6.6 / 7.4)
  if (output_memory_format(input) == at::MemoryFormat::ChannelsLast)
    if (std::optional<at::Tensor> out =
            group_norm_nhwc("group_norm", input, num_groups, eps, weight, bias, at::MemoryFormat::ChannelsLast))
      return *out;
  const at::Tensor x = input.contiguous();
  at::Tensor out = at::empty_like(x);
  const GroupStats s = group_stats("group_norm", x, num_groups, eps);
  group_norm_apply("group_norm", x, out, num_groups, s.mean, s.rstd, weight, bias);
  return in_output_format("group_norm", out, input);
}

// The fused ops' conv epilogue: bias + GELU, and GroupNorm's per-tile partials into tile_stats
// ([N, C_out, tiles, 3], the statistics dtype).
struct GeluTileStats {
  at::Tensor tile_stats;
  cuda::ConvEpilogue ep;
  GeluTileStats(const at::Tensor& input, const ConvTranspose2dParams& p, const KernelCall& k, GeluApprox approx)
      : tile_stats(at::empty({p.N, p.C_out, k.plan.tiles_per_sample, 3},
                             input.options().dtype(compute_dtype(input.scalar_type())))) {
    ep.gelu = true;
    ep.approx = approx;
    ep.tile_stats = tile_stats.data_ptr();
  }
};

// conv + bias + GELU with GroupNorm's statistics: the un-normalised output (contiguous NCHW) and
// mean / rstd (float64, [N * num_groups]). Our conv writes per-tile partials from its epilogue,
// reduced in a fixed order. cuDNN's output gets its bias and GELU in place, or (gelu_may_wait)
// neither: cuDNN's conv then runs without bias (its separate bias pass costs as much as a read
// and a write of the output) and the statistics read its output through bias + GELU, and so must
// the normalisation (`pending`, whose bias `pending_bias` holds).
struct GeluGroupStats {
  at::Tensor out;
  GroupStats stats;
  at::Tensor pending_bias;
  cuda::PreGelu pending;
};
// Our conv, run as k says, with the GELU + tile-partials epilogue; the partials reduced per group
// (float32_stats: the statistics in float32 too, GroupStats::mean32 / rstd32).
GeluGroupStats conv_gelu_group_stats_ours(const char* op, const at::Tensor& input, const at::Tensor& weight,
                                          const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p,
                                          const KernelCall& k, GeluApprox approx, int64_t num_groups, double eps,
                                          bool float32_stats = false) {
  const GeluTileStats fused(input, p, k, approx);
  GeluGroupStats r;
  r.out = conv_forward(op, input, weight, bias, p, k, fused.ep);
  r.stats = group_stats_from_partials(op, fused.tile_stats, num_groups, eps, float32_stats);
  return r;
}

GeluGroupStats conv_gelu_group_stats(const char* op, ConvSource source, const at::Tensor& input,
                                     const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                     const ConvTranspose2dParams& p, GeluApprox approx, int64_t num_groups,
                                     double eps, bool gelu_may_wait, bool float32_stats = false) {
  if (source == ConvSource::Cudnn) {
    GeluGroupStats r;
    if (gelu_may_wait) {
      r.out = cudnn_conv(op, input, weight, std::nullopt, p);
      r.pending_bias = contiguous_or_undefined(bias);
      r.pending = {true, approx, ptr_or_null(r.pending_bias)};
      r.stats = group_stats_from_partials(op, plane_moments(op, r.out, r.pending), num_groups, eps, float32_stats);
      return r;
    }
    r.out = cudnn_conv(op, input, weight, bias, p);
    check_launch(cuda::gelu_forward(r.out.const_data_ptr(), r.out.data_ptr(), r.out.numel(),
                                    kernel_dtype(r.out.scalar_type()), approx, at::cuda::getCurrentCUDAStream()),
                 op);
    r.stats = group_stats(op, r.out, num_groups, eps);
    return r;
  }
  return conv_gelu_group_stats_ours(op, input, weight, bias, p, kernel_call(p, input), approx, num_groups, eps,
                                    float32_stats);
}

// An event of this thread for device `device`, slot `which`, created once. Recording it again
// later does not change a wait already enqueued on it (cudaStreamWaitEvent takes the record
// current at the call), so a thread can reuse it from call to call; another thread has its own.
// at::cuda::CUDAEvent creates and destroys one per call: ~7 us of host time each (H100 host),
// while the GPU waits for the fused op's first kernels.
cudaEvent_t thread_event(int device, int which) {
  struct Events {
    std::vector<cudaEvent_t> events;
    ~Events() {
      for (cudaEvent_t e : events)
        if (e != nullptr) cudaEventDestroy(e);  // at exit the context may be gone: errors ignored
    }
  };
  thread_local Events cache;
  const size_t i = static_cast<size_t>(device) * 2 + static_cast<size_t>(which);
  if (cache.events.size() <= i) cache.events.resize(i + 1, nullptr);
  if (cache.events[i] == nullptr) {
    cudaEvent_t e = nullptr;
    TORCH_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess,
                "myops: cudaEventCreateWithFlags failed");
    cache.events[i] = e;
  }
  return cache.events[i];
}

// Makes `waiter` wait for the work enqueued so far on `stream`, through this thread's event `which`.
void stream_wait(const char* op, cudaStream_t waiter, cudaStream_t stream, int device, int which) {
  const cudaEvent_t e = thread_event(device, which);
  check_launch(cudaEventRecord(e, stream), op);
  check_launch(cudaStreamWaitEvent(waiter, e, 0), op);
}

// conv + bias + GELU + GroupNorm with the normalise pass following the conv on a few SMs of a
// higher-priority stream (group_norm_follow.cuh), where the plan's kernel counts its blocks per
// image; else nullopt. Not inside a CUDA graph: a graph may run its branches in any order,
// serially too, and the pass must not run (and wait) before the conv.
std::optional<at::Tensor> conv_gelu_group_norm_overlapped(const char* op, const at::Tensor& input,
                                                         const at::Tensor& weight,
                                                         const std::optional<at::Tensor>& bias,
                                                         const ConvTranspose2dParams& p, const KernelCall& k,
                                                         GeluApprox approx, int64_t num_groups, double eps,
                                                         const std::optional<at::Tensor>& gn_weight,
                                                         const std::optional<at::Tensor>& gn_bias) {
  if (k.channel_fold != 1 || !cuda::conv_plan_counts_tiles(k.plan) ||
      !cuda::group_norm_follow_supported(p.C_out, num_groups))
    return std::nullopt;
  const int64_t blocks_per_image = cuda::conv_plan_blocks_per_image(k.p, k.plan);
  if (blocks_per_image <= 0 || blocks_per_image > std::numeric_limits<unsigned>::max()) return std::nullopt;
  const at::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream();
  if (cuda::stream_capturing(stream)) return std::nullopt;  // (a failed query too: the plain path)
  // multiply-adds per output value: C_in / groups per tap, taps spread over the stride's phases
  const double flops_per_value = 2.0 * static_cast<double>(p.C_in_g * p.kH * p.kW) / static_cast<double>(p.sH * p.sW);
  const cuda::FollowShape shape{p.N, p.C_out, p.OH * p.OW, num_groups, static_cast<int>(input.element_size()),
                                flops_per_value};
  const int followers =
      cuda::group_norm_follow_blocks(at::cuda::getCurrentDeviceProperties()->multiProcessorCount, shape);
  if (followers == 0) return std::nullopt;

  // everything the pass reads, made before the side stream's wait (a memset: at::zeros would
  // launch a fill kernel, ~20 us more host time before the conv starts)
  GeluTileStats fused(input, p, k, approx);
  at::Tensor done = at::empty({p.N}, input.options().dtype(at::kInt));
  check_launch(cudaMemsetAsync(done.data_ptr(), 0, done.nbytes(), stream), op);
  fused.ep.tiles_done = reinterpret_cast<unsigned*>(done.data_ptr<int>());
  fused.ep.l2_hints = cuda::group_norm_follow_l2_hints(kernel_dtype(input.scalar_type()));
  const at::Tensor gamma = contiguous_or_undefined(gn_weight), beta = contiguous_or_undefined(gn_bias);
  const int device = input.device().index();
  const at::cuda::CUDAStream side = at::cuda::getStreamFromPool(/*isHighPriority=*/true, device);
  stream_wait(op, side, stream, device, 0);
  at::Tensor out = conv_forward(op, input, weight, bias, p, k, fused.ep);  // launched first: see group_norm_follow.cuh
  const auto [N, C, HW] = n_c_hw(out);
  check_launch(cuda::group_norm_follow(out.data_ptr(), kernel_dtype(out.scalar_type()), N, C, HW, num_groups,
                                       fused.tile_stats.const_data_ptr(), k.plan.tiles_per_sample, eps,
                                       ptr_or_null(gamma), ptr_or_null(beta), fused.ep.tiles_done,
                                       static_cast<unsigned>(blocks_per_image), followers, fused.ep.l2_hints, side),
               op);
  // the caller's stream waits for the pass; the buffers freed here are reused on that stream only
  stream_wait(op, stream, side, device, 1);
  return out;
}

// The whole op over cuDNN's channels-last conv (no bias): GroupNorm reads its output through bias
// + GELU where it lies (group_norm_nhwc) and writes the op's output in the input's layout.
at::Tensor conv_gelu_group_norm_channels_last(const char* op, const at::Tensor& input, const at::Tensor& weight,
                                              const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p,
                                              GeluApprox approx, int64_t num_groups, double eps,
                                              const std::optional<at::Tensor>& gn_weight,
                                              const std::optional<at::Tensor>& gn_bias) {
  const at::Tensor conv = cudnn_conv_channels_last(op, input, weight, p);
  const at::Tensor pre_bias = contiguous_or_undefined(bias);
  std::optional<at::Tensor> out = group_norm_nhwc(op, conv, num_groups, eps, gn_weight, gn_bias,
                                                  output_memory_format(input), {true, approx, ptr_or_null(pre_bias)});
  MYOPS_CHECK_ARG(out.has_value(), op, "weight", "gives ", p.C_out,
                  " output channels, too many for the channels-last GroupNorm kernels");
  return *out;
}

// The fused op's last pass: GroupNorm of r.out (contiguous NCHW, read through r.pending) with r's
// statistics, in place, or for a channels-last input into a new channels-last tensor, transposed
// while it normalises: one read and one write of the output, where the in-place pass and then our
// transpose made two of each.
at::Tensor normalised_output(const char* op, GeluGroupStats& r, int64_t num_groups,
                             const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias,
                             const at::Tensor& input) {
  if (output_memory_format(input) == at::MemoryFormat::ChannelsLast &&
      !r.out.is_contiguous(at::MemoryFormat::ChannelsLast)) {
    at::Tensor out = at::empty_like(r.out, r.out.options(), at::MemoryFormat::ChannelsLast);
    const at::Tensor gamma = contiguous_or_undefined(gn_weight), beta = contiguous_or_undefined(gn_bias);
    const auto [N, C, HW] = n_c_hw(r.out);
    const cudaError_t err = cuda::nchw_group_norm_apply_to_channels_last(
        r.out.const_data_ptr(), out.data_ptr(), kernel_dtype(r.out.scalar_type()), N, C, HW, num_groups,
        r.stats.mean.const_data_ptr<double>(), r.stats.rstd.const_data_ptr<double>(), ptr_or_null(gamma),
        ptr_or_null(beta), at::cuda::getCurrentCUDAStream(), r.pending);
    if (launched_unless_refused(err, op)) return out;  // else the in-place pass below
  }
  group_norm_apply(op, r.out, r.out, num_groups, r.stats.mean, r.stats.rstd, gn_weight, gn_bias, r.pending);
  return in_output_format(op, r.out, input);
}

at::Tensor conv_transpose2d_gelu_group_norm_cuda(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation, c10::string_view approximate, int64_t num_groups,
    const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias, double eps) {
  constexpr const char* kOp = "conv_transpose2d_gelu_group_norm";
  // named members, not structured bindings: the lambdas below capture them (C++17)
  const ConvGeluGroupNorm checked = check_conv_transpose2d_gelu_group_norm(
      kOp, input, weight, bias, stride, padding, output_padding, groups, dilation, approximate, num_groups,
      gn_weight, gn_bias);
  const ConvTranspose2dParams& p = checked.conv;
  const GeluApprox approx = checked.approx;
  const c10::cuda::CUDAGuard guard(input.device());
  // 1) conv + bias + GELU with GroupNorm's statistics; 2) normalise in place.
  // (a channels-last input: the normalise pass writes its channels-last output, normalised_output)
  const bool nchw_output = output_memory_format(input) != at::MemoryFormat::ChannelsLast;
  auto run = [&](ConvSource source) {
    GeluGroupStats r;
    if (source == ConvSource::Myops) {
      const KernelCall k = kernel_call(p, input);  // one plan lookup for either form
      if (nchw_output)
        if (auto out = conv_gelu_group_norm_overlapped(kOp, input, weight, bias, p, k, approx, num_groups, eps,
                                                       gn_weight, gn_bias))
          return *out;
      r = conv_gelu_group_stats_ours(kOp, input, weight, bias, p, k, approx, num_groups, eps);
    } else if (strict_fp32(input)) {
      // strict float32: cuDNN's NCHW call (its channels-last strict kernels were slower: H100,
      // L2_19's layer 20.8 ms through the channels-last form against 13.0)
      r = conv_gelu_group_stats(kOp, source, input, weight, bias, p, approx, num_groups, eps, true);
    } else {
      return conv_gelu_group_norm_channels_last(kOp, input, weight, bias, p, approx, num_groups, eps, gn_weight,
                                                gn_bias);
    }
    return normalised_output(kOp, r, num_groups, gn_weight, gn_bias, input);
  };
  return run(conv_source(kOp, p, input, bias, gelu_group_norm_extra(approximate, num_groups), true, run));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_transpose2d_gelu_group_stats_cuda(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation, c10::string_view approximate, int64_t num_groups,
    double eps) {
  constexpr const char* kOp = "conv_transpose2d_gelu_group_stats";
  // named members, not structured bindings: the lambdas below capture them (C++17)
  const ConvGeluGroupNorm checked = check_conv_transpose2d_gelu_group_norm(
      kOp, input, weight, bias, stride, padding, output_padding, groups, dilation, approximate, num_groups,
      std::nullopt, std::nullopt);
  const ConvTranspose2dParams& p = checked.conv;
  const GeluApprox approx = checked.approx;
  const c10::cuda::CUDAGuard guard(input.device());
  auto run = [&](ConvSource source) -> std::tuple<at::Tensor, at::Tensor, at::Tensor> {
    const auto stats_dtype = compute_dtype(input.scalar_type());
    const bool float32_stats = stats_dtype == at::kFloat;  // written by the reduction: no conversion launches
    GeluGroupStats r =
        conv_gelu_group_stats(kOp, source, input, weight, bias, p, approx, num_groups, eps, false, float32_stats);
    const at::Tensor mean = r.stats.mean32.defined() ? r.stats.mean32 : r.stats.mean.to(stats_dtype);
    const at::Tensor rstd = r.stats.rstd32.defined() ? r.stats.rstd32 : r.stats.rstd.to(stats_dtype);
    return {in_output_format(kOp, r.out, input), mean.view({p.N, num_groups}),
            rstd.view({p.N, num_groups})};
  };
  return run(conv_source(kOp, p, input, bias, gelu_group_norm_extra(approximate, num_groups), false, run));
}

// conv with BatchNorm's batch statistics, the mean and biased variance (float32; float64 for
// float64 input): per-tile (count, mean, M2) of the stored output, from our conv's epilogue (ep,
// which this completes), or per plane from a pass over cuDNN's output (ep unused: the caller asks
// for no window stores then), reduced per channel in a fixed order.
struct ChannelStats {
  at::Tensor out, mean, var;
};
ChannelStats conv_channel_stats(const char* op, ConvSource source, const at::Tensor& input, const at::Tensor& weight,
                                const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p,
                                const KernelCall& k, cuda::ConvEpilogue ep) {
  const auto stats_dtype = compute_dtype(input.scalar_type());
  at::Tensor tile_stats;  // [N, C_out, tiles, 3]
  ChannelStats r;
  if (source == ConvSource::Cudnn) {
    r.out = cudnn_conv(op, input, weight, bias, p);
    tile_stats = plane_moments(op, r.out);
  } else {
    tile_stats = at::empty({p.N, p.C_out, k.plan.tiles_per_sample, 3}, input.options().dtype(stats_dtype));
    ep.tile_stats = tile_stats.data_ptr();
    r.out = conv_forward(op, input, weight, bias, p, k, ep);
  }
  r.mean = at::empty({p.C_out}, input.options().dtype(stats_dtype));
  r.var = at::empty({p.C_out}, input.options().dtype(stats_dtype));
  if (p.N * p.OH * p.OW == 0) {
    r.mean.zero_();
    r.var.fill_(std::numeric_limits<double>::quiet_NaN());
  } else {
    check_launch(cuda::channel_stats_from_tiles(tile_stats.const_data_ptr(), kernel_dtype(input.scalar_type()), p.N,
                                                p.C_out, tile_stats.size(2), r.mean.data_ptr(), r.var.data_ptr(),
                                                at::cuda::getCurrentCUDAStream()),
                 op);
  }
  return r;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_transpose2d_channel_stats_cuda(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation) {
  constexpr const char* kOp = "conv_transpose2d_channel_stats";
  const auto p = check_conv_transpose2d(kOp, input, weight, bias, stride, padding, output_padding,
                                        groups, dilation);
  const c10::cuda::CUDAGuard guard(input.device());
  auto run = [&](ConvSource source) -> std::tuple<at::Tensor, at::Tensor, at::Tensor> {
    ChannelStats r = conv_channel_stats(kOp, source, input, weight, bias, p, kernel_call(p, input), {});
    return {in_output_format(kOp, r.out, input), r.mean, r.var};
  };
  return run(conv_source(kOp, p, input, bias, no_extra, false, run));
}

// BN (given statistics) + tanh + max-pool + GroupNorm of contiguous NCHW x with pooling q, into a
// new contiguous NCHW tensor. split_rows > 0: x is a window-stored conv output (the conv's tiles
// split_rows rows tall; the caller checked that the one-kernel tail takes it). after_stats: the
// statistics' kernel (channel_stats_from_tiles) was queued last, after the kernel that wrote x.
at::Tensor bn_tanh_pool_group_norm(const char* op, const at::Tensor& x, const Pool2dParams& q, int64_t split_rows,
                                   const at::Tensor& mean, const at::Tensor& var,
                                   const std::optional<at::Tensor>& bn_weight, const std::optional<at::Tensor>& bn_bias, double bn_eps, int64_t num_groups,
                                   const std::optional<at::Tensor>& gn_weight,
                                   const std::optional<at::Tensor>& gn_bias, double gn_eps, bool after_stats) {
  const int64_t N = x.size(0), C = x.size(1);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto dtype = kernel_dtype(x.scalar_type());
  const auto stats_dtype = compute_dtype(x.scalar_type());
  const at::Tensor m = mean.to(stats_dtype).contiguous(), v = var.to(stats_dtype).contiguous();
  const at::Tensor w = contiguous_or_undefined(bn_weight), b = contiguous_or_undefined(bn_bias);
  at::Tensor out = at::empty({N, C, q.PH, q.PW}, x.options());
  if (split_rows > 0 || cuda::batch_norm_tanh_max_pool2d_group_norm_fits(dtype, N, C, num_groups, q)) {
    // one kernel: each (n, group)'s pooled planes stay on chip for the statistics and the normalisation
    const at::Tensor gw = contiguous_or_undefined(gn_weight), gb = contiguous_or_undefined(gn_bias);
    check_launch(cuda::batch_norm_tanh_max_pool2d_group_norm(
                     x.const_data_ptr(), dtype, N, C, q, split_rows, m.const_data_ptr(), v.const_data_ptr(),
                     ptr_or_null(w), ptr_or_null(b), bn_eps, num_groups, ptr_or_null(gw), ptr_or_null(gb), gn_eps,
                     out.data_ptr(), after_stats, stream),
                 op);
    return out;
  }
  // Otherwise: 1) BN + tanh + max-pool, writing the pooled tensor and (count, mean, M2) per (n, c)
  // plane; 2) fixed-order reduction to mean / rstd per (n, group); 3) normalise in place.
  at::Tensor plane_stats = at::empty({N, C, 1, 3}, x.options().dtype(stats_dtype));
  check_launch(cuda::batch_norm_tanh_max_pool2d(x.const_data_ptr(), dtype, N, C, q, m.const_data_ptr(),
                                                v.const_data_ptr(), ptr_or_null(w), ptr_or_null(b), bn_eps,
                                                out.data_ptr(), plane_stats.data_ptr(), stream),
               op);
  const GroupStats g = group_stats_from_partials(op, plane_stats, num_groups, gn_eps);
  group_norm_apply(op, out, out, num_groups, g.mean, g.rstd, gn_weight, gn_bias);
  return out;
}

at::Tensor batch_norm_tanh_max_pool2d_group_norm_cuda(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& var,
    const std::optional<at::Tensor>& bn_weight, const std::optional<at::Tensor>& bn_bias,
    double bn_eps, at::IntArrayRef kernel_size, at::IntArrayRef pool_stride,
    at::IntArrayRef pool_padding, at::IntArrayRef pool_dilation, int64_t num_groups,
    const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias,
    double gn_eps) {
  constexpr const char* kOp = "batch_norm_tanh_max_pool2d_group_norm";
  const Pool2dParams q = check_batch_norm_tanh_max_pool2d_group_norm(
      kOp, input, mean, var, bn_weight, bn_bias, kernel_size, pool_stride, pool_padding, pool_dilation,
      num_groups, gn_weight, gn_bias);
  const c10::cuda::CUDAGuard guard(input.device());
  const at::Tensor out = bn_tanh_pool_group_norm(kOp, contiguous_nchw(kOp, input), q, 0, mean, var, bn_weight,
                                                 bn_bias, bn_eps, num_groups, gn_weight, gn_bias, gn_eps, false);
  return in_output_format(kOp, out, input);
}

void batch_norm_update_running_stats_cuda(const at::Tensor& running_mean, const at::Tensor& running_var,
                                          const at::Tensor& mean, const at::Tensor& var, double momentum,
                                          double var_factor, const std::optional<at::Tensor>& num_batches_tracked) {
  constexpr const char* kOp = "batch_norm_update_running_stats";
  check_batch_norm_update_running_stats(kOp, running_mean, running_var, mean, var, num_batches_tracked);
  const c10::cuda::CUDAGuard guard(running_mean.device());
  // (the batch statistics are only read: the kernel takes them as const)
  auto vec = [](const at::Tensor& t, void* data) { return cuda::StridedVector{data, t.stride(0), kernel_dtype(t.scalar_type())}; };
  auto read = [&](const at::Tensor& t) { return vec(t, const_cast<void*>(t.const_data_ptr())); };
  check_launch(cuda::batch_norm_update_running_stats(
                   vec(running_mean, running_mean.data_ptr()), vec(running_var, running_var.data_ptr()), read(mean),
                   read(var), running_mean.size(0), momentum,
                   var_factor, num_batches_tracked.has_value() ? num_batches_tracked->data_ptr<int64_t>() : nullptr,
                   at::cuda::getCurrentCUDAStream()),
               kOp);
}

// The whole chain. Where the conv kernel can store 2 x 2 windows (ConvEpilogue::pool_windows)
// and the pool is MaxPool2d(2, 2) (no padding or dilation), the intermediate holds each window's
// max, or its min where BatchNorm's weight is negative (the sign of BN's scale: max-pool then sees
// the same maximum of tanh(BN)): a quarter of the conv output's bytes written and read.
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm_cuda(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, c10::SymIntArrayRef dilation, const std::optional<at::Tensor>& mean,
    const std::optional<at::Tensor>& var, const std::optional<at::Tensor>& bn_weight,
    const std::optional<at::Tensor>& bn_bias, bool training, double bn_eps, at::IntArrayRef kernel_size,
    at::IntArrayRef pool_stride, at::IntArrayRef pool_padding, at::IntArrayRef pool_dilation,
    int64_t num_groups, const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias,
    double gn_eps) {
  constexpr const char* kOp = "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm";
  const ConvBatchNormChain checked = check_conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
      kOp, input, weight, bias, stride, padding, output_padding, groups, dilation, mean, var, bn_weight, bn_bias,
      training, kernel_size, pool_stride, pool_padding, pool_dilation, num_groups, gn_weight, gn_bias);
  const ConvTranspose2dParams& p = checked.conv;
  const Pool2dParams& q = checked.pool;
  const c10::cuda::CUDAGuard guard(input.device());
  auto run = [&](ConvSource source) -> std::tuple<at::Tensor, at::Tensor, at::Tensor> {
    const KernelCall k = kernel_call(p, input);
    const auto dtype = kernel_dtype(input.scalar_type());
    cuda::ConvEpilogue ep;
    const int64_t tile_rows = source == ConvSource::Myops && cuda::pool_is_2x2(q) && k.channel_fold == 1
                                  ? cuda::conv_plan_window_rows(k.p, k.plan, dtype)
                                  : 0;
    const int64_t split_rows =
        tile_rows > 0 && cuda::batch_norm_tanh_max_pool2d_group_norm_fits(dtype, p.N, p.C_out, num_groups, q, tile_rows)
            ? tile_rows
            : 0;
    at::Tensor sign;  // holds window_sign's memory until the conv has run
    if (split_rows > 0) {
      ep.pool_windows = true;
      if (bn_weight.has_value()) sign = bn_weight->contiguous();
      ep.window_sign = ptr_or_null(sign);
    }
    ChannelStats r;  // batch statistics in training, else empty
    if (training) {
      r = conv_channel_stats(kOp, source, input, weight, bias, p, k, ep);
    } else {
      r.out = conv_by(source, kOp, input, weight, bias, p, k, ep);
      r.mean = at::empty({0}, input.options().dtype(compute_dtype(input.scalar_type())));
      r.var = at::empty_like(r.mean);
    }
    // (in training the statistics' kernel is the last one queued: the tail may start under it)
    const at::Tensor y = bn_tanh_pool_group_norm(kOp, r.out, q, split_rows, training ? r.mean : *mean,
                                                 training ? r.var : *var, bn_weight, bn_bias, bn_eps, num_groups,
                                                 gn_weight, gn_bias, gn_eps, training);
    return {in_output_format(kOp, y, input), r.mean, r.var};
  };
  const auto extra = [&] {
    std::string e = std::to_string(training) + "|" + std::to_string(num_groups);
    for (const int64_t v : {q.kH, q.kW, q.sH, q.sW, q.pH, q.pW, q.dH, q.dW}) e += "," + std::to_string(v);
    return e;
  };
  return run(conv_source(kOp, p, input, bias, extra, false, run));
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("conv_transpose2d", &conv_transpose2d_cuda);
  m.impl("gelu", &gelu_cuda);
  m.impl("group_norm", &group_norm_cuda);
  m.impl("conv_transpose2d_gelu_group_norm", &conv_transpose2d_gelu_group_norm_cuda);
  m.impl("conv_transpose2d_gelu_group_stats", &conv_transpose2d_gelu_group_stats_cuda);
  m.impl("conv_transpose2d_channel_stats", &conv_transpose2d_channel_stats_cuda);
  m.impl("batch_norm_tanh_max_pool2d_group_norm", &batch_norm_tanh_max_pool2d_group_norm_cuda);
  m.impl("batch_norm_update_running_stats", &batch_norm_update_running_stats_cuda);
  m.impl("conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm",
         &conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm_cuda);
}

}  // namespace myops
