#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/batch_norm_chain.cuh"
#include "cuda/dtype_traits.cuh"
#include "cuda/moments.cuh"

namespace myops {
namespace cuda {
namespace {

constexpr int kThreads = 256;

// One block per channel: the channel's (n, tile) entries in a fixed order.
template <typename S>
__global__ void channel_stats_kernel(const S* __restrict__ tiles, int64_t N, int64_t C, int64_t T,
                                     S* __restrict__ mean, S* __restrict__ var) {
  const int64_t c = blockIdx.x;
  Moments acc{0, 0, 0};
  for (int64_t i = threadIdx.x; i < N * T; i += kThreads) {
    const S* e = tiles + (((i / T) * C + c) * T + i % T) * 3;
    acc = combine(acc, {e[0], e[1], e[2]});
  }
  const Moments all = block_combine<kThreads>(acc);
  if (threadIdx.x == 0) {
    mean[c] = static_cast<S>(all.n > 0 ? all.mean : 0.0);
    var[c] = static_cast<S>(all.n > 0 ? all.m2 / all.n : __longlong_as_double(0x7ff8000000000000LL));
  }
}

// Warp-level fixed-order combination of per-lane Moments (xor butterfly: every lane ends with
// the same result, independent of scheduling).
__device__ inline Moments warp_combine(Moments m) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const Moments other{__shfl_xor_sync(0xffffffffu, m.n, o), __shfl_xor_sync(0xffffffffu, m.mean, o),
                        __shfl_xor_sync(0xffffffffu, m.m2, o)};
    m = (threadIdx.x & o) ? combine(other, m) : combine(m, other);
  }
  return m;
}

// One warp per (n, c) plane (planes are small: the pooled map of a decoder layer), lanes stride
// over the pooled pixels with a float Welford each; 32-bit index math (the host checks sizes).
constexpr int kPlanesPerBlock = kThreads / 32;
template <typename T, typename S>
__global__ void bn_tanh_pool_kernel(const T* __restrict__ x, int64_t planes, int C, Pool2dParams q64,
                                    const S* __restrict__ mean, const S* __restrict__ var,
                                    const T* __restrict__ w, const T* __restrict__ b, double eps,
                                    T* __restrict__ y, S* __restrict__ plane_stats) {
  using Tr = DTypeTraits<T>;
  using acc_t = typename Tr::acc_t;
  const int64_t plane = blockIdx.x * int64_t(kPlanesPerBlock) + threadIdx.x / 32;
  if (plane >= planes) return;  // whole warps leave: the shuffles below stay full-warp
  const int lane = threadIdx.x % 32, c = static_cast<int>(plane % C);
  const int H = static_cast<int>(q64.H), W = static_cast<int>(q64.W), PW = static_cast<int>(q64.PW);
  const int kH = static_cast<int>(q64.kH), kW = static_cast<int>(q64.kW);
  const int sH = static_cast<int>(q64.sH), sW = static_cast<int>(q64.sW), pH = static_cast<int>(q64.pH);
  const int pW = static_cast<int>(q64.pW), dH = static_cast<int>(q64.dH), dW = static_cast<int>(q64.dW);
  const int n_out = static_cast<int>(q64.PH * q64.PW);
  // BatchNorm folded into one FMA per tap, the fold in float64
  double scale = rsqrt(static_cast<double>(var[c]) + eps);
  if (w) scale *= static_cast<double>(Tr::to_acc(w[c]));
  const double shift = (b ? static_cast<double>(Tr::to_acc(b[c])) : 0.0) - static_cast<double>(mean[c]) * scale;
  const acc_t a = static_cast<acc_t>(scale), s = static_cast<acc_t>(shift);
  const T* in = x + plane * q64.H * q64.W;
  T* out = y + plane * q64.PH * q64.PW;
  acc_t cnt = 0, mu = 0, m2 = 0;
  for (int o = lane; o < n_out; o += 32) {
    const int ph = o / PW, pw = o - ph * PW;
    acc_t best = -INFINITY;  // padding never wins
    for (int i = 0; i < kH; ++i) {
      const int h = ph * sH - pH + i * dH;
      if (h < 0 || h >= H) continue;
      for (int j = 0; j < kW; ++j) {
        const int wc = pw * sW - pW + j * dW;
        if (wc < 0 || wc >= W) continue;
        const acc_t v = tanh(Tr::to_acc(in[h * W + wc]) * a + s);
        if (v > best || isnan(v)) best = v;  // NaN propagates, as in max_pool2d
      }
    }
    const T stored = Tr::from_acc(best);
    out[o] = stored;
    const acc_t v = Tr::to_acc(stored);  // statistics of what is stored
    cnt += 1;
    const acc_t d = v - mu;
    mu += d / cnt;
    m2 += d * (v - mu);
  }
  const Moments all = warp_combine({static_cast<double>(cnt), static_cast<double>(mu), static_cast<double>(m2)});
  if (lane == 0) {
    plane_stats[plane * 3] = static_cast<S>(all.n);
    plane_stats[plane * 3 + 1] = static_cast<S>(all.mean);
    plane_stats[plane * 3 + 2] = static_cast<S>(all.m2);
  }
}

}  // namespace

cudaError_t channel_stats_from_tiles(const void* tile_stats, DType dtype, int64_t N, int64_t C,
                                     int64_t tiles, void* mean, void* var, cudaStream_t stream) {
  if (C == 0) return cudaSuccess;
  if (C > 0x7fffffff) return cudaErrorInvalidConfiguration;
  return dispatch_dtype(dtype, [&](auto tag) {
    using S = typename DTypeTraits<decltype(tag)>::acc_t;  // float64 for float64, else float
    channel_stats_kernel<S><<<static_cast<unsigned>(C), kThreads, 0, stream>>>(
        static_cast<const S*>(tile_stats), N, C, tiles, static_cast<S*>(mean), static_cast<S*>(var));
    return cudaGetLastError();
  });
}

cudaError_t batch_norm_tanh_max_pool2d(const void* x, DType dtype, int64_t N, int64_t C,
                                       const Pool2dParams& q, const void* mean, const void* var,
                                       const void* bn_weight, const void* bn_bias, double eps,
                                       void* y, void* plane_stats, cudaStream_t stream) {
  const int64_t planes = N * C;
  if (planes == 0) return cudaSuccess;
  const int64_t blocks = (planes + kPlanesPerBlock - 1) / kPlanesPerBlock;
  // 32-bit index math inside a plane
  const int64_t lim = 0x3fffffff;
  if (blocks > 0x7fffffff || C > lim || q.H * q.W > lim || q.PH * q.PW > lim || q.sH * q.PH + q.dH * q.kH > lim ||
      q.sW * q.PW + q.dW * q.kW > lim)
    return cudaErrorInvalidConfiguration;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using S = typename DTypeTraits<T>::acc_t;  // the statistics' type: float64 for float64, else float
    bn_tanh_pool_kernel<T, S><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        static_cast<const T*>(x), planes, static_cast<int>(C), q, static_cast<const S*>(mean), static_cast<const S*>(var),
        static_cast<const T*>(bn_weight), static_cast<const T*>(bn_bias), eps, static_cast<T*>(y),
        static_cast<S*>(plane_stats));
    return cudaGetLastError();
  });
}

}  // namespace cuda
}  // namespace myops
