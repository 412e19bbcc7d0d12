#pragma once
// Programmatic dependent launch (sm_90): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start once every block of the kernel
// ahead of it in the stream has called allow_dependent_launch() (or exited), and waits for that
// kernel to finish, its writes visible, at wait_for_prior_grid(). Both are no-ops for a kernel
// launched without the attribute, and below sm_90.

namespace myops {
namespace cuda {

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace cuda
}  // namespace myops
