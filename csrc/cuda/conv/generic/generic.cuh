#pragma once
// The generic implicit-GEMM kernel: every call the other engines refuse (float64, narrow strict
// float32, very large kernels), WMMA tensor cores or an FFMA micro-tile. Its weight layout
// [groups][kH * kW][C_in / groups][C_out / groups] is also the direct and few-channels engines'.
#include "cuda/common/launch.cuh"

namespace myops {
namespace cuda {

struct ConvEpilogue;

int64_t conv_generic_tiles_per_sample(const ConvTranspose2dParams& p);
inline int64_t conv_generic_prepared_weight_numel(const ConvTranspose2dParams& p) {
  return p.C_in * p.C_out_g * p.kH * p.kW;
}
cudaError_t conv_generic_prepare_weight(const void* weight, void* prepared, DType dtype, const ConvTranspose2dParams& p,
                                        cudaStream_t stream);
cudaError_t conv_generic_forward(const void* x, const void* prepared_weight, const void* bias, void* out, DType dtype,
                                 Fp32Math fp32_math, const ConvTranspose2dParams& p, const ConvEpilogue& ep,
                                 cudaStream_t stream);

}  // namespace cuda
}  // namespace myops
