#pragma once
// The tensor-core conv_transpose2d kernel (mma.sync TF32 / bf16 / fp16). GEMM per phase with the
// weights as the M operand (output channels) and the phase's output pixels as N:
//  - a block owns a TH x TW tile of one phase grid (of TN images when the grid is small; at
//    most 256 pixels, 4 warps x 64) and 16 * mt output channels of one group;
//  - per chunk of input channels (8 fp32 / 16 bf16 = 32 bytes per pixel) the input halo of the
//    tile's taps goes to shared memory channels-innermost, so every tap reads its B fragments
//    with ldmatrix whatever its shift; the weights are prepared once in fragment order (one
//    16-byte shared load per A fragment) and copied with cp.async; two stages.
//  - FFMA mode (float32 with TF32 off, 64-channel blocks of 8 warps): the same staging with the
//    float32 values kept exact, each thread an 8-pixel x 8-channel FFMA micro-tile.
//  - Winograd rows (FFMA mode where every phase has 3 row taps one input row apart, e.g. k3 s1):
//    F(2, 3) along the rows. Pairs of output rows from 4 transformed input rows and 4 transformed
//    weight rows: 4 products per pair where direct taps take 6 (a third fewer FFMAs); each pair
//    of warps accumulates one of the 4 components, combined in the epilogue.
#include "cuda/common/launch.cuh"

namespace myops {
namespace cuda {

// Tile shape of the mma kernel, chosen on the host from the call's shape (mt == 0: the kernel
// does not take the call).
struct MmaTiling {
  int mt = 0;          // m16 tiles of output channels per warp
  int wm = 1;          // warps along the output channels: the block covers 16 * mt * wm of them
  int th = 0, tw = 0;  // output tile of a phase grid: th rows x tw columns, th * tw <= 256
  int tn = 1;          // images per tile (> 1 only when a tile covers a whole phase grid: small
                       // maps fill the block's 256 pixels from several images)
  bool ffma = false;   // float32 with TF32 off: exact operands, FFMA micro-tiles (mt 2, wm 2)
  bool wino = false;   // FFMA mode with Winograd F(2, 3) rows: th even, th * tw <= 128, tn 1
};

// allow_winograd: the FFMA mode may take Winograd rows where the shape allows (off: A/B runs, tests).
// why: where it does not take the call, the reason.
MmaTiling conv_mma_tiling(const ConvTranspose2dParams& p, DType dtype, Fp32Math fp32_math, bool allow_winograd,
                          std::string* why = nullptr);
int64_t conv_mma_tiles_per_sample(const ConvTranspose2dParams& p, const MmaTiling& t);
int64_t conv_mma_prepared_weight_numel(const ConvTranspose2dParams& p, DType dtype, const MmaTiling& t);
cudaError_t conv_mma_prepare_weight(const void* weight, void* prepared, DType dtype,
                                    const ConvTranspose2dParams& p, const MmaTiling& t,
                                    cudaStream_t stream);
struct ConvEpilogue;
cudaError_t conv_mma_forward(const void* x, const void* prepared_weight, const void* bias, void* out,
                             DType dtype, const ConvTranspose2dParams& p, const MmaTiling& t,
                             const ConvEpilogue& ep, cudaStream_t stream);

}  // namespace cuda
}  // namespace myops
