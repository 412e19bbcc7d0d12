#pragma once
// The Hopper engine's two kernels: conv_wgmma_kernel (two blocks per SM, one tile each) and
// conv_wgmma_pingpong_kernel (persistent, two consumer warpgroups taking tiles in turn).
#include "cuda/conv/wgmma/wgmma_parts.cuh"

namespace myops {
namespace cuda {
namespace {

// Stage s holds chunk c = s + k * stages in its k-th round. full[s] completes when the producer
// warpgroup has stored the chunk's halo (128 arrivals) and the chunk's weights have landed (bulk
// copy bytes); empty[s] when the consumer's MMAs that read it have finished (128 arrivals).
// kIn: where the halo comes from (WgInput). NchwBoxes: the chunks' input boxes arrive through
// TMA, sl.box_slots chunks ahead (BoxRing); NhwcBoxes: one thread issues each chunk's weights and
// halo, full[s] then waits for one arrival and their bytes.
template <typename T, int Q, int R, WgInput kIn>
__global__ void __launch_bounds__(kThreads, 2)
    conv_wgmma_kernel(const T* __restrict__ x, const uint32_t* __restrict__ wprep,
                      const T* __restrict__ bias, T* __restrict__ out, ConvTranspose2dParams p,
                      ConvEpilogue ep, WgSmem sl, int stages, PhaseTable phases,
                      const __grid_constant__ CUtensorMap input_map, int64_t n_base, int64_t tiles_per_sample) {
  constexpr bool kF32 = std::is_same<T, float>::value;
  constexpr bool kTma = kIn == WgInput::NchwBoxes, kNhwc = kIn == WgInput::NhwcBoxes;
  constexpr int kCh = chunk_channels<T>();
  constexpr int kTW = 8 * Q, kStrip = 8 * R, kBM = epilogue_pixels(R, Q);
  using Raw = typename std::conditional<kF32, float, unsigned short>::type;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t bars = smem_addr(smem), pipe = bars + kBarrierBytes;
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (kMaxStages + s); };
  auto stage = [&](int s) { return static_cast<uint32_t>(s * sl.stage_bytes); };  // from pipe
  const BoxRing boxes(smem, sl);
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(full(s), kNhwc ? 1 : kWarpgroup);
      mbar_init(empty(s), kWarpgroup);
    }
    if (kTma) boxes.init();
    mbar_init_fence();
  }
  __syncthreads();

  const int64_t n = n_base + blockIdx.z;
  const int64_t col_tiles = (p.C_out_g + kBlockCh - 1) / kBlockCh;
  // 32-bit (the launch keeps col_tiles and gridDim.y below 2^16): a 64-bit division is ~100 instructions
  const int64_t g = blockIdx.y / static_cast<unsigned>(col_tiles), ct = blockIdx.y % static_cast<unsigned>(col_tiles);
  const int64_t oc0 = ct * kBlockCh;
  const TileOrigin origin = locate_tile(phases, static_cast<int>(blockIdx.x), R, kTW);
  const PhaseEntry& ph = phases.e[origin.phase];
  const int j0 = origin.j0, i0 = origin.i0;
  const int cnt_h = ph.count_h, cnt_w = ph.count_w, step_h = ph.off_step_h, step_w = ph.off_step_w;
  // the halo rows the MMAs read: the rows they cover (mma_rows) and the taps' row shifts; the
  // producer stages no more (a tile's last 14 of 18 rows where the grid ends 2 rows in)
  const int rows_used = min(R, ph.OHp - j0);
  const int hrows = min(ph.hrows, mma_rows<R>(rows_used) + (cnt_h - 1) * step_h);
  const int taps = cnt_h * cnt_w, hcols = ph.hcols, hpx = hrows * ph.hcols;
  const int n_chunks = taps > 0 ? static_cast<int>((p.C_in_g + kCh - 1) / kCh) : 0;
  const int b_cols = kNhwc ? sl.box_cols : hcols;  // halo pixels per row in a stage

