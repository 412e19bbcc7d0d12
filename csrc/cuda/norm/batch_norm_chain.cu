#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "cuda/norm/batch_norm_chain.cuh"
#include "cuda/common/cluster.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/dtype_traits.cuh"
#include "cuda/common/gelu_fast.cuh"  // tanh_to_store
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/moments.cuh"
#include "cuda/conv/common/window_store.cuh"

namespace myops {
namespace cuda {
namespace {

constexpr int kThreads = 256;
static_assert((kThreads & (kThreads - 1)) == 0, "pool_staged_planes cuts rows by powers of two");

constexpr int kStatsBatch = 8;  // entries a channel_stats_kernel thread loads before it sums them

// One cluster of blocks per channel (channel_stats_blocks; one block where there are no
// clusters): the channel's (n, tile) entries (count, mean, M2) in a fixed order, summed about a
// shift K, the channel's first entry's mean: s1 = sum n_i (mean_i - K) and s2 = sum M2_i + n_i
// (mean_i - K)^2 in float64, then mean = K + s1 / n and M2 = s2 - s1^2 / n (their float64
// rounding scaled by (mean - K)^2 / var, which the shift keeps near 1). No entry costs a
// division: Chan's pairwise combination divided per entry, and with the 64-bit (image, tile)
// division per entry that were most of the kernel's instructions and its dependent chain. Block r of the cluster sums entries [r, r + 1)
// x total / blocks, a thread's kStatsBatch at a time loaded before they are summed; block 0 adds
// the blocks' sums in rank order from their shared memory. The BatchNorm chain's tail may launch
// as soon as it starts (its blocks copy their first input, then wait for these statistics:
// wait_for_prior_grid).
template <typename S>
__global__ void __launch_bounds__(kThreads) channel_stats_kernel(const S* __restrict__ tiles, int64_t N, int64_t C,
                                                                 int64_t T, S* __restrict__ mean, S* __restrict__ var) {
  allow_dependent_launch();
  // a / b in 32 bits where both fit (a 64-bit division is a ~100-instruction call, and the
  // kernel's few are on its critical path)
  auto quotient = [](int64_t a, int64_t b) {
    return ((a | b) >> 31) == 0 ? int64_t(uint32_t(a) / uint32_t(b)) : a / b;
  };
  const auto [rank, blocks] = cluster_position();
  const int64_t c = blockIdx.x / blocks, total = N * T;
  const int64_t end = quotient(total * (rank + 1), blocks);
  const double shift = static_cast<double>(tiles[c * T * 3 + 1]);  // entry (0, 0)'s mean
  // this thread's entries i = first + j kThreads, walked as (image, tile) = (i / T, i % T)
  const int64_t first = quotient(total * rank, blocks) + threadIdx.x;
  int64_t n = quotient(first, T), t = first - n * T;
  const int64_t step_n = kThreads / T, step_t = kThreads % T;
  double sums[3] = {0, 0, 0};  // count, s1, s2
  for (int64_t i0 = first; i0 < end; i0 += int64_t(kStatsBatch) * kThreads) {
    S e[kStatsBatch][3];
#pragma unroll
    for (int b = 0; b < kStatsBatch; ++b) {
      const bool inside = i0 + int64_t(b) * kThreads < end;
      const S* src = tiles + ((inside ? n : 0) * C + c) * T * 3 + (inside ? t : 0) * 3;
#pragma unroll
      for (int k = 0; k < 3; ++k) e[b][k] = src[k];
      t += step_t, n += step_n;
      if (t >= T) t -= T, ++n;
    }
#pragma unroll
    for (int b = 0; b < kStatsBatch; ++b)
      if (i0 + int64_t(b) * kThreads < end) {
        const double count = e[b][0], d = static_cast<double>(e[b][1]) - shift;
        sums[0] += count;
        sums[1] += count * d;
        sums[2] += static_cast<double>(e[b][2]) + count * d * d;
      }
  }
  block_sum<kThreads>(sums);
  __shared__ double block_sums[3];
  if (threadIdx.x == 0)
    for (int k = 0; k < 3; ++k) block_sums[k] = sums[k];
  cluster_sync();
  if (rank == 0 && threadIdx.x == 0) {
    for (unsigned r = 1; r < blocks; ++r)
      for (int k = 0; k < 3; ++k) sums[k] += cluster_load(&block_sums[k], r);
    const double count = sums[0], m2 = sums[2] - sums[1] * sums[1] / count;
    mean[c] = static_cast<S>(count > 0 ? shift + sums[1] / count : 0.0);
    // (rounding can take a constant channel's M2 below zero; NaN stays NaN)
    var[c] = static_cast<S>(count > 0 ? (m2 < 0 ? 0.0 : m2) / count : __longlong_as_double(0x7ff8000000000000LL));
  }
  cluster_sync();  // (a block's shared memory must outlive block 0's reads)
}

// Blocks per channel for channel_stats_kernel: a cluster of up to 8 (the portable most), as few
// as give each thread one batch of loads (a cluster's launch and barriers cost more than its
// shorter loop gains). Option::BnStatsBlocks forces a count.
int64_t channel_stats_blocks(int64_t entries) {
  if (!cluster_launch_supported()) return 1;
  const int forced = option(Option::BnStatsBlocks);
  if (forced != kAuto) return std::max(1, std::min(8, forced));
  constexpr int64_t kPerBlock = int64_t(kStatsBatch) * kThreads;
  return std::max<int64_t>(1, std::min<int64_t>(8, (entries + kPerBlock - 1) / kPerBlock));
}

// The pooling window arithmetic in 32-bit (the host checks the ranges). inv_PH, inv_PW: for
// quotient_small's divisions of a group's pooled row and value indices.
struct PoolInts {
  int H, W, PH, PW, kH, kW, sH, sW, pH, pW, dH, dW;
  float inv_PH, inv_PW;
  explicit PoolInts(const Pool2dParams& q)
      : H(int(q.H)), W(int(q.W)), PH(int(q.PH)), PW(int(q.PW)), kH(int(q.kH)), kW(int(q.kW)), sH(int(q.sH)),
        sW(int(q.sW)), pH(int(q.pH)), pW(int(q.pW)), dH(int(q.dH)), dW(int(q.dW)),
        inv_PH(q.PH > 0 ? 1.f / static_cast<float>(q.PH) : 0.f), inv_PW(q.PW > 0 ? 1.f / static_cast<float>(q.PW) : 0.f) {}
};

// BatchNorm folded into one FMA per element (the fold in float64): y = x * a + s.
template <typename T, typename S>
__device__ inline void batch_norm_fold(int c, const S* mean, const S* var, const T* w, const T* b, double eps,
                                       typename DTypeTraits<T>::acc_t& a, typename DTypeTraits<T>::acc_t& s) {
  using Tr = DTypeTraits<T>;
  using acc_t = typename Tr::acc_t;
  double scale = rsqrt(static_cast<double>(var[c]) + eps);
  if (w) scale *= static_cast<double>(Tr::to_acc(w[c]));
  const double shift = (b ? static_cast<double>(Tr::to_acc(b[c])) : 0.0) - static_cast<double>(mean[c]) * scale;
  a = static_cast<acc_t>(scale);
  s = static_cast<acc_t>(shift);
}

// max over the pooling window of output (ph, pw) of tanh(x * a + s), x one input plane (global or
// shared memory): tanh is monotonic, so it is taken once, of the largest x * a + s. Padding never
// wins and NaN propagates, as in max_pool2d. kInside: no padding, so every window lies inside
// the plane (max_pool2d's output size guarantees it) and needs no bounds tests.
template <bool kInside = false, typename T>
__device__ inline typename DTypeTraits<T>::acc_t bn_tanh_window_max(const T* in, const PoolInts& q, int ph, int pw,
                                                                    typename DTypeTraits<T>::acc_t a,
                                                                    typename DTypeTraits<T>::acc_t s) {
  using Tr = DTypeTraits<T>;
  typename Tr::acc_t best = -INFINITY;
  for (int i = 0; i < q.kH; ++i) {
    const int h = ph * q.sH - q.pH + i * q.dH;
    if (!kInside && (h < 0 || h >= q.H)) continue;
    for (int j = 0; j < q.kW; ++j) {
      const int wc = pw * q.sW - q.pW + j * q.dW;
      if (!kInside && (wc < 0 || wc >= q.W)) continue;
      const auto v = Tr::to_acc(in[h * q.W + wc]) * a + s;
      if (v > best || isnan(v)) best = v;
    }
  }
  return tanh_to_store<T>(best);
}

// The same for a KH x KW window of stride (KH, KW) (no padding or dilation) with its loads
// unrolled: MaxPool2d(2, 2), the common case. The one-block-per-group kernel below is
// instruction-bound and the generic window's loops were most of it.
template <int KH, int KW, typename T>
__device__ inline typename DTypeTraits<T>::acc_t bn_tanh_window_max_fixed(const T* in, int W, int ph, int pw,
                                                                          typename DTypeTraits<T>::acc_t a,
                                                                          typename DTypeTraits<T>::acc_t s) {
  using Tr = DTypeTraits<T>;
  const T* p = in + (KH * ph) * W + KW * pw;
  typename Tr::acc_t best = -INFINITY;
#pragma unroll
  for (int i = 0; i < KH; ++i)
#pragma unroll
    for (int j = 0; j < KW; ++j) {
      const auto v = Tr::to_acc(p[i * W + j]) * a + s;
      if (v > best || isnan(v)) best = v;
    }
  return tanh_to_store<T>(best);
}

// MaxPool2d(2, 2) over a window-stored conv output (ConvEpilogue::pool_windows: each window
// already reduced to its extreme, in one stored row, or two where a tile edge split it): tanh of
// the larger of the two rows' values at pw (a window in one row reads that row twice: the same
// value, the same bits, and no divergence between the warp's split and unsplit rows).
template <typename T>
__device__ inline typename DTypeTraits<T>::acc_t bn_tanh_stored_window(const T* first, const T* second, int pw,
                                                                       typename DTypeTraits<T>::acc_t a,
                                                                       typename DTypeTraits<T>::acc_t s) {
  using Tr = DTypeTraits<T>;
  typename Tr::acc_t best = Tr::to_acc(first[pw]) * a + s;
  const auto v = Tr::to_acc(second[pw]) * a + s;
  if constexpr (std::is_same<typename Tr::acc_t, float>::value) {
    best = max_nan(best, v);  // (one instruction against three for the test below)
  } else if (v > best || isnan(v)) {
    best = v;
  }
  return tanh_to_store<T>(best);
}

// Pooled value (ph, pw) of one staged plane, the window given by kWindow (below); kWindow 3 with
// the stored rows of pooled row ph already found (first, second).
template <int kWindow, typename T>
__device__ __forceinline__ typename DTypeTraits<T>::acc_t bn_tanh_pooled_value(
    const T* plane, const T* first, const T* second, const PoolInts& q, int ph, int pw,
    typename DTypeTraits<T>::acc_t a, typename DTypeTraits<T>::acc_t s) {
  if constexpr (kWindow == 3) return bn_tanh_stored_window(first, second, pw, a, s);
  else if constexpr (kWindow == 2) return bn_tanh_window_max_fixed<2, 2>(plane, q.W, ph, pw, a, s);
  else return bn_tanh_window_max<kWindow == 1>(plane, q, ph, pw, a, s);
}

// The stored rows that pooled row ph of a window-stored plane reads (kWindow 3; else unused).
template <int kWindow, typename T>
__device__ __forceinline__ const T* stored_window_row(const T* plane, const PoolInts& q, int ph, int half,
                                                      float inv_split_rows) {
  if constexpr (kWindow == 3) return plane + window_store_row_small(2 * ph + half, inv_split_rows) * q.W;
  else return plane;
}

// Pooled values e0 .. e1 - 1 of one staged plane's pooled row ph: stored as T in
// `out` (indexed as the row) and added to `sum` in that order. The row's window geometry (kWindow
// 3: its stored rows) is found once for its values.
template <int kWindow, typename T>
__device__ inline void bn_tanh_pool_row(const T* plane, const PoolInts& q, int ph, int e0, int e1,
                                        float inv_split_rows, typename DTypeTraits<T>::acc_t a,
                                        typename DTypeTraits<T>::acc_t s, T* out,
                                        typename DTypeTraits<T>::acc_t& sum) {
  using Tr = DTypeTraits<T>;
  const T* first = stored_window_row<kWindow>(plane, q, ph, 0, inv_split_rows);
  const T* second = stored_window_row<kWindow>(plane, q, ph, 1, inv_split_rows);
#pragma unroll 4
  for (int pw = e0; pw < e1; ++pw) {
    const T stored = Tr::from_acc(bn_tanh_pooled_value<kWindow>(plane, first, second, q, ph, pw, a, s));
    out[pw] = stored;
    sum += Tr::to_acc(stored);
  }
}

// Per-thread Welford of the stored values (the statistics GroupNorm sees).
template <typename acc_t>
struct Welford {
  acc_t cnt = 0, mu = 0, m2 = 0;
  __device__ void add(acc_t v) {
    cnt += 1;
    const acc_t d = v - mu;
    mu += d / cnt;
    m2 += d * (v - mu);
  }
  __device__ Moments moments() const {
    return {static_cast<double>(cnt), static_cast<double>(mu), static_cast<double>(m2)};
  }
};

// One block per (n, group): the group's pooled planes stay in shared memory, so the statistics
// and the normalisation need no second pass over global memory. Input planes are staged in
// batches with coalesced 16-byte loads (placed at the source's misalignment so both sides line
// up), then pooled from shared memory. Chosen when the pooled group and one input plane fit.
// kWindow: 0 (general window), 1 (no padding: every window inside the plane), 2 (MaxPool2d(2,
// 2)), 3 (a window-stored conv output: bn_tanh_stored_window).
// The kernel is instruction-bound, half of it in the pooling pass, so the pooling pass takes a whole pooled row per step (bn_tanh_pool_row: the row's plane, BatchNorm
// fold and window rows found once for its PW outputs) and sums its outputs for the mean as it
// goes; the squared deviations read shared memory in 16-byte vectors and the normalisation
// writes global memory in 16-byte vectors. Each thread pools the same rows and values in the same
// order (pool_staged_planes) whatever the batching or the stored layout, so the statistics (and
// the outputs) of a window-stored and a full conv output are the same bits.
// The shared memory of the one-block-per-group kernels: per channel of the group, BatchNorm's
// fold (a, s) and GroupNorm's scale and shift; the group's pooled values [C_g][PHW] (16-byte
// aligned: 4 * C_g * sizeof(acc_t) is a multiple of 16); the staged input after them.
template <typename T>
struct TailShared {
  using acc_t = typename DTypeTraits<T>::acc_t;
  acc_t *bn_a, *bn_s, *gn_scale, *gn_shift;
  T *pooled, *stage;
  __device__ TailShared(uint8_t* raw, int C_g, int numel) {
    constexpr int kVec = DTypeTraits<T>::kVec;
    bn_a = reinterpret_cast<acc_t*>(raw);
    bn_s = bn_a + C_g;
    gn_scale = bn_s + C_g;
    gn_shift = gn_scale + C_g;
    pooled = reinterpret_cast<T*>(gn_shift + C_g);
    stage = pooled + (numel + kVec - 1) / kVec * kVec;
  }
};

// BatchNorm's fold of group g's channels into the shared (a, s).
template <typename T, typename S>
__device__ __forceinline__ void fold_group(const TailShared<T>& sh, int64_t g, int C_g, const S* mean, const S* var,
                                           const T* w, const T* b, double eps) {
  for (int c = threadIdx.x; c < C_g; c += kThreads)
    batch_norm_fold(static_cast<int>(g) * C_g + c, mean, var, w, b, eps, sh.bn_a[c], sh.bn_s[c]);
}

// BN + tanh + max-pool of planes pl0 .. pl0 + nb - 1 of a group of C_g, staged from `staged` on,
// into sh.pooled, this thread's outputs added to part in order. The group's pooled rows u = plane
// * PH + ph below the last whole multiple of kThreads go a row per thread (u = t mod kThreads);
// each of the `rest` rows after it is cut into 2^k pieces of consecutive values (2^k rest <=
// kThreads, pieces of about 4 values or more), piece j of row r going to thread r 2^k + j, so that
// no warp pools a second row while the others wait (e.g. 272 rows on 256 threads) and no value
// pays a row's setup alone. Whatever the batching, each thread's values are the
// same, in the same order: the statistics are the same bits.
template <int kWindow, typename T>
__device__ __forceinline__ void pool_staged_planes(const TailShared<T>& sh, const T* staged, const PoolInts& q,
                                                   int pl0, int nb, int C_g, float inv_split_rows,
                                                   typename DTypeTraits<T>::acc_t& part) {
  const int HW = q.H * q.W, u_begin = pl0 * q.PH, u_end = u_begin + nb * q.PH;
  const int rows = C_g * q.PH, row_wise = rows / kThreads * kThreads;  // rows [0, row_wise): a row per thread
  auto pool_row = [&](int u, int e0, int e1) {  // values e0 .. e1 - 1 of row u
    const int channel = quotient_small(u, q.inv_PH), ph = u - channel * q.PH;
    bn_tanh_pool_row<kWindow>(staged + (channel - pl0) * HW, q, ph, e0, e1, inv_split_rows, sh.bn_a[channel],
                              sh.bn_s[channel], sh.pooled + u * q.PW, part);
  };
  const int first = u_begin + ((int(threadIdx.x) - u_begin) % kThreads + kThreads) % kThreads;
  for (int u = first; u < min(u_end, row_wise); u += kThreads) pool_row(u, 0, q.PW);
  const int rest = rows - row_wise;
  if (rest == 0) return;
  // 2^log_pieces pieces per row: the most with 2^log_pieces rest <= kThreads (kThreads a power of
  // two) and 2^log_pieces <= ceil(PW / 4)
  constexpr int kLogThreads = __builtin_ctz(kThreads);
  const int log_pieces = max(0, min(kLogThreads - (32 - __clz(rest - 1)), 31 - __clz((q.PW + 3) >> 2)));
  const int r = int(threadIdx.x) >> log_pieces, j = int(threadIdx.x) - (r << log_pieces), u = row_wise + r;
  if (r < rest && u >= u_begin && u < u_end) pool_row(u, (j * q.PW) >> log_pieces, ((j + 1) * q.PW) >> log_pieces);
}

// GroupNorm of group g's pooled values (sh.pooled, C_g x PHW; part: this thread's share of their
// sum) into out: the mean, the variance from shared memory, the normalised values in 16-byte
// stores. after_mean() runs once the mean's barriers have passed: every thread is done with the
// staged input by then. inv_numel = 1.0 / (C_g * PHW), so that no thread divides per group.
template <typename T, typename AfterMean>
__device__ __forceinline__ void group_norm_pooled(const TailShared<T>& sh, int C_g, int PHW, int64_t g,
                                                  typename DTypeTraits<T>::acc_t part, const T* gamma,
                                                  const T* beta, double gn_eps, float inv_phw, double inv_numel,
                                                  T* out, AfterMean after_mean) {
  using Tr = DTypeTraits<T>;
  using acc_t = typename Tr::acc_t;
  constexpr int kVec = Tr::kVec;
  const int numel = C_g * PHW;
  const T* pooled = sh.pooled;
  double sum[1] = {part};
  block_sum<kThreads>(sum);  // (its barriers also publish the pooled values)
  after_mean();
  const double mu = sum[0] * inv_numel;
  const acc_t mu_acc = static_cast<acc_t>(mu);
  const int n_vec = numel / kVec;  // pooled is 16-byte aligned
  part = 0;
  for (int i = threadIdx.x; i < n_vec; i += kThreads) {
    const Vec<T, kVec> v = reinterpret_cast<const Vec<T, kVec>*>(pooled)[i];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const acc_t d = Tr::to_acc(v.v[k]) - mu_acc;
      part += d * d;
    }
  }
  for (int e = n_vec * kVec + threadIdx.x; e < numel; e += kThreads) {
    const acc_t d = Tr::to_acc(pooled[e]) - mu_acc;
    part += d * d;
  }
  sum[0] = part;
  block_sum<kThreads>(sum);
  if (threadIdx.x < C_g) {  // (only the threads that write a channel's scale need the rsqrt)
    // y = x * scale + shift: the mean folded into the shift in float64 (one FMA per value, as
    // PyTorch's GroupNorm kernels apply it)
    const double rstd = rsqrt(sum[0] * inv_numel + gn_eps);
    for (int c = threadIdx.x; c < C_g; c += kThreads) {
      const int64_t ch = g * C_g + c;
      const double scale = rstd * (gamma ? static_cast<double>(Tr::to_acc(gamma[ch])) : 1.0);
      sh.gn_scale[c] = static_cast<acc_t>(scale);
      sh.gn_shift[c] = static_cast<acc_t>((beta ? static_cast<double>(Tr::to_acc(beta[ch])) : 0.0) - mu * scale);
    }
  }
  __syncthreads();
  // The group's output is contiguous: 16-byte stores between a scalar head and tail. (numel <
  // 2^21, as quotient_small needs: the pooled group fits in 64 KB of shared memory.)
  const acc_t* gn_scale = sh.gn_scale;
  const acc_t* gn_shift = sh.gn_shift;
  auto affine_acc = [&](T v, acc_t scale, acc_t shift) { return Tr::to_acc(v) * scale + shift; };
  auto normalised = [&](int e, int c) { return Tr::from_acc(affine_acc(pooled[e], gn_scale[c], gn_shift[c])); };
  const int head = static_cast<int>(vector_head(out, numel)), out_vecs = (numel - head) / kVec;
  for (int e = threadIdx.x; e < head; e += kThreads) out[e] = normalised(e, quotient_small(e, inv_phw));
  for (int i = threadIdx.x; i < out_vecs; i += kThreads) {
    const int e0 = head + i * kVec;
    int c = quotient_small(e0, inv_phw), next = (c + 1) * PHW;  // the channel, where the next begins
    // the pooled values as one 16-byte load where the output starts aligned (pooled always does),
    // the channel's scale and shift reloaded only where the vector crosses into the next channel
    Vec<T, kVec> in;
    if (head == 0) {
      in = reinterpret_cast<const Vec<T, kVec>*>(pooled)[i];
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) in.v[k] = pooled[e0 + k];
    }
    acc_t scale = gn_scale[c], shift = gn_shift[c];
    Vec<T, kVec> v;
    Vec<T, kVec>* dst = reinterpret_cast<Vec<T, kVec>*>(out + e0);
    // (each branch stores its own vector: joined, the two had the packed words taken apart and
    // packed again, a PRMT per value)
    if (PHW >= kVec) {
      // the vector meets channels c and at most c + 1, which its elements from next - e0 on
      // take: selects, instead of the walk below (a test and two predicated loads per element,
      // ~30 PTX instructions per value)
      const int c1 = min(c + 1, C_g - 1), in_c = next - e0;
      const acc_t scale1 = gn_scale[c1], shift1 = gn_shift[c1];
#pragma unroll
      for (int k = 0; k < kVec; k += 2)  // (pairs: one packed conversion for two values, stored as one word)
        reinterpret_cast<Vec<T, 2>*>(v.v)[k / 2] =
            Tr::from_acc2(affine_acc(in.v[k], k < in_c ? scale : scale1, k < in_c ? shift : shift1),
                          affine_acc(in.v[k + 1], k + 1 < in_c ? scale : scale1, k + 1 < in_c ? shift : shift1));
      *dst = v;
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        if (e0 + k == next) {
          ++c, next += PHW;
          scale = gn_scale[c], shift = gn_shift[c];
        }
        v.v[k] = Tr::from_acc(affine_acc(in.v[k], scale, shift));
      }
      *dst = v;
    }
  }
  for (int e = head + out_vecs * kVec + threadIdx.x; e < numel; e += kThreads)
    out[e] = normalised(e, quotient_small(e, inv_phw));
}

