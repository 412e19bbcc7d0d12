#include "cuda/norm/channels_last_group_norm.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "cuda/common/dtype_traits.cuh"
#include "cuda/norm/group_norm_math.cuh"
#include "cuda/common/moments.cuh"
#include "cuda/layout/nchw_to_nhwc.cuh"
#include "cuda/common/transpose_tile.cuh"

namespace myops {
namespace cuda {
namespace {

// Blocks of 256 threads: `lanes` threads (a power of two up to 32) side by side across a block's
// channel packs, 256 / lanes rows of them over pixels, so that a warp reads whole pixel rows of
// the NHWC tensor (32 packs of up to 16 bytes); blocks that each read one 128-byte piece of every
// pixel's channels left much of the bandwidth unused.
constexpr int kThreads = 256, kWarps = kThreads / 32;
// pixels per thread per round, their loads in flight together: the statistics pass, and the
// normalise pass, whose NCHW stores then cover 64 pixels of a channel per step where a block
// spans 32 channel packs (32-pixel rows, 128-byte store runs in float32, were slower)
constexpr int kLoads = 4, kApplyLoads = 8;

template <typename T, int kPack>
struct alignas(sizeof(T) * kPack) Pack {
  T v[kPack];
};

// The channels one thread reads per pixel: a pack of 16 bytes (16-bit types: 8 bytes, as 16-byte
// packs slowed the statistics pass and cost the normalise pass ~100 registers) where C is a
// multiple and x is aligned to it, else one.
constexpr int kWideBytes = 16;
template <typename T>
constexpr int kPackBytes = sizeof(T) == 2 ? 8 : kWideBytes;
template <typename T, int kBytes = kPackBytes<T>>
constexpr int kPackOf = kBytes / sizeof(T);
template <typename T, int kBytes = kPackBytes<T>>
bool wide_packs(int64_t C, const void* x) {
  return C % kPackOf<T, kBytes> == 0 && reinterpret_cast<uintptr_t>(x) % (kPackOf<T, kBytes> * sizeof(T)) == 0;
}
// Runs f(std::integral_constant<int, kPack>): the wide pack, or one channel.
template <typename T, typename F>
cudaError_t with_pack(bool wide, const F& f) {
  return wide ? f(std::integral_constant<int, kPackOf<T>>{}) : f(std::integral_constant<int, 1>{});
}

// Threads across a block's channel packs: the packs of C, rounded up to a power of two, at most 32.
int lanes_for(int64_t packs) {
  int lanes = 1;
  while (lanes < 32 && lanes < packs) lanes *= 2;
  return lanes;
}

// Combines the Moments of the lanes of a warp that hold the same channels (lanes equal modulo
// `lanes`) in a fixed xor-butterfly order: each of them ends with the same result.
__device__ inline Moments combine_pixel_rows(Moments m, int lanes) {
  for (int o = 16; o >= lanes; o /= 2) {
    const Moments other{__shfl_xor_sync(0xffffffffu, m.n, o), __shfl_xor_sync(0xffffffffu, m.mean, o),
                        __shfl_xor_sync(0xffffffffu, m.m2, o)};
    m = (threadIdx.x & o) ? combine(other, m) : combine(m, other);
  }
  return m;
}

// grid (tiles, channel blocks, images): each thread accumulates its kPack channels over its row's
// pixels of the tile (sums of the offset from its first value, which keeps the variance from
// cancelling when |mean| >> std); the rows are combined in a fixed order, within each warp, then
// across the warps.
template <typename T, int kPack, bool kPre, typename S>
__global__ void __launch_bounds__(kThreads)
    nhwc_moments_kernel(const T* __restrict__ x, int64_t N, int64_t C, int64_t HW, int64_t tiles, int lanes,
                        const T* __restrict__ bias, ReadAs<T, kPre> read, S* __restrict__ moments) {
  using Tr = DTypeTraits<T>;
  using acc_t = typename Tr::acc_t;
  using P = Pack<T, kPack>;
  __shared__ Moments part[kWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row = threadIdx.x / lanes, rows = kThreads / lanes;
  const int64_t c0 = (int64_t(blockIdx.y) * lanes + threadIdx.x % lanes) * kPack;
  const int64_t tile = blockIdx.x, p_begin = tile * HW / tiles, p_end = (tile + 1) * HW / tiles;
  const bool valid = c0 < C;  // packs never straddle C (wide_packs)
  acc_t b[kPack];
#pragma unroll
  for (int k = 0; k < kPack; ++k) b[k] = kPre && bias && valid ? Tr::to_acc(bias[c0 + k]) : acc_t(0);
  for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
    acc_t first[kPack], s[kPack], ss[kPack];
    int64_t count = 0;
    int64_t p = p_begin + row;
    const T* xn = x + n * HW * C + c0;
    auto load = [&](int64_t px) { return *reinterpret_cast<const P*>(xn + px * C); };
    auto add = [&](const P& v) {
#pragma unroll
      for (int k = 0; k < kPack; ++k) {
        const acc_t d = read(v.v[k], b[k]) - first[k];
        s[k] += d;
        ss[k] += d * d;
      }
    };
#pragma unroll
    for (int k = 0; k < kPack; ++k) first[k] = s[k] = ss[k] = 0;
    if (valid && p < p_end) {
      const P v = load(p);
#pragma unroll
      for (int k = 0; k < kPack; ++k) first[k] = read(v.v[k], b[k]);
      for (; p + (kLoads - 1) * rows < p_end; p += kLoads * rows, count += kLoads) {
        P v4[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) v4[u] = load(p + u * rows);
#pragma unroll
        for (int u = 0; u < kLoads; ++u) add(v4[u]);
      }
      for (; p < p_end; p += rows, ++count) add(load(p));
    }
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      const double cnt = static_cast<double>(count), sum = s[k];
      Moments m = count == 0 ? Moments{0, 0, 0}
                             : Moments{cnt, first[k] + sum / cnt,
                                       std::max(static_cast<double>(ss[k]) - sum * sum / cnt, 0.0)};
      m = combine_pixel_rows(m, lanes);
      if (lane < lanes) part[warp][lane] = m;  // lane == the thread's channel pack there
      __syncthreads();
      if (threadIdx.x < lanes && valid) {
        Moments all = part[0][threadIdx.x];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) all = combine(all, part[w][threadIdx.x]);
        S* out = moments + ((n * C + c0 + k) * tiles + tile) * 3;
        out[0] = static_cast<S>(all.n);
        out[1] = static_cast<S>(all.mean);
        out[2] = static_cast<S>(all.m2);
      }
      __syncthreads();  // part is refilled for the next channel
    }
  }
}

// The PlaneNorm of each channel of a thread's pack, planes plane0, plane0 + 1, ... of [N, C].
template <typename T, int kPack>
__device__ inline void pack_norms(PlaneNorm<T> (&norm)[kPack], int64_t plane0, int64_t C, int64_t C_g,
                                  const double* mean, const double* rstd, const T* gamma, const T* beta,
                                  const T* pre_bias) {
#pragma unroll
  for (int k = 0; k < kPack; ++k) norm[k] = PlaneNorm<T>(plane0 + k, C, C_g, mean, rstd, gamma, beta, pre_bias);
}

// The normalise pass's shared tile: a row of kApplyLoads * rows pixels plus one (an odd stride) per
// channel, channel k of each thread's pack in rows k * lanes + (its lane among lanes): a warp's
// writes (one value per thread, the threads' packs side by side) and its reads along a row are
// then free of bank conflicts. 2048 kPack values at most.
template <typename T, int kPack>
constexpr int kTileValues = kApplyLoads * kThreads * kPack + 32 * kPack;

// grid (pixel spans, channel blocks, images): a block owns `lanes` kPack channels (each thread's
// fixed, their PlaneNorm folded once per image) and `steps` steps of kApplyLoads rows of pixels. Per
// step each thread loads its channels at kApplyLoads pixels (all loads before any use), normalises them
// and writes them back along channels, or (kToNchw) into the shared tile, from which the block
// stores them along pixels, kOut pixels per access (16-bit pairs: a warp stores 128 bytes).
template <typename T, int kPack, int kOut, bool kPre, bool kToNchw>
__global__ void __launch_bounds__(kThreads, 2)
    nhwc_apply_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t N, int64_t C, int64_t HW, int64_t C_g,
                      int64_t steps, int lanes, const double* __restrict__ mean, const double* __restrict__ rstd,
                      const T* __restrict__ gamma, const T* __restrict__ beta, ReadAs<T, kPre> read,
                      const T* __restrict__ pre_bias) {
  using P = Pack<T, kPack>;
  using Out = Pack<T, kOut>;
  __shared__ T tile[kToNchw ? kTileValues<T, kPack> : 1];
  const int row = threadIdx.x / lanes, rows = kThreads / lanes;
  const int span = kApplyLoads * rows, stride = span + 1;  // pixels per step; the tile's row stride
  const int block_channels = lanes * kPack;
  const int64_t cb = int64_t(blockIdx.y) * block_channels;
  const int64_t c0 = cb + (threadIdx.x % lanes) * kPack;
  const bool valid = c0 < C;
  for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
    PlaneNorm<T> norm[kPack];
    if (valid) pack_norms(norm, n * C + c0, C, C_g, mean, rstd, gamma, beta, pre_bias);
    const T* xn = x + n * HW * C;
    T* yn = y + n * HW * C;
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t p0 = (int64_t(blockIdx.x) * steps + step) * span;
      if (p0 >= HW) break;
      P v[kApplyLoads];
#pragma unroll
      for (int i = 0; i < kApplyLoads; ++i) {
        const int64_t px = p0 + row + i * rows;
        if (valid && px < HW) v[i] = *reinterpret_cast<const P*>(xn + px * C + c0);
      }
#pragma unroll
      for (int i = 0; i < kApplyLoads; ++i) {
        const int r = row + i * rows;
        if (!valid || p0 + r >= HW) continue;
#pragma unroll
        for (int k = 0; k < kPack; ++k) v[i].v[k] = norm[k](read, v[i].v[k]);
        if constexpr (kToNchw) {
#pragma unroll
          for (int k = 0; k < kPack; ++k) tile[(k * lanes + threadIdx.x % lanes) * stride + r] = v[i].v[k];
        } else {
          *reinterpret_cast<P*>(yn + (p0 + r) * C + c0) = v[i];
        }
      }
      if constexpr (kToNchw) {
        __syncthreads();
        // a warp per channel row (no division per element), its lanes along the row's pixels
        for (int ch = threadIdx.x / 32; ch < block_channels && cb + ch < C; ch += kWarps) {
          const T* src = tile + ((ch % kPack) * lanes + ch / kPack) * stride;
          for (int q = (threadIdx.x % 32) * kOut; q < span && p0 + q < HW; q += 32 * kOut) {
            Out o;
#pragma unroll
            for (int e = 0; e < kOut; ++e) o.v[e] = src[q + e];
            *reinterpret_cast<Out*>(yn + (cb + ch) * HW + p0 + q) = o;
          }
        }
        __syncthreads();  // the tile is refilled by the next step
      }
    }
  }
}

