#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "cuda/conv_common.cuh"
#include "cuda/conv_tile_geometry.cuh"
#include "cuda/conv_transpose2d_wgmma.cuh"
#include "cuda/gpu_flags.cuh"
#include "cuda/grid_dependency.cuh"
#include "cuda/hopper_pipeline.cuh"
#include "cuda/input_tensor_map.cuh"
#include "cuda/l2_policy.cuh"
#include "cuda/pair_epilogue.cuh"
#include "cuda/small_quotient.cuh"
#include "cuda/wgmma_epilogue.cuh"
#include "cuda/wgmma_ops.cuh"

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
// down to a 16-byte boundary (TMA reads from 16-byte aligned addresses only; H100: an illegal
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
  float inv_segs;  // pair -> (row, segment) by quotient_small: an integer division issued 7.5% of
                   // bfloat16 L2_19's conv instructions (H100 SourceCounters, session 27)
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

// Edge bands (ping-pong kernel). Where a phase grid ends 1 or 2 columns into a tile (L2_11: 34
// columns = 2 x 16 + 2), the tile's one strip would spend 3/4 or more of its MMAs past the edge
// (15% of all of L2_11's MMAs), because a core matrix is 8 pixels side by side in a halo row. A
// band tile stores its halo column by column instead, kPitch pixels per column (rows contiguous,
// zero-based at the halo's first row), so that one m64n48 per tap covers both columns' R rows:
// N = c * kPitch + r for column c, row r (the rows past R and past the halo are read by no valid
// output). Afterwards band_to_strip moves the accumulators to where the tile's strip 0 holds
// them, and the tile's epilogue runs unchanged (columns past the grid are masked there). H100,
// same build, L2_11 float32 conv (register producer) 779-783 -> 733-737 us, outputs bitwise equal.
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
// (only those left of the grid's edge, q < q_used; the full tile's loop is kept free of that test:
// H100, with a per-MMA test L2_19's conv took 3.96 ms, without 3.79), over the strips' first
// rows_used rows rounded up to 2, 4, 8 or all R: a tile the phase grid ends within (its last
// tile row: 2 of 16 rows at L2_19's 258 output rows, and as many at L1_57 / L1_65) issues a
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
// and measured 8-15% slower on L2_19 / L1_57 / L1_65): its pixels (kPxPerThread per thread of the warpgroup) are
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