// The kernel's parameters, shared by its body and its two entry points (below).
#define BN_TAIL_PARAMS                                                                      \
  const T* __restrict__ x, int C, int C_g, PoolInts q, int batch_planes,                \
      const S* __restrict__ mean, const S* __restrict__ var, const T* __restrict__ w,              \
      const T* __restrict__ b, double bn_eps, const T* __restrict__ gamma,                        \
      const T* __restrict__ beta, double gn_eps, float inv_split_rows, float inv_phw, double inv_numel,      \
      T* __restrict__ y
#define BN_TAIL_ARGS \
  x, C, C_g, q, batch_planes, mean, var, w, b, bn_eps, gamma, beta, gn_eps, inv_split_rows, inv_phw, inv_numel, y
template <int kWindow, typename T, typename S>
__device__ __forceinline__ void bn_tanh_pool_group_norm_body(BN_TAIL_PARAMS) {
  using Tr = DTypeTraits<T>;
  using acc_t = typename Tr::acc_t;
  constexpr int kVec = Tr::kVec;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const int G = C / C_g, HW = q.H * q.W, PHW = q.PH * q.PW;
  const int64_t n = blockIdx.x / G, g = blockIdx.x % G;
  const TailShared<T> sh(smem_raw, C_g, C_g * PHW);
  fold_group(sh, g, C_g, mean, var, w, b, bn_eps);
  acc_t part = 0;  // this thread's outputs, for the mean
  const T* src_group = x + (n * C + g * C_g) * int64_t(HW);
  for (int pl0 = 0; pl0 < C_g; pl0 += batch_planes) {
    const int nb = min(batch_planes, C_g - pl0), len = nb * HW;
    const T* src = src_group + int64_t(pl0) * HW;
    const int head = static_cast<int>(vector_head(src, len)), n_vec = (len - head) / kVec;
    T* dst = sh.stage + misalignment16(src);  // dst + head is 16-byte aligned, like src + head
    __syncthreads();       // the previous batch's readers are done (and the folds are written)
    for (int i = threadIdx.x; i < n_vec; i += kThreads)
      reinterpret_cast<Vec<T, kVec>*>(dst + head)[i] = reinterpret_cast<const Vec<T, kVec>*>(src + head)[i];
    for (int i = threadIdx.x; i < head; i += kThreads) dst[i] = src[i];
    for (int i = head + n_vec * kVec + threadIdx.x; i < len; i += kThreads) dst[i] = src[i];
    __syncthreads();
    pool_staged_planes<kWindow>(sh, dst, q, pl0, nb, C_g, inv_split_rows, part);
  }
  group_norm_pooled(sh, C_g, PHW, g, part, gamma, beta, gn_eps, inv_phw, inv_numel,
                    y + (n * C + g * C_g) * int64_t(PHW), [] {});
}

