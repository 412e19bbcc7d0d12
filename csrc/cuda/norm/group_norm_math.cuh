#pragma once
// GroupNorm pieces shared by the normalise kernels (norm_act.cu) and the pass that follows the
// conv (group_norm_follow.cu): how an element is read, the per-plane affine map, the loop over a
// plane, and the fixed-order reduction of the conv epilogue's tile partials. One definition each,
// so that every path produces the same bits.
#include "cuda/common/dtype_traits.cuh"
#include "cuda/common/gelu_fast.cuh"
#include "cuda/common/moments.cuh"
#include "cuda/norm/norm_act.cuh"

namespace myops {
namespace cuda {

// How the normalisation kernels read an element: as stored, or (kPre: PreGelu) GELU of it plus
// its channel's bias, the sum and GELU's output each rounded to T as if they had been stored.
// GELU in the conv epilogue's forms (gelu_fast.cuh: as accurate as F.gelu's, half the
// instructions; a pass over a cuDNN output evaluates it per element).
template <typename T, bool kPre_>
struct ReadAs {
  using value_t = T;
  static constexpr bool kPre = kPre_;
  using Tr = DTypeTraits<T>;
  using acc_t = typename Tr::acc_t;
  GeluApprox approx;
  __device__ acc_t operator()(T v, acc_t bias) const {
    if constexpr (kPre_) {
      const acc_t biased = Tr::to_acc(Tr::from_acc(Tr::to_acc(v) + bias));
      const acc_t act = approx == GeluApprox::Tanh ? epilogue_gelu_tanh(biased) : epilogue_gelu_erf<T>(biased);
      return Tr::to_acc(Tr::from_acc(act));
    }
    return Tr::to_acc(v);
  }
};

// Runs launch(ReadAs<T, kPre>{...}) for dtype's T, kPre = pre.on.
template <typename Launch>
cudaError_t dispatch_read(DType dtype, PreGelu pre, const Launch& launch) {
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    return pre.on ? launch(ReadAs<T, true>{pre.approx}) : launch(ReadAs<T, false>{pre.approx});
  });
}

// y = (x - mean) * (rstd * gamma) + beta for one (n, c) plane, folded once per plane (in float64);
// x read through a ReadAs, with the plane's pre-activation bias (PreGelu::bias) where given.
template <typename T>
struct PlaneNorm {
  using Tr = DTypeTraits<T>;
  using acc_t = typename Tr::acc_t;
  acc_t mu, scale, shift, in_bias;
  PlaneNorm() = default;
  // channel c of a group with statistics (mean, rstd)
  __device__ PlaneNorm(int64_t c, double mean, double rstd, const T* gamma, const T* beta, const T* pre_bias)
      : mu(static_cast<acc_t>(mean)),
        scale(static_cast<acc_t>(rstd * (gamma ? static_cast<double>(Tr::to_acc(gamma[c])) : 1.0))),
        shift(beta ? Tr::to_acc(beta[c]) : acc_t(0)),
        in_bias(pre_bias ? Tr::to_acc(pre_bias[c]) : acc_t(0)) {}
  // plane (n, c) of [N, C, HW] with per-(n, group) statistics
  __device__ PlaneNorm(int64_t plane, int64_t C, int64_t C_g, const double* mean, const double* rstd,
                       const T* gamma, const T* beta, const T* pre_bias)
      : PlaneNorm(plane % C, mean[(plane / C) * (C / C_g) + plane % C / C_g],
                  rstd[(plane / C) * (C / C_g) + plane % C / C_g], gamma, beta, pre_bias) {}
  template <typename Read>
  __device__ T operator()(const Read& read, T v) const {
    return Tr::from_acc((read(v, in_bias) - mu) * scale + shift);
  }
};

