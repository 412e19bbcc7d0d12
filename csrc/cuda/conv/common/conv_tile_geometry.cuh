#pragma once
// Tile geometry shared by the tensor-core conv kernels (mma.sync and wgmma): a tile is TH x TW
// output pixels of one phase grid; per phase, the taps that reach it and the input halo a tile
// reads. The host builds a 32-bit PhaseTable from it so that a block finds its phase and tile
// with a short search instead of 64-bit divisions; plus the PTX helpers both kernels use.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/host_device.h"
#include "cuda/conv/common/conv_common.cuh"
#include "cuda/common/cp_async.cuh"

namespace myops {
namespace cuda {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One phase of a tiling, on the host (the kernel gets the 32-bit PhaseTable built from these).
struct PhaseTile {
  int64_t rh, rw, OHp, OWp, tiles_w, tiles;
  PhaseTaps th, tw;
  int hrows, hcols;  // input halo of one tile
};

inline PhaseTile phase_tile(const ConvTranspose2dParams& p, int th, int tw, int64_t rh, int64_t rw) {
  PhaseTile ph;
  ph.rh = rh;
  ph.rw = rw;
  ph.th = phase_taps(rh, p.pH, p.dH, p.sH, p.kH);
  ph.tw = phase_taps(rw, p.pW, p.dW, p.sW, p.kW);
  ph.OHp = phase_extent(p.OH, rh, p.sH);
  ph.OWp = phase_extent(p.OW, rw, p.sW);
  ph.tiles_w = (ph.OWp + tw - 1) / tw;
  ph.tiles = ((ph.OHp + th - 1) / th) * ph.tiles_w;
  ph.hrows = th + static_cast<int>(ph.th.count > 0 ? (ph.th.count - 1) * ph.th.off_step : 0);
  ph.hcols = tw + static_cast<int>(ph.tw.count > 0 ? (ph.tw.count - 1) * ph.tw.off_step : 0);
  return ph;
}

// The most taps and the largest halo (pixels) over a tiling's phases: they size a pipeline stage.
struct PhaseMaxima {
  int taps = 0, halo = 0, halo_rows = 0, halo_cols = 0;
};
inline PhaseMaxima phase_maxima(const ConvTranspose2dParams& p, int th, int tw) {
  PhaseMaxima m;
  for (int64_t rh = 0; rh < p.sH; ++rh)
    for (int64_t rw = 0; rw < p.sW; ++rw) {
      const PhaseTile ph = phase_tile(p, th, tw, rh, rw);
      m.taps = std::max<int>(m.taps, static_cast<int>(ph.th.count * ph.tw.count));
      m.halo = std::max(m.halo, ph.hrows * ph.hcols);
      m.halo_rows = std::max(m.halo_rows, ph.hrows);
      m.halo_cols = std::max(m.halo_cols, ph.hcols);
    }
  return m;
}

// The launch's phases in 32-bit form (the host checks the ranges), so that a block finds its
// phase and tile with a short search instead of 64-bit divisions.
constexpr int kMaxPhases = 16;
struct PhaseEntry {
  int tiles_end;  // tiles of this phase and the ones before it
  int tap_base;   // the phase's first tap in the prepared weight
  int rh, rw, OHp, OWp, tiles_w, hrows, hcols;
  int off0_h, off_step_h, count_h, off0_w, off_step_w, count_w;
  int k0_h, kstep_h, k0_w, kstep_w;  // the taps' kernel positions: kh = k0_h + t_h * kstep_h
};
struct PhaseTable {
  int n;
  PhaseEntry e[kMaxPhases];
};

inline PhaseTable phase_table(const ConvTranspose2dParams& p, int th, int tw) {
  PhaseTable tab{};
  int64_t tiles = 0, taps = 0;
  for (int64_t rh = 0; rh < p.sH; ++rh)
    for (int64_t rw = 0; rw < p.sW; ++rw) {
      const PhaseTile ph = phase_tile(p, th, tw, rh, rw);
      tiles += ph.tiles;
      PhaseEntry& e = tab.e[tab.n++];
      e = {static_cast<int>(tiles), static_cast<int>(taps), static_cast<int>(rh), static_cast<int>(rw),
           static_cast<int>(ph.OHp), static_cast<int>(ph.OWp), static_cast<int>(ph.tiles_w), ph.hrows, ph.hcols,
           static_cast<int>(ph.th.off0), static_cast<int>(ph.th.off_step), static_cast<int>(ph.th.count),
           static_cast<int>(ph.tw.off0), static_cast<int>(ph.tw.off_step), static_cast<int>(ph.tw.count),
           static_cast<int>(ph.th.k0), static_cast<int>(ph.th.step), static_cast<int>(ph.tw.k0),
           static_cast<int>(ph.tw.step)};
      taps += ph.th.count * ph.tw.count;
    }
  return tab;
}

inline int64_t phase_tiles_per_sample(const ConvTranspose2dParams& p, int th, int tw) {
  int64_t tiles = 0;
  for (int64_t rh = 0; rh < p.sH; ++rh)
    for (int64_t rw = 0; rw < p.sW; ++rw) tiles += phase_tile(p, th, tw, rh, rw).tiles;
  return tiles;
}

// Whether every field of the phase table fits (checked before a tiling is accepted).
inline bool phase_table_fits(const ConvTranspose2dParams& p, int th, int tw) {
  if (p.sH * p.sW > kMaxPhases || !conv_coordinates_fit_int32(p)) return false;
  return phase_tiles_per_sample(p, th, tw) <= kInt32CoordLimit;
}

// The phase and the tile origin (row j0, column i0 of the phase grid) of tile index `block`.
struct TileOrigin {
  int phase, j0, i0;
};
__device__ inline TileOrigin locate_tile(const PhaseTable& phases, int block, int th, int tw) {
  int pi = 0;
  while (pi + 1 < phases.n && block >= phases.e[pi].tiles_end) ++pi;
  const PhaseEntry& ph = phases.e[pi];
  const int tile = block - (pi > 0 ? phases.e[pi - 1].tiles_end : 0);
  return {pi, (tile / ph.tiles_w) * th, (tile % ph.tiles_w) * tw};
}

// Where a tile's halo starts (input row or column), relative to the tile's first output row or
// column of the phase grid: the phase's first tap offset less its taps' span (may be negative).
MYOPS_HD int64_t halo_start(int64_t off0, int64_t count, int64_t off_step) { return off0 - (count - 1) * off_step; }

// The input pixel at the top-left of a tile's halo (row, column; may lie outside the input).
__device__ inline int64_t halo_row0(const PhaseEntry& ph, int j0) {
  return j0 + halo_start(ph.off0_h, ph.count_h, ph.off_step_h);
}
__device__ inline int64_t halo_col0(const PhaseEntry& ph, int i0) {
  return i0 + halo_start(ph.off0_w, ph.count_w, ph.off_step_w);
}

// Tap index in phase order (phases row-major by residue, then t_h-major within a phase: the order
// of the prepared weights) -> kernel position (kh, kw). Weight preparation calls it per word, so
// it reads the host-built table instead of recomputing the phases' taps.
__device__ inline void phase_ordered_tap(const PhaseTable& tab, int tap, int& kh, int& kw) {
  int pi = 0;
  while (pi + 1 < tab.n && tap >= tab.e[pi + 1].tap_base) ++pi;
  const PhaseEntry& e = tab.e[pi];
  const int t = tap - e.tap_base, t_h = t / e.count_w;
  kh = e.k0_h + t_h * e.kstep_h;
  kw = e.k0_w + (t - t_h * e.count_w) * e.kstep_w;
}

// Weight preparation indexes its output with 32-bit math where the buffer allows (the common
// case: the per-word index decomposition is most of the kernel's work), 64-bit otherwise.
template <typename F>
cudaError_t dispatch_prepare_index(int64_t total, F&& launch) {
  if (total < (int64_t(1) << 31)) return launch(uint32_t{});
  return launch(uint64_t{});
}

__device__ inline uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// A load at a 32-bit shared address. (Box reads through a generic pointer kept 64-bit addresses
// per element: the bfloat16 TMA producer spilled 384 bytes.) Volatile: stays after the mbarrier
// wait that makes the data visible.
template <typename Raw>
__device__ inline Raw ld_shared(uint32_t addr);
template <>
__device__ inline float ld_shared<float>(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr));
  return v;
}
template <>
__device__ inline unsigned short ld_shared<unsigned short>(uint32_t addr) {
  unsigned short v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(addr));
  return v;
}
// base[index] through the read-only path, its address one wide multiply-add (left to itself the
// compiler forms base + index in 64-bit element units per load: four instructions each).
__device__ inline float ld_nc_indexed(const float* base, int index) {
  float v;
  asm("{\n .reg .u64 a;\n mad.wide.s32 a, %1, 4, %2;\n ld.global.nc.f32 %0, [a];\n}\n"
      : "=f"(v) : "r"(index), "l"(base));
  return v;
}
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Four 8 x 8 16-bit matrices transposed on the way in (thread t: the pair at rows 2 (t % 4) and
// 2 (t % 4) + 1, column t / 4 of each), and the same fragments stored untransposed (thread t's
// pair to row t / 4, columns 2 (t % 4) and 2 (t % 4) + 1): one in, the other out, they turn rows
// of 8 channels x 8 pixels into rows of 8 pixels x 8 channels. Thread t gives the address of row
// t % 8 of matrix t / 8 (16 bytes, 16-byte aligned) to each.
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ inline void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // sm_90 (the wgmma kernel's producer only)
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
#endif
}

