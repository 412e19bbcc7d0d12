#pragma once
// Whose transposed convolution a myops op runs: its own kernels or cuDNN's (at::conv_transpose2d,
// under the same TF32 setting), the op's own epilogue passes following either way. Why: with TF32
// off, cuDNN's strict algorithms do fewer multiply-adds than any direct GEMM on some shapes (H100:
// L2_19's and L2_11's convs run slower through our FFMA kernels than through eager PyTorch) while ours
// are 2-9x faster on others (L1_57, L1_75); and with tensor cores, cuDNN's channels-last kernels
// beat ours on some layers (H100: the 4-tap stride-2 layers of decoders and GAN generators) and
// lose on others (L2_19, L2_11). Nothing in the shape says which: the first call of each shape
// times both, as torch.backends.cudnn.benchmark does for cuDNN's own algorithms.
#include <cuda_runtime.h>

#include <functional>
#include <string>

namespace myops {

enum class ConvSource { Myops, Cudnn };

// The source for a call identified by key (op, shapes, layout, math; the device is added here).
// MYOPS_CONV_SOURCE=myops or =cudnn forces one (tests, A/B). Otherwise, where may_time (the
// caller's: cuDNN enabled and no deterministic algorithms requested, since a timed choice may
// differ, and so give other bits, from one process to the next), the key's first call runs
// run(source) for each source on `stream` (one warm-up each, then the median of alternating
// timed rounds) and the faster source is kept for the process; a source that throws is never
// chosen. While `stream` is being captured into a CUDA graph nothing may be timed or
// synchronised: an unknown key then takes Myops, uncached. Without may_time: Myops.
ConvSource timed_conv_source(const std::string& key, cudaStream_t stream, bool may_time,
                             const std::function<void(ConvSource)>& run);

}  // namespace myops
