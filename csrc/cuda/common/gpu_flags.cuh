#pragma once
// Release / acquire at GPU scope: the conv's per-image count of finished blocks and the follower
// blocks' wait on it (group_norm_follow.cuh). sm_70 and later.

namespace myops {
namespace cuda {

// *p += v, after every write this thread has made or observed (a barrier before it brings in the
// block's) is visible at GPU scope: fence.acq_rel + a relaxed reduction (the pattern of CUTLASS's
// grid barrier; __threadfence() would be a sequentially consistent membar.gl, stronger than needed).
__device__ inline void release_add(unsigned* p, unsigned v) {
  asm volatile("fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// *p, with every write released before the value it reads visible to this thread afterwards.
__device__ inline unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

}  // namespace cuda
}  // namespace myops