template <int kWindow, typename T, typename S>
__global__ void bn_tanh_pool_group_norm_kernel(BN_TAIL_PARAMS) {
  bn_tanh_pool_group_norm_body<kWindow, T, S>(BN_TAIL_ARGS);
}
// 16-bit window-stored tails: 5 blocks per SM (48 registers; faster than 4 in 16-bit types, slower
// in float32). A separate entry point, since ptxas compiles the other instances without bounds to other code
// than with any explicit bound.
template <typename T, typename S>
__global__ void __launch_bounds__(kThreads, 5) bn_tanh_pool_group_norm_16bit_kernel(BN_TAIL_PARAMS) {
  bn_tanh_pool_group_norm_body<3, T, S>(BN_TAIL_ARGS);
}
// The tail of a window-stored conv output (kWindow 3) for element type T.
template <typename T, typename S>
constexpr auto stored_window_tail_kernel() {
  if constexpr (sizeof(T) == 2) return bn_tanh_pool_group_norm_16bit_kernel<T, S>;
  else return bn_tanh_pool_group_norm_kernel<3, T, S>;
}
#undef BN_TAIL_PARAMS
#undef BN_TAIL_ARGS

// The window-stored tail as persistent blocks that copy each item's stored input with cp.async
// while they finish the one before: the one-block-per-group kernel waits for its copy with
// nothing else to do, and its loads, reductions and barriers leave the SM latency-bound. A block
// takes a contiguous run of (group, image) items, group-major (BatchNorm's fold once per group it
// meets), and refills its one buffer as soon as the item's pooling has read it, under the item's
// statistics and normalisation. (A second buffer, the next copy issued as an item starts, was
// slower than the one-block kernel: its shared memory halves the blocks per SM.) Every item is computed as by
// the kernel above (same threads, same order): the same bits. The host calls it where an item's
// input is whole 16-byte vectors (prefetch_tail_smem). Launched right after channel_stats_kernel
// (the chain in training), it may start while that kernel runs (programmatic dependent launch):
// its blocks issue their first copy, whose input the conv before the statistics wrote, and only
// then wait for the statistics. (Launched otherwise, the wait returns at once.)
template <int kMinBlocks, typename T, typename S>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    bn_tanh_pool_group_norm_prefetch_kernel(const T* __restrict__ x, int N, int C, int C_g, PoolInts q,
                                            const S* __restrict__ mean, const S* __restrict__ var,
                                            const T* __restrict__ w, const T* __restrict__ b, double bn_eps,
                                            const T* __restrict__ gamma, const T* __restrict__ beta,
                                            double gn_eps, float inv_split_rows, float inv_phw, double inv_numel,
                                            T* __restrict__ y) {
  using acc_t = typename DTypeTraits<T>::acc_t;
  constexpr int kVec = DTypeTraits<T>::kVec;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const int HW = q.H * q.W, PHW = q.PH * q.PW, span_vecs = C_g * HW / kVec;
  const TailShared<T> sh(smem_raw, C_g, C_g * PHW);
  const int64_t items = int64_t(N) * (C / C_g);  // (< 2^31: the host checks N x groups)
  const int begin = static_cast<int>(blockIdx.x * items / gridDim.x);
  const int end = static_cast<int>((blockIdx.x + 1) * items / gridDim.x);
  // Item i is group i / N of image i % N: g followed from item to item, one division per block
  // instead of 64-bit ones per item.
  int g = begin / N;
  // the (n, g) span of a [N, C, plane] tensor starts here
  auto group_offset = [&](int n_, int g_, int plane) { return (int64_t(n_) * C + int64_t(g_) * C_g) * plane; };
  auto prefetch = [&](int n_, int g_) {  // this thread's vectors of item (n_, g_)'s input
    const Vec<T, kVec>* src = reinterpret_cast<const Vec<T, kVec>*>(x + group_offset(n_, g_, HW));
    Vec<T, kVec>* dst = reinterpret_cast<Vec<T, kVec>*>(sh.stage);
    for (int v = threadIdx.x; v < span_vecs; v += kThreads) cp_async16(dst + v, src + v);
    cp_async_commit();
  };
  if (begin < end) prefetch(begin - g * N, g);
  wait_for_prior_grid();  // the batch statistics (mean, var) are the prior kernel's
  for (int i = begin; i < end; ++i) {
    int n = i - g * N;
    if (n == N) n = 0, ++g;
    if (n == 0 || i == begin)  // a group's first item here (the previous fold's readers passed the
      fold_group(sh, g, C_g, mean, var, w, b, bn_eps);  // previous item's barriers)
    cp_async_wait_all();  // this thread's copies of item i
    __syncthreads();      // everyone's, and the fold
    acc_t part = 0;
    pool_staged_planes<3>(sh, sh.stage, q, 0, C_g, C_g, inv_split_rows, part);
    group_norm_pooled(sh, C_g, PHW, g, part, gamma, beta, gn_eps, inv_phw, inv_numel, y + group_offset(n, g, PHW),
                      [&] {
                        if (i + 1 < end) prefetch(n + 1 == N ? 0 : n + 1, n + 1 == N ? g + 1 : g);
                      });
  }
}

