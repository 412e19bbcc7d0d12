#pragma once
// The tensor-core conv_transpose2d kernel (mma.sync TF32 / bf16 / fp16): each block computes an
// 8 x 16 tile of one phase's output grid for 64 output channels. Per chunk of input channels it
// stages the input halo the tile's taps read and the phase's weights in shared memory
// (cp.async, two stages), then runs every tap of the phase out of shared memory.
#include "cuda/launch.cuh"
#include "cuda/conv_transpose2d.cuh"

namespace myops {
namespace cuda {

// Whether the mma kernel handles this call (tensor-core dtype / math, halo and weights fit).
bool conv_mma_supported(const ConvTranspose2dParams& p, DType dtype, Fp32Math fp32_math);
int64_t conv_mma_tiles_per_sample(const ConvTranspose2dParams& p);
int64_t conv_mma_prepared_weight_numel(const ConvTranspose2dParams& p, DType dtype);
cudaError_t conv_mma_prepare_weight(const void* weight, void* prepared, DType dtype,
                                    const ConvTranspose2dParams& p, cudaStream_t stream);
cudaError_t conv_mma_forward(const void* x, const void* prepared_weight, const void* bias, void* out,
                             DType dtype, const ConvTranspose2dParams& p, const ConvEpilogue& ep,
                             cudaStream_t stream);

}  // namespace cuda
}  // namespace myops
