#pragma once
// Per-dtype facts for the CUDA kernels: accumulation type, 16-byte vector width, and the WMMA
// fragment shapes used for the tensor-core path.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/common/launch.cuh"

namespace myops {
namespace cuda {

struct NoWmma {  // placeholder fragments for the FFMA path
  struct Acc {};
};

template <typename T>
struct DTypeTraits;

// kVec elements moved as one 16-byte access.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Vec {
  T v[kVec];
};

template <>
struct DTypeTraits<float> {
  using acc_t = float;
  __device__ static float to_acc(float v) { return v; }
  __device__ static float from_acc(float v) { return v; }
  __device__ static Vec<float, 2> from_acc2(float a, float b) { return {{a, b}}; }
  static constexpr int kVec = 4;
  struct Tf32 {
    static constexpr int kK = 8;
    using A = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 8, nvcuda::wmma::precision::tf32, nvcuda::wmma::col_major>;
    using B = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 8, nvcuda::wmma::precision::tf32, nvcuda::wmma::row_major>;
    using Acc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 8, float>;
    template <typename F>
    __device__ static void round(F& f) {
#pragma unroll
      for (int i = 0; i < f.num_elements; ++i) f.x[i] = nvcuda::wmma::__float_to_tf32(f.x[i]);
    }
  };
  template <bool kTensorCore>
  using Wmma = typename std::conditional<kTensorCore, Tf32, NoWmma>::type;
};

template <>
struct DTypeTraits<double> {
  using acc_t = double;
  __device__ static double to_acc(double v) { return v; }
  __device__ static double from_acc(double v) { return v; }
  __device__ static Vec<double, 2> from_acc2(double a, double b) { return {{a, b}}; }
  static constexpr int kVec = 2;
  template <bool kTensorCore>
  using Wmma = NoWmma;
};

template <typename Half>
struct HalfWmma {
  static constexpr int kK = 16;
  using A = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, Half, nvcuda::wmma::col_major>;
  using B = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, Half, nvcuda::wmma::row_major>;
  using Acc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;
  template <typename F>
  __device__ static void round(F&) {}
};

// v's bits as a To of the same size (the packed conversions below, the transposes' maps).
template <typename To, typename From>
__device__ __forceinline__ To bits_as(From v) {
  static_assert(sizeof(To) == sizeof(From), "same size");
  To t;
  memcpy(&t, &v, sizeof(To));
  return t;
}

// The unsigned integer of T's size: the bits that the transposes of nchw_to_nhwc.cuh move.
template <typename T>
using RawOf = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;

// float16 and bfloat16: conversions through explicit intrinsics (torch builds with
// __CUDA_NO_HALF_CONVERSIONS__ / __CUDA_NO_BFLOAT16_CONVERSIONS__).
__device__ inline float half_to_float(__half v) { return __half2float(v); }
__device__ inline float half_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename Half>
__device__ inline Half float_to_half(float v);
template <>
__device__ inline __half float_to_half<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ inline __nv_bfloat16 float_to_half<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
// Two values rounded by one packed conversion (cvt.rn.bf16x2.f32 / .f16x2: half the
// instructions of two; the wgmma epilogues convert every accumulator), kept as the packed word
// (taking its halves apart made the BatchNorm chain's tail pack them again: a PRMT per value).
template <typename Half>
__device__ inline Vec<Half, 2> float2_to_half2(float a, float b);
template <>
__device__ inline Vec<__half, 2> float2_to_half2<__half>(float a, float b) {
  return bits_as<Vec<__half, 2>>(__floats2half2_rn(a, b));
}
template <>
__device__ inline Vec<__nv_bfloat16, 2> float2_to_half2<__nv_bfloat16>(float a, float b) {
  return bits_as<Vec<__nv_bfloat16, 2>>(__floats2bfloat162_rn(a, b));
}

template <typename Half>
struct Half16Traits {
  using acc_t = float;
  static constexpr int kVec = 8;
  __device__ static float to_acc(Half v) { return half_to_float(v); }
  __device__ static Half from_acc(float v) { return float_to_half<Half>(v); }
  __device__ static Vec<Half, 2> from_acc2(float a, float b) { return float2_to_half2<Half>(a, b); }
  template <bool kTensorCore>
  using Wmma = typename std::conditional<kTensorCore, HalfWmma<Half>, NoWmma>::type;
};

template <>
struct DTypeTraits<__half> : Half16Traits<__half> {};
template <>
struct DTypeTraits<__nv_bfloat16> : Half16Traits<__nv_bfloat16> {};

// Elements of T by which p lies past a 16-byte boundary.
template <typename T>
__device__ inline int misalignment16(const T* p) {
  return static_cast<int>(reinterpret_cast<uintptr_t>(p) % 16 / sizeof(T));
}

// Scalar elements before the first 16-byte-aligned one in a run of len elements from p (a run
// that shares its misalignment with its destination: scalar head, 16-byte vectors, scalar tail).
template <typename T>
__device__ inline int64_t vector_head(const T* p, int64_t len) {
  const int mis = misalignment16(p);
  return min(len, mis == 0 ? int64_t(0) : int64_t(DTypeTraits<T>::kVec - mis));
}

// Calls f(T{}) with the element type of dtype (the launch functions' dtype switch).
template <typename F>
cudaError_t dispatch_dtype(DType dtype, F f) {
  switch (dtype) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::F16: return f(__half{});
    case DType::BF16: return f(__nv_bfloat16{});
  }
  return cudaErrorInvalidValue;
}

// dispatch_dtype for the tensor-core kernels: float64 has no tensor cores (the host never plans
// them for it), so it is an invalid value instead of an instantiation.
template <typename F>
cudaError_t dispatch_tensor_core_dtype(DType dtype, F f) {
  return dispatch_dtype(dtype, [&](auto tag) -> cudaError_t {
    if constexpr (std::is_same<decltype(tag), double>::value) {
      return cudaErrorInvalidValue;
    } else {
      return f(tag);
    }
  });
}

}  // namespace cuda
}  // namespace myops