  const NamedBarrier consumers{1, kWarpgroup};
  // The epilogue's Cs[channel][pixel], pixel offsets and GroupNorm lane partials overlay the pipeline.
  float* Cs = reinterpret_cast<float*>(smem + kBarrierBytes);
  int64_t* pix_off = reinterpret_cast<int64_t*>(Cs + kBlockCh * sl.c_ld);
  float2* lane_partials = reinterpret_cast<float2*>(pix_off + kBM);

  // Producer: the stage of chunk c once the consumer has released it; thread 0 starts the chunk's
  // weights' bulk copy into it (completing on full).
  auto claim_stage = [&](int c, const uint32_t* w_src, uint32_t w_bytes) {
    const int s = c % stages, round = c / stages;
    if (round > 0) mbar_wait(empty(s), (round - 1) & 1);
    if (threadIdx.x == 0) {
      mbar_expect_tx(full(s), w_bytes);
      bulk_copy_to_shared(pipe + stage(s) + sl.halo_bytes, w_src, w_bytes, full(s));
    }
    return s;
  };

  // 16-bit NCHW boxes: per chunk, the box goes to the stage through BoxTransposer.
  auto produce_transposed = [&](auto issue_box, const uint32_t* w_block, int64_t w_chunk_words, uint32_t w_bytes,
                                int shift) {
    const BoxTransposer transpose(sl, hrows, hcols, shift, bars + kBarrierBytes - kDiscardBytes);
    for (int c = 0; c < n_chunks; ++c) {
      const int s = claim_stage(c, w_block + c * w_chunk_words, w_bytes);
      transpose(boxes.acquire(c), pipe + stage(s));
      boxes.release(c);  // its proxy fence also orders the halo's stores before the MMAs
      mbar_arrive(full(s));
      if (threadIdx.x == 0) issue_box(c + sl.box_slots);  // into chunk c's slot, once every thread has read it
    }
  };