// One warp per (n, c) plane (the fallback for groups too large for shared memory), lanes stride
// over the pooled pixels with a float Welford each.
constexpr int kPlanesPerBlock = kThreads / 32;
template <typename T, typename S>
__global__ void bn_tanh_pool_kernel(const T* __restrict__ x, int64_t planes, int C, PoolInts q,
                                    const S* __restrict__ mean, const S* __restrict__ var,
                                    const T* __restrict__ w, const T* __restrict__ b, double eps,
                                    T* __restrict__ y, S* __restrict__ plane_stats) {
  using Tr = DTypeTraits<T>;
  using acc_t = typename Tr::acc_t;
  const int64_t plane = blockIdx.x * int64_t(kPlanesPerBlock) + threadIdx.x / 32;
  if (plane >= planes) return;  // whole warps leave: the shuffles below stay full-warp
  const int lane = threadIdx.x % 32;
  acc_t a, s;
  batch_norm_fold(static_cast<int>(plane % C), mean, var, w, b, eps, a, s);
  const T* in = x + plane * q.H * q.W;
  T* out = y + plane * q.PH * q.PW;
  Welford<acc_t> stats;
  for (int o = lane; o < q.PH * q.PW; o += 32) {
    const int ph = o / q.PW, pw = o - ph * q.PW;
    const T stored = Tr::from_acc(bn_tanh_window_max(in, q, ph, pw, a, s));
    out[o] = stored;
    stats.add(Tr::to_acc(stored));
  }
  const Moments all = warp_combine(stats.moments());
  if (lane == 0) {
    plane_stats[plane * 3] = static_cast<S>(all.n);
    plane_stats[plane * 3 + 1] = static_cast<S>(all.mean);
    plane_stats[plane * 3 + 2] = static_cast<S>(all.m2);
  }
}

