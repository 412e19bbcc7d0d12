// The BatchNorm chain on CUDA: conv_transpose2d_channel_stats, batch_norm_tanh_max_pool2d_group_norm,
// batch_norm_update_running_stats and the one-call conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>

#include "cuda/norm/batch_norm_chain.cuh"
#include "cuda/norm/running_stats.cuh"
#include "cuda/ops/conv.h"
#include "cuda/ops/group_norm.h"

namespace myops {
namespace host {
namespace {

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
  if (p.N * p.OH * p.OW == 0) {
    r.mean = at::zeros({p.C_out}, input.options().dtype(stats_dtype));
    r.var = at::full({p.C_out}, std::numeric_limits<double>::quiet_NaN(), input.options().dtype(stats_dtype));
  } else {
    std::tie(r.mean, r.var) = channel_stats_from_partials(op, tile_stats);
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
  return run(conv_source(kOp, p, input, bias, no_extra, run));
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
  return run(conv_source(kOp, p, input, bias, extra, run));
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("conv_transpose2d_channel_stats", &conv_transpose2d_channel_stats_cuda);
  m.impl("batch_norm_tanh_max_pool2d_group_norm", &batch_norm_tanh_max_pool2d_group_norm_cuda);
  m.impl("batch_norm_update_running_stats", &batch_norm_update_running_stats_cuda);
  m.impl("conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm",
         &conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm_cuda);
}

}  // namespace host
}  // namespace myops