// NCHW output where C and HW are multiples of the 16-byte pack (kPack values) and x and y are
// 16-byte aligned: tiles of 8 packs of channels x kTransposePixels pixels (16 KB) through the
// swizzled tile of transpose_tile.cuh, 16-byte accesses on both sides. Each thread loads its
// pack at 4 pixels (a warp: 4 pixels' 8 packs), normalises it and scatters it into the tile's
// channel rows; then a warp stores whole 16-byte units along channel rows (fp32: one row of 512
// bytes per instruction). grid (pixel spans, channel blocks, images), `steps` tiles a block, the
// channels' PlaneNorm folded once per image. The shared kernel above (4-byte stores along rows
// of 64 pixels, 8-byte loads for 16-bit types) reaches half this bandwidth in 16-bit types.
constexpr int kTransposePixels = 128;
template <typename T, bool kPre>
__global__ void __launch_bounds__(kThreads)
    nhwc_to_nchw_apply_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t N, int64_t C, int64_t HW,
                              int64_t C_g, int64_t steps, const double* __restrict__ mean,
                              const double* __restrict__ rstd, const T* __restrict__ gamma,
                              const T* __restrict__ beta, ReadAs<T, kPre> read, const T* __restrict__ pre_bias) {
  constexpr int kPack = kWideBytes / sizeof(T), kRows = 8 * kPack, kUnits = kTransposePixels / kPack;
  constexpr int kRowsPerStore = 32 / kUnits;
  static_assert(kRowsPerStore >= 1, "a warp stores at least one row: 2- and 4-byte types");
  constexpr int kLoadsPerThread = kTransposePixels / (4 * kWarps);
  using P = Pack<T, kPack>;
  __shared__ P tile[kRows][kUnits];
  T* values = reinterpret_cast<T*>(&tile[0][0]);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int cg = lane % 8, q = lane / 8;  // loading: channel pack cg of pixel q of a 4-pixel quad
  const int64_t cb = int64_t(blockIdx.y) * kRows, c = cb + cg * kPack;
  const bool valid = c < C;
  for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
    PlaneNorm<T> norm[kPack];
    if (valid) pack_norms(norm, n * C + c, C, C_g, mean, rstd, gamma, beta, pre_bias);
    const T* xn = x + n * HW * C;
    T* yn = y + n * C * HW;
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t p0 = (int64_t(blockIdx.x) * steps + step) * kTransposePixels;
      if (p0 >= HW) break;
      P v[kLoadsPerThread];
#pragma unroll
      for (int i = 0; i < kLoadsPerThread; ++i) {
        const int64_t px = p0 + 4 * (warp + i * kWarps) + q;
        if (valid && px < HW) v[i] = *reinterpret_cast<const P*>(xn + px * C + c);
      }
#pragma unroll
      for (int i = 0; i < kLoadsPerThread; ++i) {
        const int pl = 4 * (warp + i * kWarps) + q;
        if (!valid || p0 + pl >= HW) continue;
#pragma unroll
        for (int k = 0; k < kPack; ++k) {
          const int row = cg * kPack + k;
          values[(row * kUnits + swizzled_unit(row, pl / kPack, kPack)) * kPack + pl % kPack] = norm[k](read, v[i].v[k]);
        }
      }
      __syncthreads();
      const int u = lane % kUnits;
      for (int row = warp * kRowsPerStore + lane / kUnits; row < kRows; row += kWarps * kRowsPerStore) {
        const int64_t px = p0 + int64_t(u) * kPack;
        if (cb + row < C && px < HW) *reinterpret_cast<P*>(yn + (cb + row) * HW + px) = tile[row][swizzled_unit(row, u, kPack)];
      }
      __syncthreads();  // the tile is refilled by the next step
    }
  }
}