// Stage s holds chunk c = s + k * stages in its k-th round. full[s] completes when the producer
// warpgroup has stored the chunk's halo (128 arrivals) and the chunk's weights have landed (bulk
// copy bytes); empty[s] when the consumer's MMAs that read it have finished (128 arrivals).
// kIn: where the halo comes from (WgInput). NchwBoxes: the chunks' input boxes arrive through
// TMA, sl.box_slots chunks ahead (BoxRing); NhwcBoxes: one thread issues each chunk's weights and
// halo, full[s] then waits for one arrival and their bytes.
template <typename T, int Q, int R, WgInput kIn>
__global__ void __launch_bounds__(kThreads, 2)
    conv_wgmma_kernel(const T* __restrict__ x, const uint32_t* __restrict__ wprep,
                      const T* __restrict__ bias, T* __restrict__ out, ConvTranspose2dParams p,
                      ConvEpilogue ep, WgSmem sl, int stages, PhaseTable phases,
                      const __grid_constant__ CUtensorMap input_map, int64_t n_base, int64_t tiles_per_sample) {
  constexpr bool kF32 = std::is_same<T, float>::value;
  constexpr bool kTma = kIn == WgInput::NchwBoxes, kNhwc = kIn == WgInput::NhwcBoxes;
  constexpr int kCh = chunk_channels<T>();
  constexpr int kTW = 8 * Q, kStrip = 8 * R, kBM = epilogue_pixels(R, Q);
  using Raw = typename std::conditional<kF32, float, unsigned short>::type;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t bars = smem_addr(smem), pipe = bars + kBarrierBytes;
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (kMaxStages + s); };
  auto stage = [&](int s) { return static_cast<uint32_t>(s * sl.stage_bytes); };  // from pipe
  const BoxRing boxes(smem, sl);
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(full(s), kNhwc ? 1 : kWarpgroup);
      mbar_init(empty(s), kWarpgroup);
    }
    if (kTma) boxes.init();
    mbar_init_fence();
  }
  __syncthreads();

  const int64_t n = n_base + blockIdx.z;
  const int64_t col_tiles = (p.C_out_g + kBlockCh - 1) / kBlockCh;
  // 32-bit (the launch keeps col_tiles and gridDim.y below 2^16): a 64-bit division is ~100 instructions
  const int64_t g = blockIdx.y / static_cast<unsigned>(col_tiles), ct = blockIdx.y % static_cast<unsigned>(col_tiles);
  const int64_t oc0 = ct * kBlockCh;
  const TileOrigin origin = locate_tile(phases, static_cast<int>(blockIdx.x), R, kTW);
  const PhaseEntry& ph = phases.e[origin.phase];
  const int j0 = origin.j0, i0 = origin.i0;
  const int cnt_h = ph.count_h, cnt_w = ph.count_w, step_h = ph.off_step_h, step_w = ph.off_step_w;
  // the halo rows the MMAs read: the rows they cover (mma_rows) and the taps' row shifts; the
  // producer stages no more (a tile's last 14 of 18 rows where the grid ends 2 rows in)
  const int rows_used = min(R, ph.OHp - j0);
  const int hrows = min(ph.hrows, mma_rows<R>(rows_used) + (cnt_h - 1) * step_h);
  const int taps = cnt_h * cnt_w, hcols = ph.hcols, hpx = hrows * ph.hcols;
  const int n_chunks = taps > 0 ? static_cast<int>((p.C_in_g + kCh - 1) / kCh) : 0;
  const int b_cols = kNhwc ? sl.box_cols : hcols;  // halo pixels per row in a stage

  const NamedBarrier consumers{1, kWarpgroup};
  // The epilogue's Cs[channel][pixel], pixel offsets and GroupNorm lane partials overlay the pipeline.
  float* Cs = reinterpret_cast<float*>(smem + kBarrierBytes);
  int64_t* pix_off = reinterpret_cast<int64_t*>(Cs + kBlockCh * sl.c_ld);
  float2* lane_partials = reinterpret_cast<float2*>(pix_off + kBM);

  // Producer: the stage of chunk c once the consumer has released it; thread 0 starts the chunk's
  // weights' bulk copy into it (completing on full).
  auto claim_stage = [&](int c, const uint32_t* w_src, uint32_t w_bytes) {
    const int s = c % stages, round = c / stages;
    if (round > 0) mbar_wait(empty(s), (round - 1) & 1);
    if (threadIdx.x == 0) {
      mbar_expect_tx(full(s), w_bytes);
      bulk_copy_to_shared(pipe + stage(s) + sl.halo_bytes, w_src, w_bytes, full(s));
    }
    return s;
  };

  // 16-bit NCHW boxes: per chunk, the box goes to the stage through BoxTransposer.
  auto produce_transposed = [&](auto issue_box, const uint32_t* w_block, int64_t w_chunk_words, uint32_t w_bytes,
                                int shift) {
    const BoxTransposer transpose(sl, hrows, hcols, shift, bars + kBarrierBytes - kDiscardBytes);
    for (int c = 0; c < n_chunks; ++c) {
      const int s = claim_stage(c, w_block + c * w_chunk_words, w_bytes);
      transpose(boxes.acquire(c), pipe + stage(s));
      boxes.release(c);  // its proxy fence also orders the halo's stores before the MMAs
      mbar_arrive(full(s));
      if (threadIdx.x == 0) issue_box(c + sl.box_slots);  // into chunk c's slot, once every thread has read it
    }
  };

  // Producer: per chunk, the halo through registers (NCHW planes -> 16-byte channel groups per
  // pixel, TF32-rounded) and the phase's weights by one bulk copy.
  auto produce = [&]() {
    const int tid = threadIdx.x;
    const int64_t HW = p.H * p.W;
    const uint32_t w_bytes = static_cast<uint32_t>(taps * kTapBytes);
    // prepared weights: [group][64-channel block][chunk][phase-ordered tap][one tap's A operand]
    const int64_t w_chunk_words = p.kH * p.kW * (kTapBytes / 4);
    const uint32_t* w_block = wprep + (g * col_tiles + ct) * n_chunks * w_chunk_words + ph.tap_base * (kTapBytes / 4);
    const Raw* x_image = reinterpret_cast<const Raw*>(x) + (n * p.C_in + g * p.C_in_g) * HW;
    if constexpr (kNhwc) {
      if (tid != 0) return;
      for (int c = 0; c < n_chunks; ++c) {
        const int s = c % stages, round = c / stages;
        if (round > 0) mbar_wait(empty(s), (round - 1) & 1);
        issue_channels_last_chunk(input_map, sl, pipe + stage(s), full(s), w_block + c * w_chunk_words, w_bytes,
                                  g * p.C_in_g + int64_t(c) * kCh, halo_col0(ph, i0), halo_row0(ph, j0), n, kCh / 2);
      }
      return;
    }

    // Halo pixels this thread stages. kTma: offsets in the chunk's input box (TMA zero-filled
    // what lies outside the input). Else offsets in a channel plane (32-bit: the host checks
    // 16 * H * W < 2^31); pixels outside the input load a valid address and store zeros.
    const int64_t row0 = halo_row0(ph, j0), col0 = halo_col0(ph, i0);
    const int shift = kTma ? static_cast<int>(col0 - box_col0<Raw>(col0)) : 0;  // halo column 0 in the box
    // kTma: thread 0 issues chunk c's box box_slots chunks ahead of its use
    auto issue_box = [&](int c) {
      if (kTma && c < n_chunks)
        boxes.issue(input_map, c, box_col0<Raw>(col0), row0, g * p.C_in_g + int64_t(c) * kCh, n,
                    (ep.l2_hints & kL2InputEvictFirst) != 0);
    };
    if (kTma && tid == 0)
      for (int c = 0; c < sl.box_slots; ++c) issue_box(c);
    if constexpr (kTma && !kF32) {
      produce_transposed(issue_box, w_block, w_chunk_words, w_bytes, shift);
      return;
    }
    int src[kPxPerThread];
    unsigned inside = 0, present = 0;
#pragma unroll
    for (int k = 0; k < kPxPerThread; ++k) {
      const int h = tid + k * kWarpgroup;
      src[k] = 0;
      if (h < hpx) {
        present |= 1u << k;
        const int hr = h / hcols, hc = h - hr * hcols;
        if constexpr (kTma) {
          src[k] = (hr * sl.box_cols + hc + shift) * static_cast<int>(sizeof(Raw));  // bytes
          inside |= 1u << k;
        } else {
          const int64_t ih = row0 + hr, iw = col0 + hc;
          if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W) {
            src[k] = static_cast<int>(ih * p.W + iw);
            inside |= 1u << k;
          }
        }
      }
    }
    Raw staged[kPxPerThread][kCh];
    int ch_valid = 0;
    auto load_halo = [&](int chunk) {
      ch_valid = static_cast<int>(min(static_cast<int64_t>(kCh), p.C_in_g - int64_t(chunk) * kCh));
      if constexpr (kTma) {
        const uint32_t box = boxes.acquire(chunk);
        const int plane_bytes = sl.box_rows * sl.box_cols * static_cast<int>(sizeof(Raw));
#pragma unroll
        for (int c = 0; c < kCh; ++c)
#pragma unroll
          for (int k = 0; k < kPxPerThread; ++k)
            if ((present >> k) & 1u) staged[k][c] = ld_shared<Raw>(box + c * plane_bytes + src[k]);
        boxes.release(chunk);
      } else {
        load_halo_planes(staged, x_image + int64_t(chunk) * kCh * HW, HW, ch_valid, present, src);
      }
    };
    auto store_halo = [&](uint8_t* dst) {
#pragma unroll
      for (int k = 0; k < kPxPerThread; ++k) {
        if (!((present >> k) & 1u)) continue;
        const bool in = (inside >> k) & 1u;
        uint32_t w[8];
        pack_halo_pixel<T>(staged[k], in, ch_valid, w);
        const int h = tid + k * kWarpgroup;
        *reinterpret_cast<uint4*>(dst + h * 16) = make_uint4(w[0], w[1], w[2], w[3]);
        *reinterpret_cast<uint4*>(dst + sl.halo_plane + h * 16) = make_uint4(w[4], w[5], w[6], w[7]);
      }
    };
    // Without TMA, one chunk of loads in flight per thread (two measured 4% slower on the seed layers).
    load_halo(0);
    for (int c = 0; c < n_chunks; ++c) {
      const int s = claim_stage(c, w_block + c * w_chunk_words, w_bytes);
      if (kTma && tid == 0) issue_box(c + sl.box_slots);  // into chunk c's slot, read by load_halo(c)
      store_halo(smem + kBarrierBytes + stage(s));
      fence_proxy_async_shared();
      mbar_arrive(full(s));
      // issued after the fence (which may wait for this thread's outstanding accesses): in
      // flight while the thread waits for the next stage
      if (c + 1 < n_chunks) load_halo(c + 1);
    }
  };

  // Consumer: tap (t_h, t_w) reads the halo shifted by (cnt_h - 1 - t_h) * step_h rows and
  // (cnt_w - 1 - t_w) * step_w columns; strip q starts 8q columns in. Ends with the
  // accumulators in Cs.
  auto consume = [&]() {
    const int tid = threadIdx.x - kWarpgroup;
    float acc[Q][4 * R];
#pragma unroll
    for (int q = 0; q < Q; ++q)
#pragma unroll
      for (int e = 0; e < 4 * R; ++e) acc[q][e] = 0.f;
    const int q_used = min(Q, (ph.OWp - i0 + 7) / 8);  // strips right of the grid issue no MMAs
    for (int c = 0; c < n_chunks; ++c) {
      const int s = c % stages;
      mbar_wait(full(s), (c / stages) & 1);
      issue_chunk_mmas<T, Q, R>(acc, cnt_h, cnt_w, step_h, step_w, b_cols, q_used, rows_used,
                                wgmma_desc(pipe + stage(s) + sl.halo_bytes, kBlockCh * 16, 128),
                                wgmma_desc(pipe + stage(s), sl.halo_plane, b_cols * 16));
      // The stage goes back to the producer as soon as its MMAs are done, not once the next
      // chunk's are issued: the producer, slower than the MMAs, would otherwise start refilling
      // stage c only after stage c + 1 was full. H100, same build, queued ms: bfloat16 fused op
      // L2_19 2.83 / 3.02 / 2.93 -> 2.77 / 2.88 / 2.66, L1_57 3.23 -> 3.02, VAE_refine 0.27 ->
      // 0.26; float32 equal to 4% faster (session 41).
      wgmma_wait<0>();
      mbar_arrive(empty(s));
    }
    // the accumulators are read below only after the last wgmma_wait (as in the ping-pong kernel)
#pragma unroll
    for (int q = 0; q < Q; ++q) wgmma_fence_operands(acc[q]);
    consumers();  // the epilogue's Cs overlays stages the other warps' MMAs read

    // Accumulators -> Cs[channel][pixel]: warp w holds channels 16w + lane / 4 (+ 8); register
    // 4j + e of strip q is pixel q * 8R + 8j + 2 * (lane % 4) + e % 2 (tile row j of the strip), in
    // Cs column q * kStripPitch + 8j + ... (PairTile).
    const int warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
#pragma unroll
    for (int q = 0; q < Q; ++q)
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int c = 16 * warp + gq, m = q * PairTile<Q, R>::kStripPitch + 8 * j + 2 * tq;
        *reinterpret_cast<float2*>(Cs + c * sl.c_ld + m) = make_float2(acc[q][4 * j], acc[q][4 * j + 1]);
        *reinterpret_cast<float2*>(Cs + (c + 8) * sl.c_ld + m) = make_float2(acc[q][4 * j + 2], acc[q][4 * j + 3]);
      }
  };

  // The epilogue over `threads` threads with thread index `t` (Sync: a barrier over them); the
  // consumer alone never writes partials (they make the warpgroups join).
  auto epilogue = [&](auto threads, int t, auto sync) {
    constexpr int kEpThreads = decltype(threads)::value;
    conv_epilogue_pairs<T, Q, R, kBlockCh, kEpThreads, kEpThreads == kThreads>(
        Cs, sl.c_ld, lane_partials, bias, out, p, ep, n, g, oc0, blockIdx.x, tiles_per_sample,
        EpilogueThreads<decltype(sync)>{t, pix_off, sync}, [&](int m) -> int64_t {
          const int q = m / kStrip, r = (m % kStrip) / 8, c = 8 * q + m % 8;
          if (q >= Q || j0 + r >= ph.OHp || i0 + c >= ph.OWp) return -1;
          return (ph.rh + p.sH * int64_t(j0 + r)) * p.OW + ph.rw + p.sW * int64_t(i0 + c);
        });
  };
  static_assert(blocks_per_sm(R) == 2, "17-row strips run on conv_wgmma_pingpong_kernel");
  // With GELU or GroupNorm partials the epilogue is latency-bound: both warpgroups run it (H100:
  // L2_11's conv 12% faster, when it ran here). Plain stores stay on the consumer (with the producer joining, L1_57
  // measured 3% slower). To join, the warpgroups first return to the launch's register count,
  // the producer only once the consumer has released its registers (a setmaxnreg.inc that waits
  // for registers spins, taking issue slots from the other block's MMAs).
  const bool join = ep.gelu || ep.tile_stats != nullptr || ep.tiles_done != nullptr;
  constexpr int kLaunchRegs = 65536 / (kThreads * 2);
  const NamedBarrier handover{2, kThreads};  // the consumer has freed its extra registers
  if (threadIdx.x < kWarpgroup) {
    warpgroup_reg_dealloc<kProducerRegs>();
    if (n_chunks > 0) produce();
    if (!join) return;
    handover();
    warpgroup_reg_alloc<kLaunchRegs>();
  } else {
    warpgroup_reg_alloc<kConsumerRegs>();
    consume();
    if (!join) {
      epilogue(std::integral_constant<int, kWarpgroup>{}, static_cast<int>(threadIdx.x) - kWarpgroup, consumers);
      return;
    }
    warpgroup_reg_dealloc<kLaunchRegs>();
    handover.arrive();
  }
  __syncthreads();  // Cs holds the tile
  epilogue(std::integral_constant<int, kThreads>{}, static_cast<int>(threadIdx.x), BlockSync{});
  if (ep.tiles_done != nullptr) {
    // a release after the barrier makes every thread's stores visible before the count (the
    // followers read it with ld.acquire). H100, L2_19 with 33 follower blocks: a count per warp
    // (no barrier, 8 fences) measured slower, float32 4.78 ms against 4.45; __threadfence() +
    // atomicAdd instead of the release measured the same (float32 4.392-4.488 against 4.396-4.454).
    __syncthreads();
    if (threadIdx.x == 0) release_add(ep.tiles_done + n, 1u);
  }
}

