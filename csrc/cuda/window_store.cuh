#pragma once
// Where a window-stored conv output (ConvEpilogue::pool_windows) keeps each 2 x 2 window: shared
// by the conv epilogue that writes it and the BatchNorm chain's tail that reads it.
#include <cstdint>

#include "common/host_device.h"

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
// The same for the reader's many calls, the division by tile_rows as a multiply by its float
// reciprocal: exact while r < 2^21 ((r + 0.5) / tile_rows lies at least 0.5 / tile_rows from an
// integer, the product's error is below r x 2^-23 / tile_rows).
__device__ __forceinline__ int window_store_row_small(int r, float inv_tile_rows) {
  return r / 2 + static_cast<int>((static_cast<float>(r) + 0.5f) * inv_tile_rows);
}
MYOPS_HD int64_t window_store_rows(int64_t OH, int64_t tile_rows) {
  return OH < 2 ? 0 : window_store_row<int64_t>(OH / 2 * 2 - 1, tile_rows) + 1;
}

}  // namespace cuda
}  // namespace myops