constexpr int64_t kMaxGridYZ = 65535;

// The grid of a normalise pass over `spans` pixel spans x `cb` channel blocks x N images: (spans /
// steps, cb, images), `steps` spans per block: ~8 blocks per SM, otherwise long blocks (their
// PlaneNorm setup, 64-bit divisions and dependent loads, costs as much as a few steps). False
// past the launch limits.
bool apply_grid(int64_t spans, int64_t cb, int64_t N, int sms, int64_t& steps, dim3& grid) {
  steps = std::max<int64_t>(std::min<int64_t>(spans * cb * N / (8 * int64_t(std::max(sms, 1))), 16), 1);
  const int64_t gx = (spans + steps - 1) / steps;
  if (cb > kMaxGridYZ || gx > 0x7fffffff) return false;
  grid = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(cb), static_cast<unsigned>(std::min(N, kMaxGridYZ)));
  return true;
}

// Where nhwc_to_nchw_apply_kernel runs a pass to NCHW: packs of 16 bytes in both layouts.
template <typename T>
bool transposing_apply_fits(int64_t C, int64_t HW, const void* x, const void* y) {
  return wide_packs<T, kWideBytes>(C, x) && HW % kPackOf<T, kWideBytes> == 0 &&
         reinterpret_cast<uintptr_t>(y) % kWideBytes == 0;
}

