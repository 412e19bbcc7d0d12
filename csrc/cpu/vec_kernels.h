#pragma once
// float32 inner loops compiled once per x86-64 level (AVX-512, AVX2+FMA, baseline) and picked at
// load time (GCC target_clones), so the wheel runs on any x86-64 CPU and is fast on recent ones.
#include <cstdint>

#include "common/gelu_math.h"
#include "common/norm_act.h"

namespace myops {
namespace vec {

void gelu_f32(const float* in, float* out, int64_t n, GeluApprox approx);
// sum and sum of squared deviations from `center`, in float64
void sum_f32(const float* x, int64_t n, double& sum);
void sum_sq_dev_f32(const float* x, int64_t n, double center, double& m2);
// sums of (x - pivot) and (x - pivot)^2 in float64, in one read
void shifted_sums_f32(const float* x, int64_t n, double pivot, double& s1, double& s2);
// y = tanh(x * scale + shift) (BatchNorm folded into scale / shift, then tanh)
void affine_tanh_f32(const float* x, float* y, int64_t n, float scale, float shift);
// y = (x - mean) * scale + shift
void normalize_f32(const float* x, float* y, int64_t n, float mean, float scale, float shift);
// y = act((x - mean) * scale + shift) with one mean / scale / shift (per_element false) or one per
// element; act as F.<act> (negative_slope: leaky_relu's, approx: gelu's)
void normalize_act_f32(const float* x, float* y, int64_t n, const float* mean, const float* scale,
                       const float* shift, bool per_element, Activation act, float negative_slope,
                       GeluApprox approx);
// rows [r0, r1) of a rows x cols matrix of 2-, 4- or 8-byte elements transposed into dst (cols x
// rows), in tiles of kTransposeTile columns (a layout copy: layout_copy.cpp)
constexpr int64_t kTransposeTile = 32;
void transpose_rows(const uint16_t* src, uint16_t* dst, int64_t rows, int64_t cols, int64_t r0, int64_t r1);
void transpose_rows(const uint32_t* src, uint32_t* dst, int64_t rows, int64_t cols, int64_t r0, int64_t r1);
void transpose_rows(const uint64_t* src, uint64_t* dst, int64_t rows, int64_t cols, int64_t r0, int64_t r1);

}  // namespace vec
}  // namespace myops