// The chunks a ping-pong consumer still has to issue when it hands the turn to the other: a
// quarter of its tile's. H100, L2_11's conv (us, same build; 0 = the turn after the tile's last
// chunk, 'none' = no turn): bfloat16, 4 chunks per tile, 0: 450-456, 1: 447-450, 2: 463-470,
// none: 459-465; float32, 8 chunks, 0: 862-872, 1: 845-852, 2: 826-835, 4: 826-837, none:
// 826-842. More overlap keeps both consumers' stages held longer, which the producer then waits for.
__device__ inline int tile_turn_lead(int n_chunks) { return n_chunks / 4; }

// Where tile t of the persistent walk lies: tiles of one image and 64-channel block are
// consecutive (tile x of the phase grids, then channel block y of all groups, then image n), x
// rotated by n + y. A block's tiles are gridDim.x apart; without the rotation, a grid that is a
// multiple of the tiles per image gives each block one x throughout, and tiles differ in work
// (one-strip tiles at the grids' right edge, phases with fewer taps). H100, L2_11 (6 tiles per
// image and channel block, 132 blocks): a third of the SMs took only one-strip tiles, the SMs were
// active 90% of the kernel's time (ncu); rotated, same build, conv us: bfloat16 450-456 -> 428-430,
// float32 835-842 -> 759-761 (outputs bitwise equal).
struct WgTile {
  int64_t n, g, ct;
  int x;
};
__device__ inline WgTile wg_tile(int64_t t, int64_t tiles_per_sample, int64_t col_blocks, int64_t col_tiles) {
  const int64_t y = (t / tiles_per_sample) % col_blocks, n = t / (tiles_per_sample * col_blocks);
  return {n, y / col_tiles, y % col_tiles, static_cast<int>((t + n + y) % tiles_per_sample)};
}

