#pragma once
// Winograd F(2, 3) along the rows of a transposed convolution: the three transforms the mma
// kernel's strict float32 FFMA mode uses where a phase has 3 row taps one input row apart
// (conv_transpose2d_mma.cu, MmaTiling::wino). Tap t_h of such a phase reads halo row r + 2 - t_h
// for output row r of a tile, so the output rows 2 q, 2 q + 1 are a 3-tap correlation of the halo
// rows d_i = 2 q + i (i < 4) with g = (W2, W1, W0), W_t the weight row of tap t_h = t. F(2, 3) gives
// the pair from 4 products of transformed rows where the taps take 6:
//   inputs   d0 - d2, d1 + d2, d2 - d1, d1 - d3
//   weights  W2, (W0 + W1 + W2) / 2, (W0 - W1 + W2) / 2, W0
//   outputs  m0 + m1 + m2, m1 - m2 - m3
// where m_u is component u's products summed over input channels and width taps. All float32:
// no operand is rounded to TF32.
#include <cstdint>

namespace myops {
namespace cuda {

// The 3 row taps of a phase become 4 transformed rows: prepared-weight taps scale by 4 / 3.
__host__ __device__ inline int64_t winograd_taps(int64_t direct_taps) { return direct_taps / 3 * 4; }

// Component comp of the transformed weight, from the weight rows w[t_h] of one (channel, width tap).
__device__ inline float winograd_weight(int comp, const float (&w)[3]) {
  return comp == 0 ? w[2] : comp == 1 ? (w[0] + w[1] + w[2]) * 0.5f : comp == 2 ? (w[0] - w[1] + w[2]) * 0.5f : w[0];
}

// The 4 transformed input rows t[u] of a pair from its halo rows d[i], per channel c < C.
template <int C>
__device__ inline void winograd_input_rows(const float (&d)[4][C], float (&t)[4][C]) {
#pragma unroll
  for (int c = 0; c < C; ++c) {
    t[0][c] = d[0][c] - d[2][c];
    t[1][c] = d[1][c] + d[2][c];
    t[2][c] = d[2][c] - d[1][c];
    t[3][c] = d[1][c] - d[3][c];
  }
}

// The pair's two output rows (x: row 2 q, y: row 2 q + 1) from its components.
__device__ inline float2 winograd_output_rows(float m0, float m1, float m2, float m3) {
  return make_float2(m0 + m1 + m2, m1 - m2 - m3);
}

}  // namespace cuda
}  // namespace myops
