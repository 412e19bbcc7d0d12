#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <type_traits>

#include "cuda/group_norm_follow.cuh"
#include "cuda/group_norm_item.cuh"

namespace myops {
namespace cuda {
namespace {

constexpr int kThreads = 256;  // the block team of group_norm_stats_from_tiles: the same bits
// A follower block must move 1/k of the pass's bytes while the conv runs. Through registers a
// block kept ~20 GB/s whatever it unrolled (H100: 8 or 16 vectors of 16 bytes in flight per
// thread, 16 blocks, L2_19 float32: the pass took 14-15 ms); bulk copies into shared memory keep
// kSlots pieces in flight per warp (96 KB in all), and a block still fits beside one block of the
// two-block conv kernel (two of those take the whole register file: a follower takes the place of
// the second). Per-warp rings against one ring for the block (16 KB x 6, a block barrier per piece),
// H100, followers alone after the conv, 16 blocks, L2_19 float32: 3.26-3.32 ms against 4.55-4.96
// for the pass; the whole op (33 blocks) 4.32-4.40 against 4.44-4.52 ms. Six slots per warp (the
// whole SM's shared memory: MYOPS_GN_SLOTS=6) with 16 or 24 blocks did not beat 3 slots with 28-33.
constexpr int kWarps = kThreads / 32;
constexpr int kSlots = 3, kMaxSlots = 6;
// the warps' mbarriers, then the item's mean and rstd
constexpr uint32_t kBarrierBytes = 512;
static_assert(8 * kWarps * kMaxSlots + 16 <= kBarrierBytes, "follower mbarriers overflow their area");
int follow_slots() { return std::clamp(env_int("MYOPS_GN_SLOTS").value_or(kSlots), 1, kMaxSlots); }
constexpr int64_t kMaxGroupChannels = 1024;  // the group's PlaneNorms in shared memory

// MYOPS_GN_SLOTS=s: s slots per warp (1 to 6; A/B runs), the default kSlots. With 6 the block
// takes a whole SM (it then waits for conv blocks to leave one) and float64 over wide groups may
// not fit in shared memory: the launch then fails with its error.
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
// normalise once the conv ends; in few parts they keep only a few of the blocks busy after it.
// H100, L2_19, whole op, idle ms, 0 / 1 / 2 / 4 tail images (whole groups before them): float32
// 4.401 / 4.384 / 4.366 / 4.373, bfloat16 3.104 / 3.115 / 3.115 / 3.125. Parts before the tail
// keep the blocks on fewer images at a time (the conv's output is more often still in L2 when they
// read it) but each part costs the group's statistics and a drained slot ring again. 33 blocks,
// whole groups with the tail / every image in 2 / 4 / 8 parts, idle ms: float32 4.449 / 4.375 / 4.775 / 5.79,
// bfloat16 2.785 / 2.752 / 3.21 / 4.29; another machine, whole groups / 2 parts, each with the
// 2-image tail: float32 4.352-4.375 / 4.343-4.362, bfloat16 2.709-2.714 / 2.677-2.694 (a gain of
// ~1%, in the noise of one run but in every pair).
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

// The followers cost the conv ~30% of its time (the slots they hold, the count's fence, the memory
// traffic they add) and save the separate normalise pass, so the pass must be a large enough
// share of the conv: few enough FLOPs per output value. Each (image, group) item has a fixed cost
// (~5 us: the wait, the partials, the first copies), so items must be large; and an image is
// normalised only once all its conv blocks are done, the last one after the conv on a quarter of
// the SMs, so there must be many images. H100, whole op ms, separate passes / followers (same
// run, alternating): L2_19's layer (1152 FLOPs per value, 8-channel groups of 258^2) float32 at
// N = 8 / 16 / 32 / 64 / 128: 0.475 / 0.824 / 1.442 / 2.675 / 5.080 against 0.539 / 0.840 /
// 1.387 / 2.437 / 4.521, bfloat16 0.370 / 0.590 / 0.997 / 1.792 / 3.392 against 0.420 / 0.624 /
// 1.027 / 1.708 / 3.179; the followers lost on every other shape tried: 128 -> 128 channels k3 at
// 128^2 (2304 FLOPs per value; float32 N = 16 / 32 / 64: 0.499 / 0.913 / 1.667 against 0.562 /
// 0.992 / 1.800), k4 stride-2 layers (bfloat16 16 x 128 x 64^2 in, 4-channel groups: 0.378 against
// 0.450; 256 x 128 x 16^2 in, 16 KB items: 0.288 against 0.597), 64 channels at 64^2 (N = 64,
// 128 KB items: 0.284 against 0.400), 8 images of 1024^2 (5.155 against 5.360).
static bool group_norm_follow_pays(const FollowShape& s) {
  constexpr int64_t kMinImages = 32, kMinItemBytes = 512 * 1024;
  constexpr double kMaxFlopsPerValue = 1536;
  const int64_t item_bytes = s.num_groups > 0 ? s.C / s.num_groups * s.HW * s.elem_bytes : 0;
  return s.N >= kMinImages && item_bytes >= kMinItemBytes && s.flops_per_value <= kMaxFlopsPerValue;
}

// H100 (132 SMs), L2_19, ms for the whole op with 0 (separate passes) / 24 / 28 / 32-33 / 40 / 48
// blocks: float32 5.05-5.09 / 5.06 / 4.50 / 4.45-4.50 / 4.51 / 4.60, bfloat16 3.31-3.42 / 3.50 /
// 3.04 / 3.05-3.15 / 3.26 / 3.32. Fewer fall behind the conv (its output then leaves L2 before
// they read it), more take block slots from it.
// Under MPS with a share of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) the device's SM count
// overstates the block slots the process gets: follower blocks could then hold every slot while
// the conv's remaining blocks wait for one, so the overlap stays off there.

// On by default since session 55. Sessions 53-54 kept it off: on the H100, L2_19 float32 with 33
// followers gave a wrong image in ~1% of calls (one conv tile's band of rows, every channel). The
// cause was the conv's, exposed by the followers' timing: its producer's generic reads of an input
// box were not ordered before the TMA that refilled the box (a proxy fence was missing;
// wgmma_ops.cuh, fence_proxy_async_shared). With the fence, the trace harness that showed 192 wrong
// calls in 1500 (notes/wip_s54_race_trace.patch) showed 0 in 3000.
// MYOPS_GN_FOLLOWERS=k forces k blocks (0: the separate passes; tests, A/B runs).
constexpr bool kOverlapByDefault = true;

int group_norm_follow_blocks(int sms, const FollowShape& s) {
  if (const std::optional<int> forced = env_int("MYOPS_GN_FOLLOWERS")) return std::max(0, *forced);
  if (std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") != nullptr) return 0;
  return kOverlapByDefault && group_norm_follow_pays(s) ? std::max(1, sms / 4) : 0;
}

// H100, L2_19, 33 followers, idle ms, no hints / kL2InputEvictFirst | kL2FollowerEvictFirst (same
// build and process, three rounds, session 53): bfloat16 2.847 / 2.779 / 2.785 against 2.800 /
// 2.725 / 2.729; float32 4.469 / 4.509 / 5.038 against 4.476 / 4.530 / 5.115 (its images stay too
// large for L2: no hints there). Session 55 (bench, --no-compile, bfloat16 L2_19, one process each):
// 2.801 ms without hints (MYOPS_L2HINT=0) against 2.790 with them.
unsigned group_norm_follow_l2_hints(DType dtype) {
  if (const std::optional<int> forced = env_int("MYOPS_L2HINT")) return static_cast<unsigned>(*forced);
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
                    follow_slots()};
  if (const char* env = std::getenv("MYOPS_GN_PARTS")) {  // "body_parts/tail_images/tail_parts": A/B runs
    int body_parts = 0, tail_images = 0, tail_parts = 0;
    if (std::sscanf(env, "%d/%d/%d", &body_parts, &tail_images, &tail_parts) == 3) {
      items.body_parts = std::clamp(body_parts, 1, 64);
      items.tail_images = std::clamp<int64_t>(tail_images, 0, N);
      items.tail_parts = std::clamp(tail_parts, 1, 64);
    }
  }
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
