#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/common/dtype_traits.cuh"
#include "cuda/norm/group_norm_math.cuh"
#include "cuda/common/moments.cuh"
#include "cuda/norm/norm_act.cuh"

namespace myops {
namespace cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// ---- GELU ----------------------------------------------------------------------------------
// kVecs 16-byte vectors per thread, blockDim.x apart (each load instruction coalesced), all loaded
// before any is computed.
template <typename T, int kVecs>
__global__ void gelu_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n_vec, int64_t n,
                            GeluApprox approx) {
  using acc_t = typename DTypeTraits<T>::acc_t;
  using Tr = DTypeTraits<T>;
  constexpr int kVec = DTypeTraits<T>::kVec;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * kVecs;
  const int64_t t0 = blockIdx.x * int64_t(blockDim.x) * kVecs + threadIdx.x;
  for (int64_t i = t0; i < n_vec; i += stride) {  // 16-byte body
    // whether this thread's vector u lies inside the tensor (the loads' and the stores' test)
    auto inside = [&](int u) { return i + u * int64_t(blockDim.x) < n_vec; };
    Vec<T, kVec> v[kVecs];
#pragma unroll
    for (int u = 0; u < kVecs; ++u)
      if (inside(u)) v[u] = reinterpret_cast<const Vec<T, kVec>*>(x)[i + u * blockDim.x];
#pragma unroll
    for (int u = 0; u < kVecs; ++u) {
      if (!inside(u)) break;
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[u].v[k] = Tr::from_acc(gelu<acc_t>(Tr::to_acc(v[u].v[k]), approx));
      reinterpret_cast<Vec<T, kVec>*>(y)[i + u * blockDim.x] = v[u];
    }
  }
  const int64_t t_flat = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, flat_stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = n_vec * kVec + t_flat; i < n; i += flat_stride)  // tail
    y[i] = Tr::from_acc(gelu<acc_t>(Tr::to_acc(x[i]), approx));
}

template <typename T, int kVecs>
cudaError_t launch_gelu_vecs(const void* x, void* y, int64_t n, int64_t n_vec, GeluApprox approx, cudaStream_t s) {
  // threads: one per kVecs vectors, or one per element where nothing is vectorised (the tail
  // loop then does it all: a misaligned view took a single block before)
  const int64_t work = n_vec > 0 ? (n_vec + kVecs - 1) / kVecs : n;
  const int blocks = static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, 0x7fffffff));
  gelu_kernel<T, kVecs><<<blocks, kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), n_vec, n, approx);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_gelu(const void* x, void* y, int64_t n, GeluApprox approx, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  constexpr int kVec = DTypeTraits<T>::kVec;
  const bool vec_ok = aligned16<T>(x) && aligned16<T>(y);
  const int64_t n_vec = vec_ok ? n / kVec : 0;
  // 16-byte vectors per thread (the grid-stride loop only for tensors beyond the grid's reach):
  // one for float32 / float64, as PyTorch's elementwise kernels; four for 16-bit types, whose
  // eight erf evaluations per vector make one vector per thread partly issue-bound.
  // Option::GeluVectors forces 1, 2 or 4.
  const int forced = option(Option::GeluVectors);
  const int vecs = forced != kAuto ? forced : sizeof(T) == 2 ? 4 : 1;
  if (vecs == 2) return launch_gelu_vecs<T, 2>(x, y, n, n_vec, approx, s);
  if (vecs == 4) return launch_gelu_vecs<T, 4>(x, y, n, n_vec, approx, s);
  return launch_gelu_vecs<T, 1>(x, y, n, n_vec, approx, s);
}

