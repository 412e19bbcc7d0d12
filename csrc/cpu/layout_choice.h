#pragma once
// Which oneDNN kernels run the CPU conv of an NCHW input: its NCHW ones, or its channels-last ones
// with the two layout copies around them. Neither wins everywhere (on two cores, a k3 x 7 layer ran
// faster channels-last, a k3 one faster NCHW), so the first call of each shape times both, as
// cudnn.benchmark does, and the choice is cached for the process.
#include <functional>
#include <string>

#include "common/conv_params.h"

namespace myops {

struct CpuLayoutChoice {
  bool channels_last = false;
  double nchw_ms = 0, channels_last_ms = 0;  // the medians timed (0: not timed, the option decided)
};

// The choice for call p of a `dtype_name` input with / without bias: the option cpu_channels_last
// ('never' / 'always') decides, or in 'auto' a timed choice (run(channels_last) runs the conv one
// way), NCHW where PyTorch's deterministic algorithms are asked for.
CpuLayoutChoice cpu_conv_layout(const ConvTranspose2dParams& p, const std::string& dtype_name, bool has_bias,
                                const std::function<void(bool)>& run);

// myops.explain's line for such a call: the layout the option or deterministic mode sets, or the
// timed choice with its medians, or that the first call has not timed it yet.
std::string explain_cpu_conv_layout(const ConvTranspose2dParams& p, const std::string& dtype_name, bool has_bias);

}  // namespace myops
