#pragma once
// The NCHW -> NHWC transposes through shared memory, as templates over what is stored for each
// value: the conv's input staging stores the value (or its TF32 rounding, channels_last_input.cu),
// GroupNorm's last pass of a channels-last call stores it normalised (channels_last_group_norm.cu).
// Map: Map::Channel map.channel(n, c), the per-(image, channel) state, made once per image by the
// threads whose stores stay in one channel (every store phase below), and Raw map(state, Raw v),
// the stored bits of the value with bits v. The kernels move bits (Raw: the element's size as an
// unsigned integer), so the copies compute nothing. A block transposes `steps` consecutive pixel
// tiles of one image's channel block (Map::kTileRuns; else one), its channels' states made once
// (for every channel of the block: the last one stands in past C, so that their loads issue
// together, unbranched).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/conv/common/conv_tile_geometry.cuh"
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/transpose_tile.cuh"

namespace myops {
namespace cuda {

// The maps whose stored value depends on the value alone.
struct StatelessValues {
  static constexpr bool kTileRuns = false;  // a block per tile: no channel state to share
  struct Channel {};
  __device__ Channel channel(int64_t, int64_t) const { return {}; }
};

// The value as it is.
struct CopyValues : StatelessValues {
  template <typename Raw>
  __device__ Raw operator()(Channel, Raw v) const { return v; }
};

// A float32 value rounded to TF32 (the wgmma kernels' float32 operands).
struct RoundTf32Values : StatelessValues {
  __device__ uint32_t operator()(Channel, uint32_t v) const { return to_tf32(__uint_as_float(v)); }
};

namespace transpose_detail {

constexpr int kTile = 32;  // channels x pixels per transposed tile
constexpr int kRowsPerPass = 8;

// One image's [C][HW] -> [HW][C] in 32 x 32 tiles through shared memory, so that both the reads
// (along pixels) and the writes (along channels) are coalesced. Images stride over grid z.
template <typename Raw, typename Map>
__global__ void nchw_to_nhwc_kernel(const Raw* __restrict__ x, Raw* __restrict__ y, int64_t N, int64_t C, int64_t HW,
                                    int64_t steps, Map map) {
  allow_dependent_launch();  // the conv's weight preparation may start (conv_prepare_weight)
  // tiles of this block: a compile-time 1 for the copies, whose code stays the one-tile loop
  const int64_t run = Map::kTileRuns ? steps : 1;
  __shared__ Raw tile[kTile][kTile + 1];
  const int64_t c0 = int64_t(blockIdx.y) * kTile;
  const int64_t c_out = c0 + threadIdx.x;  // the channel this thread stores
  for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
    const Raw* xi = x + n * C * HW;
    Raw* yi = y + n * C * HW;
    const typename Map::Channel ch = map.channel(n, min(c_out, C - 1));
    for (int64_t step = 0; step < run; ++step) {
      const int64_t p0 = (int64_t(blockIdx.x) * run + step) * kTile;
      if (p0 >= HW) break;
      for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
        const int64_t c = c0 + i, px = p0 + threadIdx.x;
        if (c < C && px < HW) tile[i][threadIdx.x] = xi[c * HW + px];
      }
      __syncthreads();
      for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
        const int64_t px = p0 + i;
        if (px < HW && c_out < C) yi[px * C + c_out] = map(ch, tile[threadIdx.x][i]);
      }
      __syncthreads();  // the tile is refilled by the next step
    }
  }
}

// 4-byte types where C and HW are multiples of 4 and both tensors 16-byte aligned: 32 channels x
// 128 pixels per tile and 16-byte accesses both ways (a warp reads 512 bytes of one channel row,
// and writes 4 pixels' 128 bytes of channels), each thread's four loads in flight together,
// through the swizzled tile of transpose_tile.cuh (4-pixel units, 4-channel packs): the 32 x 32
// scalar tiles above leave bandwidth unused on large inputs.
constexpr int kWideC = 32, kWideP = 128, kWideChunks = kWideP / 4, kWideThreads = 256;
constexpr int kWidePasses = kWideC * kWideChunks / kWideThreads;  // 16-byte loads per thread