// ---- Statistics over a tensor ----------------------------------------------------------------
// Sums of d = read(x) - shift and of d^2 over one block's segment of n elements, shift = read of
// its first element (which keeps E[x^2] - E[x]^2 from cancelling when |mean| >> std): per thread
// in acc_t, then over the block in float64 (v, in every thread).
template <typename T, typename Read>
__device__ void shifted_sums(const T* __restrict__ xg, int64_t n, const Read& read, double& shift, double (&v)[2]) {
  using acc_t = typename DTypeTraits<T>::acc_t;
  constexpr int kVec = DTypeTraits<T>::kVec, kUnroll = 4;
  const acc_t first = read(xg[0]);
  acc_t s = 0, ss = 0;
  auto add = [&](T x) {
    const acc_t d = read(x) - first;
    s += d;
    ss += d * d;
  };
  // scalar head up to a 16-byte boundary, then kUnroll vectors in flight per thread, scalar tail
  const int64_t mis = static_cast<int64_t>(reinterpret_cast<uintptr_t>(xg) % 16) / static_cast<int64_t>(sizeof(T));
  const int64_t head = min(n, mis == 0 ? int64_t(0) : kVec - mis);
  const int64_t n_vec = (n - head) / kVec;
  const Vec<T, kVec>* xv = reinterpret_cast<const Vec<T, kVec>*>(xg + head);
  if (threadIdx.x < head) add(xg[threadIdx.x]);
  int64_t i = threadIdx.x;
  for (; i + (kUnroll - 1) * kThreads < n_vec; i += kUnroll * kThreads) {
    Vec<T, kVec> x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) x[u] = xv[i + u * kThreads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int k = 0; k < kVec; ++k) add(x[u].v[k]);
  }
  for (; i < n_vec; i += kThreads) {
    const Vec<T, kVec> x = xv[i];
#pragma unroll
    for (int k = 0; k < kVec; ++k) add(x.v[k]);
  }
  for (int64_t e = head + n_vec * kVec + threadIdx.x; e < n; e += kThreads) add(xg[e]);
  v[0] = static_cast<double>(s);
  v[1] = static_cast<double>(ss);
  block_sum<kThreads>(v);
  shift = static_cast<double>(first);
}

// GroupNorm's mean / rstd: one block per (n, group).
template <typename T>
__global__ void group_stats_kernel(const T* __restrict__ x, int64_t group_numel, double eps,
                                   double* __restrict__ mean, double* __restrict__ rstd) {
  double shift, v[2];
  shifted_sums(x + blockIdx.x * group_numel, group_numel, [](T e) { return DTypeTraits<T>::to_acc(e); }, shift, v);
  if (threadIdx.x == 0) {
    const double m = v[0] / group_numel;
    const double var = std::max(v[1] / group_numel - m * m, 0.0);
    mean[blockIdx.x] = m + shift;
    rstd[blockIdx.x] = rsqrt(var + eps);
  }
}

// (count, mean, M2) in S of each (n, c) plane read through `read` (with its channel's bias, kPre):
// one block per plane, [N * C][3], the layout of the conv epilogue's tile partials (one tile).
template <typename T, bool kPre, typename S>
__global__ void plane_moments_kernel(const T* __restrict__ x, int64_t HW, int64_t C, const T* __restrict__ bias,
                                     ReadAs<T, kPre> read, S* __restrict__ moments) {
  using Tr = DTypeTraits<T>;
  const int64_t plane = blockIdx.x;
  const typename Tr::acc_t b = kPre && bias ? Tr::to_acc(bias[plane % C]) : 0;
  double shift, v[2];
  shifted_sums(x + plane * HW, HW, [&](T e) { return read(e, b); }, shift, v);
  if (threadIdx.x == 0) {
    moments[3 * plane] = static_cast<S>(HW);
    moments[3 * plane + 1] = static_cast<S>(shift + v[0] / HW);
    moments[3 * plane + 2] = static_cast<S>(std::max(v[1] - v[0] * v[0] / HW, 0.0));
  }
}

// ---- GroupNorm statistics from the conv epilogue's tile partials -----------------------------
// A team of threads per (n, group): the block, or (kWarpPerGroup) a warp for groups of few
// entries (small maps: a decoder's first layers, 2048 groups of 32 entries in the DCGAN demo),
// where a block per group is mostly idle threads and barriers.
template <typename S, bool kWarpPerGroup>
__global__ void group_stats_from_tiles_kernel(const S* __restrict__ tiles, int64_t groups, int64_t per_group,
                                              double eps, double* __restrict__ mean,
                                              double* __restrict__ rstd, float* __restrict__ mean32,
                                              float* __restrict__ rstd32) {
  constexpr int kTeam = kWarpPerGroup ? 32 : kThreads;
  const int64_t group = blockIdx.x * int64_t(kThreads / kTeam) + threadIdx.x / kTeam;
  if (kWarpPerGroup && group >= groups) return;  // whole warps: the shuffles see all 32 lanes
  const Moments all = group_moments_from_tiles<kTeam>(tiles, group, per_group, threadIdx.x % kTeam);
  if (threadIdx.x % kTeam == 0) {
    const double r = group_rstd(all, eps);
    mean[group] = all.mean;
    rstd[group] = r;
    if (mean32) {
      mean32[group] = static_cast<float>(all.mean);
      rstd32[group] = static_cast<float>(r);
    }
  }
}

