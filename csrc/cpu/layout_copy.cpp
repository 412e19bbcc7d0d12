#include "cpu/layout_copy.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

#include "cpu/vec_kernels.h"

namespace myops {
namespace {

constexpr int64_t kTile = vec::kTransposeTile;

// dst[b][c][r] = src[b][r][c] for `batches` rows x cols matrices, in kTile x kTile tiles, so that
// the strided side of each tile stays in cache; T: an unsigned integer of the element's size.
template <typename T>
void transpose_batched(const T* src, T* dst, int64_t batches, int64_t rows, int64_t cols) {
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t grain = std::max<int64_t>(1, 16384 / (kTile * cols));  // about 16K elements a task
  at::parallel_for(0, batches * row_tiles, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t b = t / row_tiles, r0 = (t % row_tiles) * kTile, r1 = std::min(rows, r0 + kTile);
      vec::transpose_rows(src + b * rows * cols, dst + b * rows * cols, rows, cols, r0, r1);
    }
  });
}

template <typename T>
void transpose_as(const at::Tensor& src, at::Tensor& dst, int64_t batches, int64_t rows, int64_t cols) {
  transpose_batched(static_cast<const T*>(src.const_data_ptr()), static_cast<T*>(dst.data_ptr()), batches, rows, cols);
}

}  // namespace

at::Tensor to_memory_format(const at::Tensor& t, at::MemoryFormat format) {
  if (t.is_contiguous(format)) return t;
  const at::MemoryFormat other =
      format == at::MemoryFormat::ChannelsLast ? at::MemoryFormat::Contiguous : at::MemoryFormat::ChannelsLast;
  if (t.dim() != 4 || !t.is_contiguous(other) || t.is_conj() || t.is_neg()) return t.contiguous(format);
  const int64_t N = t.size(0), C = t.size(1), HW = t.size(2) * t.size(3);
  // (narrow matrices, e.g. an RGB image's three channels: ATen's copy is as fast)
  if (C < kTile / 2 || HW < kTile / 2) return t.contiguous(format);
  at::Tensor out = at::empty(t.sizes(), t.options().memory_format(format));
  // NCHW -> NHWC transposes each image's [C, HW]; NHWC -> NCHW its [HW, C]
  const bool to_nhwc = format == at::MemoryFormat::ChannelsLast;
  const int64_t rows = to_nhwc ? C : HW, cols = to_nhwc ? HW : C;
  switch (t.element_size()) {
    case 2: transpose_as<uint16_t>(t, out, N, rows, cols); break;
    case 4: transpose_as<uint32_t>(t, out, N, rows, cols); break;
    case 8: transpose_as<uint64_t>(t, out, N, rows, cols); break;
    default: return t.contiguous(format);
  }
  return out;
}

}  // namespace myops