// Round to TF32 (nearest, ties away: cvt.rna's rounding) with two integer ops; sm_90 expands
// cvt.rna.tf32.f32 to five. Infinities and NaNs keep their class.
__device__ inline uint32_t to_tf32(float f) { return (__float_as_uint(f) + 0x1000u) & 0xffffe000u; }

// Input channels per pipeline chunk: 32 bytes of each halo pixel (8 float32 / 16 16-bit).
template <typename T>
constexpr int chunk_channels() { return std::is_same<T, float>::value ? 8 : 16; }
inline int chunk_channels(DType d) { return d == DType::F32 ? 8 : 16; }

// One chunk's channels of a thread's N halo pixels from the NCHW planes in global memory: first
// is the chunk's first plane, src[k] pixel k's offset in a plane (present pixels only); channels
// past ch_valid re-read the last valid plane (a valid address; packing zeroes them). The
// producers of both tensor-core kernels call it on their own staging arrays. float32: one plane
// pointer stepped per channel and one wide multiply-add per value (the 64-bit index arithmetic
// the compiler forms otherwise cost as many issue slots as the MMAs of a 4-tap layer); 16-bit
// types, twice the values in flight, keep 32-bit plane offsets (fewer live registers).
template <int N, typename Raw, int kCh>
__device__ __forceinline__ void load_halo_planes(Raw (&staged)[N][kCh], const Raw* first, int64_t HW,
                                                 int ch_valid, unsigned present, const int (&src)[N]) {
  if constexpr (std::is_same<Raw, float>::value) {
    auto load = [&](auto full) {
      const float* plane = first;
#pragma unroll
      for (int c = 0; c < kCh; ++c) {
#pragma unroll
        for (int k = 0; k < N; ++k)
          if ((present >> k) & 1u) staged[k][c] = ld_nc_indexed(plane, src[k]);
        if (decltype(full)::value || c + 1 < ch_valid) plane += HW;
      }
    };
    // a full chunk (all but a channel tail) steps its plane pointer without the clamp's selects
    if (ch_valid == kCh) {
      load(std::true_type{});
    } else {
      load(std::false_type{});
    }
  } else {
#pragma unroll
    for (int c = 0; c < kCh; ++c) {
      const int plane = min(c, ch_valid - 1) * static_cast<int>(HW);  // 32-bit: the host checks kCh * HW
#pragma unroll
      for (int k = 0; k < N; ++k)
        if ((present >> k) & 1u) staged[k][c] = first[plane + src[k]];
    }
  }
}

