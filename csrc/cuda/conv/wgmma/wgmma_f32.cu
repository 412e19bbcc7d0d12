// The Hopper engine's float kernel builds (wgmma_launch.cuh).
#include "cuda/conv/wgmma/wgmma_launch.cuh"

namespace myops {
namespace cuda {

template cudaError_t conv_wgmma_launch<float>(const void*, const void*, const void*, void*, DType,
                                            const ConvTranspose2dParams&, const WgmmaTiling&, const ConvEpilogue&,
                                            const CUtensorMap*, cudaStream_t);

}  // namespace cuda
}  // namespace myops
