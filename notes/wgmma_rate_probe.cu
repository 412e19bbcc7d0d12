// Probe: the raw rate of the ping-pong kernel's MMA pattern (25 taps x Q strips of wgmma
// m64n136k16 bf16, A and B from no-swizzle shared memory as conv_wgmma_pingpong_kernel lays them
// out, commit + wait<0> per chunk), with no loads, barriers or epilogue; then (probe_turns) two
// consumer warpgroups taking tiles of 4 chunks in turn: InLoopTile with the kernel's turn handoff
// before session 44 (after the tile's last chunk), HoistedTile with session 44's (one chunk
// early) and the one-strip choice made once per tile; (probe_copies) HoistedTile's pattern fed by
// a producer's per-chunk bulk copies of the kernel's size. H100 results in
// NOTES_GPU.md (sessions 43, 44, 58, 59); the later variants move 5-10% with their place in the run (run
// them in separate processes, alternating, before trusting a difference under 10%).
// Build: nvcc -std=c++17 -O3 -Icsrc -gencode=arch=compute_90a,code=sm_90a.
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>
#include "cuda/hopper_pipeline.cuh"
#include "cuda/wgmma_ops.cuh"
using namespace myops::cuda;
constexpr int kTaps = 25, kHcols = 20, kHrows = 38;
__device__ inline uint32_t saddr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// The halo's two K-planes and the taps' weights: bfloat16 values near 1 (no zeros, no NaN).
__device__ inline void fill_operands(uint8_t* smem, int plane) {
  for (int i = threadIdx.x; i < (2 * plane + kTaps * 2048) / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem)[i] = 0x3c003c00u ^ (i * 2654435761u & 0x00ff00ffu);
}

// A consumer's two strips' accumulators, zeroed at a tile's start.
template <int N>
__device__ inline void zero_accumulators(float (&acc)[2][N / 2]) {
#pragma unroll
  for (int q = 0; q < 2; ++q)
#pragma unroll
    for (int e = 0; e < N / 2; ++e) acc[q][e] = 0.f;
#pragma unroll
  for (int q = 0; q < 2; ++q) wgmma_fence_operands(acc[q]);
}

template <int Q, int WGS, int N>
__global__ void __launch_bounds__(128 * WGS, 1) probe(int iters, int chunk_wait, float* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int plane = kHrows * kHcols * 16;           // one K-plane of the halo, 16 B per pixel
  uint8_t* halo = smem;                              // 2 K-planes
  uint8_t* w = smem + 2 * plane;                     // kTaps x [2 K-planes][64 rows][16 B]
  fill_operands(smem, plane);
  fence_proxy_async_shared();
  __syncthreads();
  const int wg = threadIdx.x / 128;
  float acc[Q][N / 2];
#pragma unroll
  for (int q = 0; q < Q; ++q)
#pragma unroll
    for (int e = 0; e < N / 2; ++e) acc[q][e] = 0.f;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int q = 0; q < Q; ++q) wgmma_fence_operands(acc[q]);
    wgmma_fence();
    for (int t = 0; t < kTaps; ++t) {
      const int dy = 4 - t / 5, dx = 4 - t % 5;
      const uint64_t a = wgmma_desc(saddr(w) + t * 2048, 1024, 128);
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        const uint64_t b = wgmma_desc(saddr(halo) + ((dy * kHcols + dx + 8 * (q + wg * Q)) % 64) * 16, plane, kHcols * 16);
        wgmma_m64<N, __nv_bfloat16>(acc[q], a, b);
      }
    }
    wgmma_commit();
    if ((it + 1) % chunk_wait == 0) wgmma_wait<0>();
  }
  wgmma_wait<0>();
#pragma unroll
  for (int q = 0; q < Q; ++q) wgmma_fence_operands(acc[q]);
  float s = 0.f;
#pragma unroll
  for (int q = 0; q < Q; ++q)
#pragma unroll
    for (int e = 0; e < N / 2; ++e) s += acc[q][e];
  if (s == 12345.f) sink[threadIdx.x] = s;
}

