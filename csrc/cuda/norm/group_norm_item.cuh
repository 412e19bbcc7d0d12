#pragma once
// One item of GroupNorm's normalise pass over a conv's output: a part of one (image, group)'s
// planes, normalised in place once every conv block of the image has counted itself done
// (ConvEpilogue::tiles_done), by a follower block (group_norm_follow.cu). The group's statistics
// come from its tile partials in the fixed order of group_norm_stats_from_tiles and every element
// gets the same affine map, so the bits are the separate passes' whatever the parts.
#include "cuda/common/gpu_flags.cuh"
#include "cuda/norm/group_norm_math.cuh"
#include "cuda/conv/wgmma/hopper_pipeline.cuh"
#include "cuda/common/l2_policy.cuh"

namespace myops {
namespace cuda {

// The body of a span goes through shared memory in pieces of this size, each warp of the block
// with its own ring of slots (a piece is one warp's: no block barrier per piece).
constexpr uint32_t kNormPieceBytes = 4 * 1024;

// What an item reads and writes: y [N, C, HW] in place, tile partials [N][C][tiles][3].
template <typename T, typename S>
struct NormItemArgs {
  T* y;
  int64_t C, HW, G;
  const S* tile_stats;
  int64_t tiles;
  double eps;
  const T* gamma;
  const T* beta;
  const unsigned* tiles_done;
  unsigned blocks_per_image;
  bool evict_first_stores;  // the normalised values marked first out of L2 (kL2FollowerEvictFirst)
};

// The block's shared memory for items: n_slots per warp (warp w's are slots w * n_slots ...),
// their mbarriers at `bars` in the same order, the slots (16-byte aligned),
// the group's PlaneNorms, kThreads Moments of scratch (the block team's reduction) and the
// item's mean and rstd.
template <typename T>
struct NormItemSmem {
  uint32_t bars;
  uint8_t* slots;
  int n_slots;
  PlaneNorm<T>* norms;
  Moments* scratch;
  double* item;  // [2]
};

// Part `part` of `parts` of item (n, g) = `item` of the pass, by a block of kThreads threads.
// The span's 16-byte aligned body is cut into pieces, the parts taking consecutive runs of them;
// part 0 also takes the few elements before and after the body, value by value. Warp w takes
// pieces j0 + w, j0 + w + kWarps, ...: the warp waits for its piece's slot, normalises it and has
// its lane 0 refill the slot (one ring for the block, with a block barrier and thread 0's
// refill per piece, left a follower block latency-bound). seq: the pieces this thread's warp has put through its slots so far (its piece seq sits in
// its slot seq % n_slots, that slot's (seq / n_slots)-th use), advanced here.
template <int kThreads, typename T, typename S>
__device__ void normalise_group_part(const NormItemArgs<T, S>& a, const NormItemSmem<T>& sm, int64_t item, int part,
                                     int parts, uint32_t& seq) {
  using V = Vec<T, DTypeTraits<T>::kVec>;
  constexpr int kVec = DTypeTraits<T>::kVec;
  constexpr int64_t kPieceElems = kNormPieceBytes / sizeof(T);
  const int64_t C_g = a.C / a.G, n = item / a.G, c0 = (item % a.G) * C_g, per_group = C_g * a.tiles;
  T* const span = a.y + (n * a.C + c0) * a.HW;
  const int64_t len = C_g * a.HW, head = vector_head(span, len), body = (len - head) / kVec * kVec;
  const int64_t all_pieces = (body + kPieceElems - 1) / kPieceElems, per_part = (all_pieces + parts - 1) / parts;
  const int64_t j0 = min(all_pieces, part * per_part), j1 = min(all_pieces, j0 + per_part);
  constexpr int kWarps = kThreads / 32;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const uint32_t first = seq;
  const uint64_t store_policy = a.evict_first_stores ? l2_policy(L2Priority::EvictFirst) : 0;
  // piece j into this warp's slot for its sequence number q (lane 0 issues)
  auto issue = [&](int64_t j, uint32_t q) {
    const uint32_t s = warp * sm.n_slots + q % sm.n_slots, bar = sm.bars + 8 * s;
    const uint32_t bytes = static_cast<uint32_t>(min(kPieceElems, body - j * kPieceElems) * sizeof(T));
    mbar_arrive_expect_tx(bar, bytes);
    bulk_copy_to_shared(static_cast<uint32_t>(__cvta_generic_to_shared(sm.slots)) + s * kNormPieceBytes,
                        span + head + j * kPieceElems, bytes, bar);
  };
  if (threadIdx.x == 0) {
    // sleeps between polls: a co-resident conv block keeps the issue slots
    while (load_acquire(a.tiles_done + n) < a.blocks_per_image) __nanosleep(256);
  }
  __syncthreads();  // thread 0's acquire orders the image's outputs and partials before every read below
  if (lane == 0) {
    // the conv's outputs were written through the generic proxy; the bulk copies read them
    // through the async proxy
#if MYOPS_WGMMA_ARCH
    asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
    // the warp's first pieces load while the block reduces the statistics
    uint32_t q = first;
    for (int64_t j = j0 + warp; j < j1 && q - first < static_cast<uint32_t>(sm.n_slots); j += kWarps, ++q) issue(j, q);
  }
  Moments all{0, 0, 0};
  if (per_group <= kWarpGroupEntries) {
    if (threadIdx.x < 32) all = group_moments_from_tiles<32>(a.tile_stats, item, per_group, threadIdx.x, nullptr);
  } else {
    all = group_moments_from_tiles<kThreads>(a.tile_stats, item, per_group, threadIdx.x, sm.scratch);
  }
  if (threadIdx.x == 0) {
    sm.item[0] = all.mean;
    sm.item[1] = group_rstd(all, a.eps);
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < C_g; c += kThreads)
    sm.norms[c] = PlaneNorm<T>(c0 + c, sm.item[0], sm.item[1], a.gamma, a.beta, nullptr);
  __syncthreads();

  const ReadAs<T, false> read{};
  const int64_t HW = a.HW;
  // the plane of an element of the span by a float64 reciprocal, corrected by one: no 64-bit
  // division per vector
  const double inv_hw = 1.0 / static_cast<double>(HW);
  auto plane_of = [&](int64_t rel) {
    int64_t plane = static_cast<int64_t>(static_cast<double>(rel) * inv_hw);
    plane += (plane + 1) * HW <= rel ? 1 : 0;
    return plane - (plane * HW > rel ? 1 : 0);
  };
  if (part == 0)
    for (int64_t e = threadIdx.x; e < len - body; e += kThreads) {  // value by value: head, then tail
      const int64_t at = e < head ? e : body + e;
      span[at] = sm.norms[at / HW](read, span[at]);
    }
  uint32_t q = first;
  for (int64_t j = j0 + warp; j < j1; j += kWarps, ++q) {
    const uint32_t s = warp * sm.n_slots + q % sm.n_slots;
    mbar_wait(sm.bars + 8 * s, (q / sm.n_slots) & 1);
    const int64_t p0 = head + j * kPieceElems;
    const int vectors = static_cast<int>(min(kPieceElems, body - j * kPieceElems) / kVec);
    const V* src = reinterpret_cast<const V*>(sm.slots + s * kNormPieceBytes);
    V* dst = reinterpret_cast<V*>(span + p0);
    const int64_t plane0 = plane_of(p0);
    if ((plane0 + 1) * HW >= p0 + int64_t(vectors) * kVec) {
      // the piece within one plane (all but one piece in a plane of more than a piece): one
      // affine map in registers; the instructions per byte are what limit a block here
      const PlaneNorm<T> norm = sm.norms[plane0];
#pragma unroll 4
      for (int v = lane; v < vectors; v += 32) {
        V x = src[v];
#pragma unroll
        for (int k = 0; k < kVec; ++k) x.v[k] = norm(read, x.v[k]);
        if (a.evict_first_stores) store_with_policy(dst + v, x, store_policy);
        else dst[v] = x;
      }
    } else {
      for (int v = lane; v < vectors; v += 32) {
        V x = src[v];
        const int64_t rel = p0 + int64_t(v) * kVec;
        int64_t plane = plane_of(rel), within = rel - plane * HW;
#pragma unroll
        for (int k = 0; k < kVec; ++k, ++within) {
          if (within == HW) within = 0, ++plane;  // a vector across two planes (HW not whole vectors)
          x.v[k] = sm.norms[plane](read, x.v[k]);
        }
        dst[v] = x;
      }
    }
    // slot s read by every lane: refill it (the fence orders the lanes' generic reads before the
    // bulk copy's async-proxy writes; wgmma_ops.cuh)
    fence_proxy_async_shared();
    __syncwarp();
    if (lane == 0 && j + int64_t(kWarps) * sm.n_slots < j1) issue(j + int64_t(kWarps) * sm.n_slots, q + sm.n_slots);
  }
  seq = q;
}

}  // namespace cuda
}  // namespace myops
