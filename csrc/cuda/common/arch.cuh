#pragma once
// What the current device and this build's kernels on it support. The Hopper-generation features
// (thread block clusters, programmatic dependent launch, the wgmma / TMA engine) need an sm_90+
// device, kernels compiled for sm_90+ (not an older architecture's PTX JIT-compiled for it: their
// cluster and launch-dependency code compiles to nothing there) and the option hopper on.

namespace myops {
namespace cuda {

// Compute capability (major * 10 + minor) of the current device, looked up once per device.
int current_device_sm();

// The virtual architecture (major * 10 + minor) the build's kernels were compiled from for the
// current device: the newest of the build's targets the device runs; 0 if none.
int kernels_arch();

// Clusters, programmatic dependent launch and the Hopper engine: sm_90+ device and kernels, and
// myops.backends' hopper option on.
bool hopper_features();

}  // namespace cuda
}  // namespace myops
