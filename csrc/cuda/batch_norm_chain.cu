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

// One block per (n, c) plane; threads stride over the pooled pixels.
template <typename T, typename S>
__global__ void bn_tanh_pool_kernel(const T* __restrict__ x, int64_t C, Pool2dParams q,
                                    const S* __restrict__ mean, const S* __restrict__ var,
                                    const T* __restrict__ w, const T* __restrict__ b, double eps,
                                    T* __restrict__ y, S* __restrict__ plane_stats) {
  using Tr = DTypeTraits<T>;
  using acc_t = typename Tr::acc_t;
  const int64_t plane = blockIdx.x, c = plane % C;
  // BatchNorm folded into one FMA per tap, the fold in float64
  double scale = rsqrt(static_cast<double>(var[c]) + eps);
  if (w) scale *= static_cast<double>(Tr::to_acc(w[c]));
  const double shift = (b ? static_cast<double>(Tr::to_acc(b[c])) : 0.0) - static_cast<double>(mean[c]) * scale;
  const acc_t a = static_cast<acc_t>(scale), s = static_cast<acc_t>(shift);
  const T* in = x + plane * q.H * q.W;
  T* out = y + plane * q.PH * q.PW;
  Moments m{0, 0, 0};
  for (int64_t o = threadIdx.x; o < q.PH * q.PW; o += kThreads) {
    const int64_t ph = o / q.PW, pw = o % q.PW;
    acc_t best = -INFINITY;  // padding never wins
    for (int64_t i = 0; i < q.kH; ++i) {
      const int64_t h = ph * q.sH - q.pH + i * q.dH;
      if (h < 0 || h >= q.H) continue;
      for (int64_t j = 0; j < q.kW; ++j) {
        const int64_t wc = pw * q.sW - q.pW + j * q.dW;
        if (wc < 0 || wc >= q.W) continue;
        const acc_t v = tanh(Tr::to_acc(in[h * q.W + wc]) * a + s);
        if (v > best || isnan(v)) best = v;  // NaN propagates, as in max_pool2d
      }
    }
    const T stored = Tr::from_acc(best);
    out[o] = stored;
    m = combine(m, {1.0, static_cast<double>(Tr::to_acc(stored)), 0.0});  // statistics of what is stored
  }
  const Moments all = block_combine<kThreads>(m);
  if (threadIdx.x == 0) {
    plane_stats[plane * 3] = static_cast<S>(all.n);
    plane_stats[plane * 3 + 1] = static_cast<S>(all.mean);
    plane_stats[plane * 3 + 2] = static_cast<S>(all.m2);
  }
}

template <typename F>
cudaError_t dispatch(DType dtype, F f) {
  switch (dtype) {
    case DType::F32: return f(float{}, float{});
    case DType::F64: return f(double{}, double{});
    case DType::F16: return f(__half{}, float{});
    case DType::BF16: return f(__nv_bfloat16{}, float{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t channel_stats_from_tiles(const void* tile_stats, DType dtype, int64_t N, int64_t C,
                                     int64_t tiles, void* mean, void* var, cudaStream_t stream) {
  if (C == 0) return cudaSuccess;
  if (C > 0x7fffffff) return cudaErrorInvalidConfiguration;
  return dispatch(dtype, [&](auto, auto s_tag) {
    using S = decltype(s_tag);
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
  if (planes > 0x7fffffff) return cudaErrorInvalidConfiguration;
  return dispatch(dtype, [&](auto t_tag, auto s_tag) {
    using T = decltype(t_tag);
    using S = decltype(s_tag);
    bn_tanh_pool_kernel<T, S><<<static_cast<unsigned>(planes), kThreads, 0, stream>>>(
        static_cast<const T*>(x), C, q, static_cast<const S*>(mean), static_cast<const S*>(var),
        static_cast<const T*>(bn_weight), static_cast<const T*>(bn_bias), eps, static_cast<T*>(y),
        static_cast<S*>(plane_stats));
    return cudaGetLastError();
  });
}

}  // namespace cuda
}  // namespace myops
