#pragma once
#include <type_traits>
// Pieces shared by the two conv_transpose2d kernels: phase geometry and the epilogue
// (bias, GELU, store, GroupNorm tile partials).
#include "cuda/conv_transpose2d.cuh"
#include "cuda/dtype_traits.cuh"

namespace myops {
namespace cuda {

constexpr int kConvThreads = 256;

// Output rows (or columns) of residue r: oh = r + s * j for j < phase_extent.
__host__ __device__ inline int64_t phase_extent(int64_t out, int64_t r, int64_t s) {
  return out > r ? (out - r + s - 1) / s : 0;
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

// Where the epilogue's pixel m of a tile lands.
struct TilePixel {
  int64_t oh, ow;
};
// (valid_of(m) is the cheap test used in the statistics loops; pixel_of(m), with its
// coordinates, is evaluated once per thread and only for valid pixels.)

// Cs[c * ldc + m] holds the tile's accumulators (channel c < BN, pixel m < BM). Adds the bias,
// applies GELU, stores to out (NCHW), and writes the GroupNorm partials (count, mean, M2) of the
// stored values per channel when ep.tile_stats is set. Each thread keeps a pixel and steps over
// channels, so a warp writes 32 neighbouring pixels of one channel.
template <typename T, int BM, int BN, int kThreads, typename ValidOf, typename PixelOf>
__device__ void conv_epilogue(typename DTypeTraits<T>::acc_t* Cs, int ldc, const T* __restrict__ bias,
                              T* __restrict__ out, const ConvTranspose2dParams& p,
                              const ConvEpilogue& ep, int64_t n, int64_t g, int64_t oc0,
                              int64_t tile_index, int64_t tiles_per_sample, ValidOf valid_of,
                              PixelOf pixel_of) {
  using acc_t = typename DTypeTraits<T>::acc_t;
  using Traits = DTypeTraits<T>;
  constexpr int kPixStep = kThreads < BM ? kThreads : BM, kChanStep = kThreads / kPixStep;
  static_assert(BM % kPixStep == 0 && kThreads % kPixStep == 0, "epilogue thread layout");
  const int tid = threadIdx.x;
  const int64_t c_valid = min(static_cast<int64_t>(BN), p.C_out_g - oc0);
  const int64_t plane = p.OH * p.OW;
  const T* bias_c = bias ? bias + g * p.C_out_g + oc0 : nullptr;
  const bool keep = ep.tile_stats != nullptr;  // the statistics below read the stored values
  const int c_first = tid / kPixStep;
  // (pointer increments and a GELU-free instantiation: this loop runs once per output element)
  auto store = [&](auto with_gelu) {
    for (int m = tid % kPixStep; m < BM; m += kPixStep) {
      if (!valid_of(m)) continue;
      const TilePixel px = pixel_of(m);
      T* o = out + ((n * p.C_out + g * p.C_out_g + oc0 + c_first) * p.OH + px.oh) * p.OW + px.ow;
      acc_t* cs = Cs + c_first * ldc + m;
#pragma unroll 4
      for (int c = c_first; c < c_valid; c += kChanStep) {
        acc_t v = *cs;
        if (bias_c) v += Traits::to_acc(bias_c[c]);
        if constexpr (decltype(with_gelu)::value) v = gelu<acc_t>(v, ep.approx);
        const T stored = Traits::from_acc(v);
        if (keep) *cs = Traits::to_acc(stored);
        *o = stored;
        o += kChanStep * plane;
        cs += kChanStep * ldc;
      }
    }
  };
  if (ep.gelu) {
    store(std::true_type{});
  } else {
    store(std::false_type{});
  }
  if (ep.tile_stats == nullptr) return;
  __syncthreads();
  // kSplit adjacent lanes share a channel and combine with shuffles in a fixed order.
  constexpr int kSplit = kThreads / BN, kSpan = BM / kSplit;
  static_assert(kThreads % BN == 0 && kSplit <= 32 && BM % kSplit == 0, "statistics layout");
  const int c = tid / kSplit, q = tid % kSplit;
  acc_t sum = 0, count = 0;
  for (int m = q * kSpan; m < (q + 1) * kSpan; ++m) {
    if (!valid_of(m)) continue;
    sum += Cs[c * ldc + m];
    count += 1;
  }
#pragma unroll
  for (int off = kSplit / 2; off > 0; off /= 2) {
    sum += __shfl_xor_sync(0xffffffffu, sum, off);
    count += __shfl_xor_sync(0xffffffffu, count, off);
  }
  const acc_t mean = sum / count;
  acc_t m2 = 0;
  for (int m = q * kSpan; m < (q + 1) * kSpan; ++m) {
    if (!valid_of(m)) continue;
    const acc_t d = Cs[c * ldc + m] - mean;
    m2 += d * d;
  }
#pragma unroll
  for (int off = kSplit / 2; off > 0; off /= 2) m2 += __shfl_xor_sync(0xffffffffu, m2, off);
  if (q == 0 && c < c_valid) {
    const int64_t oc = g * p.C_out_g + oc0 + c;
    acc_t* st = static_cast<acc_t*>(ep.tile_stats) + ((n * p.C_out + oc) * tiles_per_sample + tile_index) * 3;
    st[0] = count;
    st[1] = mean;
    st[2] = m2;
  }
}

}  // namespace cuda
}  // namespace myops
