#pragma once
// conv_transpose2d as an implicit GEMM in gather form, one output phase (oh mod s_h, ow mod s_w)
// at a time: per phase M = output pixels, N = C_out / groups, K = C_in / groups x (taps that hit
// the phase). Phases that no tap reaches just write the bias.
#include "cuda/launch.cuh"

namespace myops {
namespace cuda {

constexpr int kConvTileM = 128;  // output pixels per block (fixed: sizes the GroupNorm partials)

// What the GEMM epilogue does after adding the bias.
struct ConvEpilogue {
  bool gelu = false;
  GeluApprox approx = GeluApprox::None;
  // If set: per (n, c_out, pixel tile) the (count, mean, M2) of the epilogue's output as stored
  // (after rounding to the output dtype, so that the normalise pass sees the same values), in
  // the accumulation type (double for float64, else float), laid out
  // [N][C_out][conv_tiles_per_sample(p)][3]; reduced later in a fixed order.
  void* tile_stats = nullptr;
};

// Number of pixel tiles of one sample, over all phases.
int64_t conv_tiles_per_sample(const ConvTranspose2dParams& p);

// Elements of the prepared weight buffer: [groups][kH * kW][C_in / groups][C_out / groups].
inline int64_t conv_prepared_weight_numel(const ConvTranspose2dParams& p) {
  return p.C_in * p.C_out_g * p.kH * p.kW;
}

// weight [C_in, C_out / groups, kH, kW] (contiguous) -> prepared layout, same dtype.
cudaError_t conv_prepare_weight(const void* weight, void* prepared, DType dtype,
                                const ConvTranspose2dParams& p, cudaStream_t stream);

// x: contiguous NCHW; prepared weight; bias (nullable, [C_out]); out: contiguous NCHW.
cudaError_t conv_transpose2d_forward(const void* x, const void* prepared_weight, const void* bias,
                                     void* out, DType dtype, Fp32Math fp32_math,
                                     const ConvTranspose2dParams& p, const ConvEpilogue& epilogue,
                                     cudaStream_t stream);

}  // namespace cuda
}  // namespace myops