// ---- normalise -------------------------------------------------------------------------------
// grid: (blocks per plane, N * C). Each block normalises part of one (n, c) plane.
template <typename T, bool kPre>
__global__ void group_norm_apply_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t plane0, int64_t C,
                                        int64_t HW, int64_t C_g, const double* __restrict__ mean,
                                        const double* __restrict__ rstd, const T* __restrict__ gamma,
                                        const T* __restrict__ beta, bool vec_ok, ReadAs<T, kPre> read,
                                        const T* __restrict__ pre_bias) {
  const int64_t plane = plane0 + blockIdx.y;
  const PlaneNorm<T> norm(plane, C, C_g, mean, rstd, gamma, beta, pre_bias);
  normalise_plane<4>(x + plane * HW, y + plane * HW, HW, norm, read, vec_ok,
                     blockIdx.x * int64_t(blockDim.x) + threadIdx.x, int64_t(gridDim.x) * blockDim.x);
}

// Small planes (a decoder's first layers: 4x4 to 32x32 maps over many channels): one block per
// kPlanesElems elements' worth of whole planes, so that blocks are not mostly idle threads. The
// block's planes are one contiguous run; each thread walks its elements' plane index forward
// instead of dividing per element.
constexpr int kPlanesElems = 16 * kThreads;
constexpr int kMaxPlanesPerBlock = 1024;
template <typename T, bool kPre>
__global__ void group_norm_apply_planes_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t planes,
                                               int planes_per_block, int64_t C, int HW, int64_t C_g,
                                               const double* __restrict__ mean, const double* __restrict__ rstd,
                                               const T* __restrict__ gamma, const T* __restrict__ beta,
                                               bool vec_ok, ReadAs<T, kPre> read, const T* __restrict__ pre_bias) {
  constexpr int kVec = DTypeTraits<T>::kVec;
  __shared__ PlaneNorm<T> norms[kMaxPlanesPerBlock];
  const int64_t p0 = blockIdx.x * int64_t(planes_per_block);
  const int n_planes = static_cast<int>(min(int64_t(planes_per_block), planes - p0));
  for (int i = threadIdx.x; i < n_planes; i += kThreads) norms[i] = PlaneNorm<T>(p0 + i, C, C_g, mean, rstd, gamma, beta, pre_bias);
  __syncthreads();
  const T* xp = x + p0 * HW;
  T* yp = y + p0 * HW;
  const int len = n_planes * HW;  // < kPlanesElems + HW (host-checked to fit)
  const int head = vec_ok ? static_cast<int>(vector_head(xp, len)) : 0;
  const int n_vec = vec_ok ? (len - head) / kVec : 0;
  const Vec<T, kVec>* xv = reinterpret_cast<const Vec<T, kVec>*>(xp + head);
  Vec<T, kVec>* yv = reinterpret_cast<Vec<T, kVec>*>(yp + head);
  for (int i = threadIdx.x; i < n_vec; i += kThreads) {
    Vec<T, kVec> v = xv[i];
    const int e = head + i * kVec;
    int pl = e / HW, r = e - pl * HW;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      if (r == HW) r = 0, ++pl;
      v.v[k] = norms[pl](read, v.v[k]);
      ++r;
    }
    yv[i] = v;
  }
  auto scalar = [&](int e) { yp[e] = norms[e / HW](read, xp[e]); };
  if (static_cast<int>(threadIdx.x) < head) scalar(threadIdx.x);
  for (int e = head + n_vec * kVec + threadIdx.x; e < len; e += kThreads) scalar(e);
}

template <typename T, bool kPre>
cudaError_t launch_apply(const void* x, void* y, int64_t N, int64_t C, int64_t HW, int64_t G,
                         const double* mean, const double* rstd, const void* gamma,
                         const void* beta, cudaStream_t s, ReadAs<T, kPre> read, const void* pre_bias) {
  constexpr int kVec = DTypeTraits<T>::kVec;
  if (N * C * HW == 0) return cudaSuccess;
  // vectors need x and y equally placed modulo 16 bytes (each plane then peels the same head)
  const bool vec_ok = (reinterpret_cast<uintptr_t>(x) - reinterpret_cast<uintptr_t>(y)) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(x) % sizeof(T) == 0;
  const T* xt = static_cast<const T*>(x);
  T* yt = static_cast<T*>(y);
  const T *g = static_cast<const T*>(gamma), *b = static_cast<const T*>(beta);
  const T* pb = static_cast<const T*>(pre_bias);
  if (4 * HW <= kPlanesElems) {
    const int64_t per_block = std::min<int64_t>(kPlanesElems / HW, kMaxPlanesPerBlock);
    const int64_t blocks = (N * C + per_block - 1) / per_block;
    if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
    group_norm_apply_planes_kernel<T, kPre><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
        xt, yt, N * C, static_cast<int>(per_block), C, static_cast<int>(HW), C / G, mean, rstd, g, b, vec_ok, read,
        pb);
    return cudaGetLastError();
  }
  const int64_t per_plane = std::max<int64_t>(vec_ok ? HW / kVec : HW, 1);
  const int64_t bx = std::min<int64_t>((per_plane + 4 * kThreads - 1) / (4 * kThreads), 64);
  for (int64_t p0 = 0; p0 < N * C; p0 += 65535) {  // grid.y limit
    const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(std::min<int64_t>(N * C - p0, 65535)));
    group_norm_apply_kernel<T, kPre><<<grid, kThreads, 0, s>>>(xt, yt, p0, C, HW, C / G, mean, rstd, g, b, vec_ok,
                                                                read, pb);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t gelu_forward(const void* x, void* y, int64_t n, DType dtype, GeluApprox approx,
                         cudaStream_t stream) {
  return dispatch_dtype(dtype, [&](auto tag) { return launch_gelu<decltype(tag)>(x, y, n, approx, stream); });
}