// The pooling window's index math is 32-bit inside a plane.
bool pool_fits_int32(const Pool2dParams& q) {
  const int64_t lim = 0x3fffffff;
  return !(q.H * q.W > lim || q.PH * q.PW > lim || q.sH * q.PH + q.dH * q.kH > lim ||
           q.sW * q.PW + q.dW * q.kW > lim);
}

// Shared memory of the one-block-per-group kernels before their staged input: per-channel folds
// (4 per channel) and the pooled group (rounded to 16 bytes; at most 64 KB); 0 if it does not fit.
int64_t tail_fixed_smem(DType dtype, int64_t C_g, const Pool2dParams& q) {
  const int64_t elem = dtype_bytes(dtype), vec = 16 / elem;
  const int64_t pooled = (C_g * q.PH * q.PW + vec - 1) / vec * vec * elem;
  if (pooled > 64 * 1024 || !pool_fits_int32(q)) return 0;
  return 4 * C_g * (dtype == DType::F64 ? 8 : 4) + pooled;
}

// Shared memory of the one-block-per-group kernel: its fixed part and input planes staged in
// equal batches of up to 40 KB (at least one plane, at most 48 KB; 40 KB holds the 64->128 k5 (32^2) layer's 16
// bfloat16 planes of 34 x 34 in one batch, and the block limit is registers' four per SM either
// way), 160 KB in all; 0 if it does not fit.
struct GroupTail {
  int batch_planes = 0;
  size_t smem = 0;
};
GroupTail group_tail_layout(DType dtype, int64_t C_g, const Pool2dParams& q) {
  const int64_t fixed = tail_fixed_smem(dtype, C_g, q), plane = q.H * q.W * dtype_bytes(dtype);
  if (fixed == 0 || plane > 48 * 1024) return {};
  const int64_t most = std::min<int64_t>(C_g, std::max<int64_t>(1, 40 * 1024 / plane));
  const int64_t batches = (C_g + most - 1) / most, batch = (C_g + batches - 1) / batches;
  const int64_t bytes = fixed + batch * plane + 16;
  if (bytes > 160 * 1024) return {};
  return {static_cast<int>(batch), static_cast<size_t>(bytes)};
}

