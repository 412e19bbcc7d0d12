#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <type_traits>

#include "common/options.h"
#include "cuda/conv/conv_transpose2d.cuh"  // L2Hint
#include "cuda/norm/group_norm_follow.cuh"
#include "cuda/norm/group_norm_item.cuh"

namespace myops {
namespace cuda {
namespace {

constexpr int kThreads = 256;  // the block team of group_norm_stats_from_tiles: the same bits
// A follower block must move 1/k of the pass's bytes while the conv runs: through registers a block
// stalls on latency, so bulk copies into shared memory keep kSlots pieces in flight per warp (per-warp
// rings: no block barrier per piece), and a block still fits beside one block of the two-block conv.
constexpr int kWarps = kThreads / 32;
constexpr int kSlots = 3;
// the warps' mbarriers, then the item's mean and rstd
constexpr uint32_t kBarrierBytes = 512;
static_assert(8 * kWarps * kSlots + 16 <= kBarrierBytes, "follower mbarriers overflow their area");
constexpr int64_t kMaxGroupChannels = 1024;  // the group's PlaneNorms in shared memory

// [mbarriers, the item's mean and rstd | slots (per warp) | the group's PlaneNorms (16 or 32 bytes
// each) | the block team's scratch]
template <typename T>
__device__ NormItemSmem<T> follow_smem(uint8_t* smem, int64_t C_g, int n_slots) {
  uint8_t* slots = smem + kBarrierBytes;
  PlaneNorm<T>* norms = reinterpret_cast<PlaneNorm<T>*>(slots + kWarps * n_slots * kNormPieceBytes);
  return {static_cast<uint32_t>(__cvta_generic_to_shared(smem)), slots, n_slots, norms,
          reinterpret_cast<Moments*>(norms + C_g), reinterpret_cast<double*>(smem + 8 * kWarps * n_slots)};
}
size_t follow_smem_bytes(int64_t C_g, DType dtype, int n_slots) {
  const size_t norm_bytes = dtype == DType::F64 ? 4 * sizeof(double) : 4 * sizeof(float);
  return kBarrierBytes + kWarps * n_slots * size_t(kNormPieceBytes) + size_t(C_g) * norm_bytes +
         kThreads * sizeof(Moments);
}

// The pass's items in image order: each (image, group) span in body_parts parts, except that the
// last tail_images images' groups come in tail_parts parts each. Those images are what is left to
// normalise once the conv ends; in few parts they would keep only a few blocks busy after it. More
// parts before the tail cost each part the group's statistics and a drained slot ring again.
struct FollowItems {
  int64_t N, G, tail_images;
  int body_parts, tail_parts, n_slots;
  __host__ __device__ int64_t body_count() const { return (N - tail_images) * G * body_parts; }
  __host__ __device__ int64_t count() const { return body_count() + tail_images * G * tail_parts; }
  // item i (< count()): its (image, group) index, which part of it, and of how many parts
  struct Part {
    int64_t group_item;
    int part, parts;
  };
  __host__ __device__ Part part_of(int64_t i) const {
    const int64_t body = body_count();
    if (i < body) return {i / body_parts, static_cast<int>(i % body_parts), body_parts};
    i -= body;
    return {(N - tail_images) * G + i / tail_parts, static_cast<int>(i % tail_parts), tail_parts};
  }
};

// Items blockIdx.x, blockIdx.x + gridDim.x, ... (normalise_group_part).
template <typename T, typename S>
__global__ void __launch_bounds__(kThreads) group_norm_follow_kernel(NormItemArgs<T, S> a, FollowItems items) {
  extern __shared__ __align__(128) uint8_t smem[];
  const NormItemSmem<T> sm = follow_smem<T>(smem, a.C / a.G, items.n_slots);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kWarps * items.n_slots; ++s) mbar_init(sm.bars + 8 * s, 1);
    mbar_init_fence();
  }
  __syncthreads();
  uint32_t seq = 0;
  const int64_t total = items.count();
  for (int64_t item = blockIdx.x; item < total; item += gridDim.x) {
    const FollowItems::Part p = items.part_of(item);
    normalise_group_part<kThreads>(a, sm, p.group_item, p.part, p.parts, seq);
  }
}

}  // namespace

