// The Hopper engine's __nv_bfloat16 kernel builds (wgmma_launch.cuh).
#include "cuda/conv/wgmma/wgmma_launch.cuh"

namespace myops::cuda {
MYOPS_WGMMA_LAUNCH(__nv_bfloat16);
}  // namespace myops::cuda
