#pragma once
// Thread block clusters (sm_90): the blocks of a cluster run at once and read each other's shared
// memory, so a few blocks can share one reduction without a second kernel or a global scratch.
// Compiled for an earlier architecture, every block is a cluster of one (the host launches no
// larger ones there: cluster_launch_supported in arch.cuh).
#include <cuda_runtime.h>

#include "cuda/common/arch.cuh"

namespace myops {
namespace cuda {

#ifdef __CUDACC__
// This block's rank in its cluster, and the cluster's size in blocks.
struct ClusterPosition {
  unsigned rank, blocks;
};
__device__ __forceinline__ ClusterPosition cluster_position() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ClusterPosition p;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n\tmov.u32 %1, %%cluster_ctarank;" : "=r"(p.blocks), "=r"(p.rank));
  return p;
#else
  return {0, 1};
#endif
}

// Every thread of the cluster's blocks arrives and waits; the shared-memory writes before it are
// visible to the cluster's readers after it.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  __syncthreads();
#endif
}

// v at the address of `local` (this block's shared memory) in block `rank` of the cluster.
__device__ __forceinline__ double cluster_load(const double* local, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(local));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  double v;
  asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(remote) : "memory");
  return v;
#else
  (void)rank;
  return *local;
#endif
}
#endif

// The launch attribute (launch_with) of clusters of `blocks` blocks along x.
inline cudaLaunchAttribute cluster_dimension(unsigned blocks) {
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = blocks;
  cluster.val.clusterDim.y = cluster.val.clusterDim.z = 1;
  return cluster;
}

}  // namespace cuda
}  // namespace myops
