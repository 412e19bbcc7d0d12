#pragma once
// Host helpers shared by every op family's CUDA code: dtype mapping, launch-error checks, optional
// tensors, the [N, C, HW] view, the float32 math mode, and layout copies by our staging kernels.
#include <ATen/ATen.h>
#include <cuda_runtime.h>

#include <optional>
#include <tuple>

#include "cuda/common/launch.cuh"
#include "shapes.h"

namespace myops {
namespace host {

inline const void* ptr_or_null(const at::Tensor& t) { return t.defined() ? t.const_data_ptr() : nullptr; }

cuda::DType kernel_dtype(at::ScalarType t);

void check_launch(cudaError_t err, const char* op);

// For the launchers that may refuse a shape their grid cannot cover: false where the launcher
// refused it before any launch (cudaErrorInvalidConfiguration; the caller then falls back), true
// where the kernel was launched; any other error throws.
bool launched_unless_refused(cudaError_t err, const char* op);

at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& t);

// An [N, C, *] tensor as [N, C, HW] (the normalisation kernels' view).
std::tuple<int64_t, int64_t, int64_t> n_c_hw(const at::Tensor& x);

cuda::Fp32Math fp32_math();

// Strict float32: a float32 call with TF32 off (exact FFMA products).
bool strict_fp32(const at::Tensor& input);

// A contiguous channels-last copy of input [N, C, H, W] by our staging kernel (faster than
// PyTorch's copy), float32 rounded to TF32 where round_tf32; nullopt (nothing launched)
// where the kernel's grid cannot cover the shape (over ~2 M channels).
std::optional<at::Tensor> try_channels_last_copy(const char* op, const at::Tensor& input, bool round_tf32,
                                                 cudaStream_t stream);

at::Tensor channels_last_copy(const char* op, const at::Tensor& input, bool round_tf32, cudaStream_t stream);

// t as a contiguous NCHW tensor: a channels-last one transposed by our kernel, not PyTorch's
// slower contiguous(); PyTorch's copy only where our grid refuses
// the shape (over ~2 M pixels per image).
at::Tensor contiguous_nchw(const char* op, const at::Tensor& t);

// An op's result `out` (contiguous NCHW, as our kernels write it) in the input's memory format
// (output_memory_format): a channels-last one by the staging kernel, not PyTorch's slower
// contiguous().
at::Tensor in_output_format(const char* op, const at::Tensor& out, const at::Tensor& input);

}  // namespace host
}  // namespace myops