// The pipeline is one sequence of chunks over the block's tiles: chunk i sits in stage
// i % stages in round i / stages; the block's k-th tile is consumer k % 2's. Its full barrier,
// full[k % 2][s], completes when the producer warpgroup has stored the chunk's halo (128
// arrivals) and the chunk's weights have landed (bulk copy bytes); empty[s] when the consumer's
// MMAs that read it have finished (128 arrivals). A full barrier per consumer and stage sees only
// that consumer's chunks, which it waits for in order, so its phase parity is always the right
// one, whatever the other consumer does. (With one full barrier per stage a consumer could not
// start a tile before the other had issued its whole tile's MMAs, or parity could not tell a
// stage's round from the one two rounds on.) The turn (turn[], tile_turn_lead) then only paces
// the consumers: a consumer starts a tile's MMAs once the other has a quarter of its tile's
// chunks left to issue, so that the two overlap (one's MMAs fill the other's waits for its
// chunks to drain) without both holding stages for long.
// kIn: Registers or NhwcBoxes (one thread issues each chunk; each full barrier waits for one arrival).
// kWindows: the epilogue stores 2 x 2 windows (ep.pool_windows); its own build, since a runtime
// choice between two kinds of stores made ptxas spill 50-100 bytes in every instance.
template <typename T, int Q, int R, WgInput kIn, bool kWindows>
__global__ void __launch_bounds__(kPingPongThreads, 1)
    conv_wgmma_pingpong_kernel(const T* __restrict__ x, const uint32_t* __restrict__ wprep,
                      const T* __restrict__ bias, T* __restrict__ out, ConvTranspose2dParams p,
                      ConvEpilogue ep, WgSmem sl, int stages, PhaseTable phases, int64_t total_tiles,
                      int64_t tiles_per_sample, const __grid_constant__ CUtensorMap input_map, bool bands) {
  static_assert(kIn != WgInput::NchwBoxes, "the ping-pong kernel reads NCHW input through registers only");
  static_assert(Q == 2, "edge bands replace the second of two strips");
  constexpr bool kNhwc = kIn == WgInput::NhwcBoxes;
  constexpr int kCh = chunk_channels<T>();
  constexpr int kTW = 8 * Q;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t bars = smem_addr(smem), pipe = bars + kBarrierBytes;
  auto full = [&](int consumer, int s) { return bars + 8 * (consumer == 0 ? s : kSecondFullBarrier + s); };
  auto empty = [&](int s) { return bars + 8 * (kMaxStages + s); };
  auto turn = [&](int c) { return bars + 8 * (kTurnBarrier + c); };
  auto stage = [&](int s) { return static_cast<uint32_t>(s * sl.stage_bytes); };  // from pipe
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      for (int c = 0; c < 2; ++c) mbar_init(full(c, s), kNhwc ? 1 : kWarpgroup);
      mbar_init(empty(s), kWarpgroup);
    }
    for (int c = 0; c < 2; ++c) mbar_init(turn(c), kWarpgroup);
    mbar_init_fence();
  }
  __syncthreads();

  const int64_t col_tiles = (p.C_out_g + kBlockCh - 1) / kBlockCh, col_blocks = p.groups * col_tiles;
  const int n_chunks_full = static_cast<int>((p.C_in_g + kCh - 1) / kCh);  // of a tile with taps
  auto tile_chunks = [&](const PhaseEntry& ph) { return ph.count_h * ph.count_w > 0 ? n_chunks_full : 0; };
  // Edge bands (EdgeBand) with the register producer only: through TMA (one box per band column)
  // the bfloat16 L2_11 conv measured 444-447 us against 440-441 without (H100, same build).
  // bands: the launch checked that a band's halo fits.
  auto is_band = [&](const PhaseEntry& ph, const TileOrigin& origin) {
    return !kNhwc && bands && ph.OWp - origin.i0 <= EdgeBand::kCols;
  };

  // Producer: per chunk, the halo through registers (NCHW planes -> 16-byte channel groups per
  // pixel, TF32-rounded) and the phase's weights by one bulk copy.
  auto produce = [&]() {
    const int tid = threadIdx.x;
    const int64_t w_chunk_words = p.kH * p.kW * (kTapBytes / 4);
    int chunk_seq = 0;  // the pipeline position
    int64_t k = 0;      // the block's tile count: tile k is consumer k % 2's
    for (int64_t t = blockIdx.x; t < total_tiles; t += gridDim.x, ++k) {
      const WgTile tl = wg_tile(t, tiles_per_sample, col_blocks, col_tiles);
      const TileOrigin origin = locate_tile(phases, tl.x, R, kTW);
      const PhaseEntry& ph = phases.e[origin.phase];
      const int n_chunks = tile_chunks(ph);
      if (n_chunks == 0) continue;
      const int owner = static_cast<int>(k % 2);
      const uint32_t w_bytes = static_cast<uint32_t>(ph.count_h * ph.count_w * kTapBytes);
      // prepared weights: [group][64-channel block][chunk][phase-ordered tap][one tap's A operand]
      const uint32_t* w_tap0 = wprep + (tl.g * col_tiles + tl.ct) * n_chunks * w_chunk_words + ph.tap_base * (kTapBytes / 4);
      if constexpr (kNhwc) {
        for (int c = 0; c < n_chunks; ++c, ++chunk_seq) {
          const int s = chunk_seq % stages, round = chunk_seq / stages;
          if (round > 0) mbar_wait(empty(s), (round - 1) & 1);
          issue_channels_last_chunk(input_map, sl, pipe + stage(s), full(owner, s), w_tap0 + c * w_chunk_words, w_bytes,
                                    tl.g * p.C_in_g + int64_t(c) * kCh, halo_col0(ph, origin.i0),
                                    halo_row0(ph, origin.j0), tl.n, kCh / 2);
        }
        continue;
      }
      HaloStager<T> halo(x, p, ph, origin, tl.n, tl.g, is_band(ph, origin));
      // One chunk of loads in flight per thread (two measured 4% slower on the seed layers).
      halo.load(0);
      for (int c = 0; c < n_chunks; ++c, ++chunk_seq) {
        const int s = chunk_seq % stages, round = chunk_seq / stages;
        if (round > 0) mbar_wait(empty(s), (round - 1) & 1);
        if (tid == 0) {
          mbar_expect_tx(full(owner, s), w_bytes);
          bulk_copy_to_shared(pipe + stage(s) + sl.halo_bytes, w_tap0 + c * w_chunk_words, w_bytes, full(owner, s));
        }
        halo.store(smem + kBarrierBytes + stage(s), sl.halo_plane);
        fence_proxy_async_shared();
        mbar_arrive(full(owner, s));
        // issued after the fence (which may wait for this thread's outstanding accesses): in
        // flight while the thread waits for the next stage
        if (c + 1 < n_chunks) halo.load(c + 1);
      }
    }
  };

  // Consumer `me`: tap (t_h, t_w) reads the halo shifted by (cnt_h - 1 - t_h) * step_h rows and
  // (cnt_w - 1 - t_w) * step_w columns; strip q starts 8q columns in. Then the epilogue, from
  // the accumulators.
  auto consume = [&](int me) {
    const int tid = threadIdx.x % kWarpgroup;
    int chunk_seq = 0;
    unsigned parity = 0;  // bit s: the parity of this consumer's next round of full(me, s)
    int turns = 0;
    int64_t k = 0;
    for (int64_t t = blockIdx.x; t < total_tiles; t += gridDim.x, ++k) {
      const WgTile tl = wg_tile(t, tiles_per_sample, col_blocks, col_tiles);
      const TileOrigin origin = locate_tile(phases, tl.x, R, kTW);
      const PhaseEntry& ph = phases.e[origin.phase];
      const int n_chunks = tile_chunks(ph);
      if (k % 2 != me) {
        chunk_seq += n_chunks;
        continue;
      }
      if (k > 0) mbar_wait(turn(me), turns++ & 1);  // the other consumer's previous tile
      const int cnt_h = ph.count_h, cnt_w = ph.count_w, step_h = ph.off_step_h, step_w = ph.off_step_w;
      const int hcols = kNhwc ? sl.box_cols : ph.hcols;  // halo pixels per row in a stage
      // The tile's chunks: wait for each, issue(A descriptor, halo address) its MMAs, hand the turn
      // over, give the stage back.
      // As in conv_wgmma_kernel, a stage goes back as soon as its MMAs are done (H100, same build,
      // queued ms: L2_11's conv float32 0.94 -> 0.90, its chain 1.04 -> 1.00, bfloat16 chain 0.655
      // -> 0.635). 16-bit NHWC input: chunk c's MMAs are issued before chunk c - 1's are waited
      // for, so the tensor pipe does not drain between a tile's chunks (H100, same build, conv us:
      // bfloat16 L2_11 426-433 -> 423-431, float16 428-430 -> 428; float32 through registers
      // 737-750 -> 751-762, so not there; float32 NHWC builds then spilled: not there either).
      constexpr bool kChunkInFlight = kNhwc && sizeof(T) == 2;
      auto run_chunks = [&](auto issue) {
        int held = -1;  // kChunkInFlight: the stage whose MMAs may still run
        for (int c = 0; c < n_chunks; ++c) {
          const int s = (chunk_seq + c) % stages;
          mbar_wait(full(me, s), (parity >> s) & 1u);
          parity ^= 1u << s;
          issue(wgmma_desc(pipe + stage(s) + sl.halo_bytes, kBlockCh * 16, 128), pipe + stage(s));
          if (c == n_chunks - 1 - tile_turn_lead(n_chunks)) mbar_arrive(turn(1 - me));
          if constexpr (kChunkInFlight) {
            if (held >= 0) {
              wgmma_wait<1>();
              mbar_arrive(empty(held));
            }
            held = s;
          } else {
            wgmma_wait<0>();
            mbar_arrive(empty(s));
          }
        }
        wgmma_wait<0>();  // (on every path: one without it made ptxas serialise the MMAs, C7514)
        if (held >= 0) mbar_arrive(empty(held));
      };
      // After the MMAs: the epilogue, from the accumulators.
      auto finish = [&](float (&acc)[Q][4 * R]) {
        if (n_chunks == 0) mbar_arrive(turn(1 - me));
        chunk_seq += n_chunks;
        wgmma_epilogue<T, Q, R, kWindows>(acc, tid, bias, out, p, ep, ph, origin.j0, origin.i0, tl.n, tl.g,
                                          tl.ct * kBlockCh, tl.x, tiles_per_sample);
      };
      // Each path has its own accumulators and epilogue: accumulators defined on two paths and
      // merged (or one array used by both MMA shapes) made ptxas serialise the MMAs (C7511).
      // The test is warp-uniform to the compiler (as `me`), else ptxas serialises them as well.
      if (!kNhwc && __shfl_sync(0xffffffffu, is_band(ph, origin), 0)) {
        float band_acc[EdgeBand::kN / 2];
#pragma unroll
        for (int e = 0; e < EdgeBand::kN / 2; ++e) band_acc[e] = 0.f;
        wgmma_fence_operands(band_acc);
        run_chunks([&](uint64_t a_desc, uint32_t halo) {  // (its core matrices are consecutive: 128 bytes apart)
          issue_band_chunk_mmas<T>(band_acc, cnt_h, cnt_w, step_h, step_w, a_desc, wgmma_desc(halo, sl.halo_plane, 128));
        });
        wgmma_fence_operands(band_acc);
        float acc[Q][4 * R];
        band_to_strip<R>(band_acc, acc);
        finish(acc);
      } else {
        float acc[Q][4 * R];
#pragma unroll
        for (int q = 0; q < Q; ++q)
#pragma unroll
          for (int e = 0; e < 4 * R; ++e) acc[q][e] = 0.f;
#pragma unroll
        for (int q = 0; q < Q; ++q) wgmma_fence_operands(acc[q]);
        const int q_used = min(Q, (ph.OWp - origin.i0 + 7) / 8);  // strips right of the grid issue no MMAs
        // every row (a compile-time R: the shorter MMA shapes' code in this kernel made ptxas inject
        // warpgroup.arrive fences into its loop, and L2_11's conv, whose 34-row maps are whole
        // 17-row strips, took 2-3% longer on the H100)
        constexpr int rows_used = R;
        run_chunks([&](uint64_t a_desc, uint32_t halo) {
          issue_chunk_mmas<T, Q, R>(acc, cnt_h, cnt_w, step_h, step_w, hcols, q_used, rows_used, a_desc,
                                    wgmma_desc(halo, sl.halo_plane, hcols * 16));
        });
#pragma unroll
        for (int q = 0; q < Q; ++q) wgmma_fence_operands(acc[q]);
        finish(acc);
      }
    }
  };

  const int wg = threadIdx.x / kWarpgroup;
  if (wg == 0) {
    warpgroup_reg_dealloc<kPingPongProducerRegs>();
    if (!kNhwc || threadIdx.x == 0) produce();
  } else {
    warpgroup_reg_alloc<kPingPongConsumerRegs>();
    consume(__shfl_sync(0xffffffffu, wg - 1, 0));  // warp-uniform to the compiler: no wgmma serialisation
  }
}

