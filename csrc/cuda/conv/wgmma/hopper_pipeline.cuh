#pragma once
// Hopper (sm_90a) pieces of a warp-specialised pipeline: shared-memory mbarriers (arrive counts
// plus expected transaction bytes), the bulk global -> shared copy that completes on an mbarrier,
// TMA tensor loads, register reallocation between warpgroups, and named barriers. Like wgmma_ops.cuh, the bodies
// are instructions only in the sm_90a target; elsewhere the host never selects the kernel.
#include <cstdint>

#include "cuda/conv/wgmma/wgmma_ops.cuh"

namespace myops {
namespace cuda {

__device__ inline void mbar_init(uint32_t bar, uint32_t arrivals) {
#if MYOPS_WGMMA_ARCH
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
#endif
}

// After a thread's mbar_init calls, before the barrier that publishes them to the block: makes
// the initialised barriers visible to the async proxy, which completes bulk copies and TMA loads
// on them (complete_tx); the pattern of the CUDA programming guide's TMA example and of CUTLASS's
// pipelines. (The GroupNorm followers' race was fixed by a proxy fence on the input boxes'
// reads, not by this: wgmma_ops.cuh.)
__device__ inline void mbar_init_fence() {
#if MYOPS_WGMMA_ARCH
  asm volatile("fence.mbarrier_init.release.cluster;\n"
               "fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Release: this thread's earlier shared-memory writes are visible to whoever waits on the phase.
__device__ inline void mbar_arrive(uint32_t bar) {
#if MYOPS_WGMMA_ARCH
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}

// The current phase also waits for `bytes` of asynchronous copies (complete_tx).
__device__ inline void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
#if MYOPS_WGMMA_ARCH
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}

// Acquire: blocks until the phase with the given parity (0 for the 1st, 3rd, ... completion) is done.
__device__ inline void mbar_wait(uint32_t bar, uint32_t parity) {
#if MYOPS_WGMMA_ARCH
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory through
// the async proxy (wgmma reads it without a proxy fence); completes as transaction bytes on `bar`.
__device__ inline void bulk_copy_to_shared(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
#if MYOPS_WGMMA_ARCH
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#endif
}

// This thread's arrival, also adding `bytes` of expected asynchronous copies to the current phase.
__device__ inline void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if MYOPS_WGMMA_ARCH
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}

// One box of a 4-D tensor map (a CUtensorMap kernel parameter, passed by its address) from global
// to shared memory (128-byte aligned) through TMA; coordinates innermost first, elements outside
// the tensor read as zero; completes as transaction bytes on `bar`.
__device__ inline void tma_load_4d(uint32_t dst, const void* tensor_map, int c0, int c1, int c2, int c3,
                                   uint32_t bar) {
#if MYOPS_WGMMA_ARCH
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
      ::"r"(dst), "l"(tensor_map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
#endif
}

// The same with an L2 eviction policy (l2_policy.cuh).
__device__ inline void tma_load_4d_with_policy(uint32_t dst, const void* tensor_map, int c0, int c1, int c2, int c3,
                                               uint32_t bar, uint64_t policy) {
#if MYOPS_WGMMA_ARCH
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n"
      ::"r"(dst), "l"(tensor_map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "l"(policy)
      : "memory");
#endif
}

// Moves registers between the warpgroups of a block (all warps of a warpgroup execute it).
template <int Regs>
__device__ inline void warpgroup_reg_alloc() {
#if MYOPS_WGMMA_ARCH
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Regs));
#endif
}
template <int Regs>
__device__ inline void warpgroup_reg_dealloc() {
#if MYOPS_WGMMA_ARCH
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Regs));
#endif
}

// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32).
struct NamedBarrier {
  int id, threads;
  __device__ void operator()() const {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
  }
  // Signals arrival without waiting (the waiting side calls operator()).
  __device__ void arrive() const {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
  }
};

}  // namespace cuda
}  // namespace myops
