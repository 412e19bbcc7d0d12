#pragma once
// The two-block wgmma kernel's epilogue through Cs with lanes on pixel pairs: a pair is two
// neighbouring columns of a strip row, read from Cs as one 8-byte vector and, where they are
// consecutive in memory (stride-1 columns inside the output), stored as one 4- or 8-byte access.
// conv_epilogue (one 2- or 4-byte store per value, each with its own 64-bit address and bounds
// branch) made the bfloat16 GELU + statistics epilogue a large share of the kernel's
// instructions. Lanes on whole 8-pixel segments (one 16-byte vector each) were slower: each
// store instruction then wrote a little to 16 rows (twice the L2 sectors per byte).
// The GroupNorm partials (kStats): per channel, each lane leaves the sum of its stored values and
// their M2 about its own mean in shared memory; once the warp's channels are stored, the warp
// combines them for all its channels at once (Chan et al.'s formula, a fixed order), where two
// dependent five-shuffle chains and a division per channel were a sizeable part of the conv. The
// same combine through registers (every channel's partials live at once) made the kernel's code
// 2.5x larger and the epilogue-free layers slower.
#include <cstdint>
#include <type_traits>

#include "cuda/conv/common/conv_common.cuh"
#include "cuda/common/l2_policy.cuh"

namespace myops {
namespace cuda {

// Pixel pairs of a 256-pixel tile of Q strips of R rows x 8 columns (logical pixel m = 8R strip +
// 8 row + column; Q = 2, R = 16 or Q = 4, R = 8): lanes 32 / Q apart take the same pair of the Q
// strips, so a store instruction covers whole tile rows (4 of 16 columns, or 2 of 32), and lane l
// takes pairs from m = 8R (l / L) + 2L j + 2 (l % L), j < 4 (L = 32 / Q lanes per strip). In Cs a
// strip is kStripPitch floats: with four strips, 16 floats of padding put a half-warp's two strips
// on different banks (a half-warp then reads 32 consecutive banks, as with two strips unpadded).
constexpr int kPairTilePixels = 256, kPairsPerLane = 4;
// Cs floats per strip of `rows` rows in a tile of q strips (the layout above).
__host__ __device__ constexpr int pair_strip_pitch(int q, int rows) { return 8 * rows + (q > 2 ? 16 : 0); }
// Cs floats per channel row of such a tile.
__host__ __device__ constexpr int pair_tile_cs_columns(int q, int rows) { return q * pair_strip_pitch(q, rows); }
template <int Q, int R>
struct PairTile {
  static_assert(8 * Q * R == kPairTilePixels && (Q == 2 || Q == 4), "tiles of 256 pixels in 2 or 4 strips");
  static constexpr int kLanes = 32 / Q;  // lanes per strip
  static constexpr int kStripPitch = pair_strip_pitch(Q, R);
  // lane's pair j: its offset in its strip (in_strip), as the tile's logical pixel and as a Cs column
  __device__ static int in_strip(int lane, int j) { return 2 * kLanes * j + 2 * (lane % kLanes); }
  __device__ static int pixel(int lane, int j) { return 8 * R * (lane / kLanes) + in_strip(lane, j); }
  __device__ static int cs_column(int lane, int j) { return kStripPitch * (lane / kLanes) + in_strip(lane, j); }
};

// The warp's channels' tile partials from their lane partials (partials[c * 32 + l]: lane l's sum
// of its stored values of channel c and their M2 about its own mean, over lane_count values, the
// same count for every channel): lane l takes channel i = l / kLanes of the warp (c = warp +
// i * kWarps), combines 32 / kLanes lanes' partials and its kLanes - 1 neighbours' by shuffles;
// the total's mean first, then each part's M2 moved to it (Chan et al.).
template <int BN, int kWarps>
__device__ inline void combine_lane_partials(const float2* partials, const ConvEpilogue& ep, int64_t channels,
                                             int64_t n, int64_t oc_warp, int c_valid, int64_t tile_index,
                                             int64_t tiles_per_sample, float count, int lane_count,
                                             float lane_inv_n, int lane, int warp) {
  constexpr int kChPerWarp = BN / kWarps, kLanes = 32 / kChPerWarp, kParts = 32 / kLanes;
  static_assert(kChPerWarp * kWarps == BN && kChPerWarp * kLanes == 32, "whole channels per warp, lanes per channel");
  __syncwarp();  // the warp's partials are in shared memory
  const int i = lane / kLanes;
  const int first = (lane % kLanes) * kParts;  // the lanes whose partials this lane combines
  const float2* part = partials + (warp + i * kWarps) * 32 + first;
  float2 v[kParts];
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kParts; ++k) {
    v[k] = part[k];
    sum += v[k].x;
  }
#pragma unroll
  for (int o = 1; o < kLanes; o *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float mean = count > 0.f ? sum / count : 0.f;
  float m2 = 0.f;
#pragma unroll
  for (int k = 0; k < kParts; ++k) {
    const float n_k = static_cast<float>(__shfl_sync(0xffffffffu, lane_count, first + k));
    const float d = v[k].x * __shfl_sync(0xffffffffu, lane_inv_n, first + k) - mean;
    m2 += v[k].y + n_k * d * d;
  }
#pragma unroll
  for (int o = 1; o < kLanes; o *= 2) m2 += __shfl_xor_sync(0xffffffffu, m2, o);
  if (lane % kLanes == 0 && warp + i * kWarps < c_valid)
    write_tile_stats(ep, channels, n, oc_warp + i * kWarps, tile_index, tiles_per_sample, count, mean, m2);
}

// As conv_epilogue (same arguments and results, one image per tile): bias, activation, stores,
// and per channel the GroupNorm partials of the stored values. A pair with a pixel outside the
// output, not consecutive in memory (column stride > 1) or not aligned to its size stores value
// by value.
// kStats: whether the tile partials may be asked for (ep.tile_stats); partials: [BN][32] lane
// partials in shared memory (kStats only).
template <typename T, int Q, int R, int BN, int kThreads, bool kStats, typename Sync, typename PixelOffset>
__device__ void conv_epilogue_pairs(float* Cs, int ldc, float2* partials, const T* __restrict__ bias,
                                    T* __restrict__ out,
                                    const ConvTranspose2dParams& p, const ConvEpilogue& ep, int64_t n, int64_t g,
                                    int64_t oc0, int64_t tile_index, int64_t tiles_per_sample,
                                    EpilogueThreads<Sync> ew, PixelOffset pixel_offset) {
  using Traits = DTypeTraits<T>;
  using Tile = PairTile<Q, R>;
  constexpr int kWarps = kThreads / 32, BM = kPairTilePixels;
  int64_t* pix_off = ew.pix_off;
  for (int m = ew.tid; m < BM; m += kThreads) pix_off[m] = pixel_offset(m);
  ew.sync();
  const int lane = ew.tid % 32, warp = ew.tid / 32;
  int64_t off[kPairsPerLane];
  unsigned inside = 0, joined = 0;  // bit 2j + e: pixel e of pair j inside the output; bit j: pair j one access
#pragma unroll
  for (int j = 0; j < kPairsPerLane; ++j) {
    const int64_t* o = pix_off + Tile::pixel(lane, j);
    off[j] = o[0];
    const unsigned in = static_cast<unsigned>(o[0] >= 0) | static_cast<unsigned>(o[1] >= 0) << 1;
    inside |= in << (2 * j);
    joined |= static_cast<unsigned>(in == 3u && o[1] == o[0] + 1 && o[0] % 2 == 0) << j;
  }
  // the tile's pixels inside the output: every channel's count
  const int lane_count = __popc(inside);
  const float count = static_cast<float>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(lane_count)));
  const float lane_inv_n = lane_count > 0 ? 1.f / static_cast<float>(lane_count) : 0.f;
  const bool stats = kStats && ep.tile_stats != nullptr;
  const int c_valid = static_cast<int>(min(static_cast<int64_t>(BN), p.C_out_g - oc0));
  const int64_t plane = p.OH * p.OW;
  const float lane_bias = warp_lane_bias<T, BN, kWarps>(bias, p, g, oc0, c_valid, lane, warp);
  // the warp's channels kWarps apart: pointers stepped, not recomputed from 64-bit products
  const int64_t oc_warp = g * p.C_out_g + oc0 + warp;
  T* const chan_warp = out + (n * p.C_out + oc_warp) * plane;
  const int64_t chan_step = kWarps * plane;
  // Every pair of every lane one aligned access (all pixels inside, stride-1 columns, channel
  // planes of an even length: every tile away from the output's right and bottom edges): a
  // build of the loop without the per-pair tests and their branches (faster for 16-bit fused calls).
  const bool all_whole = __all_sync(0xffffffffu, joined == (1u << kPairsPerLane) - 1) && plane % 2 == 0 &&
                         reinterpret_cast<uintptr_t>(out) % (2 * sizeof(T)) == 0;
  // 16-bit outputs with statistics: two channels per iteration give the latency-bound loop more
  // independent work (float32 gains nothing)
  constexpr int kUnroll = kStats && sizeof(T) == 2 ? 2 : 1;
  // (ConvEpilogue::l2_hints: the whole pairs only; the edges' single values store plainly)
  const bool out_evict_last = (ep.l2_hints & kL2OutputEvictLast) != 0;
  const uint64_t out_policy = out_evict_last ? l2_policy(L2Priority::EvictLast) : 0;
  with_activation<float, T>(ep, [&](auto act) {
    auto channels = [&](auto all_pairs_whole) {
      constexpr bool kAllWhole = decltype(all_pairs_whole)::value;
      T* chan = chan_warp;
#pragma unroll kUnroll
      for (int c = warp, i = 0; c < c_valid; c += kWarps, ++i, chan += chan_step) {
        // pairs at even offsets are aligned where the channel is (read only when !kAllWhole)
        const unsigned whole = reinterpret_cast<uintptr_t>(chan) % (2 * sizeof(T)) == 0 ? joined : 0u;
        const float b = __shfl_sync(0xffffffffu, lane_bias, i);
        float stored[2 * kPairsPerLane];
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kPairsPerLane; ++j) {
          const float2 v = *reinterpret_cast<const float2*>(Cs + c * ldc + Tile::cs_column(lane, j));
          const Vec<T, 2> pair = Traits::from_acc2(act(v.x + b), act(v.y + b));
          stored[2 * j] = Traits::to_acc(pair.v[0]);
          stored[2 * j + 1] = Traits::to_acc(pair.v[1]);
          if (kAllWhole || ((whole >> j) & 1u)) {
            Vec<T, 2>* const dst = reinterpret_cast<Vec<T, 2>*>(chan + off[j]);
            if (out_evict_last) store_with_policy(dst, pair, out_policy);
            else *dst = pair;
            sum += stored[2 * j] + stored[2 * j + 1];
          } else {
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if ((inside >> (2 * j + e)) & 1u) {
                chan[pix_off[Tile::pixel(lane, j) + e]] = pair.v[e];
                sum += stored[2 * j + e];
              }
          }
        }
        if (!stats) continue;
        const float lane_mean = sum * lane_inv_n;
        float m2 = 0.f;
#pragma unroll
        for (int k = 0; k < 2 * kPairsPerLane; ++k) {
          const float d = stored[k] - lane_mean;
          if (kAllWhole || ((inside >> k) & 1u)) m2 += d * d;
        }
        partials[c * 32 + lane] = make_float2(sum, m2);
      }
    };
    if (all_whole) {
      channels(std::true_type{});
    } else {
      channels(std::false_type{});
    }
  });
  if (stats) combine_lane_partials<BN, kWarps>(partials, ep, p.C_out, n, oc_warp, c_valid, tile_index,
                                               tiles_per_sample, count, lane_count, lane_inv_n, lane, warp);
}

}  // namespace cuda
}  // namespace myops