// Shared memory of the prefetching tail (window-stored input at `in`, 16-byte aligned), given the
// one-block kernel's layout: the fixed part and a buffer of an item's whole input, which must be
// whole 16-byte vectors and that layout's single batch (so it fits: the one-block kernel's
// shared memory less its misalignment slack); 0 where it does not apply, or with
// Option::BnTailPrefetch off (the one-block kernel).
size_t prefetch_tail_smem(DType dtype, int64_t C_g, const Pool2dParams& in, const GroupTail& one_block) {
  if (option(Option::BnTailPrefetch) == 0) return 0;
  const int64_t span = C_g * in.H * in.W * dtype_bytes(dtype);
  if (one_block.batch_planes != C_g || span % 16 != 0) return 0;
  return static_cast<size_t>(tail_fixed_smem(dtype, C_g, in) + span);
}

// The prefetching tail's entry for T. 16-bit: eight blocks per SM, the most 256-thread blocks an
// SM holds (ptxas fits the kernel in 32 registers without spilling; fewer blocks were slower).
// float32: four (64 registers; its shared memory allows five at most, no faster).
template <typename T, typename S>
constexpr auto prefetch_tail_kernel() {
  return bn_tanh_pool_group_norm_prefetch_kernel<sizeof(T) == 2 ? 8 : 4, T, S>;
}