template <typename Map>
__global__ void __launch_bounds__(kWideThreads) nchw_to_nhwc_wide_kernel(const uint4* __restrict__ x,
                                                                         uint4* __restrict__ y, int64_t N,
                                                                         int64_t C, int64_t HW, int64_t steps,
                                                                         Map map) {
  allow_dependent_launch();
  const int64_t run = Map::kTileRuns ? steps : 1;
  __shared__ uint4 tile[kWideC][kWideChunks];
  const uint32_t* words = reinterpret_cast<const uint32_t*>(&tile[0][0]);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t c0 = int64_t(blockIdx.y) * kWideC;
  const int64_t HW4 = HW / 4, C4 = C / 4;
  const int cg = lane % 8, q = lane / 8;  // column phase: channels 4 cg.., pixel q of a 4-pixel chunk
  const int64_t c_out = c0 + 4 * cg;     // the first of the 4 channels this thread stores
  for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
    typename Map::Channel ch[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) ch[k] = map.channel(n, min(c_out + k, C - 1));
    for (int64_t step = 0; step < run; ++step) {
      const int64_t chunk0 = (int64_t(blockIdx.x) * run + step) * kWideChunks;
      if (chunk0 >= HW4) break;
      uint4 v[kWidePasses];
#pragma unroll
      for (int i = 0; i < kWidePasses; ++i) {  // a warp per channel row, a 4-pixel chunk per lane
        const int64_t c = c0 + warp + i * (kWideThreads / 32), chunk = chunk0 + lane;
        v[i] = c < C && chunk < HW4 ? x[(n * C + c) * HW4 + chunk] : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < kWidePasses; ++i) {
        const int row = warp + i * (kWideThreads / 32);
        tile[row][swizzled_unit(row, lane, 4)] = v[i];
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < kWidePasses; ++i) {  // a warp per chunk: 4 pixels x 32 channels
        const int chunk = warp + i * (kWideThreads / 32);
        const int64_t px = (chunk0 + chunk) * 4 + q;
        if (px >= HW || c_out >= C) continue;
        uint32_t o[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int row = 4 * cg + k;
          o[k] = map(ch[k], words[(row * kWideChunks + swizzled_unit(row, chunk, 4)) * 4 + q]);
        }
        y[(n * HW + px) * C4 + c_out / 4] = make_uint4(o[0], o[1], o[2], o[3]);
      }
      __syncthreads();  // the tile is refilled by the next step
    }
  }
}

// 16-bit types: 64 channels x 64 pixels per tile, read as pixel pairs and written as channel pairs
// (32-bit words: 2-byte accesses are half as fast); a warp reads one channel row's
// 128 bytes and writes one pixel's, and each thread issues all its loads before it waits for any.
// kWordRows: every channel row starts 4-byte aligned (HW even, x aligned), so a pair is one load;
// else (an odd pixel count: the 64->128 k5 (32^2) layer's 17 x 17 pooled maps) two 2-byte loads, the stores the same.
constexpr int kTile16 = 64, kPass16 = 256 / 32;  // 256 threads: 8 channel rows (or pixels) a pass
template <bool kWordRows, typename Map>
__global__ void __launch_bounds__(256) nchw_to_nhwc_16bit_kernel(const unsigned short* __restrict__ x,
                                                                  unsigned short* __restrict__ y, int64_t N,
                                                                  int64_t C, int64_t HW, int64_t steps, Map map) {
  allow_dependent_launch();
  const int64_t run = Map::kTileRuns ? steps : 1;
  __shared__ uint32_t tile[kTile16][kTile16 / 2 + 1];  // [channel][pixel pair]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t c0 = int64_t(blockIdx.y) * kTile16;
  const int64_t c_out = c0 + 2 * lane;  // the channel pair this thread stores: c_out, c_out + 1
  const bool pair_out = c_out + 1 < C;  // else only channel c_out (C odd)
  for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
    const typename Map::Channel ch0 = map.channel(n, min(c_out, C - 1)), ch1 = map.channel(n, min(c_out + 1, C - 1));
    for (int64_t step = 0; step < run; ++step) {
      const int64_t p0 = (int64_t(blockIdx.x) * run + step) * kTile16;
      if (p0 >= HW) break;
      const bool first_in = p0 + 2 * lane < HW, second_in = p0 + 2 * lane + 1 < HW;  // the pair's pixels
      const unsigned short* xi = x + n * C * HW + p0 + 2 * lane;
      unsigned short* yi = y + n * C * HW + c_out;
      uint32_t v[kTile16 / kPass16];
#pragma unroll
      for (int i = 0; i < kTile16 / kPass16; ++i) {
        const int64_t c = c0 + warp + i * kPass16;
        if constexpr (kWordRows) {
          v[i] = first_in && c < C ? *reinterpret_cast<const uint32_t*>(xi + c * HW) : 0u;
        } else {
          const uint32_t lo = first_in && c < C ? xi[c * HW] : 0u, hi = second_in && c < C ? xi[c * HW + 1] : 0u;
          v[i] = lo | (hi << 16);
        }
      }
#pragma unroll
      for (int i = 0; i < kTile16 / kPass16; ++i) tile[warp + i * kPass16][lane] = v[i];
      __syncthreads();
#pragma unroll
      for (int i = 0; i < kTile16 / kPass16; ++i) {
        const int px = warp + i * kPass16;  // a warp per pixel, a channel pair per lane
        if (p0 + px >= HW || c_out >= C) continue;
        const int half = 16 * (px % 2);
        const auto lo = map(ch0, static_cast<unsigned short>(tile[2 * lane][px / 2] >> half));
        unsigned short* dst = yi + (p0 + px) * C;
        if (pair_out && C % 2 == 0) {
          const auto hi = map(ch1, static_cast<unsigned short>(tile[2 * lane + 1][px / 2] >> half));
          *reinterpret_cast<uint32_t*>(dst) = uint32_t(lo) | (uint32_t(hi) << 16);
        } else {
          dst[0] = lo;
          if (pair_out) dst[1] = map(ch1, static_cast<unsigned short>(tile[2 * lane + 1][px / 2] >> half));
        }
      }
      __syncthreads();  // the tile is refilled by the next step
    }
  }
}