// weight [C_in][C_out_g][kH][kW] -> [groups][64-channel blocks][chunks][phase-ordered taps]
// [K-plane][64 rows][4 words]: the A operand of one MMA in core-matrix order (float32 rounded
// to TF32, 16-bit types as pairs of neighbouring input channels), zero padded. A phase's taps of
// one chunk are contiguous: one bulk copy per chunk.
template <typename T, typename I>
__global__ void prepare_wgmma_weight_kernel(const T* __restrict__ w, uint32_t* __restrict__ wp,
                                            ConvTranspose2dParams p, PhaseTable phases, I n_chunks,
                                            I col_tiles, I total) {
  constexpr bool kF32 = std::is_same<T, float>::value;
  constexpr int kCh = chunk_channels<T>();
  const I taps = static_cast<I>(p.kH * p.kW);
  for (I idx = blockIdx.x * I(blockDim.x) + threadIdx.x; idx < total; idx += I(gridDim.x) * blockDim.x) {
    const int word = static_cast<int>(idx % 4), row = static_cast<int>((idx / 4) % kBlockCh);
    const int plane = static_cast<int>((idx / (4 * kBlockCh)) % 2);
    I rest = idx / (kTapBytes / 4);
    const I tap = rest % taps;
    rest /= taps;
    const I chunk = rest % n_chunks;
    rest /= n_chunks;
    const I blk = rest % col_tiles, grp = rest / col_tiles;
    int kh, kw;
    phase_ordered_tap(phases, static_cast<int>(tap), kh, kw);
    const int64_t k = kF32 ? 4 * plane + word : 8 * plane + 2 * word;
    wp[idx] = weight_operand_word(w, p, grp, int64_t(chunk) * kCh + k, int64_t(blk) * kBlockCh + row, kh, kw);
  }
  // started under the input's staging (conv_wgmma_prepare_weight's `early`): end only after it, so
  // that the conv, launched plainly next, follows both
  wait_for_prior_grid();
}

