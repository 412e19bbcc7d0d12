#pragma once
// The Hopper engine's building blocks, shared by its kernels (wgmma_kernels.cuh), its weight
// preparation and its tiling: constants, shared-memory layout, input boxes, the producer's staging
// and the consumers' MMA issue.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "cuda/conv/common/conv_common.cuh"
#include "cuda/conv/common/conv_tile_geometry.cuh"
#include "cuda/conv/wgmma/wgmma.cuh"
#include "cuda/common/gpu_flags.cuh"
#include "cuda/common/grid_dependency.cuh"
#include "cuda/conv/wgmma/hopper_pipeline.cuh"
#include "cuda/conv/wgmma/input_tensor_map.cuh"
#include "cuda/common/l2_policy.cuh"
#include "cuda/conv/common/pair_epilogue.cuh"
#include "cuda/common/small_quotient.cuh"
#include "cuda/conv/wgmma/wgmma_epilogue.cuh"
#include "cuda/conv/wgmma/wgmma_ops.cuh"

namespace myops {
namespace cuda {
namespace {

constexpr int kWarpgroup = 128;
// Two kernels share the producer and the MMAs:
//  - conv_wgmma_kernel: one tile per block, warpgroup 0 stages chunks, warpgroup 1 issues the
//    MMAs. Tiles of 256 pixels (two 16-row or four 8-row strips): registers per thread after
//    reallocation sum to 2 x 128, so two blocks fit an SM and one's epilogue runs under the
//    other's MMAs (the consumer's 64 x 256-pixel accumulators need 128 registers).
//  - conv_wgmma_pingpong_kernel (17-row strips, whose 68q accumulators do not fit 160
//    registers: one block per SM): persistent, one producer and two consumer warpgroups taking
//    the block's tiles alternately, so that one's epilogue (and its chunks' drains) run under the
//    other's MMAs in the block.
constexpr int kThreads = 2 * kWarpgroup;
constexpr int kProducerRegs = 96, kConsumerRegs = 160;
constexpr int blocks_per_sm(int rows) { return rows == 17 ? 1 : 2; }
constexpr int kPingPongThreads = 3 * kWarpgroup;
// launch 168 each; setmaxnreg.inc only gets what the block's setmaxnreg.dec released, so the
// producer gives up exactly what the consumers take (or they would wait forever)
constexpr int kPingPongProducerRegs = 104, kPingPongConsumerRegs = 200;
static_assert(168 - kPingPongProducerRegs == 2 * (kPingPongConsumerRegs - 168), "register reallocation must balance");
constexpr int kBlockCh = 64;      // output channels per block: the MMA's M
// A strip is R rows x 8 columns of pixels, the MMA's N = 8R (R = 16 or 8 with Q = 2 or 4, or 17
// for maps of 2 x 17 rows); a tile is Q strips side by side. The epilogue's pixel count is padded
// to whole warps.
constexpr int epilogue_pixels(int rows, int q) { return (8 * rows * q + 31) / 32 * 32; }
constexpr int kMaxHalo = 512;     // halo pixels per tile (4 per producer thread)
constexpr int kPxPerThread = kMaxHalo / kWarpgroup;
constexpr int kTapBytes = 2 * kBlockCh * 16;  // A of one tap and chunk: 2 K-planes x 64 rows x 16 B
constexpr int kMaxStages = 4;
constexpr int kMaxBoxSlots = 4;  // TMA input boxes in flight
// mbarriers full[kMaxStages], empty[kMaxStages], (ping-pong) the second consumer's full[kMaxStages]
// and turn[2], box_full[kMaxBoxSlots], box_empty[kMaxBoxSlots], padded to keep the pipeline
// 128-byte aligned (TMA destinations)
constexpr int kSecondFullBarrier = 2 * kMaxStages, kTurnBarrier = kSecondFullBarrier + kMaxStages;
constexpr int kBoxBarrier = kTurnBarrier + 2;
constexpr int kBarrierBytes = 256;
// the area's last 16 bytes: where the 16-bit box transposition sends box pixels outside the halo
constexpr int kDiscardBytes = 16;
static_assert(8 * (kBoxBarrier + 2 * kMaxBoxSlots) <= kBarrierBytes - kDiscardBytes, "mbarriers overflow their area");
constexpr size_t kMaxSmem = 227 * 1024;
constexpr size_t kTwoBlocksSmem = 113 * 1024;

// How the producer gets a chunk's input halo: through registers from the NCHW planes, from NCHW
// boxes that TMA loaded (float32: then value by value through registers, TF32-rounded; 16-bit:
// then transposed by ldmatrix / stmatrix), or (NHWC input) as two TMA boxes, one per K-plane,
// that land in the stage in the MMA's operand layout.
enum class WgInput { Registers, NchwBoxes, NhwcBoxes };

// The NHWC box of one K-plane (16 bytes of channels) of a tile's halo: the largest phase halo's
// rows and columns (a stage's halo rows are box.cols pixels apart, in every phase).
InputBox wg_channels_last_box(const ConvTranspose2dParams& p, int rows, int q, DType dtype) {
  const PhaseMaxima most = phase_maxima(p, rows, 8 * q);
  return {most.halo_cols, most.halo_rows, 16 / dtype_bytes(dtype)};
}

// The input box a tile's chunk reads through TMA: the largest phase halo, its first column moved
// down to a 16-byte boundary (TMA reads from 16-byte aligned addresses only; an illegal
// instruction otherwise) and its rows padded to 16 bytes. float32: room for any such move.
// 16-bit (transposed by ldmatrix): a phase's halo starts a fixed number of columns from the tile's
// (a multiple of 16 bytes' columns), so its move is the same in every tile and the box has the
// columns the phases need exactly; and each channel's plane is an odd number of 16-byte units
// (rows and 16-byte column groups odd), so that the eight channel rows one ldmatrix reads fall
// in distinct banks.
InputBox wg_input_box(const ConvTranspose2dParams& p, int rows, int q, DType dtype) {
  const PhaseMaxima most = phase_maxima(p, rows, 8 * q);
  const int align = 16 / dtype_bytes(dtype);
  if (dtype == DType::F32)
    return {(most.halo_cols + 2 * align - 2) / align * align, most.halo_rows, chunk_channels(dtype)};
  int cols = 0;
  for (int64_t rh = 0; rh < p.sH; ++rh)
    for (int64_t rw = 0; rw < p.sW; ++rw) {
      const PhaseTile ph = phase_tile(p, rows, 8 * q, rh, rw);
      if (ph.th.count * ph.tw.count == 0) continue;
      const int64_t first = halo_start(ph.tw.off0, ph.tw.count, ph.tw.off_step);
      cols = std::max(cols, static_cast<int>((first % align + align) % align) + ph.hcols);
    }
  const int groups = (cols + align - 1) / align;
  return {(groups | 1) * align, most.halo_rows | 1, chunk_channels(dtype)};
}

// The box's first input column for a halo starting at column col0 (possibly negative): col0
// rounded down to 16 bytes of Raw.
template <typename Raw>
__device__ inline int64_t box_col0(int64_t col0) {
  constexpr int kAlign = 16 / sizeof(Raw);
  return col0 - ((col0 % kAlign) + kAlign) % kAlign;
}

struct WgSmem {
  int halo_plane;   // bytes between the two K-planes of a stage's halo (the B operand's K stride)
  int halo_bytes;   // one stage of halo
  int stage_bytes;  // halo + the most taps' weights
  int c_ld;         // epilogue Cs row stride (floats)
  // NCHW boxes (box_slots > 0): the ring of raw input boxes after the stages, one box per slot;
  // NHWC boxes: box_cols x box_rows pixels per K-plane, box_bytes each
  int box_slots, box_cols, box_rows;
  uint32_t box_offset, box_bytes, box_slot_bytes;  // offset from the pipeline start
  size_t bytes;     // mbarriers + the whole pipeline (or the epilogue's Cs and offsets, if larger)
};

WgSmem wg_smem(const ConvTranspose2dParams& p, int rows, int q, int stages, DType dtype, int box_slots,
               bool nhwc) {
  const PhaseMaxima most = phase_maxima(p, rows, 8 * q);
  const InputBox box = nhwc ? wg_channels_last_box(p, rows, q, dtype) : wg_input_box(p, rows, q, dtype);
  if (nhwc) box_slots = 0;
  WgSmem s;
  // NHWC: each K-plane is a TMA destination (128-byte aligned), box.cols pixels per halo row
  s.halo_plane = nhwc ? (box.cols * box.rows * 16 + 127) / 128 * 128 : most.halo * 16;
  s.halo_bytes = 2 * s.halo_plane;
  s.stage_bytes = s.halo_bytes + most.taps * kTapBytes;
  s.c_ld = pair_tile_cs_columns(q, rows) + 8;
  s.box_slots = box_slots;
  s.box_cols = box.cols;
  s.box_rows = box.rows;
  s.box_bytes = static_cast<uint32_t>(box.cols * box.rows * box.channels * dtype_bytes(dtype));  // NHWC: 16 per pixel
  s.box_slot_bytes = (s.box_bytes + 127) / 128 * 128;
  s.box_offset = static_cast<uint32_t>((static_cast<size_t>(stages) * s.stage_bytes + 127) / 128 * 128);
  const size_t pipeline = box_slots > 0 ? s.box_offset + size_t(box_slots) * s.box_slot_bytes
                                        : static_cast<size_t>(stages) * s.stage_bytes;
  // Cs, the pixel offsets, the GroupNorm lane partials (conv_epilogue_pairs)
  const size_t epilogue = 4 * kBlockCh * s.c_ld + 8 * epilogue_pixels(rows, q) + sizeof(float2) * 32 * kBlockCh;
  s.bytes = kBarrierBytes + std::max(pipeline, epilogue);
  return s;
}

// The TMA producer's ring of input boxes: box `seq` of the block's chunk sequence lands in slot
// seq % slots; full(r) completes with the box's bytes (one arrival: the issuing thread), empty(r)
// once the producer warpgroup has read the box (128 arrivals).
struct BoxRing {
  uint32_t bars, base;  // shared addresses: box_full[0], slot 0
  const WgSmem& sl;
  __device__ BoxRing(uint8_t* smem, const WgSmem& sl_)
      : bars(smem_addr(smem) + 8 * kBoxBarrier), base(smem_addr(smem) + kBarrierBytes + sl_.box_offset), sl(sl_) {}
  __device__ uint32_t full(int r) const { return bars + 8 * r; }
  __device__ uint32_t empty(int r) const { return bars + 8 * (kMaxBoxSlots + r); }
  __device__ void init() const {
    for (int r = 0; r < sl.box_slots; ++r) {
      mbar_init(full(r), 1);
      mbar_init(empty(r), kWarpgroup);
    }
  }
  // One thread: box `seq` at input column col0, row row0, channel ch of image n, once its slot's
  // previous box has been read.
  // evict_first: the box's lines are marked first out of L2 (ConvEpilogue::l2_hints).
  __device__ void issue(const CUtensorMap& map, int seq, int64_t col0, int64_t row0, int64_t ch, int64_t n,
                        bool evict_first) const {
    const int r = seq % sl.box_slots;
    if (seq >= sl.box_slots) mbar_wait(empty(r), (seq / sl.box_slots - 1) & 1);
    mbar_arrive_expect_tx(full(r), sl.box_bytes);
    const uint32_t dst = base + r * sl.box_slot_bytes;
    const int c0 = static_cast<int>(col0), c1 = static_cast<int>(row0), c2 = static_cast<int>(ch);
    if (evict_first)
      tma_load_4d_with_policy(dst, &map, c0, c1, c2, static_cast<int>(n), full(r), l2_policy(L2Priority::EvictFirst));
    else
      tma_load_4d(dst, &map, c0, c1, c2, static_cast<int>(n), full(r));
  }
  // The shared address of box `seq` ([channel][row][column]), once it has landed.
  __device__ uint32_t acquire(int seq) const {
    const int r = seq % sl.box_slots;
    mbar_wait(full(r), (seq / sl.box_slots) & 1);
    return base + r * sl.box_slot_bytes;
  }
  // After this thread's last read of box `seq`: the fence orders those (generic-proxy) reads
  // before the TMA (async proxy) that refills the slot once every thread has arrived.
  __device__ void release(int seq) const {
    fence_proxy_async_shared();
    mbar_arrive(empty(seq % sl.box_slots));
  }
};

// A 16-bit NCHW box ([16 channels][box_rows][box_cols], as TMA landed it) -> a stage's two
// K-planes of 16-byte pixels, by the producer warpgroup: 8 channels x 8 box columns of one row per
// matrix, four matrices per ldmatrix.trans / stmatrix pair (two column groups x both K-planes);
// box columns outside the halo (hrows x hcols, starting `shift` columns into the box) go to a
// discard slot. TMA zero-filled what lies outside the input.
struct BoxTransposer {
  int row, mi, warp;  // this lane's matrix (mi: column group mi / 2, K-plane mi % 2) and the row of it it addresses
  int segs, pairs, hcols, shift, box_cols;
  float inv_segs;  // pair -> (row, segment) by quotient_small: an integer division here was a
                   // noticeable share of the conv's instructions
  uint32_t plane_bytes, discard, halo_plane;
  __device__ BoxTransposer(const WgSmem& sl, int hrows, int hcols_, int shift_, uint32_t discard_)
      : row(threadIdx.x % 8), mi((threadIdx.x % 32) / 8), warp((threadIdx.x % kWarpgroup) / 32),
        segs((shift_ + hcols_ + 7) / 8), pairs(hrows * segs), hcols(hcols_), shift(shift_), box_cols(sl.box_cols),
        inv_segs(1.f / static_cast<float>(segs)), plane_bytes(static_cast<uint32_t>(sl.box_rows * sl.box_cols * 2)),
        discard(discard_), halo_plane(static_cast<uint32_t>(sl.halo_plane)) {}
  // box, halo: shared addresses of the box and of the stage's first K-plane
  __device__ void operator()(uint32_t box, uint32_t halo) const {
    const int kp = mi & 1;
    halo += kp * halo_plane;
    for (int gi = warp; 2 * gi < pairs; gi += kWarpgroup / 32) {
      const int pair = min(2 * gi + mi / 2, pairs - 1);  // an odd count repeats the last pair
      const int r = quotient_small(pair, inv_segs), col = (pair - r * segs) * 8;
      uint32_t v[4];
      ldmatrix_x4_trans(v, box + (kp * 8 + row) * plane_bytes + (r * box_cols + col) * 2);
      const int hc = col + row - shift;
      stmatrix_x4(hc >= 0 && hc < hcols ? halo + (r * hcols + hc) * 16 : discard, v);
    }
  }
};

// Edge bands (ping-pong kernel). Where a phase grid ends 1 or 2 columns into a tile (e.g. 34
// columns = 2 x 16 + 2), the tile's one strip would spend 3/4 or more of its MMAs past the edge,
// because a core matrix is 8 pixels side by side in a halo row. A
// band tile stores its halo column by column instead, kPitch pixels per column (rows contiguous,
// zero-based at the halo's first row), so that one m64n48 per tap covers both columns' R rows:
// N = c * kPitch + r for column c, row r (the rows past R and past the halo are read by no valid
// output). Afterwards band_to_strip moves the accumulators to where the tile's strip 0 holds
// them, and the tile's epilogue runs unchanged (columns past the grid are masked there); the
// outputs are bitwise those of the strip form.
struct EdgeBand {
  static constexpr int kCols = 2, kPitch = 24, kN = kCols * kPitch;
  // the band's halo columns for a tile halo of `tile_halo_cols` (the tile's 16 columns' worth)
  MYOPS_HD static constexpr int halo_cols(int tile_halo_cols) { return tile_halo_cols - 16 + kCols; }
};
static_assert(EdgeBand::kPitch % 8 == 0, "column 1 of a band must start a core matrix");

// NHWC input (one thread): chunk c's stage s gets the weights (one bulk copy) and the halo's two
// K-planes (one TMA box each, channels ch and ch + 16 bytes' worth, from input column col0 and
// row0 of image n; TMA zero-fills what lies outside the input), all completing on full.
__device__ inline void issue_channels_last_chunk(const CUtensorMap& map, const WgSmem& sl, uint32_t stage,
                                                 uint32_t full, const uint32_t* w_src, uint32_t w_bytes,
                                                 int64_t ch, int64_t col0, int64_t row0, int64_t n, int plane_ch) {
  mbar_arrive_expect_tx(full, w_bytes + 2 * sl.box_bytes);
  bulk_copy_to_shared(stage + sl.halo_bytes, w_src, w_bytes, full);
  for (int k = 0; k < 2; ++k)
    tma_load_4d(stage + k * sl.halo_plane, &map, static_cast<int>(ch + k * plane_ch), static_cast<int>(col0),
                static_cast<int>(row0), static_cast<int>(n), full);
}

// One strip's MMA over its first kRows rows: m64n(8 kRows) into the first 4 kRows of the strip's
// 4R accumulators (the MMA's accumulator layout puts N-column n of any N in the same register).
template <typename T, int R, int kRows>
__device__ inline void wgmma_strip(float (&acc)[4 * R], uint64_t a, uint64_t b) {
  static_assert(R == 8 || R == 16 || R == 17, "strip heights with generated wrappers");
  static_assert(kRows == R || kRows == 2 || kRows == 4 || kRows == 8, "row counts with generated wrappers");
  wgmma_m64<8 * kRows, T>(*reinterpret_cast<float(*)[4 * kRows]>(&acc[0]), a, b);
}

// The rows a tile's MMAs cover for rows_used rows of output in its strips: 2, 4, 8 or all R (the
// MMA shapes with wrappers).
template <int R>
__host__ __device__ constexpr int mma_rows(int rows_used) {
  return rows_used <= 2 ? 2 : rows_used <= 4 ? 4 : rows_used <= 8 ? 8 : R;
}

// One chunk's MMAs (then committed as one group): every tap of phase ph on the tile's strips
// (only those left of the grid's edge, q < q_used; the full tile's loop is kept free of that test,
// which slowed it), over the strips' first rows_used rows rounded up to 2, 4, 8 or all R: a tile
// the phase grid ends within (e.g. 2 of 16 rows of its last tile row for 258 output rows) issues a
// fraction of the MMA work (mma_rows). Tap (t_h, t_w) reads the halo shifted by (cnt_h - 1 - t_h) * step_h
// rows and (cnt_w - 1 - t_w) * step_w columns; strip q starts 8q columns in. Descriptor addresses
// are in 16-byte units: one per halo pixel.
template <typename T, int Q, int R>
__device__ __forceinline__ void issue_chunk_mmas(float (&acc)[Q][4 * R], int cnt_h, int cnt_w, int step_h,
                                                 int step_w, int hcols, int q_used, int rows_used, uint64_t a_desc,
                                                 uint64_t b_desc) {
  auto taps = [&](auto all_strips, auto rows) {
    constexpr int kRows = decltype(rows)::value;
    int tap = 0;
    for (int t_h = 0; t_h < cnt_h; ++t_h)
      for (int t_w = 0; t_w < cnt_w; ++t_w, ++tap) {
        const int shift = (cnt_h - 1 - t_h) * step_h * hcols + (cnt_w - 1 - t_w) * step_w;
#pragma unroll
        for (int q = 0; q < Q; ++q)
          if (decltype(all_strips)::value || q < q_used)
            wgmma_strip<T, R, kRows>(acc[q], a_desc + tap * (kTapBytes / 16), b_desc + shift + 8 * q);
      }
  };
  auto strips = [&](auto rows) {
    if (q_used == Q) {
      taps(std::true_type{}, rows);
    } else {
      taps(std::false_type{}, rows);
    }
  };
  wgmma_fence();
  const int rows = mma_rows<R>(rows_used);
  if (rows == 2) {
    strips(std::integral_constant<int, 2>{});
  } else if (rows == 4) {
    strips(std::integral_constant<int, 4>{});
  } else if (rows == 8) {
    strips(std::integral_constant<int, 8>{});
  } else {
    strips(std::integral_constant<int, R>{});
  }
  wgmma_commit();
}

// One chunk's MMAs of an edge band (committed as one group): every tap of the phase, the halo
// shifted by whole columns (kPitch pixels) and rows.
template <typename T>
__device__ __forceinline__ void issue_band_chunk_mmas(float (&acc)[EdgeBand::kN / 2], int cnt_h, int cnt_w,
                                                      int step_h, int step_w, uint64_t a_desc, uint64_t b_desc) {
  wgmma_fence();
  int tap = 0;
  for (int t_h = 0; t_h < cnt_h; ++t_h)
    for (int t_w = 0; t_w < cnt_w; ++t_w, ++tap)
      wgmma_m64<EdgeBand::kN, T>(acc, a_desc + tap * (kTapBytes / 16),
                                 b_desc + (cnt_w - 1 - t_w) * step_w * EdgeBand::kPitch + (cnt_h - 1 - t_h) * step_h);
  wgmma_commit();
}

// A band's accumulators (issue_band_chunk_mmas) as the tile's strip 0 holds them (strip 1 zero):
// register 4r + e of a thread holds row r, column 2 * (lane % 4) + e % 2, channel lane / 4 +
// 8 (e / 2); the band holds (row r, column c) in register 4 ((c kPitch + r) / 8) + r % 2 (+ 2) of
// lane (lane & ~3) | (r % 8) / 2. Lanes other than lane % 4 == 0 hold columns 2-7, past the band
// (kCols = 2): whatever they receive is masked.
template <int R>
__device__ __forceinline__ void band_to_strip(const float (&band)[EdgeBand::kN / 2], float (&acc)[2][4 * R]) {
  static_assert(R <= EdgeBand::kPitch, "a band column holds the strip's rows");
  const int base = static_cast<int>(threadIdx.x % 32) & ~3;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int src = base | ((r % 8) / 2);
    constexpr int kCol1 = EdgeBand::kPitch / 8;  // core matrices of column 0
    const int i0 = 4 * (r / 8) + r % 2, i1 = 4 * (kCol1 + r / 8) + r % 2;
    acc[0][4 * r] = __shfl_sync(0xffffffffu, band[i0], src);
    acc[0][4 * r + 1] = __shfl_sync(0xffffffffu, band[i1], src);
    acc[0][4 * r + 2] = __shfl_sync(0xffffffffu, band[i0 + 2], src);
    acc[0][4 * r + 3] = __shfl_sync(0xffffffffu, band[i1 + 2], src);
  }
#pragma unroll
  for (int e = 0; e < 4 * R; ++e) acc[1][e] = 0.f;
}

// The ping-pong producer's halo for one tile (the two-block kernel keeps this staging state inline,
// sharing only load_halo_planes: as a struct it spilled in bfloat16 at that kernel's 96 registers
// and was slower): its pixels (kPxPerThread per thread of the warpgroup) are
// read per chunk of input channels from the NCHW planes into registers, then stored as two
// K-planes of 16-byte pixels (TF32-rounded). Offsets in a channel plane are 32-bit (the host
// checks 16 * H * W < 2^31); pixels outside the input load a valid address and store zeros.
// The producer is warpgroup 0: thread threadIdx.x stages halo pixels threadIdx.x + 128 k.
template <typename T>
struct HaloStager {
  using Raw = typename std::conditional<std::is_same<T, float>::value, float, unsigned short>::type;
  static constexpr int kCh = chunk_channels<T>();
  const ConvTranspose2dParams& p;  // the kernel's parameter: read where used, not held in registers
  const Raw* x_image;
  int src[kPxPerThread], ch_valid = 0;
  unsigned inside = 0, present = 0;
  Raw staged[kPxPerThread][kCh];