// Tiles per block: one for a copy (its blocks need no setup), else enough that a block's channel
// states are made for many tiles while the grid keeps ~2048 blocks (one tile per block spent much
// of a normalising 16-bit transpose on that setup).
template <typename Map>
int64_t tile_steps(int64_t tiles) {
  return Map::kTileRuns ? std::clamp<int64_t>(tiles / 2048, 1, 16) : 1;
}

// The transposes' grid for tile_px-pixel x tile_c-channel tiles: runs of `steps` tiles (tile_steps)
// x channel blocks of an image in x and y, images over z (the kernels stride over them). False
// where x or y would exceed the launch limits.
template <typename Map>
bool image_tile_grid(int64_t N, int64_t C, int64_t HW, int tile_px, int tile_c, int64_t& steps, dim3& grid) {
  const int64_t tiles = ceil_div(HW, tile_px), gy = ceil_div(C, tile_c);
  steps = tile_steps<Map>(N * gy * tiles);
  const int64_t gx = ceil_div(tiles, steps);
  if (gx > 0x7fffffff || gy > 65535) return false;
  grid = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(std::min<int64_t>(N, 65535)));
  return true;
}

}  // namespace transpose_detail

// x: contiguous [N, C, HW], y: contiguous [N, HW, C], y = map(x) value by value, where Raw is the
// elements' size (uint16_t, uint32_t or uint64_t bits). cudaErrorInvalidConfiguration, before any
// launch, where the grid cannot cover the shape (over ~2 M channels).
template <typename Raw, typename Map>
cudaError_t transpose_to_channels_last(const Raw* x, Raw* y, int64_t N, int64_t C, int64_t HW, const Map& map,
                                       cudaStream_t stream) {
  using namespace transpose_detail;
  if (N * C * HW == 0) return cudaSuccess;
  int64_t steps;
  dim3 grid;
  if constexpr (sizeof(Raw) == 2) {
    if (!image_tile_grid<Map>(N, C, HW, kTile16, kTile16, steps, grid)) return cudaErrorInvalidConfiguration;
    const auto* src = reinterpret_cast<const unsigned short*>(x);
    auto* dst = reinterpret_cast<unsigned short*>(y);
    if (HW % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 4 == 0)
      nchw_to_nhwc_16bit_kernel<true><<<grid, 256, 0, stream>>>(src, dst, N, C, HW, steps, map);
    else
      nchw_to_nhwc_16bit_kernel<false><<<grid, 256, 0, stream>>>(src, dst, N, C, HW, steps, map);
    return cudaGetLastError();
  } else {
    if constexpr (sizeof(Raw) == 4) {
      if (C % 4 == 0 && HW % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
          reinterpret_cast<uintptr_t>(y) % 16 == 0 && image_tile_grid<Map>(N, C, HW, kWideP, kWideC, steps, grid)) {
        nchw_to_nhwc_wide_kernel<<<grid, kWideThreads, 0, stream>>>(reinterpret_cast<const uint4*>(x),
                                                                    reinterpret_cast<uint4*>(y), N, C, HW, steps, map);
        return cudaGetLastError();
      }
    }
    if (!image_tile_grid<Map>(N, C, HW, kTile, kTile, steps, grid)) return cudaErrorInvalidConfiguration;
    nchw_to_nhwc_kernel<<<grid, dim3(kTile, kRowsPerPass), 0, stream>>>(x, y, N, C, HW, steps, map);
    return cudaGetLastError();
  }
}

}  // namespace cuda
}  // namespace myops
