#pragma once
// The conv + normalisation + activation family's normalise + activation pass (myops::normalize_act):
// one read and one write of the conv output.
#include "common/norm_act.h"
#include "cuda/common/launch.cuh"

namespace myops {
namespace cuda {

// Which activation the pass applies after the normalisation (as F.<act>).
struct ActivationSpec {
  Activation act = Activation::None;
  GeluApprox approx = GeluApprox::None;
  double negative_slope = 0.01;
};

// y[n, c, ...] = act((x[n, c, ...] - mean[n, c]) * scale[n, c] + shift[n, c]) over x [N, C, HW],
// contiguous (channels_last: [N, HW, C]); mean / scale / shift contiguous [N, C] in double for
// float64 tensors (dtype), else float. y may be x.
cudaError_t normalize_act(const void* x, void* y, DType dtype, int64_t N, int64_t C, int64_t HW, bool channels_last,
                          const void* mean, const void* scale, const void* shift, ActivationSpec act,
                          cudaStream_t stream);

}  // namespace cuda
}  // namespace myops
