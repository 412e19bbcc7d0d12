#pragma once
// Whose transposed convolution a myops op runs: its own kernels or cuDNN's (at::conv_transpose2d,
// under the same TF32 setting), the op's own epilogue passes following either way. Why: with TF32
// off, cuDNN's strict algorithms do fewer multiply-adds than any direct GEMM on some shapes while
// ours are several times faster on others (grouped, strided, large maps); and with tensor cores,
// cuDNN's channels-last kernels beat ours on some layers (4-tap stride-2 up-sampling) and lose on
// others. Nothing in the shape says which: the first call of each shape times the candidates, as
// torch.backends.cudnn.benchmark does for cuDNN's own algorithms.
#include <cuda_runtime.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace myops {

// Cudnn: cuDNN in the input's layout. CudnnChannelsLast: an NCHW input copied to channels-last,
// cuDNN there (its fastest kernels), the output copied back: the copies are part of its time.
enum class ConvSource { Myops, Cudnn, CudnnChannelsLast };

const char* conv_source_name(ConvSource source);

// A timed choice: the source kept and each candidate's median milliseconds (infinity: it threw).
struct ConvChoice {
  ConvSource source = ConvSource::Myops;
  std::vector<std::pair<ConvSource, float>> ms;
};

// The source for a call identified by key (op, shapes, layout, math, options; the device is added
// here; the caller applies a source forced by myops.backends first) among candidates (Myops
// first). Where may_time (the caller's: cuDNN enabled and no deterministic algorithms requested,
// since a timed choice may differ, and so give other bits, from one process to the next), the
// key's first call runs run(source) for each candidate on `stream` (one warm-up each, then the
// median of alternating timed rounds) and the fastest is kept for the process; a source that
// throws is never chosen. While `stream` is being captured into a CUDA graph nothing may be timed
// or synchronised: an unknown key then takes Myops, uncached. Without may_time: Myops.
ConvSource timed_conv_source(const std::string& key, cudaStream_t stream, bool may_time,
                             const std::vector<ConvSource>& candidates, const std::function<void(ConvSource)>& run);

// The choice already made for key on the current device, if its first call has been timed.
std::optional<ConvChoice> cached_conv_choice(const std::string& key);

}  // namespace myops
