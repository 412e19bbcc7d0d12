// The Hopper engine's __half kernel builds (wgmma_launch.cuh).
#include "cuda/conv/wgmma/wgmma_launch.cuh"

namespace myops::cuda {
MYOPS_WGMMA_LAUNCH(__half);
}  // namespace myops::cuda