cudaError_t group_norm_stats(const void* x, DType dtype, int64_t N, int64_t C, int64_t HW,
                             int64_t num_groups, double eps, double* mean, double* rstd,
                             cudaStream_t stream) {
  const int64_t groups = N * num_groups;
  if (groups == 0 || C * HW == 0) return cudaSuccess;
  if (groups > 0x7fffffff) return cudaErrorInvalidConfiguration;
  const int64_t group_numel = (C / num_groups) * HW;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    group_stats_kernel<T><<<static_cast<unsigned>(groups), kThreads, 0, stream>>>(
        static_cast<const T*>(x), group_numel, eps, mean, rstd);
    return cudaGetLastError();
  });
}

cudaError_t plane_moments(const void* x, DType dtype, int64_t N, int64_t C, int64_t HW, void* moments,
                          cudaStream_t stream, PreGelu pre) {
  if (N * C == 0 || HW == 0) return cudaSuccess;
  if (N * C > 0x7fffffff) return cudaErrorInvalidConfiguration;
  return dispatch_read(dtype, pre, [&](auto read) {
    using T = typename decltype(read)::value_t;
    using S = typename std::conditional<std::is_same<T, double>::value, double, float>::type;
    plane_moments_kernel<<<static_cast<unsigned>(N * C), kThreads, 0, stream>>>(
        static_cast<const T*>(x), HW, C, static_cast<const T*>(pre.bias), read, static_cast<S*>(moments));
    return cudaGetLastError();
  });
}

cudaError_t group_norm_stats_from_tiles(const void* tile_stats, DType dtype, int64_t N, int64_t C,
                                        int64_t tiles, int64_t num_groups, double eps,
                                        double* mean, double* rstd, cudaStream_t stream, float* mean32,
                                        float* rstd32) {
  const int64_t groups = N * num_groups;
  if (groups == 0) return cudaSuccess;
  const int64_t per_group = (C / num_groups) * tiles;
  auto launch = [&](auto tag) {  // S: the partials' type
    using S = decltype(tag);
    const S* stats = static_cast<const S*>(tile_stats);
    // up to 16 entries per lane: a warp per group (one wave instead of many idle blocks)
    if (per_group <= kWarpGroupEntries) {
      constexpr int64_t kGroupsPerBlock = kThreads / 32;
      group_stats_from_tiles_kernel<S, true>
          <<<static_cast<unsigned>((groups + kGroupsPerBlock - 1) / kGroupsPerBlock), kThreads, 0, stream>>>(
              stats, groups, per_group, eps, mean, rstd, mean32, rstd32);
    } else {
      group_stats_from_tiles_kernel<S, false>
          <<<static_cast<unsigned>(groups), kThreads, 0, stream>>>(stats, groups, per_group, eps, mean, rstd,
                                                                   mean32, rstd32);
    }
    return cudaGetLastError();
  };
  return dtype == DType::F64 ? launch(double{}) : launch(float{});
}

cudaError_t group_norm_apply(const void* x, void* y, DType dtype, int64_t N, int64_t C, int64_t HW,
                             int64_t num_groups, const double* mean, const double* rstd,
                             const void* gamma, const void* beta, cudaStream_t stream, PreGelu pre) {
  return dispatch_read(dtype, pre, [&](auto read) {
    return launch_apply(x, y, N, C, HW, num_groups, mean, rstd, gamma, beta, stream, read, pre.bias);
  });
}

}  // namespace cuda
}  // namespace myops
