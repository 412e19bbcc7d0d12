#pragma once
// BatchNorm's running-buffer step in one launch (the op batch_norm_update_running_stats).
#include "cuda/common/launch.cuh"

namespace myops {
namespace cuda {

// A 1-D tensor of `dtype` elements `stride` apart.
struct StridedVector {
  void* data;
  int64_t stride;
  DType dtype;
};

// running = (1 - momentum) * running + momentum * batch over C channels (var's batch value times
// var_factor), in the buffers' compute dtype (float for 16-bit and float32 buffers, double for
// float64) with one rounding, as aten's batch_norm; then *num_batches_tracked += 1 (nullable).
// running_mean / running_var share a dtype, as do mean / var.
cudaError_t batch_norm_update_running_stats(StridedVector running_mean, StridedVector running_var,
                                            StridedVector mean, StridedVector var, int64_t C,
                                            double momentum, double var_factor,
                                            int64_t* num_batches_tracked, cudaStream_t stream);

}  // namespace cuda
}  // namespace myops
