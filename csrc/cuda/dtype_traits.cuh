#pragma once
// Per-dtype facts for the CUDA kernels: accumulation type, 16-byte vector width, and the WMMA
// fragment shapes used for the tensor-core path.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

namespace myops {
namespace cuda {

struct NoWmma {  // placeholder fragments for the FFMA path
  struct Acc {};
};

template <typename T>
struct DTypeTraits;

template <>
struct DTypeTraits<float> {
  using acc_t = float;
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

template <>
struct DTypeTraits<__half> {
  using acc_t = float;
  static constexpr int kVec = 8;
  template <bool kTensorCore>
  using Wmma = typename std::conditional<kTensorCore, HalfWmma<__half>, NoWmma>::type;
};

template <>
struct DTypeTraits<__nv_bfloat16> {
  using acc_t = float;
  static constexpr int kVec = 8;
  template <bool kTensorCore>
  using Wmma = typename std::conditional<kTensorCore, HalfWmma<__nv_bfloat16>, NoWmma>::type;
};

}  // namespace cuda
}  // namespace myops