  // band: the tile is an edge band (EdgeBand), its halo stored column by column
  __device__ HaloStager(const T* x, const ConvTranspose2dParams& p_, const PhaseEntry& ph, const TileOrigin& origin,
                        int64_t n, int64_t g, bool band)
      : p(p_), x_image(reinterpret_cast<const Raw*>(x) + (n * p_.C_in + g * p_.C_in_g) * p_.H * p_.W) {
    const int64_t row0 = halo_row0(ph, origin.j0), col0 = halo_col0(ph, origin.i0);
    const int hcols = band ? EdgeBand::halo_cols(ph.hcols) : ph.hcols;
    const int hpx = band ? hcols * EdgeBand::kPitch : ph.hrows * ph.hcols;
#pragma unroll
    for (int k = 0; k < kPxPerThread; ++k) {
      const int h = threadIdx.x + k * kWarpgroup;
      src[k] = 0;
      const int hr = band ? h % EdgeBand::kPitch : h / hcols, hc = band ? h / EdgeBand::kPitch : h - hr * hcols;
      if (h < hpx && hr < ph.hrows) {  // (a band's rows past the halo are read by no valid output)
        present |= 1u << k;
        const int64_t ih = row0 + hr, iw = col0 + hc;
        if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W) {
          src[k] = static_cast<int>(ih * p.W + iw);
          inside |= 1u << k;
        }
      }
    }
  }
  __device__ void load(int chunk) {
    const int64_t HW = p.H * p.W;
    ch_valid = static_cast<int>(min(static_cast<int64_t>(kCh), p.C_in_g - int64_t(chunk) * kCh));
    load_halo_planes(staged, x_image + int64_t(chunk) * kCh * HW, HW, ch_valid, present, src);
  }
  // dst: the stage's halo; its second K-plane halo_plane bytes further
  __device__ void store(uint8_t* dst, int halo_plane) const {
#pragma unroll
    for (int k = 0; k < kPxPerThread; ++k) {
      if (!((present >> k) & 1u)) continue;
      uint32_t w[8];
      pack_halo_pixel<T>(staged[k], (inside >> k) & 1u, ch_valid, w);
      const int h = threadIdx.x + k * kWarpgroup;
      *reinterpret_cast<uint4*>(dst + h * 16) = make_uint4(w[0], w[1], w[2], w[3]);
      *reinterpret_cast<uint4*>(dst + halo_plane + h * 16) = make_uint4(w[4], w[5], w[6], w[7]);
    }
  }
};

}  // namespace
}  // namespace cuda
}  // namespace myops