// map: the input's TMA map, or null (the producer then loads through registers).
template <typename T, int Q, int R>
cudaError_t launch_tile(const void* x, const void* wprep, const void* bias, void* out,
                        DType dtype, const ConvTranspose2dParams& p, const WgmmaTiling& t,
                        const ConvEpilogue& ep, const CUtensorMap* map, cudaStream_t stream) {
  const int64_t tiles = conv_wgmma_tiles_per_sample(p, t);
  const int64_t col_tiles = p.groups * ceil_div(p.C_out_g, kBlockCh);
  const bool boxes = map != nullptr && !t.nhwc;  // NCHW boxes
  const int stages = boxes ? t.tma_stages : t.stages;
  const WgSmem sl = wg_smem(p, R, Q, stages, dtype, boxes ? t.box_slots : 0, t.nhwc);
  auto go = [&](auto kernel) {
    return launch_conv_grid(kernel, kThreads, sl.bytes, stream, tiles, col_tiles, p.N, 1, static_cast<const T*>(x),
                            static_cast<const uint32_t*>(wprep), static_cast<const T*>(bias), static_cast<T*>(out),
                            p, ep, sl, stages, phase_table(p, R, 8 * Q), map ? *map : CUtensorMap{});
  };
  if (t.nhwc) return go(conv_wgmma_kernel<T, Q, R, WgInput::NhwcBoxes>);
  if (boxes) return go(conv_wgmma_kernel<T, Q, R, WgInput::NchwBoxes>);
  return go(conv_wgmma_kernel<T, Q, R, WgInput::Registers>);
}

// The ping-pong kernel: persistent blocks, one per SM (or per tile, if fewer tiles).
template <typename T, int Q, int R>
cudaError_t launch_pingpong(const void* x, const void* wprep, const void* bias, void* out,
                            DType dtype, const ConvTranspose2dParams& p, const WgmmaTiling& t,
                            const ConvEpilogue& ep, const CUtensorMap* map, cudaStream_t stream) {
  const int64_t tiles = conv_wgmma_tiles_per_sample(p, t);
  const int64_t total = tiles * p.groups * ceil_div(p.C_out_g, kBlockCh) * p.N;
  if (total == 0) return cudaSuccess;
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  const WgSmem sl = wg_smem(p, R, Q, t.stages, dtype, 0, t.nhwc);
  // Edge bands (EdgeBand, register producer) where their halo fits: a band column holds the halo's
  // rows, and a K-plane the band's columns plus the pixels its MMAs read past the last one (< kPitch).
  const PhaseMaxima most = phase_maxima(p, R, 8 * Q);
  const int band_cols = EdgeBand::halo_cols(most.halo_cols);
  const bool bands = most.halo_rows <= EdgeBand::kPitch && band_cols * EdgeBand::kPitch <= kMaxHalo &&
                     (band_cols + 1) * EdgeBand::kPitch * 16 <= sl.halo_plane;
  // window stores (conv_wgmma_stores_windows): no builds for 16-bit input through registers
  constexpr bool kF32 = std::is_same<T, float>::value;
  const bool windows = ep.pool_windows && (kF32 || t.nhwc);
  auto kernel = t.nhwc ? (windows ? conv_wgmma_pingpong_kernel<T, Q, R, WgInput::NhwcBoxes, true>
                                  : conv_wgmma_pingpong_kernel<T, Q, R, WgInput::NhwcBoxes, false>)
                       : (windows ? conv_wgmma_pingpong_kernel<T, Q, R, WgInput::Registers, kF32>
                                  : conv_wgmma_pingpong_kernel<T, Q, R, WgInput::Registers, false>);
  err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), sl.bytes);
  if (err != cudaSuccess) return err;
  kernel<<<static_cast<unsigned>(std::min<int64_t>(total, sms)), kPingPongThreads, sl.bytes, stream>>>(
      static_cast<const T*>(x), static_cast<const uint32_t*>(wprep), static_cast<const T*>(bias),
      static_cast<T*>(out), p, ep, sl, t.stages, phase_table(p, R, 8 * Q), total, tiles, t.nhwc ? *map : CUtensorMap{},
      bands);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch(const void* x, const void* wprep, const void* bias, void* out, DType dtype,
                   const ConvTranspose2dParams& p, const WgmmaTiling& t, const ConvEpilogue& ep,
                   const CUtensorMap* map, cudaStream_t stream) {
  if (t.q == 2 && t.rows == 16) return launch_tile<T, 2, 16>(x, wprep, bias, out, dtype, p, t, ep, map, stream);
  if constexpr (!std::is_same<T, float>::value)  // 8 x 32 tiles: 16-bit types only (conv_wgmma_tiling)
    if (t.q == 4 && t.rows == 8) return launch_tile<T, 4, 8>(x, wprep, bias, out, dtype, p, t, ep, map, stream);
  if (t.q == 2 && t.rows == 17) return launch_pingpong<T, 2, 17>(x, wprep, bias, out, dtype, p, t, ep, map, stream);
  return cudaErrorInvalidValue;
}

