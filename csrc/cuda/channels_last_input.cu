#include "cuda/channels_last_input.cuh"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/conv_tile_geometry.cuh"
#include "cuda/grid_dependency.cuh"
#include "cuda/transpose_tile.cuh"

namespace myops {
namespace cuda {
namespace {

constexpr int kTile = 32;  // channels x pixels per transposed tile
constexpr int kRowsPerPass = 8;

template <typename Raw, bool kRound>
__device__ inline Raw staged_value(Raw v) {
  if constexpr (kRound) return to_tf32(__uint_as_float(v));
  return v;
}

// One image's [C][HW] -> [HW][C] in 32 x 32 tiles through shared memory, so that both the reads
// (along pixels) and the writes (along channels) are coalesced. Images stride over grid z.
template <typename Raw, bool kRound>
__global__ void nchw_to_nhwc_kernel(const Raw* __restrict__ x, Raw* __restrict__ y, int64_t N, int64_t C,
                                    int64_t HW) {
  allow_dependent_launch();  // the conv's weight preparation may start (conv_prepare_weight)
  __shared__ Raw tile[kTile][kTile + 1];
  const int64_t p0 = int64_t(blockIdx.x) * kTile, c0 = int64_t(blockIdx.y) * kTile;
  for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
    const Raw* xi = x + n * C * HW;
    Raw* yi = y + n * C * HW;
    for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
      const int64_t c = c0 + i, px = p0 + threadIdx.x;
      if (c < C && px < HW) tile[i][threadIdx.x] = xi[c * HW + px];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
      const int64_t px = p0 + i, c = c0 + threadIdx.x;
      if (px < HW && c < C) yi[px * C + c] = staged_value<Raw, kRound>(tile[threadIdx.x][i]);
    }
    __syncthreads();  // the tile is refilled for the next image
  }
}

// 4-byte types where C and HW are multiples of 4 and both tensors 16-byte aligned: 32 channels x
// 128 pixels per tile and 16-byte accesses both ways (a warp reads 512 bytes of one channel row,
// and writes 4 pixels' 128 bytes of channels), each thread's four loads in flight together,
// through the swizzled tile of transpose_tile.cuh (4-pixel units, 4-channel packs). H100: the
// 32 x 32 scalar tiles above moved the VAE demo's 16 x 128 x 64^2 input at ~1.6 TB/s.
constexpr int kWideC = 32, kWideP = 128, kWideChunks = kWideP / 4, kWideThreads = 256;
constexpr int kWidePasses = kWideC * kWideChunks / kWideThreads;  // 16-byte loads per thread

template <bool kRound>
__global__ void __launch_bounds__(kWideThreads) nchw_to_nhwc_wide_kernel(const uint4* __restrict__ x,
                                                                         uint4* __restrict__ y, int64_t N,
                                                                         int64_t C, int64_t HW) {
  allow_dependent_launch();
  __shared__ uint4 tile[kWideC][kWideChunks];
  const uint32_t* words = reinterpret_cast<const uint32_t*>(&tile[0][0]);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t chunk0 = int64_t(blockIdx.x) * kWideChunks, c0 = int64_t(blockIdx.y) * kWideC;
  const int64_t HW4 = HW / 4, C4 = C / 4;
  const int cg = lane % 8, q = lane / 8;  // column phase: channels 4 cg.., pixel q of a 4-pixel chunk
  for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
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
      const int64_t px = (chunk0 + chunk) * 4 + q, c = c0 + 4 * cg;
      if (px >= HW || c >= C) continue;
      uint32_t o[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int row = 4 * cg + k;
        const uint32_t w = words[(row * kWideChunks + swizzled_unit(row, chunk, 4)) * 4 + q];
        o[k] = kRound ? to_tf32(__uint_as_float(w)) : w;
      }
      y[(n * HW + px) * C4 + c / 4] = make_uint4(o[0], o[1], o[2], o[3]);
    }
    __syncthreads();  // the tile is refilled for the next image
  }
}

// A channels-last float32 input: the TF32-rounded copy, element by element.
__global__ void round_tf32_copy_kernel(const uint32_t* __restrict__ x, uint32_t* __restrict__ y, int64_t total) {
  allow_dependent_launch();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = to_tf32(__uint_as_float(x[i]));
}