template <typename Read, typename T = typename Read::value_t>
cudaError_t transposing_apply(const Read& read, const void* x, void* y, int64_t N, int64_t C, int64_t HW, int64_t C_g,
                              const double* mean, const double* rstd, const void* gamma, const void* beta, int sms,
                              cudaStream_t stream, PreGelu pre) {
  constexpr int64_t kRows = 8 * kPackOf<T, kWideBytes>;
  int64_t steps;
  dim3 grid;
  if (!apply_grid((HW + kTransposePixels - 1) / kTransposePixels, (C + kRows - 1) / kRows, N, sms, steps, grid))
    return cudaErrorInvalidConfiguration;
  nhwc_to_nchw_apply_kernel<T, Read::kPre><<<grid, kThreads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<T*>(y), N, C, HW, C_g, steps, mean, rstd, static_cast<const T*>(gamma),
      static_cast<const T*>(beta), read, static_cast<const T*>(pre.bias));
  return cudaGetLastError();
}

// The transposes' map that normalises (nchw_to_nhwc.cuh): each value through its plane's
// PlaneNorm, the normalise kernels' own expression, so the bits equal the NCHW pass's.
// (Channels and groups in 32 bits: the transposes' grid takes at most ~4 M channels.)
template <typename T, bool kPre>
struct NormaliseValues {
  static constexpr bool kTileRuns = true;
  int groups, C_g;
  const double* mean;
  const double* rstd;
  const T* gamma;
  const T* beta;
  const T* pre_bias;
  ReadAs<T, kPre> read;
  using Channel = PlaneNorm<T>;
  __device__ Channel channel(int64_t n, int64_t c) const {
    const int64_t group = n * groups + static_cast<int>(c) / C_g;  // a 32-bit division per channel
    return PlaneNorm<T>(c, mean[group], rstd[group], gamma, beta, pre_bias);
  }
  __device__ RawOf<T> operator()(const Channel& norm, RawOf<T> v) const {
    return bits_as<RawOf<T>>(norm(read, bits_as<T>(v)));
  }
};

}  // namespace

