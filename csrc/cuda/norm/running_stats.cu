#include "cuda/common/dtype_traits.cuh"
#include "cuda/norm/running_stats.cuh"

namespace myops {
namespace cuda {
namespace {

template <typename B, typename S>
__global__ void running_stats_kernel(B* __restrict__ rm, B* __restrict__ rv, int64_t rm_stride, int64_t rv_stride,
                                     const S* __restrict__ m, const S* __restrict__ v, int64_t m_stride,
                                     int64_t v_stride, int64_t C, double momentum, double var_factor,
                                     int64_t* __restrict__ num_batches_tracked) {
  using BT = DTypeTraits<B>;
  using acc_t = typename BT::acc_t;
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c == 0 && num_batches_tracked) *num_batches_tracked += 1;
  if (c >= C) return;
  const acc_t mom = static_cast<acc_t>(momentum), keep = static_cast<acc_t>(1.0 - momentum);
  const acc_t mean = static_cast<acc_t>(DTypeTraits<S>::to_acc(m[c * m_stride]));
  const acc_t var = static_cast<acc_t>(DTypeTraits<S>::to_acc(v[c * v_stride])) * static_cast<acc_t>(var_factor);
  B& r_mean = rm[c * rm_stride];
  B& r_var = rv[c * rv_stride];
  r_mean = BT::from_acc(mom * mean + keep * BT::to_acc(r_mean));
  r_var = BT::from_acc(mom * var + keep * BT::to_acc(r_var));
}

}  // namespace

cudaError_t batch_norm_update_running_stats(StridedVector running_mean, StridedVector running_var,
                                            StridedVector mean, StridedVector var, int64_t C,
                                            double momentum, double var_factor,
                                            int64_t* num_batches_tracked, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t blocks = std::max<int64_t>(1, (C + kThreads - 1) / kThreads);
  return dispatch_dtype(running_mean.dtype, [&](auto buffer) {
    using B = decltype(buffer);
    return dispatch_dtype(mean.dtype, [&](auto stat) {
      using S = decltype(stat);
      running_stats_kernel<B, S><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          static_cast<B*>(running_mean.data), static_cast<B*>(running_var.data), running_mean.stride,
          running_var.stride, static_cast<const S*>(mean.data), static_cast<const S*>(var.data), mean.stride,
          var.stride, C, momentum, var_factor, num_batches_tracked);
      return cudaGetLastError();
    });
  });
}

}  // namespace cuda
}  // namespace myops
