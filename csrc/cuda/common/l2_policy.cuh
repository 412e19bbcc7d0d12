#pragma once
// L2 eviction policies for global accesses (the L2Hint flags of conv_transpose2d.cuh).
#include <cstdint>

#include "cuda/conv/wgmma/wgmma_ops.cuh"

namespace myops {
namespace cuda {

enum class L2Priority { EvictNormal, EvictFirst, EvictLast };

// A policy operand for the .L2::cache_hint instruction forms (sm_90a builds; 0 elsewhere, where
// the hinted forms below are plain accesses).
__device__ inline uint64_t l2_policy(L2Priority priority) {
  uint64_t policy = 0;
#if MYOPS_WGMMA_ARCH
  if (priority == L2Priority::EvictFirst)
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  else if (priority == L2Priority::EvictLast)
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  else
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

// *dst = v (4, 8 or 16 bytes, aligned to its size) with an L2 eviction policy.
template <typename V>
__device__ inline void store_with_policy(V* dst, const V& v, uint64_t policy) {
  static_assert(sizeof(V) == 4 || sizeof(V) == 8 || sizeof(V) == 16, "4, 8 or 16 bytes");
#if MYOPS_WGMMA_ARCH
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
  if constexpr (sizeof(V) == 4) {
    asm volatile("st.global.L2::cache_hint.b32 [%0], %1, %2;" ::"l"(dst), "r"(w[0]), "l"(policy) : "memory");
  } else if constexpr (sizeof(V) == 8) {
    asm volatile("st.global.L2::cache_hint.v2.b32 [%0], {%1, %2}, %3;" ::"l"(dst), "r"(w[0]), "r"(w[1]), "l"(policy)
                 : "memory");
  } else {
    asm volatile("st.global.L2::cache_hint.v4.b32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(dst), "r"(w[0]), "r"(w[1]),
                 "r"(w[2]), "r"(w[3]), "l"(policy)
                 : "memory");
  }
#else
  (void)policy;
  *dst = v;
#endif
}

}  // namespace cuda
}  // namespace myops
