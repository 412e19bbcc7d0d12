#pragma once
#include <algorithm>
#include <type_traits>
// Pieces shared by the two conv_transpose2d kernels: phase geometry and the epilogue
// (bias, GELU, store, GroupNorm tile partials).
#include "cuda/conv/conv_transpose2d.cuh"
#include "cuda/common/dtype_traits.cuh"
#include "cuda/common/activation.cuh"

namespace myops {
namespace cuda {

constexpr int kConvThreads = 256;

// Blocks of 256 threads for a grid-stride weight-preparation kernel over `total` elements.
inline int prepare_blocks(int64_t total) { return static_cast<int>(std::min<int64_t>((total + 255) / 256, 4096)); }

// Launches a conv kernel kernel(args..., n_base, tiles) on the grid (tiles per image, column
// tiles, groups of per_z images), in slices of at most 65535 groups along z (the grid limit),
// n_base being a slice's first image. Empty grids launch nothing; grids beyond the x / y limits
// are refused. smem > 0: the kernel's dynamic shared memory, set as its attribute first.
template <typename... Params, typename... Args>
cudaError_t launch_conv_grid(void (*kernel)(Params...), int threads, size_t smem, cudaStream_t stream,
                             int64_t tiles, int64_t col_tiles, int64_t N, int64_t per_z, Args... args) {
  if (tiles == 0 || N == 0) return cudaSuccess;
  if (tiles > 0x7fffffff || col_tiles > 65535) return cudaErrorInvalidConfiguration;
  if (smem > 0) {
    const cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
    if (err != cudaSuccess) return err;
  }
  for (int64_t n0 = 0; n0 < N; n0 += 65535 * per_z) {
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(col_tiles),
                    static_cast<unsigned>(std::min<int64_t>(65535, (N - n0 + per_z - 1) / per_z)));
    kernel<<<grid, threads, smem, stream>>>(args..., n0, tiles);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

// Output rows (or columns) of residue r: oh = r + s * j for j < phase_extent.
__host__ __device__ inline int64_t phase_extent(int64_t out, int64_t r, int64_t s) {
  return out > r ? (out - r + s - 1) / s : 0;
}

// Whether the call's sizes, paddings and kernel extents fit the 32-bit coordinates the tiled
// kernels use inside a block (sums of two of them included); tensor offsets stay 64-bit.
constexpr int64_t kInt32CoordLimit = 0x3fffffff;
inline bool conv_coordinates_fit_int32(const ConvTranspose2dParams& p) {
  const int64_t lim = kInt32CoordLimit;
  return p.OH <= lim && p.OW <= lim && p.H <= lim && p.W <= lim && p.pH <= lim && p.pW <= lim &&
         p.kH * p.kW <= lim && p.dH * p.kH <= lim && p.dW * p.kW <= lim;
}

// The taps that reach one phase along one dimension form an arithmetic progression
// k = k0 + t * step (t < count); tap t reads input row i = j + off0 - t * off_step for output
// row j of the phase. Block-uniform, so K loops have no per-thread tap tests.
struct PhaseTaps {
  int64_t k0, step, count, off0, off_step;
};

__host__ __device__ inline int64_t gcd64(int64_t a, int64_t b) {
  while (b != 0) {
    const int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

__host__ __device__ inline PhaseTaps phase_taps(int64_t r, int64_t pad, int64_t dil, int64_t s,
                                                int64_t K) {
  const int64_t step = s / gcd64(dil, s);  // period of (r + pad - k * dil) mod s in k
  for (int64_t k = 0; k < step && k < K; ++k) {
    const int64_t a = r + pad - k * dil;
    if (((a % s) + s) % s == 0) {
      // a is a multiple of s, and so is step * dil: both divisions are exact
      return {k, step, (K - 1 - k) / step + 1, a / s, step * dil / s};
    }
  }
  return {0, 1, 0, 0, 0};
}

// PhaseTaps in 32 bits (the host checks the ranges: conv_coordinates_fit_int32), for kernels
// that take a tap table per residue as a kernel parameter.
struct Taps32 {
  int k0, step, count, off0, off_step;
};
constexpr int kMaxTapTableStride = 32;  // residues per dimension such a table holds

// The tap tables of every residue along both dimensions (strides <= kMaxTapTableStride).
inline void phase_taps32(const ConvTranspose2dParams& p, Taps32 (&rows)[kMaxTapTableStride],
                         Taps32 (&cols)[kMaxTapTableStride]) {
  auto taps32 = [](const PhaseTaps& t) {
    return Taps32{static_cast<int>(t.k0), static_cast<int>(t.step), static_cast<int>(t.count),
                  static_cast<int>(t.off0), static_cast<int>(t.off_step)};
  };
  for (int64_t r = 0; r < p.sH; ++r) rows[r] = taps32(phase_taps(r, p.pH, p.dH, p.sH, p.kH));
  for (int64_t r = 0; r < p.sW; ++r) cols[r] = taps32(phase_taps(r, p.pW, p.dW, p.sW, p.kW));
}

// One tile's GroupNorm / BatchNorm partials (count, mean, M2) of statistics channel c (of
// `channels`) of image n, in the layout ConvEpilogue::tile_stats documents.
template <typename acc_t>
__device__ inline void write_tile_stats(const ConvEpilogue& ep, int64_t channels, int64_t n, int64_t c,
                                        int64_t tile_index, int64_t tiles_per_sample, acc_t count, acc_t mean,
                                        acc_t m2) {
  acc_t* st = static_cast<acc_t*>(ep.tile_stats) + ((n * channels + c) * tiles_per_sample + tile_index) * 3;
  st[0] = count;
  st[1] = mean;
  st[2] = m2;
}

// The partials of a tile holding `images` images of image_px pixels each (small maps): row c of
// Cs holds channel c's stored values, image i at pixels [i * image_px, (i + 1) * image_px), and
// valid[k] says whether pixel k of an image lies inside the output (the same for every image of
// the tile); a statistics channel is `fold` consecutive rows (ConvEpilogue::channel_fold, a
// divisor of c_valid). One thread per (statistics channel, image) pair walks its values in a fixed order,
// starting at a channel-rotated pixel to spread a warp's lanes (consecutive channels, rows 8
// words apart modulo 32 banks in the mma.sync kernel) over the banks: distinct banks for images
// of 32 or more pixels, max(2, 32 / image_px)-way conflicts below. Every lane does useful work,
// where a shuffle reduction per image left most lanes idle or serialised. Pair (c, i) writes
// (count, mean, M2) of channel oc0 + c of image n + i.
template <typename acc_t, int kThreads, bool kFold>
__device__ void tile_image_stats(const acc_t* Cs, int ldc, const uint8_t* valid, int c_valid, int images,
                                 int image_px, int tid, const ConvEpilogue& ep, const ConvTranspose2dParams& p,
                                 int64_t n, int64_t oc0, int64_t tile_index, int64_t tiles_per_sample) {
  const int fold = kFold ? ep.channel_fold : 1, c_stats = c_valid / fold;
  for (int pair = tid; pair < c_stats * images; pair += kThreads) {
    const int c = pair % c_stats, i = pair / c_stats;
    const int first = c % image_px;
    acc_t sum = 0;
    int count = 0;
    for (int f = 0; f < fold; ++f) {
      const acc_t* v = Cs + (c * fold + f) * ldc + i * image_px;
      for (int s = 0, k = first; s < image_px; ++s, k = k + 1 == image_px ? 0 : k + 1)
        if (valid[k]) {
          sum += v[k];
          ++count;
        }
    }
    const acc_t mean = count > 0 ? sum / static_cast<acc_t>(count) : acc_t(0);
    acc_t m2 = 0;
    for (int f = 0; f < fold; ++f) {
      const acc_t* v = Cs + (c * fold + f) * ldc + i * image_px;
      for (int s = 0, k = first; s < image_px; ++s, k = k + 1 == image_px ? 0 : k + 1)
        if (valid[k]) {
          const acc_t d = v[k] - mean;
          m2 += d * d;
        }
    }
    write_tile_stats(ep, p.C_out / fold, n + i, (oc0 + c * fold) / fold, tile_index, tiles_per_sample,
                     static_cast<acc_t>(count), mean, m2);
  }
}

// The sum of v over the warp's lanes, in every lane (a fixed butterfly order: deterministic).
template <typename acc_t>
__device__ inline acc_t warp_sum(acc_t v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The epilogues' warps take channels warp, warp + kWarps, ...: lane i holds the bias of the
// warp's i-th channel (one load per warp up front instead of one per channel, whose latency
// every channel would wait for), read back with __shfl_sync(.., i).
template <typename T, int BN, int kWarps>
__device__ inline typename DTypeTraits<T>::acc_t warp_lane_bias(const T* bias, const ConvTranspose2dParams& p,
                                                                int64_t g, int64_t oc0, int c_valid, int lane,
                                                                int warp) {
  constexpr int kChPerWarp = (BN + kWarps - 1) / kWarps;
  static_assert(kChPerWarp <= 32, "one bias per lane");
  if (bias == nullptr || lane >= kChPerWarp || warp + lane * kWarps >= c_valid) return 0;
  return DTypeTraits<T>::to_acc(bias[g * p.C_out_g + oc0 + warp + lane * kWarps]);
}

// Cs[c * ldc + m] holds a tile's accumulators (channel c < BN, pixel m < BM);
// pixel_offset(m) is where pixel m lands relative to channel 0 of image n's output
// (oh * OW + ow, plus i * C_out * OH * OW for the tile's i-th image), or -1 if it lies outside
// the output. Adds the bias, applies GELU, stores to out (NCHW) and, when ep.tile_stats is set,
// writes the GroupNorm partials (count, mean, M2) of the stored values per channel and image.
// Each warp takes whole channels and its lanes neighbouring pixels: coalesced stores, the bias
// in a register, and the partials reduced by shuffles in a fixed order. A tile may hold
// `images` images of `image_px` pixels each (small maps), and a statistics channel may fold
// several output channels (ep.channel_fold): their partials are then reduced per (statistics
// channel, image) by tile_image_stats, after all channels are stored.
// The epilogue runs on threads ew.tid in [0, kThreads) (a whole block, or the consumer
// warpgroup of a warp-specialised kernel); ew.sync() is a barrier over exactly those threads and
// ew.pix_off holds BM entries of shared memory.
struct BlockSync {
  __device__ void operator()() const { __syncthreads(); }
};
template <typename Sync = BlockSync>
struct EpilogueThreads {
  int tid;
  int64_t* pix_off;
  Sync sync;
};

// The stores of a tile of 1 x 1 outputs (its pixels are images: the pointwise view of a 1 x 1
// input) with lanes along the channels, contiguous in memory, where lanes along the pixels would
// each store to another image. The stored values go back to Cs for tile_image_stats.
template <typename T, int BM, int kWarps>
__device__ void store_unit_outputs(typename DTypeTraits<T>::acc_t* Cs, int ldc, const T* __restrict__ bias,
                                   T* __restrict__ out, const ConvTranspose2dParams& p, const ConvEpilogue& ep,
                                   int64_t n, int64_t g, int64_t oc0, int c_valid, const int64_t* pix_off,
                                   int lane, int warp) {
  using acc_t = typename DTypeTraits<T>::acc_t;
  using Traits = DTypeTraits<T>;
  with_activation<acc_t, T>(ep, [&](auto act) {
    for (int m = warp; m < BM; m += kWarps) {
      const int64_t o = pix_off[m];
      for (int c = lane; c < c_valid; c += 32) {
        const int64_t oc = g * p.C_out_g + oc0 + c;
        const acc_t b = bias != nullptr ? Traits::to_acc(bias[oc]) : acc_t(0);
        const T t = Traits::from_acc(act(Cs[c * ldc + m] + b));
        if (o >= 0) out[n * p.C_out + oc + o] = t;
        Cs[c * ldc + m] = Traits::to_acc(t);
      }
    }
  });
}

// kUnitOutputs: the paths for 1 x 1 outputs (store_unit_outputs) and folded statistics channels
// (ep.channel_fold > 1, which only the mma kernel's 1 x 1-output build gets). Every other build
// leaves them out: with them ptxas spilled 100-200 bytes in the 128-register builds of the mma,
// direct, generic and wgmma kernels. Without them a 1 x 1 output takes the general path.
template <typename T, int BM, int BN, int kThreads, bool kUnitOutputs, typename Sync, typename PixelOffset>
__device__ void conv_epilogue(typename DTypeTraits<T>::acc_t* Cs, int ldc,
                              const T* __restrict__ bias, T* __restrict__ out,
                              const ConvTranspose2dParams& p, const ConvEpilogue& ep, int64_t n,
                              int64_t g, int64_t oc0, int64_t tile_index, int64_t tiles_per_sample,
                              int images, int image_px, EpilogueThreads<Sync> ew,
                              PixelOffset pixel_offset) {
  using acc_t = typename DTypeTraits<T>::acc_t;
  using Traits = DTypeTraits<T>;
  constexpr int kWarps = kThreads / 32, kPerLane = BM / 32;
  static_assert(BM % 32 == 0 && kThreads % 32 == 0, "epilogue layout");
  int64_t* pix_off = ew.pix_off;
  for (int m = ew.tid; m < BM; m += kThreads) pix_off[m] = pixel_offset(m);
  ew.sync();
  const int lane = ew.tid % 32, warp = ew.tid / 32;
  const int c_valid = static_cast<int>(min(static_cast<int64_t>(BN), p.C_out_g - oc0));
  const int64_t plane = p.OH * p.OW;
  // partials per (statistics channel, image) by tile_image_stats, after all channels are stored
  const bool per_image_stats = images > 1 || (kUnitOutputs && (ep.channel_fold > 1 || plane == 1));
  if (kUnitOutputs && plane == 1) {
    store_unit_outputs<T, BM, kWarps>(Cs, ldc, bias, out, p, ep, n, g, oc0, c_valid, pix_off, lane, warp);
  } else {
    int64_t off[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) off[j] = pix_off[lane + 32 * j];
    const acc_t lane_bias = warp_lane_bias<T, BN, kWarps>(bias, p, g, oc0, c_valid, lane, warp);
    with_activation<acc_t, T>(ep, [&](auto act) {
      for (int c = warp, i = 0; c < c_valid; c += kWarps, ++i) {
        const int64_t oc = g * p.C_out_g + oc0 + c;
        T* chan = out + (n * p.C_out + oc) * plane;
        const acc_t b = __shfl_sync(0xffffffffu, lane_bias, i);
        acc_t stored[kPerLane];
        acc_t sum = 0, count = 0;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
          const acc_t v = Cs[c * ldc + lane + 32 * j] + b;
          const T t = Traits::from_acc(act(v));
          stored[j] = Traits::to_acc(t);
          if (off[j] >= 0) {
            chan[off[j]] = t;
            sum += stored[j];
            count += 1;
          }
        }
        if (ep.tile_stats == nullptr) continue;
        if (per_image_stats) {
          // the lane's own Cs entries take the stored values; tile_image_stats reduces them below
#pragma unroll
          for (int j = 0; j < kPerLane; ++j) Cs[c * ldc + lane + 32 * j] = stored[j];
          continue;
        }
        sum = warp_sum(sum);
        count = warp_sum(count);
        const acc_t mean = count > 0 ? sum / count : acc_t(0);
        acc_t m2 = 0;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
          const acc_t d = stored[j] - mean;
          if (off[j] >= 0) m2 += d * d;
        }
        m2 = warp_sum(m2);
        if (lane == 0) write_tile_stats(ep, p.C_out, n, oc, tile_index, tiles_per_sample, count, mean, m2);
      }
    });
  }
  if (ep.tile_stats == nullptr || !per_image_stats) return;
  __shared__ uint8_t valid[BM];  // pixel k of an image inside the output (pix_off: image 0's)
  for (int k = ew.tid; k < image_px; k += kThreads) valid[k] = pix_off[k] >= 0;
  ew.sync();  // also orders the stored values in Cs before the reduction reads them
  tile_image_stats<acc_t, kThreads, kUnitOutputs>(Cs, ldc, valid, c_valid, static_cast<int>(min(static_cast<int64_t>(images), p.N - n)),
                                    image_px, ew.tid, ep, p, n, g * p.C_out_g + oc0, tile_index, tiles_per_sample);
}

}  // namespace cuda
}  // namespace myops