// The input planes the tail reads: the conv output, or (split_rows > 0) its window-stored form,
// [window_store_rows(H, split_rows)][W / 2] per plane, read with 1 x 1 "windows" (kWindow 3).
Pool2dParams tail_input(const Pool2dParams& q, int64_t split_rows) {
  if (split_rows == 0) return q;
  Pool2dParams in = q;
  in.H = window_store_rows(q.H, split_rows);
  in.W = q.PW;
  in.kH = in.kW = in.sH = in.sW = 1;
  return in;
}

}  // namespace

cudaError_t channel_stats_from_tiles(const void* tile_stats, DType dtype, int64_t N, int64_t C,
                                     int64_t tiles, void* mean, void* var, cudaStream_t stream) {
  if (C == 0) return cudaSuccess;
  return dispatch_dtype(dtype, [&](auto tag) {
    using S = typename DTypeTraits<decltype(tag)>::acc_t;  // float64 for float64, else float
    const int64_t blocks = channel_stats_blocks(N * tiles);
    if (C * blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
    cudaLaunchAttribute cluster = cluster_dimension(static_cast<unsigned>(blocks));
    return launch_with(channel_stats_kernel<S>, dim3(static_cast<unsigned>(C * blocks)), dim3(kThreads), 0, stream,
                       blocks > 1 ? &cluster : nullptr, static_cast<const S*>(tile_stats), N, C, tiles,
                       static_cast<S*>(mean), static_cast<S*>(var));
  });
}

bool batch_norm_tanh_max_pool2d_group_norm_fits(DType dtype, int64_t N, int64_t C, int64_t num_groups,
                                                const Pool2dParams& q, int64_t split_rows) {
  // (a stored plane of at most 48 KB also keeps its rows below window_store_row_small's 2^21)
  return N * num_groups <= 0x7fffffff && C <= 0x3fffffff &&
         group_tail_layout(dtype, C / num_groups, tail_input(q, split_rows)).smem > 0;
}

cudaError_t batch_norm_tanh_max_pool2d_group_norm(const void* x, DType dtype, int64_t N, int64_t C,
                                                  const Pool2dParams& q, int64_t split_rows, const void* mean,
                                                  const void* var, const void* bn_weight, const void* bn_bias,
                                                  double bn_eps, int64_t num_groups, const void* gn_weight,
                                                  const void* gn_bias, double gn_eps, void* y, bool after_stats,
                                                  cudaStream_t stream) {
  if (N * C == 0 || q.PH * q.PW == 0) return cudaSuccess;
  const bool stored_windows = split_rows > 0;
  if (stored_windows && !pool_is_2x2(q)) return cudaErrorInvalidValue;
  if (!batch_norm_tanh_max_pool2d_group_norm_fits(dtype, N, C, num_groups, q, split_rows))
    return cudaErrorInvalidConfiguration;
  const Pool2dParams in = tail_input(q, split_rows);
  const GroupTail layout = group_tail_layout(dtype, C / num_groups, in);
  const double inv_group_numel = 1.0 / static_cast<double>(C / num_groups * q.PH * q.PW);
  const size_t prefetch_smem = stored_windows && reinterpret_cast<uintptr_t>(x) % 16 == 0
                                   ? prefetch_tail_smem(dtype, C / num_groups, in, layout)
                                   : 0;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using S = typename DTypeTraits<T>::acc_t;
    if (prefetch_smem > 0) {
      constexpr auto kernel = prefetch_tail_kernel<T, S>();
      int64_t blocks = 0;
      cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), prefetch_smem);
      if (err == cudaSuccess) err = resident_blocks(reinterpret_cast<const void*>(kernel), kThreads, prefetch_smem, blocks);
      if (err != cudaSuccess) return err;
      // after channel_stats_kernel: started under it (see the kernel)
      return launch_early(
          kernel, dim3(static_cast<unsigned>(std::min(N * num_groups, blocks))), dim3(kThreads), prefetch_smem, stream,
          after_stats && option(Option::EarlyLaunch) != 0, static_cast<const T*>(x), static_cast<int>(N), static_cast<int>(C),
          static_cast<int>(C / num_groups), PoolInts(in), static_cast<const S*>(mean), static_cast<const S*>(var),
          static_cast<const T*>(bn_weight), static_cast<const T*>(bn_bias), bn_eps,
          static_cast<const T*>(gn_weight), static_cast<const T*>(gn_bias), gn_eps,
          1.f / static_cast<float>(split_rows), 1.f / static_cast<float>(q.PH * q.PW), inv_group_numel,
          static_cast<T*>(y));
    }
    const bool inside = q.pH == 0 && q.pW == 0;
    auto kernel = stored_windows  ? stored_window_tail_kernel<T, S>()
                  : pool_is_2x2(q) ? bn_tanh_pool_group_norm_kernel<2, T, S>
                  : inside         ? bn_tanh_pool_group_norm_kernel<1, T, S>
                                   : bn_tanh_pool_group_norm_kernel<0, T, S>;
    cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), layout.smem);
    if (err != cudaSuccess) return err;
    kernel<<<static_cast<unsigned>(N * num_groups), kThreads, layout.smem, stream>>>(
        static_cast<const T*>(x), static_cast<int>(C), static_cast<int>(C / num_groups), PoolInts(in),
        layout.batch_planes, static_cast<const S*>(mean), static_cast<const S*>(var),
        static_cast<const T*>(bn_weight), static_cast<const T*>(bn_bias), bn_eps, static_cast<const T*>(gn_weight),
        static_cast<const T*>(gn_bias), gn_eps, stored_windows ? 1.f / static_cast<float>(split_rows) : 0.f,
        1.f / static_cast<float>(q.PH * q.PW), inv_group_numel, static_cast<T*>(y));
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
  if (blocks > 0x7fffffff || C > 0x3fffffff || !pool_fits_int32(q)) return cudaErrorInvalidConfiguration;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using S = typename DTypeTraits<T>::acc_t;  // the statistics' type: float64 for float64, else float
    bn_tanh_pool_kernel<T, S><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        static_cast<const T*>(x), planes, static_cast<int>(C), PoolInts(q), static_cast<const S*>(mean),
        static_cast<const S*>(var), static_cast<const T*>(bn_weight), static_cast<const T*>(bn_bias), eps,
        static_cast<T*>(y), static_cast<S*>(plane_stats));
    return cudaGetLastError();
  });
}

}  // namespace cuda
}  // namespace myops