// The followers cost the conv a share of its time (the slots they hold, the count's fence, the
// memory traffic they add) and save the separate normalise pass, so the pass must be a large enough
// share of the conv: few enough FLOPs per output value. Each (image, group) item has a fixed cost
// (the wait, the partials, the first copies), so items must be large; and an image is normalised
// only once all its conv blocks are done, so there must be many images. The followers win on
// 8-channel groups of a 64-channel k3 stride-1 layer at 258^2 from 32 images up, and lose on
// wider k3 layers, k4 stride-2 layers, small images and few large images.
static bool group_norm_follow_pays(const FollowShape& s) {
  constexpr int64_t kMinImages = 32, kMinItemBytes = 512 * 1024;
  constexpr double kMaxFlopsPerValue = 1536;
  const int64_t item_bytes = s.num_groups > 0 ? s.C / s.num_groups * s.HW * s.elem_bytes : 0;
  return s.N >= kMinImages && item_bytes >= kMinItemBytes && s.flops_per_value <= kMaxFlopsPerValue;
}

// A quarter of the SMs: fewer fall behind the conv (its output then leaves L2 before they read
// it), more take block slots from it.
// Under MPS with a share of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) the device's SM count
// overstates the block slots the process gets: follower blocks could then hold every slot while
// the conv's remaining blocks wait for one, so the overlap stays off there.
// Option::GnFollowers = k forces k blocks (0: the separate passes).
int group_norm_follow_blocks(int sms, const FollowShape& s) {
  const int forced = option(Option::GnFollowers);
  if (forced != kAuto) return std::max(0, forced);
  if (std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") != nullptr) return 0;
  return group_norm_follow_pays(s) ? std::max(1, sms / 4) : 0;
}

// 16-bit images fit L2 well enough for the hints to pay; float32 ones mostly miss either way.
unsigned group_norm_follow_l2_hints(DType dtype) {
  return dtype == DType::BF16 || dtype == DType::F16 ? kL2InputEvictFirst | kL2FollowerEvictFirst : 0u;
}

bool group_norm_follow_supported(int64_t C, int64_t num_groups) {
  return num_groups > 0 && C / num_groups <= kMaxGroupChannels;
}

cudaError_t group_norm_follow(void* y, DType dtype, int64_t N, int64_t C, int64_t HW, int64_t num_groups,
                              const void* tile_stats, int64_t tiles, double eps, const void* gamma,
                              const void* beta, const unsigned* tiles_done, unsigned blocks_per_image, int blocks,
                              unsigned l2_hints, cudaStream_t stream) {
  if (N * num_groups == 0 || HW == 0) return cudaSuccess;
  // every group in two parts, the last two images' in as many as it takes to give every block one
  FollowItems items{N, num_groups, std::min<int64_t>(N, 2), 2,
                    static_cast<int>(std::clamp<int64_t>((blocks + num_groups - 1) / num_groups, 1, 64)),
                    kSlots};
  if (!group_norm_follow_supported(C, num_groups)) return cudaErrorInvalidValue;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, items.count())));
  const size_t smem = follow_smem_bytes(C / num_groups, dtype, items.n_slots);
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using S = typename std::conditional<std::is_same<T, double>::value, double, float>::type;
    static_assert(sizeof(PlaneNorm<T>) <= 4 * sizeof(typename DTypeTraits<T>::acc_t), "follow_smem_bytes");
    const auto kernel = group_norm_follow_kernel<T, S>;
    const cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
    if (err != cudaSuccess) return err;
    const NormItemArgs<T, S> a{static_cast<T*>(y), C, HW, num_groups, static_cast<const S*>(tile_stats), tiles, eps,
                               static_cast<const T*>(gamma), static_cast<const T*>(beta), tiles_done,
                               blocks_per_image, (l2_hints & kL2FollowerEvictFirst) != 0};
    kernel<<<grid, kThreads, smem, stream>>>(a, items);
    return cudaGetLastError();
  });
}

}  // namespace cuda
}  // namespace myops
