// conv_transpose2d on the CPU: ATen's transposed convolution (oneDNN) in the compute dtype, or
// (option cpu_reference: the test oracle) per (sample, group) one GEMM  cols = W_g^T · X_g
// (K = C_in / groups) followed by a col2im scatter-add of cols[C_out_g * kH * kW, H * W] into the
// output planes.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>

#include "common/options.h"
#include "cpu/cpu_kernels.h"
#include "cpu/layout_choice.h"
#include "cpu/layout_copy.h"
#include "shapes.h"

namespace myops {
namespace {

// Adds the GEMM rows of output channel c (one row per kernel tap) into its output plane.
template <typename T>
void col2im_add_channel(const T* cols, int64_t c, T* out_plane, const ConvTranspose2dParams& p) {
  const int64_t HW = p.H * p.W;
  for (int64_t kh = 0; kh < p.kH; ++kh) {
    const TapRange rh = tap_input_range(p.H, p.OH, p.sH, p.pH, kh * p.dH);
    for (int64_t kw = 0; kw < p.kW; ++kw) {
      const TapRange rw = tap_input_range(p.W, p.OW, p.sW, p.pW, kw * p.dW);
      const T* tap_row = cols + ((c * p.kH + kh) * p.kW + kw) * HW;
      const int64_t ow0 = kw * p.dW - p.pW;
      for (int64_t ih = rh.lo; ih < rh.hi; ++ih) {
        T* out_row = out_plane + (ih * p.sH - p.pH + kh * p.dH) * p.OW;
        const T* in_row = tap_row + ih * p.W;
        if (p.sW == 1) {
          for (int64_t iw = rw.lo; iw < rw.hi; ++iw) out_row[iw + ow0] += in_row[iw];
        } else {
          for (int64_t iw = rw.lo; iw < rw.hi; ++iw) out_row[iw * p.sW + ow0] += in_row[iw];
        }
      }
    }
  }
}

at::Tensor conv_transpose2d_reference(const at::Tensor& input, const at::Tensor& weight,
                                      const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p) {
  const auto ct = compute_dtype(input.scalar_type());
  const at::Tensor x = input.to(ct).contiguous();
  const at::Tensor w = weight.to(ct).contiguous();
  at::Tensor out = at::empty({p.N, p.C_out, p.OH, p.OW}, x.options());
  if (p.N == 0) return out;
  const at::Tensor b = bias.has_value() ? bias->to(ct).contiguous() : at::Tensor();
  const int64_t taps = p.kH * p.kW, HW = p.H * p.W, plane = p.OH * p.OW;
  at::Tensor cols = at::empty({p.C_out_g * taps, HW}, x.options());

  AT_DISPATCH_FLOATING_TYPES(ct, "myops::conv_transpose2d (CPU)", [&] {
    scalar_t* out_ptr = out.data_ptr<scalar_t>();
    const scalar_t* bias_ptr = b.defined() ? b.const_data_ptr<scalar_t>() : nullptr;
    for (int64_t n = 0; n < p.N; ++n) {
      for (int64_t g = 0; g < p.groups; ++g) {
        const at::Tensor x_g = x[n].narrow(0, g * p.C_in_g, p.C_in_g).view({p.C_in_g, HW});
        const at::Tensor w_g =
            w.narrow(0, g * p.C_in_g, p.C_in_g).view({p.C_in_g, p.C_out_g * taps});
        at::mm_out(cols, w_g.t(), x_g);
        const scalar_t* cols_ptr = cols.const_data_ptr<scalar_t>();
        at::parallel_for(0, p.C_out_g, 1, [&](int64_t c_begin, int64_t c_end) {
          for (int64_t c = c_begin; c < c_end; ++c) {
            const int64_t oc = g * p.C_out_g + c;
            scalar_t* out_plane = out_ptr + (n * p.C_out + oc) * plane;
            std::fill(out_plane, out_plane + plane, bias_ptr ? bias_ptr[oc] : scalar_t(0));
            col2im_add_channel(cols_ptr, c, out_plane, p);
          }
        });
      }
    }
  });
  return out;
}

// ATen's (oneDNN's) transposed convolution of call p in the compute dtype, computed and returned
// in `format`. NHWC: oneDNN reorders an NCHW weight itself, faster than a channels-last copy of it.
at::Tensor aten_conv(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                     const ConvTranspose2dParams& p, at::MemoryFormat format) {
  const auto ct = compute_dtype(input.scalar_type());
  const at::Tensor b = bias.has_value() ? bias->to(ct) : at::Tensor();
  const at::Tensor w = format == at::MemoryFormat::ChannelsLast ? weight.to(ct) : weight.to(ct).contiguous();
  return to_memory_format(at::conv_transpose2d(to_memory_format(input.to(ct), format), w, b, {p.sH, p.sW}, {p.pH, p.pW},
                                              {p.opH, p.opW}, p.groups, {p.dH, p.dW}),
                          format);
}

}  // namespace

at::Tensor conv_transpose2d_compute(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias,
                                    const ConvTranspose2dParams& p) {
  if (option(Option::CpuReference) != 0 || p.N == 0) return conv_transpose2d_reference(input, weight, bias, p);
  // NCHW whatever the input's layout (the fused seed ops' passes read NCHW; the same bits for both
  // layouts: oneDNN's NHWC path sums in another order)
  return aten_conv(input, weight, bias, p, at::MemoryFormat::Contiguous);
}

at::Tensor conv_transpose2d_in_layout(const at::Tensor& input, const at::Tensor& weight,
                                     const std::optional<at::Tensor>& bias, const ConvTranspose2dParams& p) {
  const at::MemoryFormat format = output_memory_format(input);
  if (option(Option::CpuReference) != 0 || p.N == 0)
    return to_memory_format(conv_transpose2d_compute(input, weight, bias, p), format);
  // oneDNN's NHWC kernels on the input where it lies: faster than its NCHW ones, and no transposes
  if (format == at::MemoryFormat::ChannelsLast) return aten_conv(input, weight, bias, p, format);
  // an NCHW input: its NHWC kernels between two layout copies where they were timed faster
  const auto run = [&](bool channels_last) {
    return channels_last ? to_memory_format(aten_conv(input, weight, bias, p, at::MemoryFormat::ChannelsLast),
                                             at::MemoryFormat::Contiguous)
                         : aten_conv(input, weight, bias, p, at::MemoryFormat::Contiguous);
  };
  const bool channels_last =
      cpu_conv_layout(p, c10::toString(input.scalar_type()), bias.has_value(), [&](bool cl) { run(cl); })
          .channels_last;
  return run(channels_last);
}

namespace {

at::Tensor conv_transpose2d_cpu(const at::Tensor& input, const at::Tensor& weight,
                                const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                c10::SymIntArrayRef padding, c10::SymIntArrayRef output_padding,
                                c10::SymInt groups, c10::SymIntArrayRef dilation) {
  const ConvTranspose2dParams p = check_conv_transpose2d(
      "conv_transpose2d", input, weight, bias, stride, padding, output_padding, groups, dilation);
  return to_memory_format(conv_transpose2d_in_layout(input, weight, bias, p).to(input.scalar_type()),
                          output_memory_format(input));
}

}  // namespace

TORCH_LIBRARY_IMPL(myops, CPU, m) { m.impl("conv_transpose2d", &conv_transpose2d_cpu); }

}  // namespace myops
