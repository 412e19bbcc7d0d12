#pragma once
// The shared-memory tile of the passes that transpose between NCHW and NHWC with 16-byte global
// accesses on both sides: rows are channels, each a run of 16-byte units of consecutive pixels.
// One phase moves whole units along a row (a quarter-warp covers 8 units); the other moves, per
// thread, one pixel of `pack_rows` consecutive rows (its channel pack), lanes side by side across
// packs. Storing unit u of row r at u ^ ((r / pack_rows) % 8) keeps both free of bank conflicts:
// the 8 units of a quarter-warp stay within their aligned group of 8, and the eight packs of a
// warp land on eight different units of the group.
namespace myops {
namespace cuda {

__device__ inline int swizzled_unit(int row, int unit, int pack_rows) { return unit ^ ((row / pack_rows) % 8); }

}  // namespace cuda
}  // namespace myops