  // Producer: per chunk, the halo through registers (NCHW planes -> 16-byte channel groups per
  // pixel, TF32-rounded) and the phase's weights by one bulk copy.
  auto produce = [&]() {
    const int tid = threadIdx.x;
    const int64_t HW = p.H * p.W;
    const uint32_t w_bytes = static_cast<uint32_t>(taps * kTapBytes);
    // prepared weights: [group][64-channel block][chunk][phase-ordered tap][one tap's A operand]
    const int64_t w_chunk_words = p.kH * p.kW * (kTapBytes / 4);
    const uint32_t* w_block = wprep + (g * col_tiles + ct) * n_chunks * w_chunk_words + ph.tap_base * (kTapBytes / 4);
    const Raw* x_image = reinterpret_cast<const Raw*>(x) + (n * p.C_in + g * p.C_in_g) * HW;
    if constexpr (kNhwc) {
      if (tid != 0) return;
      for (int c = 0; c < n_chunks; ++c) {
        const int s = c % stages, round = c / stages;
        if (round > 0) mbar_wait(empty(s), (round - 1) & 1);
        issue_channels_last_chunk(input_map, sl, pipe + stage(s), full(s), w_block + c * w_chunk_words, w_bytes,
                                  g * p.C_in_g + int64_t(c) * kCh, halo_col0(ph, i0), halo_row0(ph, j0), n, kCh / 2);
      }
      return;
    }

    // Halo pixels this thread stages. kTma: offsets in the chunk's input box (TMA zero-filled
    // what lies outside the input). Else offsets in a channel plane (32-bit: the host checks
    // 16 * H * W < 2^31); pixels outside the input load a valid address and store zeros.
    const int64_t row0 = halo_row0(ph, j0), col0 = halo_col0(ph, i0);
    const int shift = kTma ? static_cast<int>(col0 - box_col0<Raw>(col0)) : 0;  // halo column 0 in the box
    // kTma: thread 0 issues chunk c's box box_slots chunks ahead of its use
    auto issue_box = [&](int c) {
      if (kTma && c < n_chunks)
        boxes.issue(input_map, c, box_col0<Raw>(col0), row0, g * p.C_in_g + int64_t(c) * kCh, n,
                    (ep.l2_hints & kL2InputEvictFirst) != 0);
    };
    if (kTma && tid == 0)
      for (int c = 0; c < sl.box_slots; ++c) issue_box(c);
    if constexpr (kTma && !kF32) {
      produce_transposed(issue_box, w_block, w_chunk_words, w_bytes, shift);
      return;
    }
    int src[kPxPerThread];
    unsigned inside = 0, present = 0;
#pragma unroll
    for (int k = 0; k < kPxPerThread; ++k) {
      const int h = tid + k * kWarpgroup;
      src[k] = 0;
      if (h < hpx) {
        present |= 1u << k;
        const int hr = h / hcols, hc = h - hr * hcols;
        if constexpr (kTma) {
          src[k] = (hr * sl.box_cols + hc + shift) * static_cast<int>(sizeof(Raw));  // bytes
          inside |= 1u << k;
        } else {
          const int64_t ih = row0 + hr, iw = col0 + hc;
          if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W) {
            src[k] = static_cast<int>(ih * p.W + iw);
            inside |= 1u << k;
          }
        }
      }
    }
    Raw staged[kPxPerThread][kCh];
    int ch_valid = 0;
    auto load_halo = [&](int chunk) {
      ch_valid = static_cast<int>(min(static_cast<int64_t>(kCh), p.C_in_g - int64_t(chunk) * kCh));
      if constexpr (kTma) {
        const uint32_t box = boxes.acquire(chunk);
        const int plane_bytes = sl.box_rows * sl.box_cols * static_cast<int>(sizeof(Raw));
#pragma unroll
        for (int c = 0; c < kCh; ++c)
#pragma unroll
          for (int k = 0; k < kPxPerThread; ++k)
            if ((present >> k) & 1u) staged[k][c] = ld_shared<Raw>(box + c * plane_bytes + src[k]);
        boxes.release(chunk);
      } else {
        load_halo_planes(staged, x_image + int64_t(chunk) * kCh * HW, HW, ch_valid, present, src);
      }
    };
    auto store_halo = [&](uint8_t* dst) {
#pragma unroll
      for (int k = 0; k < kPxPerThread; ++k) {
        if (!((present >> k) & 1u)) continue;
        const bool in = (inside >> k) & 1u;
        uint32_t w[8];
        pack_halo_pixel<T>(staged[k], in, ch_valid, w);
        const int h = tid + k * kWarpgroup;
        *reinterpret_cast<uint4*>(dst + h * 16) = make_uint4(w[0], w[1], w[2], w[3]);
        *reinterpret_cast<uint4*>(dst + sl.halo_plane + h * 16) = make_uint4(w[4], w[5], w[6], w[7]);
      }
    };
    // Without TMA, one chunk of loads in flight per thread (two were slower).
    load_halo(0);
    for (int c = 0; c < n_chunks; ++c) {
      const int s = claim_stage(c, w_block + c * w_chunk_words, w_bytes);
      if (kTma && tid == 0) issue_box(c + sl.box_slots);  // into chunk c's slot, read by load_halo(c)
      store_halo(smem + kBarrierBytes + stage(s));
      fence_proxy_async_shared();
      mbar_arrive(full(s));
      // issued after the fence (which may wait for this thread's outstanding accesses): in
      // flight while the thread waits for the next stage
      if (c + 1 < n_chunks) load_halo(c + 1);
    }
  };

  // Consumer: tap (t_h, t_w) reads the halo shifted by (cnt_h - 1 - t_h) * step_h rows and
  // (cnt_w - 1 - t_w) * step_w columns; strip q starts 8q columns in. Ends with the
  // accumulators in Cs.
  auto consume = [&]() {
    const int tid = threadIdx.x - kWarpgroup;
    float acc[Q][4 * R];
#pragma unroll
    for (int q = 0; q < Q; ++q)
#pragma unroll
      for (int e = 0; e < 4 * R; ++e) acc[q][e] = 0.f;
    const int q_used = min(Q, (ph.OWp - i0 + 7) / 8);  // strips right of the grid issue no MMAs
    for (int c = 0; c < n_chunks; ++c) {
      const int s = c % stages;
      mbar_wait(full(s), (c / stages) & 1);
      issue_chunk_mmas<T, Q, R>(acc, cnt_h, cnt_w, step_h, step_w, b_cols, q_used, rows_used,
                                wgmma_desc(pipe + stage(s) + sl.halo_bytes, kBlockCh * 16, 128),
                                wgmma_desc(pipe + stage(s), sl.halo_plane, b_cols * 16));
      // The stage goes back to the producer as soon as its MMAs are done, not once the next
      // chunk's are issued: the producer, slower than the MMAs, would otherwise start refilling
      // stage c only after stage c + 1 was full.
      wgmma_wait<0>();
      mbar_arrive(empty(s));
    }
    // the accumulators are read below only after the last wgmma_wait (as in the ping-pong kernel)
#pragma unroll
    for (int q = 0; q < Q; ++q) wgmma_fence_operands(acc[q]);
    consumers();  // the epilogue's Cs overlays stages the other warps' MMAs read

    // Accumulators -> Cs[channel][pixel]: warp w holds channels 16w + lane / 4 (+ 8); register
    // 4j + e of strip q is pixel q * 8R + 8j + 2 * (lane % 4) + e % 2 (tile row j of the strip), in
    // Cs column q * kStripPitch + 8j + ... (PairTile).
    const int warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
#pragma unroll
    for (int q = 0; q < Q; ++q)
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int c = 16 * warp + gq, m = q * PairTile<Q, R>::kStripPitch + 8 * j + 2 * tq;
        *reinterpret_cast<float2*>(Cs + c * sl.c_ld + m) = make_float2(acc[q][4 * j], acc[q][4 * j + 1]);
        *reinterpret_cast<float2*>(Cs + (c + 8) * sl.c_ld + m) = make_float2(acc[q][4 * j + 2], acc[q][4 * j + 3]);
      }
  };

  // The epilogue over `threads` threads with thread index `t` (Sync: a barrier over them); the
  // consumer alone never writes partials (they make the warpgroups join).
  auto epilogue = [&](auto threads, int t, auto sync) {
    constexpr int kEpThreads = decltype(threads)::value;
    conv_epilogue_pairs<T, Q, R, kBlockCh, kEpThreads, kEpThreads == kThreads>(
        Cs, sl.c_ld, lane_partials, bias, out, p, ep, n, g, oc0, blockIdx.x, tiles_per_sample,
        EpilogueThreads<decltype(sync)>{t, pix_off, sync}, [&](int m) -> int64_t {
          const int q = m / kStrip, r = (m % kStrip) / 8, c = 8 * q + m % 8;
          if (q >= Q || j0 + r >= ph.OHp || i0 + c >= ph.OWp) return -1;
          return (ph.rh + p.sH * int64_t(j0 + r)) * p.OW + ph.rw + p.sW * int64_t(i0 + c);
        });
  };
  static_assert(blocks_per_sm(R) == 2, "17-row strips run on conv_wgmma_pingpong_kernel");
  // With GELU or GroupNorm partials the epilogue is latency-bound: both warpgroups run it. Plain
  // stores stay on the consumer (with the producer joining they were slower). To join, the warpgroups first return to the launch's register count,
  // the producer only once the consumer has released its registers (a setmaxnreg.inc that waits
  // for registers spins, taking issue slots from the other block's MMAs).
  const bool join = ep.act != Activation::None || ep.tile_stats != nullptr || ep.tiles_done != nullptr;
  constexpr int kLaunchRegs = 65536 / (kThreads * 2);
  const NamedBarrier handover{2, kThreads};  // the consumer has freed its extra registers
  if (threadIdx.x < kWarpgroup) {
    warpgroup_reg_dealloc<kProducerRegs>();
    if (n_chunks > 0) produce();
    if (!join) return;
    handover();
    warpgroup_reg_alloc<kLaunchRegs>();
  } else {
    warpgroup_reg_alloc<kConsumerRegs>();
    consume();
    if (!join) {
      epilogue(std::integral_constant<int, kWarpgroup>{}, static_cast<int>(threadIdx.x) - kWarpgroup, consumers);
      return;
    }
    warpgroup_reg_dealloc<kLaunchRegs>();
    handover.arrive();
  }
  __syncthreads();  // Cs holds the tile
  epilogue(std::integral_constant<int, kThreads>{}, static_cast<int>(threadIdx.x), BlockSync{});
  if (ep.tiles_done != nullptr) {
    // a release after the barrier makes every thread's stores visible before the count (the
    // followers read it with ld.acquire). A count per warp (no barrier, 8 fences) was slower;
    // __threadfence() + atomicAdd instead of the release is the same.
    __syncthreads();
    if (threadIdx.x == 0) release_add(ep.tiles_done + n, 1u);
  }
}