// Whether staging a channels-last copy of an NCHW input (read + write of the input) costs less
// than it saves: the copy is proportional to the input's bytes, the saving (the producer's load
// latency off the MMAs' path) to the MMAs' work, so the rule is on the FLOPs per input byte,
// 2 x C_out_g x kH x kW / element size, independent of the map size. H100, conv kernel alone
// (torch.profiler), NCHW registers -> NHWC boxes, ms: bfloat16 L2_11 (3200 FLOP/B) 0.686 -> 0.503
// for a 67 MB copy; L2_19 (576) 2.354 -> 2.086 for a 1.07 GB copy; VAE refine (1152) 0.201 ->
// 0.171 for 67 MB; float32 L2_11 (1600) 0.929 -> 0.917, L1_65 (672) 1.129 -> 1.196.
constexpr int64_t kChannelsLastFlopsPerByte = 2048;
bool channels_last_pays(const ConvTranspose2dParams& p, DType dtype) {
  return 2 * p.C_out_g * p.kH * p.kW >= kChannelsLastFlopsPerByte * dtype_bytes(dtype);
}

}  // namespace

WgmmaTiling conv_wgmma_tiling(const ConvTranspose2dParams& p, DType dtype, Fp32Math fp32_math, int device_sm,
                              bool force, bool allow_tma, ChannelsLastInput channels_last, WideTiles wide_tiles) {
  if (device_sm != 90) return {};
  if (dtype == DType::F64 || (dtype == DType::F32 && fp32_math != Fp32Math::TF32)) return {};
  // 64-channel blocks: for 32 or fewer channels per group the mma.sync kernel's narrower blocks
  // waste less
  if (p.C_out_g <= 32) return {};
  if (16 * p.H * p.W > 0x7fffffff || p.OH * p.OW > 0x7fffffff) return {};  // 32-bit in-plane offsets
  const int64_t OHmax = phase_extent(p.OH, 0, p.sH), OWmax = phase_extent(p.OW, 0, p.sW);
  if (OHmax == 0 || OWmax == 0) return {};
  // Tiles of 16 columns (q = 2): measured on the seed and demo layers, q = 1 (twice the weight
  // copies per MMA) and tiles mostly outside the phase grids lose to the mma.sync kernel, which
  // also has tiles spanning several images for small maps. Strips of 16 rows, or 17 where that
  // covers the phase grids better (maps of 2 x 17 = 34 rows leave 16-row strips 70% full).
  struct Fit {
    int64_t used = 0, covered = 0, most_taps = 0, tiles = 0;
    bool ok = true;
  };
  auto fit = [&](int rows, int q) {
    Fit f;
    for (int64_t rh = 0; rh < p.sH; ++rh)
      for (int64_t rw = 0; rw < p.sW; ++rw) {
        const PhaseTile ph = phase_tile(p, rows, 8 * q, rh, rw);
        const int64_t taps = ph.th.count * ph.tw.count;
        if (taps > 0 && ph.hrows * ph.hcols > kMaxHalo) f.ok = false;
        f.most_taps = std::max(f.most_taps, taps);
        f.used += ph.OHp * ph.OWp;
        // strips right of the grid issue no MMAs
        f.covered += ceil_div(ph.OHp, rows) * rows * ceil_div(ph.OWp, 8) * 8;
      }
    f.ok = f.ok && phase_table_fits(p, rows, 8 * q);
    f.tiles = phase_tiles_per_sample(p, rows, 8 * q);
    return f;
  };
  const Fit f16 = fit(16, 2), f17 = fit(17, 2), f8 = fit(8, 4);
  // 17-row strips only for a clear gain: their MMAs are 6% longer and their tile covers more halo
  const bool tall = f17.ok && (!f16.ok || f17.covered * 100 < f16.covered * 95);
  // Tiles of 8 rows x 32 columns (four strips, m64n64 MMAs): a 16-bit tile row is then 64 bytes
  // of output, not 32; rows of these outputs are only 4-byte aligned, so each row piece straddles
  // one more 32-byte sector than it fills: 1.9x the output's bytes in L1 store sectors at 16
  // columns (ncu, bfloat16 L1_57). In exchange each MMA reads the weights for half the pixels.
  // H100, same build, queued ms, 16 x 16 -> 8 x 32, bfloat16 plain: L1_57 1.95 -> 1.69, VAE_up
  // 0.173 -> 0.161, VAE_refine 0.188 -> 0.182, L2_19 1.86 -> 1.81; but L1_65 (21 taps) 0.72 ->
  // 0.77, float32 L2_19 3.01 -> 3.14, L1_65 1.06 -> 1.22, and fused GELU + GroupNorm calls equal
  // or slower (L2_19 2.66 -> 2.72) (session 42). Not where it takes many more tiles (maps of few
  // rows).
  const bool wide = !tall && f8.ok && dtype != DType::F32 &&
                    (wide_tiles == WideTiles::Always ||
                     (wide_tiles == WideTiles::Auto && f8.most_taps <= 9 && f8.tiles * 100 <= f16.tiles * 105));
  const Fit& f = tall ? f17 : wide ? f8 : f16;
  const int rows = tall ? 17 : wide ? 8 : 16, q = wide ? 4 : 2;
  if (!f.ok) return {};
  if (!force && f.used < 0.6 * f.covered) return {};
  // float32 chunks with fewer than 4 taps: per-chunk costs (halo, weights, barriers) dominate and
  // the mma.sync kernel is faster (H100, session 38, k2 s2: 113 against 126 us); from 4 taps on
  // (k4 s2, k3 s2) this kernel won on 10 of 11 decoder layers, plain and fused (e.g. 256 -> 128
  // channels at 16^2: 96 -> 75 us; the DCGAN demo's 128 -> 64 at 16^2 fused: 237 -> 216 us).
  // 16-bit chunks carry twice the channels.
  if (!force && dtype == DType::F32 && f.most_taps < 4) return {};
  // 17-row strips run on the ping-pong kernel, whose single producer must keep two consumers fed:
  // enough chunks per tile (measured with 4, on L2_11's 64 input channels in bfloat16; with
  // 16-row strips and 9 taps the ping-pong form lost to two blocks per SM: H100, L2_19 6.6 ms
  // against 5.6, L1_57 4.5 against 3.9; bfloat16 with 16-bit boxes in both forms, conv alone,
  // session 26: L2_19 3.02-3.56 ms against 2.61, L1_57 4.23-4.84 against 2.04; its four-warp
  // epilogue cannot keep up with the other consumer's short MMA phase)
  if (!force && blocks_per_sm(rows) == 1 && ceil_div(p.C_in_g, chunk_channels(dtype)) < 4) return {};
  // Two blocks per SM (one's epilogue runs under the other's MMAs) with the deepest pipeline
  // that fits, else one block with up to kMaxStages.
  WgmmaTiling t{q, rows, 0};
  auto fits = [&](size_t budget, int stages, int box_slots, bool nhwc) {
    return (budget == kMaxSmem || blocks_per_sm(rows) == 2) &&
           wg_smem(p, rows, q, stages, dtype, box_slots, nhwc).bytes <= budget;
  };
  auto deepest = [&](bool nhwc) {
    for (const size_t budget : {kTwoBlocksSmem, kMaxSmem})
      for (int s = kMaxStages; s >= 2; --s)
        if (fits(budget, s, 0, nhwc)) return s;
    return 0;
  };
  t.stages = deepest(false);
  if (t.stages == 0) return {};
  // A channels-last input: TMA loads each chunk's halo straight into the stage, no thread touches
  // it. A chunk must not read another group's channels (their weights are zero, but 0 x inf is not).
  const bool nhwc_possible = channels_last != ChannelsLastInput::Never && tensor_maps_available() &&
                             (p.groups == 1 || p.C_in_g % chunk_channels(dtype) == 0) &&
                             channels_last_box_supported(p, dtype, wg_channels_last_box(p, rows, q, dtype));
  if (nhwc_possible) {
    const int nhwc_stages = deepest(true);
    // the same blocks per SM as the register path
    const bool same_occupancy = blocks_per_sm(rows) == 1 || fits(kTwoBlocksSmem, nhwc_stages, 0, true) ==
                                                                 fits(kTwoBlocksSmem, t.stages, 0, false);
    if (nhwc_stages > 0 && same_occupancy &&
        (channels_last == ChannelsLastInput::Always || channels_last_pays(p, dtype))) {
      t.stages = nhwc_stages;
      t.nhwc = true;
      return t;
    }
  }
  // TMA input boxes, several chunks ahead (the register path has one chunk of loads in flight),
  // with two blocks per SM only. H100, conv alone, ms, register path / TMA pipeline (stages, boxes):
  // float32 L2_19 3.754 / 3.376 (3, 2), L1_57 3.884 / 3.339; 16-bit boxes transposed by ldmatrix /
  // stmatrix (session 25; bit-identical outputs): bfloat16 L2_19 (fused) 2.680 / 2.576 (2, 3),
  // L1_57 2.555-2.579 / 2.013-2.026 (2, 3), 2.048 (2, 2). (Read value by value, 16-bit boxes lost:
  // L2_19 2.447 / 2.615.) Where the boxes only fit one block per SM (L1_65: 21 taps per stage) they
  // lost 33% (float32); the ping-pong kernel (L2_11) has no box path (float32 1.048 / 1.320 with a
  // per-value one; bfloat16 boxes transposed as here, issued across tile boundaries, 0.657 against
  // 0.469 + 0.046 for NHWC staging + NHWC boxes; session 26). 16-bit boxes zero channels past the
  // input only, so a chunk must not straddle two groups' channels (else 0 x inf from the next group).
  const bool one_group_chunks = dtype == DType::F32 || p.groups == 1 || p.C_in_g % chunk_channels(dtype) == 0;
  if (allow_tma && one_group_chunks && blocks_per_sm(rows) == 2 && fits(kTwoBlocksSmem, t.stages, 0, false) &&
      input_box_supported(p, dtype, wg_input_box(p, rows, q, dtype))) {
    constexpr int kPipelines[][2] = {{3, 2}, {2, 3}, {2, 2}};  // (stages, boxes), best first
    for (const auto& c : kPipelines)
      if (t.box_slots == 0 && fits(kTwoBlocksSmem, c[0], c[1], false)) {
        t.tma_stages = c[0];
        t.box_slots = c[1];
      }
  }
  return t;
}

