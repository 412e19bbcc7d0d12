#pragma once
// The wgmma kernel's epilogue, straight from the consumer warpgroup's accumulators: bias, the
// activation, the stores and the GroupNorm / BatchNorm tile partials, with no shared-memory
// round trip (a Cs-based epilogue took a third of the block's time, and with one block per SM
// nothing overlapped it).
// Each channel's values of a tile sit in one quad of lanes, so its partials take two shuffles.
#include <type_traits>

#include "cuda/conv/common/conv_common.cuh"
#include "cuda/conv/common/conv_tile_geometry.cuh"
#include "cuda/conv/common/window_store.cuh"

namespace myops {
namespace cuda {

// ep.pool_windows: a lane's values of one channel (acc register 2 hc + e of each row, as stored)
// reduced per 2 x 2 window and stored. A window opens on an even output row, so with the tile's
// first row at j0 the windows are rows (2w - odd, 2w + 1 - odd) (odd = j0 % 2, a compile-time
// branch: the loop is static either way), clipped to the tile: a window split by the tile edge
// is stored as its part. Window w goes to stored row window_store_row(j0, R) + w (the first
// window's, as the rows of one tile share j0 / R). flip = -1 (BN weight negative): the minimum, as -max(-v).
template <typename T, int Q, int R, int kOdd>
__device__ __forceinline__ void store_windows(const float (&acc)[Q][4 * R], int hc, int window_rows, int cols,
                                              int tq, float flip, T* chan, int out_w) {
#pragma unroll
  for (int q = 0; q < Q; ++q) {
    if (8 * q + 2 * tq + 1 >= cols) continue;  // the window's second column is outside the output
#pragma unroll
    for (int w = 0; w < (R + kOdd + 1) / 2; ++w) {
      const int first = 2 * w - kOdd < 0 ? 0 : 2 * w - kOdd, last = 2 * w + 1 - kOdd < R ? 2 * w + 1 - kOdd : R - 1;
      if (first >= window_rows) break;  // windows start in order; none from here on is complete
      float m = max_nan(acc[q][4 * first + 2 * hc] * flip, acc[q][4 * first + 2 * hc + 1] * flip);
      if (last > first) m = max_nan(m, max_nan(acc[q][4 * last + 2 * hc] * flip, acc[q][4 * last + 2 * hc + 1] * flip));
      chan[w * out_w + 4 * q] = DTypeTraits<T>::from_acc(m * flip);
    }
  }
}

// The tile is Q strips of R rows x 8 columns of phase `ph`'s output grid from (j0, i0), and
// 64 output channels from oc0 of group g. Thread t of the warpgroup holds, in register 4j + e of
// strip q (the m64nNk MMA's accumulator layout), output channel 16 (t / 32) + (t % 32) / 4 +
// 8 (e / 2) of the block at tile row j, column 8q + 2 (t % 4) + e % 2. acc is overwritten with
// the values as stored (rounded to T), which is what the partials describe. kWindows
// (ep.pool_windows; stride 1, a tile starting at a multiple of 8 columns and R rows): a lane holds
// both columns of its windows and every row, so it reduces each 2 x 2 window (or the part of it
// inside the tile) to one value itself.
template <typename T, int Q, int R, bool kWindows>
__device__ void wgmma_epilogue(float (&acc)[Q][4 * R], int tid, const T* __restrict__ bias, T* __restrict__ out,
                               const ConvTranspose2dParams& p, const ConvEpilogue& ep, const PhaseEntry& ph,
                               int j0, int i0, int64_t n, int64_t g, int64_t oc0, int64_t tile_index,
                               int64_t tiles_per_sample) {
  using Traits = DTypeTraits<T>;
  const int lane = tid % 32, tq = lane % 4;
  const int rows = min(R, ph.OHp - j0), cols = min(8 * Q, ph.OWp - i0);  // the tile's part of the grid
  // output offsets inside a channel plane (the host keeps OH * OW below 2^31); a stored window is
  // one value: half the columns, window_store_rows rows
  constexpr int col_shift = kWindows ? 1 : 0;
  const int out_w = static_cast<int>(p.OW) >> col_shift, col_step = static_cast<int>(p.sW);
  const int row_step = static_cast<int>(p.sH) * out_w, strip_step = (8 * col_step) >> col_shift;
  const int64_t plane = (kWindows ? window_store_rows(p.OH, R) : p.OH) * out_w;
  const int first = kWindows ? (i0 + 2 * tq) >> 1
                             : (ph.rh + static_cast<int>(p.sH) * j0) * out_w + ph.rw + col_step * (i0 + 2 * tq);
  // windows: the tile's rows that belong to one (rows 2k and 2k + 1 < OH), and the parity of row 0
  const int window_rows = min(rows, static_cast<int>(p.OH / 2 * 2) - j0), odd_start = j0 & 1;
  const float count = static_cast<float>(rows * cols);
  // The thread's two channels one after the other: fewer live registers beside the accumulators
  // (a ping-pong consumer has 200).
#pragma unroll
  for (int hc = 0; hc < 2; ++hc) {
    const int64_t c = oc0 + 16 * (tid / 32) + lane / 4 + 8 * hc;
    const bool ch_ok = c < p.C_out_g;
    const int64_t oc = g * p.C_out_g + (ch_ok ? c : 0);
    const float b = bias != nullptr && ch_ok ? Traits::to_acc(bias[oc]) : 0.f;
    T* const chan = out + (n * p.C_out + oc) * plane + first;
    // a lane's two columns as one store: contiguous, and aligned in every row (even steps)
    const bool pair_ok = col_step == 1 && row_step % 2 == 0 && reinterpret_cast<uintptr_t>(chan) % (2 * sizeof(T)) == 0;
    const bool window_min = kWindows && ep.window_sign != nullptr && ch_ok &&
                            Traits::to_acc(static_cast<const T*>(ep.window_sign)[oc]) < 0.f;
    float sum = 0.f;
    with_activation<float, T>(ep, [&](auto act) {
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        const int col = 8 * q + 2 * tq;
        const bool ok0 = col < cols, ok1 = col + 1 < cols;
#pragma unroll
        for (int j = 0; j < R; ++j) {
          float* v = &acc[q][4 * j + 2 * hc];
          const Vec<T, 2> pair = Traits::from_acc2(act(v[0] + b), act(v[1] + b));
          v[0] = Traits::to_acc(pair.v[0]);
          v[1] = Traits::to_acc(pair.v[1]);
          if (j >= rows) continue;
          sum += (ok0 ? v[0] : 0.f) + (ok1 ? v[1] : 0.f);
          if constexpr (kWindows) continue;  // stored below, per window
          if (!ch_ok) continue;
          T* dst = chan + j * row_step + q * strip_step;
          if (pair_ok && ok1) {
            *reinterpret_cast<Vec<T, 2>*>(dst) = pair;
          } else {
            if (ok0) dst[0] = pair.v[0];
            if (ok1) dst[col_step] = pair.v[1];
          }
        }
      }
    });
    if constexpr (kWindows) {
      if (ch_ok) {
        T* const first_window = chan + window_store_row(j0, R) * out_w;
        const float flip = window_min ? -1.f : 1.f;
        if (odd_start) store_windows<T, Q, R, 1>(acc, hc, window_rows, cols, tq, flip, first_window, out_w);
        else store_windows<T, Q, R, 0>(acc, hc, window_rows, cols, tq, flip, first_window, out_w);
      }
    }
    if (ep.tile_stats == nullptr) continue;
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float mean = sum / count;
    float m2 = 0.f;
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      const int col = 8 * q + 2 * tq;
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const float d0 = acc[q][4 * j + 2 * hc] - mean, d1 = acc[q][4 * j + 2 * hc + 1] - mean;
        m2 += j < rows ? (col < cols ? d0 * d0 : 0.f) + (col + 1 < cols ? d1 * d1 : 0.f) : 0.f;
      }
    }
    m2 += __shfl_xor_sync(0xffffffffu, m2, 1);
    m2 += __shfl_xor_sync(0xffffffffu, m2, 2);
    if (tq == 0 && ch_ok) write_tile_stats(ep, p.C_out, n, oc, tile_index, tiles_per_sample, count, mean, m2);
  }
}

}  // namespace cuda
}  // namespace myops
