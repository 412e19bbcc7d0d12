#pragma once
// What the current device and this build's kernels on it support. The Hopper-generation features
// (thread block clusters, programmatic dependent launch, the wgmma / TMA engine) need an sm_90+
// device, kernels compiled for sm_90+ (not an older architecture's PTX JIT-compiled for it: their
// cluster and launch-dependency code compiles to nothing there) and the option hopper on. Each
// answer is looked up once per device (a driver query on every launch is host time the kernels
// wait for).

namespace myops {
namespace cuda {

// Compute capability (major * 10 + minor) of the current device.
int current_device_sm();

// Clusters, programmatic dependent launch and the Hopper engine: an sm_90+ device running kernels
// compiled for sm_90+ (the PTX version of the kernel the driver loaded), and myops.backends'
// hopper option on.
bool hopper_features();

// hopper_features() and the device launches clusters (cudaDevAttrClusterLaunch).
bool cluster_launch_supported();

}  // namespace cuda
}  // namespace myops