int64_t conv_wgmma_tiles_per_sample(const ConvTranspose2dParams& p, const WgmmaTiling& t) {
  return phase_tiles_per_sample(p, t.rows, 8 * t.q);
}

int64_t conv_wgmma_blocks_per_image(const ConvTranspose2dParams& p, const WgmmaTiling& t) {
  return conv_wgmma_tiles_per_sample(p, t) * p.groups * ceil_div(p.C_out_g, kBlockCh);  // launch_tile's grid x * y
}

// In elements of the input dtype (the buffer is allocated with the weight's dtype).
int64_t conv_wgmma_prepared_weight_numel(const ConvTranspose2dParams& p, DType dtype) {
  const int64_t words = p.groups * p.kH * p.kW * ceil_div(p.C_in_g, chunk_channels(dtype)) *
                        ceil_div(p.C_out_g, kBlockCh) * (kTapBytes / 4);
  return dtype == DType::F32 ? words : 2 * words;
}

cudaError_t conv_wgmma_prepare_weight(const void* weight, void* prepared, DType dtype,
                                      const ConvTranspose2dParams& p, bool early, cudaStream_t stream) {
  const int64_t n_chunks = ceil_div(p.C_in_g, chunk_channels(dtype));
  const int64_t col_tiles = ceil_div(p.C_out_g, kBlockCh);
  const int64_t total = p.groups * p.kH * p.kW * n_chunks * col_tiles * (kTapBytes / 4);
  if (total == 0) return cudaSuccess;
  uint32_t* wp = static_cast<uint32_t*>(prepared);
  // any tile shape: only the phases' taps are read
  const PhaseTable phases = phase_table(p, 16, 8);
  return dispatch_tensor_core_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    return dispatch_prepare_index(total, [&](auto index) {
      using I = decltype(index);
      return launch_early(prepare_wgmma_weight_kernel<T, I>, dim3(prepare_blocks(total)), dim3(256), 0, stream,
                          early && option(Option::EarlyLaunch) != 0, static_cast<const T*>(weight), wp, p, phases,
                          I(n_chunks), I(col_tiles), I(total));
    });
  });
}

cudaError_t conv_wgmma_forward(const void* x, const void* prepared_weight, const void* bias, void* out,
                               DType dtype, const ConvTranspose2dParams& p, const WgmmaTiling& t,
                               const ConvEpilogue& ep, cudaStream_t stream) {
  CUtensorMap map;
  // NHWC input: the caller staged it (16-byte aligned); the plan checked that it can be mapped
  if (t.nhwc && !encode_channels_last_input_map(&map, x, dtype, p, wg_channels_last_box(p, t.rows, t.q, dtype)))
    return cudaErrorNotSupported;
  // NCHW: boxes where the plan allows them and this input can be mapped (a 16-byte aligned pointer)
  const bool tma = t.nhwc || (t.box_slots > 0 && encode_input_map(&map, x, dtype, p, wg_input_box(p, t.rows, t.q, dtype)));
  return dispatch_tensor_core_dtype(dtype, [&](auto tag) {
    return launch<decltype(tag)>(x, prepared_weight, bias, out, dtype, p, t, ep, tma ? &map : nullptr, stream);
  });
}

}  // namespace cuda
}  // namespace myops
