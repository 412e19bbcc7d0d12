#pragma once
// Strict float32 (TF32 off): whose transposed convolution a myops op runs, its own exact FFMA
// kernels or cuDNN's (at::conv_transpose2d, which then runs without TF32 too), the op's own
// epilogue passes following either way. Why: on some shapes cuDNN's strict algorithms do fewer
// multiply-adds than any direct GEMM can (H100: L2_19, L2_11, L1_65 ran slower through our FFMA
// kernels than through eager PyTorch), on others ours are 2-9x faster (L1_57, L1_75), and nothing
// in the shape says which: the first call of each shape times both, as
// torch.backends.cudnn.benchmark does for cuDNN's own algorithms.
#include <cuda_runtime.h>

#include <functional>
#include <string>

namespace myops {

enum class ConvSource { Myops, Cudnn };

// The source for a call identified by key (op, shapes, layout; the device is added here).
// MYOPS_STRICT_FP32_CONV=myops or =cudnn forces one (tests, A/B). Otherwise, where may_time (the
// caller's: cuDNN enabled and no deterministic algorithms requested, since a timed choice may
// differ, and so give other bits, from one process to the next), the key's first call runs
// run(source) for each source on `stream` (one warm-up, then the faster of two timed runs) and
// the faster source is kept for the process; a source that throws is never chosen. While `stream`
// is being captured into a CUDA graph nothing may be timed or synchronised: an unknown key then
// takes Myops, uncached. Without may_time: Myops.
ConvSource strict_fp32_conv_source(const std::string& key, cudaStream_t stream, bool may_time,
                                   const std::function<void(ConvSource)>& run);

}  // namespace myops
