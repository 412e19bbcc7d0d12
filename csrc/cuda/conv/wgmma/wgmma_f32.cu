// The Hopper engine's float kernel builds (wgmma_launch.cuh).
#include "cuda/conv/wgmma/wgmma_launch.cuh"

namespace myops::cuda {
MYOPS_WGMMA_LAUNCH(float);
}  // namespace myops::cuda
