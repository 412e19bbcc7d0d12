#pragma once
// Types shared by the CUDA launch functions (plain CUDA: no torch header, so nvcc builds these
// files on a CPU-only machine).
#include <cuda_runtime.h>

#include <cstdint>

#include "common/conv_params.h"
#include "common/gelu_math.h"

namespace myops {
namespace cuda {

enum class DType : int { F32 = 0, F64 = 1, F16 = 2, BF16 = 3 };
inline int dtype_bytes(DType d) { return d == DType::F64 ? 8 : d == DType::F32 ? 4 : 2; }

// float32 convolution math: TF32 tensor cores (PyTorch's default for cuDNN convs) or exact FFMA.
enum class Fp32Math : int { Exact = 0, TF32 = 1 };

}  // namespace cuda
}  // namespace myops
