#include <atomic>

#include "common/options.h"
#include "cuda/common/arch.cuh"

namespace myops {
namespace cuda {
namespace {

// Never launched: its attributes say which of the build's targets the device loaded.
__global__ void arch_probe_kernel() {}

// f(device) once per device (a driver query on every launch is host time the kernels wait for),
// lock-free after the first call; devices past the table are queried each time.
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

}  // namespace

int current_device_sm() {
  static std::atomic<int> cache[64];
  return per_device(cache, [](int device) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    return 10 * major + minor;
  });
}

int kernels_arch() {
  static std::atomic<int> cache[64];
  return per_device(cache, [](int) {
    cudaFuncAttributes attributes{};
    if (cudaFuncGetAttributes(&attributes, arch_probe_kernel) != cudaSuccess) {
      (void)cudaGetLastError();  // no kernel for this device: nothing of ours runs on it
      return 0;
    }
    return attributes.ptxVersion;
  });
}

bool hopper_features() {
  return option(Option::Hopper) != 0 && current_device_sm() >= 90 && kernels_arch() >= 90;
}

}  // namespace cuda
}  // namespace myops
