#pragma once
// The Hopper conv_transpose2d kernel (wgmma, sm_90a). Same GEMM per phase as the mma.sync kernel
// (weights = M, the phase's output pixels = N, input channels x taps = K), warp-specialised:
//  - a block owns 64 output channels of one group and an R-row x 8q-column tile of one phase grid
//    (q strips of R x 8 pixels, (q, R) = (2, 16), (4, 8) or (2, 17): one m64n(8R) MMA per strip
//    and tap);
//  - a producer warpgroup stages, per chunk of input channels (8 fp32 / 16 bf16 = 32 bytes per
//    pixel), the tile's input halo as two K-planes of 16-byte pixels (so a tap's B operand is the
//    halo shifted by the tap's offset: 8 neighbouring pixels form one core matrix and a tile row
//    the next one) and bulk-copies the chunk's weights, prepared once in core-matrix order; the
//    halo comes from global memory through registers, one chunk ahead, or (two blocks per SM)
//    from input boxes that TMA loads into shared memory several chunks ahead;
//  - a consumer warpgroup only waits for a stage, issues the chunk's asynchronous MMAs straight
//    from shared memory and hands the stage back; it then runs the epilogue;
//  - 2 to 4 stages synchronised by mbarriers; registers are moved to the consumer so that two
//    blocks share an SM and one's epilogue runs under the other's MMAs;
//  - 17-row strips (two blocks do not fit an SM): a persistent "ping-pong" form instead, one
//    producer and two consumer warpgroups that take the block's tiles in turn, each running the
//    epilogue straight from its accumulators while the other issues MMAs.
#include "cuda/common/launch.cuh"

namespace myops {
namespace cuda {

// Tile of the wgmma kernel (q == 0: the kernel does not take the call).
struct WgmmaTiling {
  int q = 0;       // strips of 8 columns: the tile is `rows` rows x 8q columns
  int rows = 16;   // 16 (q = 2), 8 (q = 4) or 17 (q = 2) (the MMA's N = 8 x rows)
  int stages = 0;  // pipeline depth
  // TMA input loads (box_slots > 0: boxes in flight; the input must also be 16-byte aligned, else
  // the call runs without TMA at `stages`), with tma_stages stages
  int tma_stages = 0, box_slots = 0;
  // The input arrives channels-last (NHWC, 16-byte aligned, float32 rounded to TF32: the caller
  // stages it, channels_last_input.cuh) and TMA loads each chunk's halo as two boxes straight
  // into the stage, in the MMA's operand layout; `stages` deep, no NCHW boxes.
  bool nhwc = false;
};

// Whether a call may take its input channels-last: Never; Auto (an NCHW input, where staging an
// NHWC copy pays, by a rule on the work per input byte); Always (wherever the kernel can:
// channels-last inputs, which the other paths copy to NCHW, and tests).
enum class ChannelsLastInput { Never, Auto, Always };

// Whether a two-block tile may be 8 rows x 32 columns instead of 16 x 16 (16-bit types only):
// Never; Auto (at most 9 taps per phase and not many more tiles; conv_plan asks for it on plain
// convs, where the output stores weigh most); Always (wherever the tile fits: tests).
enum class WideTiles { Never, Auto, Always };

// device_sm: the current device's compute capability (major * 10 + minor); the kernel exists for
// sm_90 only (built for sm_90a). force: take every call the kernel can run, also those the
// heuristics give to the mma.sync kernel (tests and sanitizer runs). allow_tma: load an NCHW input
// through TMA where its layout allows. channels_last: whether the input may come channels-last.
// wide_tiles: WideTiles.
WgmmaTiling conv_wgmma_tiling(const ConvTranspose2dParams& p, DType dtype, Fp32Math fp32_math, int device_sm,
                              bool force, bool allow_tma, ChannelsLastInput channels_last, WideTiles wide_tiles,
                              std::string* why = nullptr);
// Whether the tiling's kernel stores 2 x 2 windows (ConvEpilogue::pool_windows): the ping-pong
// form (17-row strips), with input through registers in float32 only (16-bit input through
// registers spilled 56-68 bytes in the column-pair build that preceded it).
inline bool conv_wgmma_stores_windows(const WgmmaTiling& t, DType dtype) {
  return t.q > 0 && t.rows == 17 && (dtype == DType::F32 || t.nhwc);
}
int64_t conv_wgmma_tiles_per_sample(const ConvTranspose2dParams& p, const WgmmaTiling& t);
// Whether the tiling's kernel counts its blocks per image (ConvEpilogue::tiles_done): the
// two-block form (16- or 8-row strips; the persistent ping-pong form does not); its blocks per image.
inline bool conv_wgmma_counts_tiles(const WgmmaTiling& t) { return t.q > 0 && t.rows != 17; }
int64_t conv_wgmma_blocks_per_image(const ConvTranspose2dParams& p, const WgmmaTiling& t);
int64_t conv_wgmma_prepared_weight_numel(const ConvTranspose2dParams& p, DType dtype);
// early: this preparation (it reads only the weight) may start under the kernel ahead of it in the
// stream, meant to be the input's staging (channels_last_input.cuh); it waits for that kernel
// before it ends.
cudaError_t conv_wgmma_prepare_weight(const void* weight, void* prepared, DType dtype,
                                      const ConvTranspose2dParams& p, bool early, cudaStream_t stream);
struct ConvEpilogue;
cudaError_t conv_wgmma_forward(const void* x, const void* prepared_weight, const void* bias, void* out,
                               DType dtype, const ConvTranspose2dParams& p, const WgmmaTiling& t,
                               const ConvEpilogue& ep, cudaStream_t stream);

}  // namespace cuda
}  // namespace myops
