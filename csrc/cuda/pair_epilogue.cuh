#pragma once
// The two-block wgmma kernel's epilogue through Cs with lanes on pixel pairs: a pair is two
// neighbouring columns of a strip row, read from Cs as one 8-byte vector and, where they are
// consecutive in memory (stride-1 columns inside the output), stored as one 4- or 8-byte access.
// conv_epilogue (one 2- or 4-byte store per value, each with its own 64-bit address and bounds
// branch) issued ~45 instructions per value on L2_19's bfloat16 GELU + statistics epilogue
// (H100 SASS counts, session 24): 43% of the kernel's instructions. Lanes on whole 8-pixel
// segments (one 16-byte vector each) were tried first and measured 15% slower on L2_19: each
// store instruction then wrote a little to 16 rows (twice the L2 sectors per byte).
#include <cstdint>

#include "cuda/conv_common.cuh"

namespace myops {
namespace cuda {

// Pixel pairs of a 256-pixel tile (two strips of 16 rows x 8 columns, m = 128 strip + 8 row +
// column): lane l takes pairs starting at m = 128 (l / 16) + 32 j + 2 (l % 16), j < 4. A store
// instruction then covers 4 rows x 16 columns, and a half-warp's Cs reads 32 consecutive floats
// (no bank conflict).
constexpr int kPairTilePixels = 256, kPairsPerLane = 4;
__device__ inline int pair_pixel(int lane, int j) { return 128 * (lane / 16) + 32 * j + 2 * (lane % 16); }

// As conv_epilogue (same arguments and results, one image per tile): bias, activation, stores,
// and per channel the GroupNorm partials of the stored values. A pair with a pixel outside the
// output, not consecutive in memory (column stride > 1) or not aligned to its size stores value
// by value.
template <typename T, int BM, int BN, int kThreads, typename Sync, typename PixelOffset>
__device__ void conv_epilogue_pairs(float* Cs, int ldc, const T* __restrict__ bias, T* __restrict__ out,
                                    const ConvTranspose2dParams& p, const ConvEpilogue& ep, int64_t n, int64_t g,
                                    int64_t oc0, int64_t tile_index, int64_t tiles_per_sample,
                                    EpilogueThreads<Sync> ew, PixelOffset pixel_offset) {
  using Traits = DTypeTraits<T>;
  constexpr int kWarps = kThreads / 32;
  static_assert(BM == kPairTilePixels, "the pair layout of a 256-pixel tile");
  int64_t* pix_off = ew.pix_off;
  for (int m = ew.tid; m < BM; m += kThreads) pix_off[m] = pixel_offset(m);
  ew.sync();
  const int lane = ew.tid % 32, warp = ew.tid / 32;
  int64_t off[kPairsPerLane];
  unsigned inside = 0, joined = 0;  // bit 2j + e: pixel e of pair j inside the output; bit j: pair j one access
#pragma unroll
  for (int j = 0; j < kPairsPerLane; ++j) {
    const int64_t* o = pix_off + pair_pixel(lane, j);
    off[j] = o[0];
    const unsigned in = static_cast<unsigned>(o[0] >= 0) | static_cast<unsigned>(o[1] >= 0) << 1;
    inside |= in << (2 * j);
    joined |= static_cast<unsigned>(in == 3u && o[1] == o[0] + 1 && o[0] % 2 == 0) << j;
  }
  // the tile's pixels inside the output: every channel's count
  const float count = static_cast<float>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(__popc(inside))));
  const int c_valid = static_cast<int>(min(static_cast<int64_t>(BN), p.C_out_g - oc0));
  const int64_t plane = p.OH * p.OW;
  const float lane_bias = warp_lane_bias<T, BN, kWarps>(bias, p, g, oc0, c_valid, lane, warp);
  // the warp's channels kWarps apart: pointers stepped, not recomputed from 64-bit products
  const int64_t oc_warp = g * p.C_out_g + oc0 + warp;
  T* const chan_warp = out + (n * p.C_out + oc_warp) * plane;
  const int64_t chan_step = kWarps * plane;
  with_activation<float>(ep, [&](auto act) {
    T* chan = chan_warp;
    for (int c = warp, i = 0; c < c_valid; c += kWarps, ++i, chan += chan_step) {
      const int64_t oc = oc_warp + i * kWarps;
      // pairs at even offsets are aligned where the channel is
      const unsigned whole = reinterpret_cast<uintptr_t>(chan) % (2 * sizeof(T)) == 0 ? joined : 0u;
      const float b = __shfl_sync(0xffffffffu, lane_bias, i);
      float stored[2 * kPairsPerLane];
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kPairsPerLane; ++j) {
        const float2 v = *reinterpret_cast<const float2*>(Cs + c * ldc + pair_pixel(lane, j));
        const Vec<T, 2> pair = Traits::from_acc2(act(v.x + b), act(v.y + b));
        stored[2 * j] = Traits::to_acc(pair.v[0]);
        stored[2 * j + 1] = Traits::to_acc(pair.v[1]);
        if ((whole >> j) & 1u) {
          *reinterpret_cast<Vec<T, 2>*>(chan + off[j]) = pair;
          sum += stored[2 * j] + stored[2 * j + 1];
        } else {
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if ((inside >> (2 * j + e)) & 1u) {
              chan[pix_off[pair_pixel(lane, j) + e]] = pair.v[e];
              sum += stored[2 * j + e];
            }
        }
      }
      if (ep.tile_stats == nullptr) continue;
      sum = warp_sum(sum);
      const float mean = count > 0.f ? sum / count : 0.f;
      float m2 = 0.f;
#pragma unroll
      for (int k = 0; k < 2 * kPairsPerLane; ++k) {
        const float d = stored[k] - mean;
        if ((inside >> k) & 1u) m2 += d * d;
      }
      m2 = warp_sum(m2);
      if (lane == 0) write_tile_stats(ep, p.C_out, n, oc, tile_index, tiles_per_sample, count, mean, m2);
    }
  });
}

}  // namespace cuda
}  // namespace myops
