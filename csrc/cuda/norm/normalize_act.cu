#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/common/activation.cuh"
#include "cuda/common/dtype_traits.cuh"
#include "cuda/norm/normalize_act.cuh"

namespace myops {
namespace cuda {
namespace {

constexpr int kThreads = 256;

// One kVec-element vector per thread and step of a grid-stride loop. A vector never straddles a
// plane (NCHW: HW % kVec == 0) or a pixel's channels (channels-last: C % kVec == 0); kVec = 1
// where those fail or the pointers are not 16-byte aligned.
template <typename T, int kVec, bool kChannelsLast>
__global__ void __launch_bounds__(kThreads)
    normalize_act_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n_vec, int64_t C, int64_t HW,
                         const typename DTypeTraits<T>::acc_t* __restrict__ mean,
                         const typename DTypeTraits<T>::acc_t* __restrict__ scale,
                         const typename DTypeTraits<T>::acc_t* __restrict__ shift, ActivationSpec spec) {
  using Tr = DTypeTraits<T>;
  using acc_t = typename Tr::acc_t;
  with_activation<acc_t, T>(spec, [&](auto act) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_vec; i += stride) {
      const int64_t first = i * kVec;
      Vec<T, kVec> v = reinterpret_cast<const Vec<T, kVec>*>(x)[i];
      if constexpr (kChannelsLast) {
        const int64_t p = first / (HW * C) * C + first % C;  // (n, c) of the vector's first element
#pragma unroll
        for (int k = 0; k < kVec; ++k)
          v.v[k] = Tr::from_acc(act((Tr::to_acc(v.v[k]) - mean[p + k]) * scale[p + k] + shift[p + k]));
      } else {
        const int64_t p = first / HW;
        const acc_t m = mean[p], s = scale[p], b = shift[p];
#pragma unroll
        for (int k = 0; k < kVec; ++k) v.v[k] = Tr::from_acc(act((Tr::to_acc(v.v[k]) - m) * s + b));
      }
      reinterpret_cast<Vec<T, kVec>*>(y)[i] = v;
    }
  });
}

template <typename T, int kVec>
cudaError_t launch(const void* x, void* y, int64_t n, int64_t C, int64_t HW, bool channels_last, const void* mean,
                   const void* scale, const void* shift, ActivationSpec act, cudaStream_t stream) {
  using acc_t = typename DTypeTraits<T>::acc_t;
  const int64_t n_vec = n / kVec;
  const int blocks = static_cast<int>(std::min<int64_t>((n_vec + kThreads - 1) / kThreads, 1 << 20));
  const auto* m = static_cast<const acc_t*>(mean);
  const auto* s = static_cast<const acc_t*>(scale);
  const auto* b = static_cast<const acc_t*>(shift);
  if (channels_last)
    normalize_act_kernel<T, kVec, true><<<blocks, kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), n_vec, C, HW, m, s, b, act);
  else
    normalize_act_kernel<T, kVec, false><<<blocks, kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), n_vec, C, HW, m, s, b, act);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_for(const void* x, void* y, int64_t N, int64_t C, int64_t HW, bool channels_last,
                       const void* mean, const void* scale, const void* shift, ActivationSpec act,
                       cudaStream_t stream) {
  const int64_t n = N * C * HW;
  if (n == 0) return cudaSuccess;
  constexpr int kVec = DTypeTraits<T>::kVec;
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
  if (aligned && (channels_last ? C : HW) % kVec == 0)
    return launch<T, kVec>(x, y, n, C, HW, channels_last, mean, scale, shift, act, stream);
  return launch<T, 1>(x, y, n, C, HW, channels_last, mean, scale, shift, act, stream);
}

}  // namespace

cudaError_t normalize_act(const void* x, void* y, DType dtype, int64_t N, int64_t C, int64_t HW, bool channels_last,
                          const void* mean, const void* scale, const void* shift, ActivationSpec act,
                          cudaStream_t stream) {
  switch (dtype) {
    case DType::F32: return launch_for<float>(x, y, N, C, HW, channels_last, mean, scale, shift, act, stream);
    case DType::F64: return launch_for<double>(x, y, N, C, HW, channels_last, mean, scale, shift, act, stream);
    case DType::F16: return launch_for<__half>(x, y, N, C, HW, channels_last, mean, scale, shift, act, stream);
    case DType::BF16:
      return launch_for<__nv_bfloat16>(x, y, N, C, HW, channels_last, mean, scale, shift, act, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace myops
