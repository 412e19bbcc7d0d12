#pragma once
// TMA tensor maps over the input (host side), for the wgmma kernel's producer:
//  - NCHW: each chunk's input halo as one box of cols x rows pixels x channels of one image,
//    several chunks ahead (the producer then transposes it through registers);
//  - NHWC (a channels-last copy or input): each K-plane of a chunk's halo as one box of
//    16 bytes of channels x cols x rows, which lands in shared memory in the MMA's operand
//    layout (16 bytes per pixel, row-major), so that no thread touches the input.
#include <cuda.h>

#include "cuda/common/launch.cuh"

namespace myops {
namespace cuda {

struct InputBox {
  int cols = 0, rows = 0, channels = 0;
};

// Whether TMA can address the input with this box, whatever its pointer: rows a multiple of 16
// bytes, box sides within TMA's 256 elements, the box's row a multiple of 16 bytes, sizes in range.
bool input_box_supported(const ConvTranspose2dParams& p, DType dtype, const InputBox& box);

// A 4-D map (W, H, C_in, N) of x with the given box; elements outside the tensor read as zero.
// False when x is not 16-byte aligned, the box is unsupported, or the driver cannot encode it:
// the caller then loads without TMA.
bool encode_input_map(CUtensorMap* map, const void* x, DType dtype, const ConvTranspose2dParams& p,
                      const InputBox& box);

// Whether the driver's tensor-map encoder could be found (else no call uses TMA).
bool tensor_maps_available();

// The same for an NHWC input: a 4-D map (C_in, W, H, N) with boxes of box.channels (16 bytes)
// x cols x rows. Needs C_in x element size a multiple of 16 bytes and a 16-byte aligned pointer.
bool channels_last_box_supported(const ConvTranspose2dParams& p, DType dtype, const InputBox& box);
bool encode_channels_last_input_map(CUtensorMap* map, const void* x, DType dtype, const ConvTranspose2dParams& p,
                                    const InputBox& box);

}  // namespace cuda
}  // namespace myops
