#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "cuda/gpu_flags.cuh"
#include "cuda/group_norm_follow.cuh"
#include "cuda/group_norm_math.cuh"
#include "cuda/hopper_pipeline.cuh"

namespace myops {
namespace cuda {
namespace {

constexpr int kThreads = 256;  // the block team of group_norm_stats_from_tiles: the same bits
// A follower block must move 1/k of the pass's bytes while the conv runs. Through registers a
// block kept ~20 GB/s whatever it unrolled (H100: 8 or 16 vectors of 16 bytes in flight per
// thread, 16 blocks, L2_19 float32: the pass took 14-15 ms); bulk copies into shared memory keep
// kSlots pieces in flight, and a block still fits beside a two-block conv block.
constexpr uint32_t kPieceBytes = 16 * 1024;
constexpr int kSlots = 6;
constexpr uint32_t kBarrierBytes = 128;
constexpr int64_t kMaxGroupChannels = 1024;  // the group's PlaneNorms in shared memory

size_t follow_smem_bytes(int64_t C_g, DType dtype) {
  const size_t norm_bytes = dtype == DType::F64 ? 4 * sizeof(double) : 4 * sizeof(float);
  return kBarrierBytes + kSlots * size_t(kPieceBytes) + size_t(C_g) * norm_bytes;
}

// Items (n, g) = blockIdx.x, blockIdx.x + gridDim.x, ... of N * G, in image order. An item's
// C_g planes are one span of y: its 16-byte aligned body goes through the ring of shared-memory
// slots in pieces (bulk copies, thread 0 keeps kSlots in flight), the few elements before and
// after it go value by value.
template <typename T, typename S>
__global__ void __launch_bounds__(kThreads) group_norm_follow_kernel(
    T* y, int64_t items, int64_t C, int64_t HW, int64_t G, const S* tile_stats, int64_t tiles, double eps,
    const T* __restrict__ gamma, const T* __restrict__ beta, const unsigned* tiles_done, unsigned blocks_per_image) {
  using V = Vec<T, DTypeTraits<T>::kVec>;
  constexpr int kVec = DTypeTraits<T>::kVec;
  constexpr int64_t kPieceElems = kPieceBytes / sizeof(T);
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t bars = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  uint8_t* slots = smem + kBarrierBytes;
  PlaneNorm<T>* norms = reinterpret_cast<PlaneNorm<T>*>(slots + kSlots * kPieceBytes);
  __shared__ double item_mean, item_rstd;
  if (threadIdx.x == 0)
    for (int s = 0; s < kSlots; ++s) mbar_init(bars + 8 * s, 1);
  __syncthreads();
  const int64_t C_g = C / G, per_group = C_g * tiles;
  const ReadAs<T, false> read{};
  // the plane of an element of the span by a float64 reciprocal, corrected by one: no 64-bit
  // division per vector
  const double inv_hw = 1.0 / static_cast<double>(HW);
  auto plane_of = [&](int64_t rel) {
    int64_t plane = static_cast<int64_t>(static_cast<double>(rel) * inv_hw);
    plane += (plane + 1) * HW <= rel ? 1 : 0;
    return plane - (plane * HW > rel ? 1 : 0);
  };
  uint32_t seq = 0;  // pieces so far: piece seq sits in slot seq % kSlots, its (seq / kSlots)-th use
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t n = item / G, c0 = (item % G) * C_g;
    if (threadIdx.x == 0) {
      // sleeps between polls: the co-resident conv block keeps the issue slots
      while (load_acquire(tiles_done + n) < blocks_per_image) __nanosleep(256);
      // the conv's outputs were written through the generic proxy; the bulk copies read them
      // through the async proxy
#if MYOPS_WGMMA_ARCH
      asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
    }
    __syncthreads();  // thread 0's acquire orders the image's outputs and partials before every read below
    Moments all{0, 0, 0};
    if (per_group <= kWarpGroupEntries) {
      if (threadIdx.x < 32) all = group_moments_from_tiles<32>(tile_stats, item, per_group, threadIdx.x);
    } else {
      all = group_moments_from_tiles<kThreads>(tile_stats, item, per_group, threadIdx.x);
    }
    if (threadIdx.x == 0) {
      item_mean = all.mean;
      item_rstd = group_rstd(all, eps);
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < C_g; c += kThreads)
      norms[c] = PlaneNorm<T>(c0 + c, item_mean, item_rstd, gamma, beta, nullptr);
    __syncthreads();

    T* span = y + (n * C + c0) * HW;
    const int64_t len = C_g * HW, head = vector_head(span, len), body = (len - head) / kVec * kVec;
    for (int64_t e = threadIdx.x; e < len - body; e += kThreads) {  // value by value: head, then tail
      const int64_t at = e < head ? e : body + e;
      span[at] = norms[at / HW](read, span[at]);
    }
    const uint32_t first = seq;
    const int64_t pieces = (body + kPieceElems - 1) / kPieceElems;
    auto issue = [&](int64_t j) {
      const uint32_t s = (first + j) % kSlots, bar = bars + 8 * s;
      const uint32_t bytes = static_cast<uint32_t>(min(kPieceElems, body - j * kPieceElems) * sizeof(T));
      mbar_arrive_expect_tx(bar, bytes);
      bulk_copy_to_shared(bars + kBarrierBytes + s * kPieceBytes, span + head + j * kPieceElems, bytes, bar);
    };
    if (threadIdx.x == 0)
      for (int64_t j = 0; j < min(int64_t(kSlots), pieces); ++j) issue(j);
    for (int64_t j = 0; j < pieces; ++j) {
      const uint32_t s = (first + j) % kSlots;
      mbar_wait(bars + 8 * s, ((first + j) / kSlots) & 1);
      const int64_t p0 = head + j * kPieceElems;
      const int vectors = static_cast<int>(min(kPieceElems, body - j * kPieceElems) / kVec);
      const V* src = reinterpret_cast<const V*>(slots + s * kPieceBytes);
      V* dst = reinterpret_cast<V*>(span + p0);
      const int64_t plane0 = plane_of(p0);
      if ((plane0 + 1) * HW >= p0 + int64_t(vectors) * kVec) {
        // the piece within one plane (all but one piece in a plane of more than a piece): one
        // affine map in registers; the instructions per byte are what limit a follower block
        const PlaneNorm<T> norm = norms[plane0];
#pragma unroll 4
        for (int v = threadIdx.x; v < vectors; v += kThreads) {
          V x = src[v];
#pragma unroll
          for (int k = 0; k < kVec; ++k) x.v[k] = norm(read, x.v[k]);
          dst[v] = x;
        }
      } else {
        for (int v = threadIdx.x; v < vectors; v += kThreads) {
          V x = src[v];
          const int64_t rel = p0 + int64_t(v) * kVec;
          int64_t plane = plane_of(rel), within = rel - plane * HW;
#pragma unroll
          for (int k = 0; k < kVec; ++k, ++within) {
            if (within == HW) within = 0, ++plane;  // a vector across two planes (HW not whole vectors)
            x.v[k] = norms[plane](read, x.v[k]);
          }
          dst[v] = x;
        }
      }
      __syncthreads();  // slot s read by every thread: refill it
      if (threadIdx.x == 0 && j + kSlots < pieces) issue(j + kSlots);
    }
    seq = first + static_cast<uint32_t>(pieces);
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

int group_norm_follow_blocks(int sms, const FollowShape& s) {
  const char* env = std::getenv("MYOPS_GN_FOLLOWERS");
  if (env != nullptr && *env != 0) return std::max(0, std::atoi(env));
  if (std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") != nullptr) return 0;
  return group_norm_follow_pays(s) ? std::max(1, sms / 4) : 0;
}

bool group_norm_follow_supported(int64_t C, int64_t num_groups) {
  return num_groups > 0 && C / num_groups <= kMaxGroupChannels;
}

cudaError_t group_norm_follow(void* y, DType dtype, int64_t N, int64_t C, int64_t HW, int64_t num_groups,
                              const void* tile_stats, int64_t tiles, double eps, const void* gamma,
                              const void* beta, const unsigned* tiles_done, unsigned blocks_per_image, int blocks,
                              cudaStream_t stream) {
  const int64_t items = N * num_groups;
  if (items == 0 || HW == 0) return cudaSuccess;
  if (!group_norm_follow_supported(C, num_groups)) return cudaErrorInvalidValue;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, items)));
  const size_t smem = follow_smem_bytes(C / num_groups, dtype);
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using S = typename std::conditional<std::is_same<T, double>::value, double, float>::type;
    static_assert(sizeof(PlaneNorm<T>) <= 4 * sizeof(typename DTypeTraits<T>::acc_t), "follow_smem_bytes");
    const auto kernel = group_norm_follow_kernel<T, S>;
    const cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
    if (err != cudaSuccess) return err;
    kernel<<<grid, kThreads, smem, stream>>>(static_cast<T*>(y), items, C, HW, num_groups,
                                             static_cast<const S*>(tile_stats), tiles, eps,
                                             static_cast<const T*>(gamma), static_cast<const T*>(beta), tiles_done,
                                             blocks_per_image);
    return cudaGetLastError();
  });
}

}  // namespace cuda
}  // namespace myops
