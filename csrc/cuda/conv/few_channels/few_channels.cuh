#pragma once
// The few-channels conv_transpose2d kernel, for plain float32 / float64 calls (no GroupNorm /
// BatchNorm partials) with at most 4 output channels per group and at most 512 multiply-adds per
// output value: the image heads of decoders and GAN generators (64 -> 3 RGB), mask and flow heads.
// Their GEMM's channel dimension fills at most a quarter of a tensor-core tile (m16: 3 of 16
// rows), so an output-stationary FFMA kernel does as well or better there; the compile pass routes such heads to myops.conv_transpose2d (README).
//  - a block owns one output phase (oh mod s_h, ow mod s_w) of one group of one image: a tile of
//    `cols` phase columns (lanes: consecutive input columns, coalesced loads) x rows;
//  - a thread computes kFewChannelsRows consecutive phase rows x every output channel of the
//    group (up to kFewChannels), so one shared-memory load of a (tap, input channel)'s weights
//    serves kFewChannelsRows x 4 multiply-adds;
//  - the input is read straight from global memory (the taps of a channel re-read its rows from
//    L1); only the phase's weights are staged, in shared memory.
// The FFMA products are exact whatever the TF32 setting.
#include "cuda/common/launch.cuh"

namespace myops {
namespace cuda {

constexpr int kFewChannels = 4;  // output channels per group the kernel takes
constexpr int kFewChannelsRows = 4;      // phase rows per thread

// cols == 0: the few-channels kernel does not take the call.
struct FewChannelsTiling {
  int cols = 0;  // phase columns per block: 8, 16 or 32 (the phase grid's width, rounded up)
};

// why: where it does not take the call, the reason.
FewChannelsTiling conv_few_channels_tiling(const ConvTranspose2dParams& p, DType dtype, std::string* why = nullptr);
struct ConvEpilogue;
// prepared_weight: the generic kernel's layout [groups][kH * kW][C_in / groups][C_out / groups].
// ep: bias and activation only (the plan takes this kernel for plain calls).
cudaError_t conv_few_channels_forward(const void* x, const void* prepared_weight, const void* bias, void* out,
                                      DType dtype, const ConvTranspose2dParams& p, const FewChannelsTiling& t,
                                      const ConvEpilogue& ep, cudaStream_t stream);

}  // namespace cuda
}  // namespace myops