// Two consumer warpgroups taking tiles of 4 chunks in turn, as conv_wgmma_pingpong_kernel's
// consumers do: consumer k % 2 waits for its turn, issues its tile's chunks (commit, wait<0> after
// each) and hands the turn over at a chunk Body chooses. partial_every > 0: every
// partial_every-th tile issues one strip only (the 34-column maps' last tile of each row band).
constexpr int kChunks = 4;

// probe_turns' tile before session 44: the one-strip test inside the tap loop, the turn handed
// over after the tile's last chunk.
struct InLoopTile {
  template <int N>
  __device__ static void run(float (&acc)[2][N / 2], uint32_t w, uint32_t halo, int plane, uint32_t other_turn,
                             bool partial, int) {
    for (int c = 0; c < kChunks; ++c) {
      wgmma_fence();
      for (int t = 0; t < kTaps; ++t) {
        const int dy = 4 - t / 5, dx = 4 - t % 5;
        const uint64_t a = wgmma_desc(w + t * 2048, 1024, 128);
        const uint64_t b = wgmma_desc(halo + (dy * kHcols + dx) * 16, plane, kHcols * 16);
        if (partial) {
          wgmma_m64<N, __nv_bfloat16>(acc[0], a, b);
        } else {
          wgmma_m64<N, __nv_bfloat16>(acc[0], a, b);
          wgmma_m64<N, __nv_bfloat16>(acc[1], a, b + 8);
        }
      }
      wgmma_commit();
      if (c + 1 == kChunks) mbar_arrive(other_turn);
      wgmma_wait<0>();
    }
  }
};

// The one-strip choice made once per tile, outside the chunk and tap loops, and the turn handed
// over with one chunk left (as the kernel since session 44). kSplit: a one-strip tile's taps
// alternate between both accumulators (two chains of MMAs). kRuntimeTaps: the taps as the kernel
// walks them, cnt x cnt from a runtime count (not unrolled).
template <bool kSplit, bool kRuntimeTaps>
struct HoistedTile {
  template <int N, int S>
  __device__ static void chunks(float (&acc)[2][N / 2], uint32_t w, uint32_t halo, int plane, uint32_t other_turn,
                                int cnt) {
#pragma unroll 1
    for (int c = 0; c < kChunks; ++c) {
      wgmma_fence();
      const int taps = kRuntimeTaps ? cnt * cnt : kTaps, cols = kRuntimeTaps ? cnt : 5;
      for (int t = 0; t < (kRuntimeTaps ? taps : kTaps); ++t) {
        const int dy = cols - 1 - t / cols, dx = cols - 1 - t % cols;
        const uint64_t a = wgmma_desc(w + t * 2048, 1024, 128);
        const uint64_t b = wgmma_desc(halo + (dy * kHcols + dx) * 16, plane, kHcols * 16);
        if constexpr (S == 2) {
          wgmma_m64<N, __nv_bfloat16>(acc[0], a, b);
          wgmma_m64<N, __nv_bfloat16>(acc[1], a, b + 8);
        } else if constexpr (kSplit) {
          if (t % 2 == 0) wgmma_m64<N, __nv_bfloat16>(acc[0], a, b);
          else wgmma_m64<N, __nv_bfloat16>(acc[1], a, b);
        } else {
          wgmma_m64<N, __nv_bfloat16>(acc[0], a, b);
        }
      }
      wgmma_commit();
      if (c == kChunks - 2) mbar_arrive(other_turn);  // the turn with one chunk left
      wgmma_wait<0>();
    }
  }
  template <int N>
  __device__ static void run(float (&acc)[2][N / 2], uint32_t w, uint32_t halo, int plane, uint32_t other_turn,
                             bool partial, int cnt) {
    if (partial)
      chunks<N, 1>(acc, w, halo, plane, other_turn, cnt);
    else
      chunks<N, 2>(acc, w, halo, plane, other_turn, cnt);
  }
};