int64_t nhwc_moment_tiles(int64_t HW) {
  // 512 pixels per tile: every thread row has 16 to 256 pixels, so that a tile's reduction is a
  // small part of its work and the grid is many waves long
  return std::max<int64_t>((HW + 511) / 512, 1);
}

cudaError_t nhwc_channel_moments(const void* x, DType dtype, int64_t N, int64_t C, int64_t HW, int64_t tiles,
                                 void* moments, cudaStream_t stream, PreGelu pre) {
  if (N * C == 0 || HW == 0) return cudaSuccess;
  if (tiles < 1 || tiles > 0x7fffffff) return cudaErrorInvalidValue;
  return dispatch_read(dtype, pre, [&](auto read) {
    using T = typename decltype(read)::value_t;
    using S = typename std::conditional<std::is_same<T, double>::value, double, float>::type;
    return with_pack<T>(wide_packs<T>(C, x), [&](auto pack) {
      constexpr int kPack = decltype(pack)::value;
      const int lanes = lanes_for((C + kPack - 1) / kPack);
      const int64_t cb = (C + int64_t(lanes) * kPack - 1) / (int64_t(lanes) * kPack);
      if (cb > kMaxGridYZ) return cudaErrorInvalidConfiguration;
      const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(cb),
                      static_cast<unsigned>(std::min(N, kMaxGridYZ)));
      nhwc_moments_kernel<T, kPack><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(x), N, C, HW, tiles, lanes,
                                                                    static_cast<const T*>(pre.bias), read,
                                                                    static_cast<S*>(moments));
      return cudaGetLastError();
    });
  });
}

