#pragma once
// TMA tensor maps over a contiguous NCHW input (host side): the wgmma kernel's producer loads each
// chunk's input halo as one box of cols x rows pixels x channels of one image, asynchronously and
// several chunks ahead, instead of through registers one chunk at a time.
#include <cuda.h>

#include "cuda/launch.cuh"

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

}  // namespace cuda
}  // namespace myops
