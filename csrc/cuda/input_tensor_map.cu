#include "cuda/input_tensor_map.cuh"

#include <cudaTypedefs.h>

#include <cstdint>

namespace myops {
namespace cuda {
namespace {

CUtensorMapDataType tma_type(DType d) {
  switch (d) {
    case DType::F32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::F64: return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
    case DType::F16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::BF16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  }
  return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
}

// The driver's encoder, looked up once through the runtime (no link against libcuda).
PFN_cuTensorMapEncodeTiled_v12000 tiled_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

bool input_box_supported(const ConvTranspose2dParams& p, DType dtype, const InputBox& box) {
  const int es = dtype_bytes(dtype);
  const int64_t limit = int64_t(1) << 31;  // coordinates are 32-bit
  return box.cols > 0 && box.rows > 0 && box.channels > 0 && box.cols <= 256 && box.rows <= 256 &&
         box.channels <= 256 && (box.cols * es) % 16 == 0 && (p.W * es) % 16 == 0 &&
         p.W < limit && p.H < limit && p.C_in < limit && p.N < limit &&
         p.C_in * p.H * p.W * es < (int64_t(1) << 40);
}

bool encode_input_map(CUtensorMap* map, const void* x, DType dtype, const ConvTranspose2dParams& p,
                      const InputBox& box) {
  const int es = dtype_bytes(dtype);
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || !input_box_supported(p, dtype, box)) return false;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tiled_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(p.W), static_cast<cuuint64_t>(p.H),
                              static_cast<cuuint64_t>(p.C_in), static_cast<cuuint64_t>(p.N)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(p.W * es), static_cast<cuuint64_t>(p.H * p.W * es),
                                 static_cast<cuuint64_t>(p.C_in * p.H * p.W * es)};
  const cuuint32_t box_dims[4] = {static_cast<cuuint32_t>(box.cols), static_cast<cuuint32_t>(box.rows),
                                  static_cast<cuuint32_t>(box.channels), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  return encode(map, tma_type(dtype), 4, const_cast<void*>(x), dims, strides, box_dims, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace cuda
}  // namespace myops
