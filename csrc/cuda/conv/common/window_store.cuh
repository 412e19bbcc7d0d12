#pragma once
// Where a window-stored conv output (ConvEpilogue::pool_windows) keeps each 2 x 2 window: shared
// by the conv epilogue that writes it and the BatchNorm chain's tail that reads it.
#include <cstdint>

#include "common/host_device.h"
#include "cuda/common/small_quotient.cuh"

namespace myops {
namespace cuda {

// Rows of a window-stored output (ConvEpilogue::pool_windows) whose tiles are `tile_rows` output
// rows tall: output row r (of a window: r < 2 x (OH / 2)) is stored in row r / 2 + r / tile_rows,
// so a window split by a tile edge gets one row per half and rows between unsplit windows stay
// unused.
template <typename I>
MYOPS_HD I window_store_row(I r, I tile_rows) {
  return r / 2 + r / tile_rows;
}
// The same for the reader's many calls (r < 2^21), the division by tile_rows by quotient_small.
__device__ __forceinline__ int window_store_row_small(int r, float inv_tile_rows) {
  return r / 2 + quotient_small(r, inv_tile_rows);
}
MYOPS_HD int64_t window_store_rows(int64_t OH, int64_t tile_rows) {
  return OH < 2 ? 0 : window_store_row<int64_t>(OH / 2 * 2 - 1, tile_rows) + 1;
}

#ifdef __CUDACC__
// max(a, b), NaN if either is NaN (max_pool2d's rule), in one instruction: how the conv epilogue
// reduces a window and the tail combines a split window's two halves.
__device__ __forceinline__ float max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
#endif

}  // namespace cuda
}  // namespace myops
