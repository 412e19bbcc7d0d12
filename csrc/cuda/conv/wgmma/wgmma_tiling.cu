// Whether the Hopper engine takes a call, and its tiling (host only).
#include "cuda/conv/wgmma/wgmma_parts.cuh"

namespace myops {
namespace cuda {
namespace {

// Whether staging a channels-last copy of an NCHW input (read + write of the input) costs less
// than it saves: the copy is proportional to the input's bytes, the saving (the producer's load
// latency off the MMAs' path) to the MMAs' work, so the rule is on the FLOPs per input byte,
// 2 x C_out_g x kH x kW / element size, independent of the map size (the threshold sits between
// the layers that gained and those that lost, copy included).
constexpr int64_t kChannelsLastFlopsPerByte = 2048;
bool channels_last_pays(const ConvTranspose2dParams& p, DType dtype) {
  return 2 * p.C_out_g * p.kH * p.kW >= kChannelsLastFlopsPerByte * dtype_bytes(dtype);
}

}  // namespace

WgmmaTiling conv_wgmma_tiling(const ConvTranspose2dParams& p, DType dtype, Fp32Math fp32_math, int device_sm,
                              bool force, bool allow_tma, ChannelsLastInput channels_last, WideTiles wide_tiles,
                              std::string* why) {
  if (device_sm != 90) return refuse<WgmmaTiling>(why, "not an sm_90 GPU");
  if (dtype == DType::F64 || (dtype == DType::F32 && fp32_math != Fp32Math::TF32))
    return refuse<WgmmaTiling>(why, "float64 or strict float32 (no TF32)");
  // 64-channel blocks: for 32 or fewer channels per group the mma.sync kernel's narrower blocks
  // waste less
  if (p.C_out_g <= 32) return refuse<WgmmaTiling>(why, "32 or fewer output channels per group (mma.sync wastes less)");
  if (16 * p.H * p.W > 0x7fffffff || p.OH * p.OW > 0x7fffffff)  // 32-bit in-plane offsets
    return refuse<WgmmaTiling>(why, "planes too large for 32-bit offsets");
  const int64_t OHmax = phase_extent(p.OH, 0, p.sH), OWmax = phase_extent(p.OW, 0, p.sW);
  if (OHmax == 0 || OWmax == 0) return refuse<WgmmaTiling>(why, "an empty output");
  // Tiles of 16 columns (q = 2): q = 1 (twice the weight copies per MMA) and tiles mostly outside the phase grids lose to the mma.sync kernel, which
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
  // one more 32-byte sector than it fills: nearly twice the output's bytes in L1 store sectors at
  // 16 columns. In exchange each MMA reads the weights for half the pixels. That wins for plain
  // 16-bit convs of up to 9 taps; it loses with more taps, in float32 and in the fused GELU +
  // GroupNorm epilogue, and where it takes many more tiles (maps of few rows).
  const bool wide = !tall && f8.ok && dtype != DType::F32 &&
                    (wide_tiles == WideTiles::Always ||
                     (wide_tiles == WideTiles::Auto && f8.most_taps <= 9 && f8.tiles * 100 <= f16.tiles * 105));
  const Fit& f = tall ? f17 : wide ? f8 : f16;
  const int rows = tall ? 17 : wide ? 8 : 16, q = wide ? 4 : 2;
  if (!f.ok) return refuse<WgmmaTiling>(why, "a phase's halo or tap table does not fit");
  if (!force && f.used < 0.6 * f.covered) return refuse<WgmmaTiling>(why, "its tiles would be under 60% inside the phase grids");
  // float32 chunks with fewer than 4 taps: per-chunk costs (halo, weights, barriers) dominate and
  // the mma.sync kernel is faster (e.g. k2 s2); from 4 taps on (k4 s2, k3 s2) this kernel wins on
  // almost every decoder layer, plain and fused. 16-bit chunks carry twice the channels.
  if (!force && dtype == DType::F32 && f.most_taps < 4) return refuse<WgmmaTiling>(why, "float32 with fewer than 4 taps per phase");
  // 17-row strips run on the ping-pong kernel, whose single producer must keep two consumers fed:
  // enough chunks per tile (4: the 64->128 k5 layer's 64 input channels in bfloat16). With 16-row
  // strips and 9 taps the ping-pong form loses to two blocks per SM: its four-warp epilogue cannot
  // keep up with the other consumer's short MMA phase.
  if (!force && blocks_per_sm(rows) == 1 && ceil_div(p.C_in_g, chunk_channels(dtype)) < 4)
    return refuse<WgmmaTiling>(why, "17-row strips with fewer than 4 input-channel chunks");
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
  if (t.stages == 0) return refuse<WgmmaTiling>(why, "no pipeline of 2 or more stages fits shared memory");
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
  // with two blocks per SM only (16-bit boxes transposed by ldmatrix / stmatrix, bit-identical
  // outputs; read value by value they lost). Where the boxes only fit one block per SM (21 taps
  // per stage) they lose; the ping-pong kernel has no box path (NHWC staging + NHWC boxes beat
  // its attempts). 16-bit boxes zero channels past the input only, so a chunk must not straddle two groups' channels (else 0 x inf from the next group).
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

}  // namespace cuda
}  // namespace myops