template <int N, typename Tile>
__global__ void __launch_bounds__(256, 1) probe_turns(int tiles, int partial_every, float* sink, int cnt) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t turn_bars[2];
  const int plane = kHrows * kHcols * 16;
  uint8_t* halo = smem;
  uint8_t* w = smem + 2 * plane;
  fill_operands(smem, plane);
  if (threadIdx.x == 0)
    for (int c = 0; c < 2; ++c) mbar_init(saddr(&turn_bars[c]), 128);
  fence_proxy_async_shared();
  __syncthreads();
  const int me = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  float acc[2][N / 2];
  int turns = 0;
  float s = 0.f;
  for (int k = me; k < tiles; k += 2) {
    if (k > 0) mbar_wait(saddr(&turn_bars[me]), turns++ & 1);
    zero_accumulators<N>(acc);
    const bool partial = partial_every > 0 && k % partial_every == partial_every - 1;
    Tile::template run<N>(acc, saddr(w), saddr(halo), plane, saddr(&turn_bars[1 - me]), partial, cnt);
#pragma unroll
    for (int q = 0; q < 2; ++q) wgmma_fence_operands(acc[q]);
    s += acc[0][0] + acc[1][N / 2 - 1];
  }
  if (s == 12345.f) sink[threadIdx.x] = s;
}

constexpr int kSmem = 2 * kHrows * kHcols * 16 + kTaps * 2048;




// The best of three timed launches (ms) after one warm-up launch, on one block per SM.
template <typename Launch>
float best_of_three(Launch launch) {
  launch(true);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float best = 1e9;
  for (int r = 0; r < 3; ++r) {
    cudaEventRecord(e0);
    launch(false);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    best = ms < best ? ms : best;
  }
  return best;
}

int sm_count() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  return sms;
}

// Tiles per block of the turn / copies variants: 400 (~3 ms a launch), or main's second
// argument. A launch that long reads the clocks of a GPU just woken; a sustained one (40000:
// ~0.3 s) the clocks under the H100's power cap. H100 (session 59), `hoisted`: 38.0-38.3 ns per
// MMA per SM at 400 tiles, 40.3 at 40000 (the board then at ~670 W, 1.70-1.73 GHz, power-capped:
// ~69 clocks per m64n136k16, the tensor cores' peak).
int g_tiles = 400;

