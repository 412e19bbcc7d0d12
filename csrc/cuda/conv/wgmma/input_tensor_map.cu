#include "cuda/conv/wgmma/input_tensor_map.cuh"

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

// Coordinates are 32-bit; TMA's strides must be multiples of 16 bytes below 2^40.
bool input_sizes_in_range(const ConvTranspose2dParams& p, int es) {
  const int64_t limit = int64_t(1) << 31;
  return p.W < limit && p.H < limit && p.C_in < limit && p.N < limit && p.C_in * p.H * p.W * es < (int64_t(1) << 40);
}

bool box_sides_in_range(const InputBox& box) {
  return box.cols > 0 && box.rows > 0 && box.channels > 0 && box.cols <= 256 && box.rows <= 256 &&
         box.channels <= 256;
}

// A 4-D map of a dense tensor (sizes and box sides innermost first; each stride the product of
// the sizes inside it), zero fill outside the tensor.
bool encode_dense_4d(CUtensorMap* map, const void* x, DType dtype, const int64_t (&sizes)[4],
                     const int (&box)[4]) {
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0) return false;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tiled_encoder();
  if (encode == nullptr) return false;
  cuuint64_t dims[4], strides[3];
  cuuint32_t box_dims[4];
  int64_t stride = dtype_bytes(dtype);
  for (int i = 0; i < 4; ++i) {
    dims[i] = static_cast<cuuint64_t>(sizes[i]);
    box_dims[i] = static_cast<cuuint32_t>(box[i]);
    stride *= sizes[i];
    if (i < 3) strides[i] = static_cast<cuuint64_t>(stride);
  }
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  return encode(map, tma_type(dtype), 4, const_cast<void*>(x), dims, strides, box_dims, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

bool tensor_maps_available() { return tiled_encoder() != nullptr; }

bool input_box_supported(const ConvTranspose2dParams& p, DType dtype, const InputBox& box) {
  const int es = dtype_bytes(dtype);
  return box_sides_in_range(box) && (box.cols * es) % 16 == 0 && (p.W * es) % 16 == 0 && input_sizes_in_range(p, es);
}

bool encode_input_map(CUtensorMap* map, const void* x, DType dtype, const ConvTranspose2dParams& p,
                      const InputBox& box) {
  return input_box_supported(p, dtype, box) &&
         encode_dense_4d(map, x, dtype, {p.W, p.H, p.C_in, p.N}, {box.cols, box.rows, box.channels, 1});
}

bool channels_last_box_supported(const ConvTranspose2dParams& p, DType dtype, const InputBox& box) {
  const int es = dtype_bytes(dtype);
  return box_sides_in_range(box) && box.channels * es == 16 && (p.C_in * es) % 16 == 0 &&
         input_sizes_in_range(p, es);
}

bool encode_channels_last_input_map(CUtensorMap* map, const void* x, DType dtype, const ConvTranspose2dParams& p,
                                    const InputBox& box) {
  return channels_last_box_supported(p, dtype, box) &&
         encode_dense_4d(map, x, dtype, {p.C_in, p.W, p.H, p.N}, {box.channels, box.cols, box.rows, 1});
}

}  // namespace cuda
}  // namespace myops
