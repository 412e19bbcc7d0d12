#include <atomic>

#include "common/options.h"
#include "cuda/common/arch.cuh"

namespace myops {
namespace cuda {
namespace {

// Never launched: its attributes say which of the build's targets the device loaded.
__global__ void arch_probe_kernel() {}

// f(device) >= 0 for the current device, once per device and lock-free after the first call;
// devices past the table are queried each time.
template <typename F>
int per_device(std::atomic<int> (&cache)[64], F f) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0) {
    (void)cudaGetLastError();
    return 0;
  }
  if (device >= 64) return f(device);
  int v = cache[device].load(std::memory_order_relaxed);
  if (v == 0) cache[device].store(v = f(device) + 1, std::memory_order_relaxed);  // stored + 1: 0 is "unknown"
  return v - 1;
}

int device_sm(int device) {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return 10 * major + minor;
}

// The virtual architecture (major * 10 + minor) the build's kernels were compiled from for the
// current device: the newest of the build's targets it runs; 0 if none.
int kernels_arch() {
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, arch_probe_kernel) != cudaSuccess) {
    (void)cudaGetLastError();  // no kernel for this device: nothing of ours runs on it
    return 0;
  }
  return attributes.ptxVersion;
}

}  // namespace

int current_device_sm() {
  static std::atomic<int> cache[64];
  return per_device(cache, device_sm);
}

bool hopper_features() {
  static std::atomic<int> cache[64];
  return option(Option::Hopper) != 0 &&
         per_device(cache, [](int device) { return device_sm(device) >= 90 && kernels_arch() >= 90 ? 1 : 0; }) != 0;
}

bool cluster_launch_supported() {
  static std::atomic<int> cache[64];
  return hopper_features() && per_device(cache, [](int device) {
           int supported = 0;
           if (cudaDeviceGetAttribute(&supported, cudaDevAttrClusterLaunch, device) != cudaSuccess) {
             (void)cudaGetLastError();
             supported = 0;
           }
           return supported != 0 ? 1 : 0;
         }) != 0;
}

}  // namespace cuda
}  // namespace myops