// 16-bit types: 64 channels x 64 pixels per tile, read as pixel pairs and written as channel pairs
// (32-bit words: 2-byte accesses measured ~1 TB/s on the H100); a warp reads one channel row's
// 128 bytes and writes one pixel's, and each thread issues all its loads before it waits for any.
// kWordRows: every channel row starts 4-byte aligned (HW even, x aligned), so a pair is one load;
// else (an odd pixel count: L2_11's 17 x 17 pooled maps) two 2-byte loads, the stores the same.
constexpr int kTile16 = 64, kPass16 = 256 / 32;  // 256 threads: 8 channel rows (or pixels) a pass
template <bool kWordRows>
__global__ void __launch_bounds__(256) nchw_to_nhwc_16bit_kernel(const unsigned short* __restrict__ x,
                                                                  unsigned short* __restrict__ y, int64_t N,
                                                                  int64_t C, int64_t HW) {
  allow_dependent_launch();
  __shared__ uint32_t tile[kTile16][kTile16 / 2 + 1];  // [channel][pixel pair]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t p0 = int64_t(blockIdx.x) * kTile16, c0 = int64_t(blockIdx.y) * kTile16;
  const bool first_in = p0 + 2 * lane < HW, second_in = p0 + 2 * lane + 1 < HW;  // the pair's pixels
  for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
    const unsigned short* xi = x + n * C * HW + p0 + 2 * lane;
    unsigned short* yi = y + n * C * HW + c0 + 2 * lane;
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
    const bool pair_out = c0 + 2 * lane + 1 < C;  // else only channel c0 + 2 lane (C odd)
#pragma unroll
    for (int i = 0; i < kTile16 / kPass16; ++i) {
      const int px = warp + i * kPass16;  // a warp per pixel, a channel pair per lane
      if (p0 + px >= HW || c0 + 2 * lane >= C) continue;
      const int half = 16 * (px % 2);
      const uint32_t lo = (tile[2 * lane][px / 2] >> half) & 0xffffu;
      unsigned short* dst = yi + (p0 + px) * C;
      if (pair_out && C % 2 == 0) {
        *reinterpret_cast<uint32_t*>(dst) = lo | (((tile[2 * lane + 1][px / 2] >> half) & 0xffffu) << 16);
      } else {
        dst[0] = static_cast<unsigned short>(lo);
        if (pair_out) dst[1] = static_cast<unsigned short>(tile[2 * lane + 1][px / 2] >> half);
      }
    }
    __syncthreads();  // the tile is refilled for the next image
  }
}

// The transposes' grid: tile_px x tile_c (pixels x channels) tiles of an image in x and y, images
// over z (the kernels stride over them). False where x or y would exceed the launch limits.
bool image_tile_grid(int64_t N, int64_t C, int64_t HW, int tile_px, int tile_c, dim3& grid) {
  const int64_t gx = ceil_div(HW, tile_px), gy = ceil_div(C, tile_c);
  if (gx > 0x7fffffff || gy > 65535) return false;
  grid = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(std::min<int64_t>(N, 65535)));
  return true;
}

template <typename Raw, bool kRound>
cudaError_t transpose(const void* x, void* y, int64_t N, int64_t C, int64_t HW, cudaStream_t stream) {
  dim3 grid;
  if (!image_tile_grid(N, C, HW, kTile, kTile, grid)) return cudaErrorInvalidConfiguration;
  nchw_to_nhwc_kernel<Raw, kRound><<<grid, dim3(kTile, kRowsPerPass), 0, stream>>>(static_cast<const Raw*>(x),
                                                                                    static_cast<Raw*>(y), N, C, HW);
  return cudaGetLastError();
}

}  // namespace

cudaError_t stage_channels_last_input(const void* x, void* y, DType dtype, int64_t N, int64_t C, int64_t HW,
                                      bool source_channels_last, bool round_tf32, cudaStream_t stream) {
  const int64_t total = N * C * HW;
  if (total == 0) return cudaSuccess;
  const bool round = round_tf32 && dtype == DType::F32;
  if (source_channels_last) {
    if (!round) return cudaMemcpyAsync(y, x, total * dtype_bytes(dtype), cudaMemcpyDeviceToDevice, stream);
    const int blocks = static_cast<int>(std::min<int64_t>(ceil_div(total, 256), 65535));
    round_tf32_copy_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), total);
    return cudaGetLastError();
  }
  switch (dtype) {
    case DType::F32: {
      dim3 grid;
      const bool wide = C % 4 == 0 && HW % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(y) % 16 == 0 && image_tile_grid(N, C, HW, kWideP, kWideC, grid);
      if (!wide)
        return round ? transpose<uint32_t, true>(x, y, N, C, HW, stream) : transpose<uint32_t, false>(x, y, N, C, HW, stream);
      auto launch = [&](auto kernel) {
        kernel<<<grid, kWideThreads, 0, stream>>>(static_cast<const uint4*>(x), static_cast<uint4*>(y), N, C, HW);
        return cudaGetLastError();
      };
      return round ? launch(nchw_to_nhwc_wide_kernel<true>) : launch(nchw_to_nhwc_wide_kernel<false>);
    }
    case DType::F64: return transpose<unsigned long long, false>(x, y, N, C, HW, stream);
    case DType::F16:
    case DType::BF16: {
      dim3 grid;
      if (!image_tile_grid(N, C, HW, kTile16, kTile16, grid)) return cudaErrorInvalidConfiguration;
      const auto* src = static_cast<const unsigned short*>(x);
      auto* dst = static_cast<unsigned short*>(y);
      if (HW % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 4 == 0)
        nchw_to_nhwc_16bit_kernel<true><<<grid, 256, 0, stream>>>(src, dst, N, C, HW);
      else
        nchw_to_nhwc_16bit_kernel<false><<<grid, 256, 0, stream>>>(src, dst, N, C, HW);
      return cudaGetLastError();
    }
  }
  return cudaErrorInvalidValue;
}

// [N][HW][C] -> [N][C][HW] is the NCHW -> NHWC transpose of an image of HW "channels" of C "pixels".
cudaError_t unstage_channels_last(const void* x, void* y, DType dtype, int64_t N, int64_t C, int64_t HW,
                                  cudaStream_t stream) {
  return stage_channels_last_input(x, y, dtype, N, HW, C, false, false, stream);
}

}  // namespace cuda
}  // namespace myops