// The chunks a ping-pong consumer still has to issue when it hands the turn to the other: a
// quarter of its tile's (best or tied in both 16-bit and float32 among 0, 1, 2, 4 chunks). More
// overlap keeps both consumers' stages held longer, which the producer then waits for.
__device__ inline int tile_turn_lead(int n_chunks) { return n_chunks / 4; }

// Where tile t of the persistent walk lies: tiles of one image and 64-channel block are
// consecutive (tile x of the phase grids, then channel block y of all groups, then image n), x
// rotated by n + y. A block's tiles are gridDim.x apart; without the rotation, a grid that is a
// multiple of the tiles per image gives each block one x throughout, and tiles differ in work
// (one-strip tiles at the grids' right edge, phases with fewer taps): e.g. with 6 tiles per image
// and channel block on 132 blocks, a third of the SMs took only one-strip tiles. The rotation
// leaves the outputs bitwise equal.
struct WgTile {
  int64_t n, g, ct;
  int x;
};
__device__ inline WgTile wg_tile(int64_t t, int64_t tiles_per_sample, int64_t col_blocks, int64_t col_tiles) {
  const int64_t y = (t / tiles_per_sample) % col_blocks, n = t / (tiles_per_sample * col_blocks);
  return {n, y / col_tiles, y % col_tiles, static_cast<int>((t + n + y) % tiles_per_sample)};
}