// The tensor-core operand word of weight [C_in][C_out_g][kH][kW] for group grp, output channel oc,
// tap (kh, kw) and input channel icg of the group: float32 rounded to TF32 (kept exact for the
// FFMA mode, kRound false), 16-bit types as the pair (icg, icg + 1) (low = icg); zero past the
// channels (tile padding). Both kernels' weight preparation reads through it.
template <typename T, bool kRound = true>
__device__ inline uint32_t weight_operand_word(const T* w, const ConvTranspose2dParams& p, int64_t grp,
                                               int64_t icg, int64_t oc, int64_t kh, int64_t kw) {
  auto bits = [&](int64_t ic) -> uint32_t {
    if (oc >= p.C_out_g || ic >= p.C_in_g) return 0;
    const int64_t i = (((grp * p.C_in_g + ic) * p.C_out_g + oc) * p.kH + kh) * p.kW + kw;
    if constexpr (std::is_same<T, float>::value) {
      return kRound ? to_tf32(w[i]) : __float_as_uint(w[i]);
    } else {
      return reinterpret_cast<const unsigned short*>(w)[i];
    }
  };
  return std::is_same<T, float>::value ? bits(icg) : bits(icg) | (bits(icg + 1) << 16);
}

// A chunk's channels as loaded (float, or the 16-bit pattern) -> the 8 words one halo pixel
// holds in shared memory: float32 rounded to TF32 (exact when kRound is false: the FFMA mode),
// 16-bit values in pairs (low = even channel); channels past ch_valid and pixels outside the
// input are zero.
template <typename T, typename Raw, bool kRound = true>
__device__ inline void pack_halo_pixel(const Raw (&v)[chunk_channels<T>()], bool inside, int ch_valid,
                                       uint32_t (&w)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if constexpr (std::is_same<T, float>::value) {
      const uint32_t bits = kRound ? to_tf32(v[i]) : __float_as_uint(v[i]);
      w[i] = inside && i < ch_valid ? bits : 0u;
    } else {
      const uint32_t lo = inside && 2 * i < ch_valid ? v[2 * i] : 0u;
      const uint32_t hi = inside && 2 * i + 1 < ch_valid ? v[2 * i + 1] : 0u;
      w[i] = lo | (hi << 16);
    }
  }
}

}  // namespace cuda
}  // namespace myops
