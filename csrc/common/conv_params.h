#pragma once
// Shape of one conv_transpose2d call, filled and validated by csrc/shapes.h and consumed by the CPU
// and CUDA kernels. Plain C++ (no torch headers) so that .cu files can include it. All sizes are
// int64_t: a tensor may hold more than 2^31 elements.
#include <cstdint>

#include "common/host_device.h"

namespace myops {

struct ConvTranspose2dParams {
  int64_t N = 0, C_in = 0, H = 0, W = 0;       // input  [N, C_in, H, W]
  int64_t C_out = 0, kH = 0, kW = 0;           // weight [C_in, C_out / groups, kH, kW]
  int64_t groups = 1, C_in_g = 0, C_out_g = 0; // channels per group
  int64_t sH = 1, sW = 1, pH = 0, pW = 0;      // stride, padding
  int64_t opH = 0, opW = 0, dH = 1, dW = 1;    // output_padding, dilation
  int64_t OH = 0, OW = 0;                      // output [N, C_out, OH, OW]
};

// One max_pool2d call (ceil_mode false), filled by check_max_pool2d in csrc/shapes.h.
struct Pool2dParams {
  int64_t kH = 1, kW = 1, sH = 1, sW = 1, pH = 0, pW = 0, dH = 1, dW = 1;
  int64_t H = 0, W = 0, PH = 0, PW = 0;  // input and pooled sizes
};

// PyTorch's transposed-convolution output size along one dimension.
MYOPS_HD int64_t conv_transpose_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t op,
                                         int64_t d) {
  return (in - 1) * s - 2 * p + d * (k - 1) + op + 1;
}

MYOPS_HD int64_t ceil_div_nonneg(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

// For one kernel tap, the input positions i in [lo, hi) whose scattered output
// o = i * s - p + k_off lands inside [0, out): the only positions that tap touches.
struct TapRange {
  int64_t lo, hi;
};
MYOPS_HD TapRange tap_input_range(int64_t in, int64_t out, int64_t s, int64_t p, int64_t k_off) {
  // o >= 0  <=>  i >= (p - k_off) / s (rounded up);  o < out  <=>  i <= (out - 1 + p - k_off) / s.
  int64_t lo = ceil_div_nonneg(p - k_off, s);
  int64_t last = out - 1 + p - k_off;
  int64_t hi = last < 0 ? 0 : last / s + 1;
  if (hi > in) hi = in;
  if (lo > hi) lo = hi;
  return {lo, hi};
}

}  // namespace myops
