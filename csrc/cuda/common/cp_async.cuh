#pragma once
// Ampere-style asynchronous global -> shared copies (sm_80 and later): 16 bytes per thread and
// instruction, grouped by commit; a thread waits for its own groups, a barrier then publishes
// them to the block.
#include <cstdint>

namespace myops {
namespace cuda {

__device__ inline void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))),
               "l"(gmem));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits for all of this thread's committed groups.
__device__ inline void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

}  // namespace cuda
}  // namespace myops
