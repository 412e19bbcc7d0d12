#pragma once
// Copies between NCHW and channels-last (NHWC) on the CPU: per image a [C, H*W] <-> [H*W, C]
// transpose in cache-sized tiles, vectorised per x86-64 level (vec_kernels.h): faster than ATen's
// element-wise strided copy (the CPU conv's layout copies around oneDNN's NHWC kernels).
#include <ATen/ATen.h>

namespace myops {

// t in `format` (Contiguous or ChannelsLast): t itself where it already is, the tiled transpose
// where t is a dense 4-D tensor in the other layout, else t.contiguous(format).
at::Tensor to_memory_format(const at::Tensor& t, at::MemoryFormat format);

}  // namespace myops
