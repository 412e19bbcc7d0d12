// myops::conv_transpose2d_gelu_group_norm and conv_transpose2d_gelu_group_stats on CUDA: the conv
// with bias + GELU and GroupNorm's statistics in its epilogue, then the normalise pass (in place,
// overlapped with the conv where that pays, or writing a channels-last output).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>
#include <vector>

#include "cuda/norm/group_norm_follow.cuh"
#include "cuda/ops/conv.h"
#include "cuda/ops/group_norm.h"

namespace myops {
namespace host {
namespace {

// The fused ops' conv epilogue: bias + GELU, and GroupNorm's per-tile partials into tile_stats
// ([N, C_out, tiles, 3], the statistics dtype).
struct GeluTileStats {
  at::Tensor tile_stats;
  cuda::ConvEpilogue ep;
  GeluTileStats(const at::Tensor& input, const ConvTranspose2dParams& p, const KernelCall& k, GeluApprox approx)
      : tile_stats(at::empty({p.N, p.C_out, k.plan.tiles_per_sample, 3},
                             input.options().dtype(compute_dtype(input.scalar_type())))) {
    ep.act = Activation::Gelu;
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
// at::cuda::CUDAEvent creates and destroys one per call, host time the GPU spends waiting for the
// fused op's first kernels.
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
  // launch a fill kernel, more host time before the conv starts)
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
  const at::Tensor conv = cudnn_conv_channels_last(op, input, weight, std::nullopt, p);
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
      // strict float32: cuDNN's NCHW call (its channels-last strict kernels are slower)
      r = conv_gelu_group_stats(kOp, source, input, weight, bias, p, approx, num_groups, eps, true);
    } else {
      return conv_gelu_group_norm_channels_last(kOp, input, weight, bias, p, approx, num_groups, eps, gn_weight,
                                                gn_bias);
    }
    return normalised_output(kOp, r, num_groups, gn_weight, gn_bias, input);
  };
  return run(conv_source(kOp, p, input, bias, gelu_group_norm_extra(approximate, num_groups), run));
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
  return run(conv_source(kOp, p, input, bias, gelu_group_norm_extra(approximate, num_groups), run));
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("conv_transpose2d_gelu_group_norm", &conv_transpose2d_gelu_group_norm_cuda);
  m.impl("conv_transpose2d_gelu_group_stats", &conv_transpose2d_gelu_group_stats_cuda);
}

}  // namespace host
}  // namespace myops