cudaError_t nhwc_group_norm_apply(const void* x, void* y, bool y_channels_last, DType dtype, int64_t N, int64_t C,
                                  int64_t HW, int64_t num_groups, const double* mean, const double* rstd,
                                  const void* gamma, const void* beta, int sms, cudaStream_t stream, PreGelu pre) {
  if (N * C * HW == 0) return cudaSuccess;
  return dispatch_read(dtype, pre, [&](auto read) {
    using T = typename decltype(read)::value_t;
    if constexpr (sizeof(T) <= 4) {
      if (!y_channels_last && transposing_apply_fits<T>(C, HW, x, y))
        return transposing_apply(read, x, y, N, C, HW, C / num_groups, mean, rstd, gamma, beta, sms, stream, pre);
    }
    // channels-last output: y is read as x is (wide packs need it aligned too)
    const bool wide = wide_packs<T>(C, x) && (!y_channels_last || wide_packs<T>(C, y));
    return with_pack<T>(wide, [&](auto pack) {
      constexpr int kPack = decltype(pack)::value;
      const int lanes = lanes_for((C + kPack - 1) / kPack);
      const int64_t span = kApplyLoads * (kThreads / lanes);
      const int64_t cb = (C + int64_t(lanes) * kPack - 1) / (int64_t(lanes) * kPack);
      int64_t steps;
      dim3 grid;
      if (!apply_grid((HW + span - 1) / span, cb, N, sms, steps, grid)) return cudaErrorInvalidConfiguration;
      auto launch = [&](auto out, auto to_nchw) {
        nhwc_apply_kernel<T, kPack, decltype(out)::value, decltype(read)::kPre, decltype(to_nchw)::value>
            <<<grid, kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), N, C, HW, C / num_groups,
                                            steps, lanes, mean, rstd, static_cast<const T*>(gamma),
                                            static_cast<const T*>(beta), read, static_cast<const T*>(pre.bias));
        return cudaGetLastError();
      };
      if (y_channels_last) return launch(std::integral_constant<int, 1>{}, std::false_type{});
      // NCHW stores of 16-bit pixel pairs where every pair is aligned
      if constexpr (sizeof(T) == 2) {
        if (HW % 2 == 0 && reinterpret_cast<uintptr_t>(y) % 4 == 0)
          return launch(std::integral_constant<int, 2>{}, std::true_type{});
      }
      return launch(std::integral_constant<int, 1>{}, std::true_type{});
    });
  });
}

cudaError_t nchw_group_norm_apply_to_channels_last(const void* x, void* y, DType dtype, int64_t N, int64_t C,
                                                  int64_t HW, int64_t num_groups, const double* mean,
                                                  const double* rstd, const void* gamma, const void* beta,
                                                  cudaStream_t stream, PreGelu pre) {
  return dispatch_read(dtype, pre, [&](auto read) {
    using T = typename decltype(read)::value_t;
    if (C > 0x7fffffff) return cudaErrorInvalidConfiguration;
    const NormaliseValues<T, decltype(read)::kPre> map{static_cast<int>(num_groups),
                                                       static_cast<int>(C / num_groups),
                                                       mean,
                                                       rstd,
                                                       static_cast<const T*>(gamma),
                                                       static_cast<const T*>(beta),
                                                       static_cast<const T*>(pre.bias),
                                                       read};
    return transpose_to_channels_last(static_cast<const RawOf<T>*>(x), static_cast<RawOf<T>*>(y), N, C, HW, map,
                                      stream);
  });
}

}  // namespace cuda
}  // namespace myops