// The pipeline is one sequence of chunks over the block's tiles: chunk i sits in stage
// i % stages in round i / stages; the block's k-th tile is consumer k % 2's. Its full barrier,
// full[k % 2][s], completes when the producer warpgroup has stored the chunk's halo (128
// arrivals) and the chunk's weights have landed (bulk copy bytes); empty[s] when the consumer's
// MMAs that read it have finished (128 arrivals). A full barrier per consumer and stage sees only
// that consumer's chunks, which it waits for in order, so its phase parity is always the right
// one, whatever the other consumer does. (With one full barrier per stage a consumer could not
// start a tile before the other had issued its whole tile's MMAs, or parity could not tell a
// stage's round from the one two rounds on.) The turn (turn[], tile_turn_lead) then only paces
// the consumers: a consumer starts a tile's MMAs once the other has a quarter of its tile's
// chunks left to issue, so that the two overlap (one's MMAs fill the other's waits for its
// chunks to drain) without both holding stages for long.
// kIn: Registers or NhwcBoxes (one thread issues each chunk; each full barrier waits for one arrival).
// kWindows: the epilogue stores 2 x 2 windows (ep.pool_windows); its own build, since a runtime
// choice between two kinds of stores made ptxas spill 50-100 bytes in every instance.
template <typename T, int Q, int R, WgInput kIn, bool kWindows>
__global__ void __launch_bounds__(kPingPongThreads, 1)
    conv_wgmma_pingpong_kernel(const T* __restrict__ x, const uint32_t* __restrict__ wprep,
                      const T* __restrict__ bias, T* __restrict__ out, ConvTranspose2dParams p,
                      ConvEpilogue ep, WgSmem sl, int stages, PhaseTable phases, int64_t total_tiles,
                      int64_t tiles_per_sample, const __grid_constant__ CUtensorMap input_map, bool bands) {
  static_assert(kIn != WgInput::NchwBoxes, "the ping-pong kernel reads NCHW input through registers only");
  static_assert(Q == 2, "edge bands replace the second of two strips");
  constexpr bool kNhwc = kIn == WgInput::NhwcBoxes;
  constexpr int kCh = chunk_channels<T>();
  constexpr int kTW = 8 * Q;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t bars = smem_addr(smem), pipe = bars + kBarrierBytes;
  auto full = [&](int consumer, int s) { return bars + 8 * (consumer == 0 ? s : kSecondFullBarrier + s); };
  auto empty = [&](int s) { return bars + 8 * (kMaxStages + s); };
  auto turn = [&](int c) { return bars + 8 * (kTurnBarrier + c); };
  auto stage = [&](int s) { return static_cast<uint32_t>(s * sl.stage_bytes); };  // from pipe
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      for (int c = 0; c < 2; ++c) mbar_init(full(c, s), kNhwc ? 1 : kWarpgroup);
      mbar_init(empty(s), kWarpgroup);
    }
    for (int c = 0; c < 2; ++c) mbar_init(turn(c), kWarpgroup);
    mbar_init_fence();
  }
  __syncthreads();

  const int64_t col_tiles = (p.C_out_g + kBlockCh - 1) / kBlockCh, col_blocks = p.groups * col_tiles;
  const int n_chunks_full = static_cast<int>((p.C_in_g + kCh - 1) / kCh);  // of a tile with taps
  auto tile_chunks = [&](const PhaseEntry& ph) { return ph.count_h * ph.count_w > 0 ? n_chunks_full : 0; };
  // Edge bands (EdgeBand) with the register producer only: through TMA (one box per band column)
  // they gained nothing.
  // bands: the launch checked that a band's halo fits.
  auto is_band = [&](const PhaseEntry& ph, const TileOrigin& origin) {
    return !kNhwc && bands && ph.OWp - origin.i0 <= EdgeBand::kCols;
  };

  // Producer: per chunk, the halo through registers (NCHW planes -> 16-byte channel groups per
  // pixel, TF32-rounded) and the phase's weights by one bulk copy.
  auto produce = [&]() {
    const int tid = threadIdx.x;
    const int64_t w_chunk_words = p.kH * p.kW * (kTapBytes / 4);
    int chunk_seq = 0;  // the pipeline position
    int64_t k = 0;      // the block's tile count: tile k is consumer k % 2's
    for (int64_t t = blockIdx.x; t < total_tiles; t += gridDim.x, ++k) {
      const WgTile tl = wg_tile(t, tiles_per_sample, col_blocks, col_tiles);
      const TileOrigin origin = locate_tile(phases, tl.x, R, kTW);
      const PhaseEntry& ph = phases.e[origin.phase];
      const int n_chunks = tile_chunks(ph);
      if (n_chunks == 0) continue;
      const int owner = static_cast<int>(k % 2);
      const uint32_t w_bytes = static_cast<uint32_t>(ph.count_h * ph.count_w * kTapBytes);
      // prepared weights: [group][64-channel block][chunk][phase-ordered tap][one tap's A operand]
      const uint32_t* w_tap0 = wprep + (tl.g * col_tiles + tl.ct) * n_chunks * w_chunk_words + ph.tap_base * (kTapBytes / 4);
      if constexpr (kNhwc) {
        for (int c = 0; c < n_chunks; ++c, ++chunk_seq) {
          const int s = chunk_seq % stages, round = chunk_seq / stages;
          if (round > 0) mbar_wait(empty(s), (round - 1) & 1);
          issue_channels_last_chunk(input_map, sl, pipe + stage(s), full(owner, s), w_tap0 + c * w_chunk_words, w_bytes,
                                    tl.g * p.C_in_g + int64_t(c) * kCh, halo_col0(ph, origin.i0),
                                    halo_row0(ph, origin.j0), tl.n, kCh / 2);
        }
        continue;
      }
      HaloStager<T> halo(x, p, ph, origin, tl.n, tl.g, is_band(ph, origin));
      // One chunk of loads in flight per thread (two were slower).
      halo.load(0);
      for (int c = 0; c < n_chunks; ++c, ++chunk_seq) {
        const int s = chunk_seq % stages, round = chunk_seq / stages;
        if (round > 0) mbar_wait(empty(s), (round - 1) & 1);
        if (tid == 0) {
          mbar_expect_tx(full(owner, s), w_bytes);
          bulk_copy_to_shared(pipe + stage(s) + sl.halo_bytes, w_tap0 + c * w_chunk_words, w_bytes, full(owner, s));
        }
        halo.store(smem + kBarrierBytes + stage(s), sl.halo_plane);
        fence_proxy_async_shared();
        mbar_arrive(full(owner, s));
        // issued after the fence (which may wait for this thread's outstanding accesses): in
        // flight while the thread waits for the next stage
        if (c + 1 < n_chunks) halo.load(c + 1);
      }
    }
  };

  // Consumer `me`: tap (t_h, t_w) reads the halo shifted by (cnt_h - 1 - t_h) * step_h rows and
  // (cnt_w - 1 - t_w) * step_w columns; strip q starts 8q columns in. Then the epilogue, from
  // the accumulators.
  auto consume = [&](int me) {
    const int tid = threadIdx.x % kWarpgroup;
    int chunk_seq = 0;
    unsigned parity = 0;  // bit s: the parity of this consumer's next round of full(me, s)
    int turns = 0;
    int64_t k = 0;
    for (int64_t t = blockIdx.x; t < total_tiles; t += gridDim.x, ++k) {
      const WgTile tl = wg_tile(t, tiles_per_sample, col_blocks, col_tiles);
      const TileOrigin origin = locate_tile(phases, tl.x, R, kTW);
      const PhaseEntry& ph = phases.e[origin.phase];
      const int n_chunks = tile_chunks(ph);
      if (k % 2 != me) {
        chunk_seq += n_chunks;
        continue;
      }
      if (k > 0) mbar_wait(turn(me), turns++ & 1);  // the other consumer's previous tile
      const int cnt_h = ph.count_h, cnt_w = ph.count_w, step_h = ph.off_step_h, step_w = ph.off_step_w;
      const int hcols = kNhwc ? sl.box_cols : ph.hcols;  // halo pixels per row in a stage
      // The tile's chunks: wait for each, issue(A descriptor, halo address) its MMAs, hand the turn
      // over, give the stage back.
      // As in conv_wgmma_kernel, a stage goes back as soon as its MMAs are done. 16-bit NHWC
      // input: chunk c's MMAs are issued before chunk c - 1's are waited for, so the tensor pipe
      // does not drain between a tile's chunks (float32 lost through registers and spilled with
      // NHWC boxes, so not there).
      constexpr bool kChunkInFlight = kNhwc && sizeof(T) == 2;
      auto run_chunks = [&](auto issue) {
        int held = -1;  // kChunkInFlight: the stage whose MMAs may still run
        for (int c = 0; c < n_chunks; ++c) {
          const int s = (chunk_seq + c) % stages;
          mbar_wait(full(me, s), (parity >> s) & 1u);
          parity ^= 1u << s;
          issue(wgmma_desc(pipe + stage(s) + sl.halo_bytes, kBlockCh * 16, 128), pipe + stage(s));
          if (c == n_chunks - 1 - tile_turn_lead(n_chunks)) mbar_arrive(turn(1 - me));
          if constexpr (kChunkInFlight) {
            if (held >= 0) {
              wgmma_wait<1>();
              mbar_arrive(empty(held));
            }
            held = s;
          } else {
            wgmma_wait<0>();
            mbar_arrive(empty(s));
          }
        }
        wgmma_wait<0>();  // (on every path: one without it made ptxas serialise the MMAs, C7514)
        if (held >= 0) mbar_arrive(empty(held));
      };
      // After the MMAs: the epilogue, from the accumulators.
      auto finish = [&](float (&acc)[Q][4 * R]) {
        if (n_chunks == 0) mbar_arrive(turn(1 - me));
        chunk_seq += n_chunks;
        wgmma_epilogue<T, Q, R, kWindows>(acc, tid, bias, out, p, ep, ph, origin.j0, origin.i0, tl.n, tl.g,
                                          tl.ct * kBlockCh, tl.x, tiles_per_sample);
      };
      // Each path has its own accumulators and epilogue: accumulators defined on two paths and
      // merged (or one array used by both MMA shapes) made ptxas serialise the MMAs (C7511).
      // The test is warp-uniform to the compiler (as `me`), else ptxas serialises them as well.
      if (!kNhwc && __shfl_sync(0xffffffffu, is_band(ph, origin), 0)) {
        float band_acc[EdgeBand::kN / 2];
#pragma unroll
        for (int e = 0; e < EdgeBand::kN / 2; ++e) band_acc[e] = 0.f;
        wgmma_fence_operands(band_acc);
        run_chunks([&](uint64_t a_desc, uint32_t halo) {  // (its core matrices are consecutive: 128 bytes apart)
          issue_band_chunk_mmas<T>(band_acc, cnt_h, cnt_w, step_h, step_w, a_desc, wgmma_desc(halo, sl.halo_plane, 128));
        });
        wgmma_fence_operands(band_acc);
        float acc[Q][4 * R];
        band_to_strip<R>(band_acc, acc);
        finish(acc);
      } else {
        float acc[Q][4 * R];
#pragma unroll
        for (int q = 0; q < Q; ++q)
#pragma unroll
          for (int e = 0; e < 4 * R; ++e) acc[q][e] = 0.f;
#pragma unroll
        for (int q = 0; q < Q; ++q) wgmma_fence_operands(acc[q]);
        const int q_used = min(Q, (ph.OWp - origin.i0 + 7) / 8);  // strips right of the grid issue no MMAs
        // every row (a compile-time R: the shorter MMA shapes' code in this kernel made ptxas inject
        // warpgroup.arrive fences into its loop, slowing convs whose maps are whole 17-row strips)
        constexpr int rows_used = R;
        run_chunks([&](uint64_t a_desc, uint32_t halo) {
          issue_chunk_mmas<T, Q, R>(acc, cnt_h, cnt_w, step_h, step_w, hcols, q_used, rows_used, a_desc,
                                    wgmma_desc(halo, sl.halo_plane, hcols * 16));
        });
#pragma unroll
        for (int q = 0; q < Q; ++q) wgmma_fence_operands(acc[q]);
        finish(acc);
      }
    }
  };

  const int wg = threadIdx.x / kWarpgroup;
  if (wg == 0) {
    warpgroup_reg_dealloc<kPingPongProducerRegs>();
    if (!kNhwc || threadIdx.x == 0) produce();
  } else {
    warpgroup_reg_alloc<kPingPongConsumerRegs>();
    consume(__shfl_sync(0xffffffffu, wg - 1, 0));  // warp-uniform to the compiler: no wgmma serialisation
  }
}

}  // namespace
}  // namespace cuda
}  // namespace myops