// One plane of HW elements, xp -> yp (may alias), by the threads t0, t0 + stride, ...: 16-byte
// vectors (vec_ok: xp and yp equally placed modulo 16 bytes) kUnroll in flight per thread, a
// scalar head up to the first 16-byte boundary and a scalar tail.
template <int kUnroll, typename T, typename Read>
__device__ inline void normalise_plane(const T* xp, T* yp, int64_t HW, const PlaneNorm<T>& norm, const Read& read,
                                       bool vec_ok, int64_t t0, int64_t stride) {
  constexpr int kVec = DTypeTraits<T>::kVec;
  const int64_t head = vec_ok ? vector_head(xp, HW) : 0, n_vec = vec_ok ? (HW - head) / kVec : 0;
  const Vec<T, kVec>* xv = reinterpret_cast<const Vec<T, kVec>*>(xp + head);
  Vec<T, kVec>* yv = reinterpret_cast<Vec<T, kVec>*>(yp + head);
  int64_t i = t0;
  for (; i + (kUnroll - 1) * stride < n_vec; i += kUnroll * stride) {
    Vec<T, kVec> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = xv[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[u].v[k] = norm(read, v[u].v[k]);
      yv[i + u * stride] = v[u];
    }
  }
  for (; i < n_vec; i += stride) {
    Vec<T, kVec> v = xv[i];
#pragma unroll
    for (int k = 0; k < kVec; ++k) v.v[k] = norm(read, v.v[k]);
    yv[i] = v;
  }
  if (t0 < head) yp[t0] = norm(read, xp[t0]);
  for (int64_t e = head + n_vec * kVec + t0; e < HW; e += stride) yp[e] = norm(read, xp[e]);
}

// Group `group`'s (count, mean, M2) from tile partials [groups][per_group][3] (a group's
// (channel, tile) entries are contiguous), by a team of kTeam threads (a warp, or a whole block of
// kTeam threads, then combining through `scratch`: kTeam entries of shared memory), `member` its
// index: each member combines entries member, member + kTeam, ..., then the team combines the
// members in a fixed order. Valid in member 0.
template <int kTeam, typename S>
__device__ inline Moments group_moments_from_tiles(const S* tiles, int64_t group, int64_t per_group, int member,
                                                   Moments* scratch) {
  const S* t = tiles + group * per_group * 3;
  Moments acc{0, 0, 0};
  // kBatch entries loaded before any is combined: the combines' divisions make a dependent chain,
  // and loads issued inside it would wait on global memory one after another. Same order, same bits.
  constexpr int kBatch = 4;
  int64_t i = member;
  for (; i + (kBatch - 1) * int64_t(kTeam) < per_group; i += kBatch * int64_t(kTeam)) {
    S v[kBatch][3];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
#pragma unroll
      for (int k = 0; k < 3; ++k) v[b][k] = t[3 * (i + b * int64_t(kTeam)) + k];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) acc = combine(acc, {v[b][0], v[b][1], v[b][2]});
  }
  for (; i < per_group; i += kTeam) acc = combine(acc, {t[3 * i], t[3 * i + 1], t[3 * i + 2]});
  if constexpr (kTeam == 32) {
    return warp_combine(acc);
  } else {
    return block_combine<kTeam>(acc, scratch);
  }
}
// The same with a block team's scratch in static shared memory.
template <int kTeam, typename S>
__device__ inline Moments group_moments_from_tiles(const S* tiles, int64_t group, int64_t per_group, int member) {
  if constexpr (kTeam == 32) {
    return group_moments_from_tiles<kTeam>(tiles, group, per_group, member, nullptr);
  } else {
    __shared__ Moments scratch[kTeam];
    return group_moments_from_tiles<kTeam>(tiles, group, per_group, member, scratch);
  }
}

// GroupNorm's rstd from a group's moments (biased variance), one expression for every path.
__device__ inline double group_rstd(const Moments& m, double eps) { return rsqrt(m.m2 / m.n + eps); }

// Tile partials per group up to which a warp reduces a group (group_norm_stats_from_tiles): a
// block per group is mostly idle threads and barriers there.
constexpr int64_t kWarpGroupEntries = 16 * 32;

}  // namespace cuda
}  // namespace myops