// probe_turns with Tile's tiles; cnt: the runtime tap count of HoistedTile<*, true>.
template <int N, typename Tile>
void run_turns(const char* name, int partial_every, float* sink, int cnt = 5) {
  cudaFuncSetAttribute(probe_turns<N, Tile>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  const int sms = sm_count(), tiles = g_tiles;
  const float best = best_of_three([&](bool warm_up) {
    probe_turns<N, Tile><<<sms, 256, kSmem>>>(warm_up ? 20 : tiles, partial_every, sink, cnt);
  });
  const int partial = partial_every > 0 ? tiles / partial_every : 0;
  const double mmas = (2.0 * (tiles - partial) + partial) * kChunks * kTaps;  // per SM
  printf("%-44s partial every %d: %.3f ms, %.0f TFLOP/s, %.1f ns per MMA per SM (err %s)\n", name, partial_every, best,
         2.0 * sms * mmas * 64 * N * 16 / best / 1e9, best * 1e6 / mmas, cudaGetErrorString(cudaGetLastError()));
}

template <int Q, int WGS, int N>
void run(const char* name, int chunk_wait, float* sink) {
  cudaFuncSetAttribute(probe<Q, WGS, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  const int sms = sm_count(), iters = 2000;
  const float best = best_of_three([&](bool warm_up) {
    probe<Q, WGS, N><<<sms, 128 * WGS, kSmem>>>(warm_up ? 50 : iters, chunk_wait, sink);
  });
  const double mmas = double(iters) * kTaps * Q * WGS;  // per SM
  printf("%-44s wait every %d chunk(s): %.3f ms, %.0f TFLOP/s, %.1f ns per MMA per SM (err %s)\n", name, chunk_wait, best,
         2.0 * sms * mmas * 64 * N * 16 / best / 1e9, best * 1e6 / mmas, cudaGetErrorString(cudaGetLastError()));
}


// probe_turns plus a producer thread that bulk-copies each chunk's bytes as the NHWC ping-pong
// kernel's producer does (51 200 B of weights + 24 320 B of halo per chunk, from an L2-resident
// buffer) into two scratch slots, each chunk's copy issued once the chunk two before was consumed;
// the consumers wait for their chunk's copy (full) and release it after its MMAs (consumed). The
// MMAs still read the fixed operands: this measures the copies' cost to the MMA rate (shared
// memory write bandwidth, the barriers), not the data. H100 (session 58): 39.3 ns per MMA per SM
// against 38.0-38.4 for `hoisted` without copies: the copies cost ~1 ns.
constexpr int kWBytes = kTaps * 2048, kHaloBytes = 2 * kHrows * kHcols * 16, kSlotBytes = kWBytes + kHaloBytes;
template <int N>
__global__ void __launch_bounds__(384, 1) probe_copies(int tiles, const uint8_t* src, int src_chunks, float* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[6];  // turn[2], full[2], consumed[2]
  const int plane = kHrows * kHcols * 16;
  uint8_t* halo = smem;
  uint8_t* w = smem + 2 * plane;
  uint8_t* scratch = smem + kSmem;  // 2 slots
  auto turn = [&](int c) { return saddr(&bars[c]); };
  auto full = [&](int s) { return saddr(&bars[2 + s]); };
  auto consumed = [&](int s) { return saddr(&bars[4 + s]); };
  fill_operands(smem, plane);
  if (threadIdx.x == 0) {
    for (int c = 0; c < 2; ++c) mbar_init(turn(c), 128);
    for (int s = 0; s < 2; ++s) mbar_init(full(s), 1), mbar_init(consumed(s), 128);
    mbar_init_fence();
  }
  fence_proxy_async_shared();
  __syncthreads();
  const int wg = threadIdx.x / 128;
  const int total = tiles * kChunks;
  if (wg == 2) {
    if (threadIdx.x != 256) return;
    for (int j = 0; j < total; ++j) {
      const int s = j % 2;
      if (j >= 2) mbar_wait(consumed(s), ((j - 2) / 2) & 1);
      const uint8_t* from = src + size_t((j * 7 + blockIdx.x) % src_chunks) * kSlotBytes;
      const uint32_t to = saddr(scratch + s * kSlotBytes);
      mbar_arrive_expect_tx(full(s), kSlotBytes);
      bulk_copy_to_shared(to, from, kWBytes, full(s));
      bulk_copy_to_shared(to + kWBytes, from + kWBytes, kHaloBytes, full(s));
    }
    return;
  }
  const int me = __shfl_sync(0xffffffffu, wg, 0);
  float acc[2][N / 2];
  int turns = 0;
  float s = 0.f;
  for (int k = me; k < tiles; k += 2) {
    if (k > 0) mbar_wait(turn(me), turns++ & 1);
    zero_accumulators<N>(acc);
#pragma unroll 1
    for (int c = 0; c < kChunks; ++c) {
      const int j = k * kChunks + c, slot = j % 2;
      mbar_wait(full(slot), (j / 2) & 1);
      wgmma_fence();
#pragma unroll
      for (int t = 0; t < kTaps; ++t) {
        const int dy = 4 - t / 5, dx = 4 - t % 5;
        const uint64_t a = wgmma_desc(saddr(w) + t * 2048, 1024, 128);
        const uint64_t b = wgmma_desc(saddr(halo) + (dy * kHcols + dx) * 16, plane, kHcols * 16);
        wgmma_m64<N, __nv_bfloat16>(acc[0], a, b);
        wgmma_m64<N, __nv_bfloat16>(acc[1], a, b + 8);
      }
      wgmma_commit();
      if (c == kChunks - 2) mbar_arrive(turn(1 - me));
      wgmma_wait<0>();
      mbar_arrive(consumed(slot));
    }
#pragma unroll
    for (int q = 0; q < 2; ++q) wgmma_fence_operands(acc[q]);
    s += acc[0][0] + acc[1][N / 2 - 1];
  }
  if (s == 12345.f) sink[threadIdx.x] = s;
}

template <int N>
void run_copies(const char* name, float* sink) {
  const int bytes = kSmem + 2 * kSlotBytes;
  cudaFuncSetAttribute(probe_copies<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  const int src_chunks = 64;  // 4.8 MB: stays in L2, as the kernel's weights do
  uint8_t* src;
  cudaMalloc(&src, size_t(src_chunks) * kSlotBytes);
  cudaMemset(src, 0, size_t(src_chunks) * kSlotBytes);
  const int sms = sm_count(), tiles = g_tiles;
  const float best = best_of_three([&](bool warm_up) {
    probe_copies<N><<<sms, 384, bytes>>>(warm_up ? 20 : tiles, src, src_chunks, sink);
  });
  const double mmas = 2.0 * tiles * kChunks * kTaps;
  printf("%-44s: %.3f ms, %.0f TFLOP/s, %.1f ns per MMA per SM (err %s)\n", name, best,
         2.0 * sms * mmas * 64 * N * 16 / best / 1e9, best * 1e6 / mmas, cudaGetErrorString(cudaGetLastError()));
  cudaFree(src);
}

// No argument: every variant in one process (their order moves the later ones 5-10%); one of
// turns / hoisted / hoisted_runtime_taps / copies: that variant alone, with and without one-strip
// tiles; a second argument: the tiles per block (g_tiles).
int main(int argc, char** argv) {
  float* sink;
  cudaMalloc(&sink, 4096);
  if (argc > 2) g_tiles = std::max(1, std::atoi(argv[2]));
  if (argc > 1) {
    const std::string v = argv[1];
    for (int partial : {0, 3}) {
      if (v == "turns") run_turns<136, InLoopTile>("2 consumers in turn, tiles of 4 chunks", partial, sink);
      if (v == "hoisted")
        run_turns<136, HoistedTile<false, false>>("turn 1 chunk early, strips chosen per tile", partial, sink);
      if (v == "copies" && partial == 0) run_copies<136>("copies, consumers wait for them", sink);
      if (v == "hoisted_runtime_taps")
        run_turns<136, HoistedTile<false, true>>("... 5 x 5 taps from runtime counts", partial, sink);
    }
    cudaFree(sink);
    return 0;
  }
  run<2, 1, 136>("ours: 1 warpgroup, 2 strips m64n136k16", 1, sink);
  run<2, 1, 136>("ours: 1 warpgroup, 2 strips m64n136k16", 4, sink);
  run<2, 1, 136>("ours: 1 warpgroup, 2 strips m64n136k16", 1000000, sink);
  run<1, 2, 136>("2 warpgroups at once, 1 strip m64n136k16 each", 1, sink);
  run<2, 2, 136>("2 warpgroups at once, 2 strips each", 1, sink);
  run<2, 1, 128>("1 warpgroup, 2 strips m64n128k16", 1, sink);
  run<1, 1, 136>("1 warpgroup, 1 strip m64n136k16", 1, sink);
  run_turns<136, InLoopTile>("2 consumers in turn, tiles of 4 chunks", 0, sink);
  run_turns<136, InLoopTile>("2 consumers in turn, tiles of 4 chunks", 3, sink);
  run_turns<136, HoistedTile<false, false>>("turn 1 chunk early, strips chosen per tile", 0, sink);
  run_turns<136, HoistedTile<false, false>>("turn 1 chunk early, strips chosen per tile", 3, sink);
  run_turns<136, HoistedTile<true, false>>("... one-strip tiles on two accumulators", 3, sink);
  run_turns<136, HoistedTile<false, true>>("... 5 x 5 taps from runtime counts", 0, sink);
  run_turns<136, HoistedTile<false, true>>("... 5 x 5 taps from runtime counts", 3, sink);
  run_turns<136, InLoopTile>("2 consumers in turn, tiles of 4 chunks", 0, sink);
  run_turns<136, InLoopTile>("2 consumers in turn, tiles of 4 chunks", 3, sink);
  cudaFree(sink);
  return 0;
}
