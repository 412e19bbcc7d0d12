#pragma once
// The direct conv_transpose2d kernel, for calls whose cost is writing the output: few
// multiply-adds per output value (C_in / groups x the taps of a phase), e.g. grouped or
// depthwise upsamplers. Tensor-core tiles would be mostly padding there, and per-phase tiles
// scatter the stores (a stride-3 phase writes every third element, so three blocks at different
// times fill each 32-byte sector). Instead a block owns a TH x TW tile of the whole output (every
// phase) x up to 16 output channels of one group:
//  - per phase, a warp takes up to 32 pixels of one phase row (the same taps for every lane,
//    consecutive input columns: coalesced loads) and accumulates all the block's channels with
//    FFMA (exact float32 whatever the TF32 setting; 16-bit inputs in float32) from weights
//    staged once in shared memory, into a shared-memory output tile;
//  - then the shared conv epilogue (bias, GELU, GroupNorm partials) stores the tile row by row,
//    each warp writing 32 consecutive pixels of a channel.
#include "cuda/common/launch.cuh"

namespace myops {
namespace cuda {

// cb == 0: the direct kernel does not take the call.
struct DirectTiling {
  int cb = 0;  // output channels per block (8 or 16, compile-time in the kernel)
  int th = 0;  // output rows per block (the columns per block are fixed: kDirectTileCols)
};
constexpr int kDirectTileCols = 96;  // 32 pixels per phase row at stride 3, 3 x 32 at stride 1

// why: where it does not take the call, the reason.
DirectTiling conv_direct_tiling(const ConvTranspose2dParams& p, DType dtype, std::string* why = nullptr);
// GroupNorm partials come per output row and column tile (a row of the block's tile).
int64_t conv_direct_tiles_per_sample(const ConvTranspose2dParams& p);
struct ConvEpilogue;
// prepared_weight: the generic kernel's layout [groups][kH * kW][C_in / groups][C_out / groups].
cudaError_t conv_direct_forward(const void* x, const void* prepared_weight, const void* bias, void* out,
                                DType dtype, const ConvTranspose2dParams& p, const DirectTiling& t,
                                const ConvEpilogue& ep, cudaStream_t stream);

}  // namespace cuda
}  // namespace myops
