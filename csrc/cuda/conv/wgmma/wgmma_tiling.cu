// Whether the Hopper engine takes a call, and its tiling (host only).
#include "cuda/conv/wgmma/wgmma_parts.cuh"

namespace myops {
namespace cuda {
namespace {

// Whether staging a channels-last copy of an NCHW input (read + write of the input) costs less
// than it saves: the copy is proportional to the input's bytes, the saving (the producer's load
// latency off the MMAs' path) to the MMAs' work, so the rule is on the FLOPs per input byte,
// 2 x C_out_g x kH x kW / element size, independent of the map size. H100, conv kernel alone
// (torch.profiler), NCHW registers -> NHWC boxes, ms: bfloat16 the 64->128 k5 (32^2) layer (3200 FLOP/B) 0.686 -> 0.503
// for a 67 MB copy; the 64->64 k3 (256^2) layer (576) 2.354 -> 2.086 for a 1.07 GB copy; VAE refine (1152) 0.201 ->
// 0.171 for 67 MB; float32 the 64->128 k5 (32^2) layer (1600) 0.929 -> 0.917, the 64->64 k3x7 (512^2) layer (672) 1.129 -> 1.196.
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
  // columns (ncu, bfloat16 the 64->64 k3 (1024^2) layer). In exchange each MMA reads the weights for half the pixels.
  // H100, same build, queued ms, 16 x 16 -> 8 x 32, bfloat16 plain: the 64->64 k3 (1024^2) layer 1.95 -> 1.69, VAE_up
  // 0.173 -> 0.161, VAE_refine 0.188 -> 0.182, the 64->64 k3 (256^2) layer 1.86 -> 1.81; but the 64->64 k3x7 (512^2) layer (21 taps) 0.72 ->
  // 0.77, float32 the 64->64 k3 (256^2) layer 3.01 -> 3.14, the 64->64 k3x7 (512^2) layer 1.06 -> 1.22, and fused GELU + GroupNorm calls equal
  // or slower (the 64->64 k3 (256^2) layer 2.66 -> 2.72). Not where it takes many more tiles (maps of few
  // rows).
  const bool wide = !tall && f8.ok && dtype != DType::F32 &&
                    (wide_tiles == WideTiles::Always ||
                     (wide_tiles == WideTiles::Auto && f8.most_taps <= 9 && f8.tiles * 100 <= f16.tiles * 105));
  const Fit& f = tall ? f17 : wide ? f8 : f16;
  const int rows = tall ? 17 : wide ? 8 : 16, q = wide ? 4 : 2;
  if (!f.ok) return refuse<WgmmaTiling>(why, "a phase's halo or tap table does not fit");
  if (!force && f.used < 0.6 * f.covered) return refuse<WgmmaTiling>(why, "its tiles would be under 60% inside the phase grids");
  // float32 chunks with fewer than 4 taps: per-chunk costs (halo, weights, barriers) dominate and
  // the mma.sync kernel is faster (H100, an earlier measurement, k2 s2: 113 against 126 us); from 4 taps on
  // (k4 s2, k3 s2) this kernel won on 10 of 11 decoder layers, plain and fused (e.g. 256 -> 128
  // channels at 16^2: 96 -> 75 us; the DCGAN demo's 128 -> 64 at 16^2 fused: 237 -> 216 us).
  // 16-bit chunks carry twice the channels.
  if (!force && dtype == DType::F32 && f.most_taps < 4) return refuse<WgmmaTiling>(why, "float32 with fewer than 4 taps per phase");
  // 17-row strips run on the ping-pong kernel, whose single producer must keep two consumers fed:
  // enough chunks per tile (measured with 4, on the 64->128 k5 (32^2) layer's 64 input channels in bfloat16; with
  // 16-row strips and 9 taps the ping-pong form lost to two blocks per SM: H100, the 64->64 k3 (256^2) layer 6.6 ms
  // against 5.6, the 64->64 k3 (1024^2) layer 4.5 against 3.9; bfloat16 with 16-bit boxes in both forms, conv alone,
  //: the 64->64 k3 (256^2) layer 3.02-3.56 ms against 2.61, the 64->64 k3 (1024^2) layer 4.23-4.84 against 2.04; its four-warp
  // epilogue cannot keep up with the other consumer's short MMA phase)
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
  // with two blocks per SM only. H100, conv alone, ms, register path / TMA pipeline (stages, boxes):
  // float32 the 64->64 k3 (256^2) layer 3.754 / 3.376 (3, 2), the 64->64 k3 (1024^2) layer 3.884 / 3.339; 16-bit boxes transposed by ldmatrix /
  // stmatrix (bit-identical outputs): bfloat16 the 64->64 k3 (256^2) layer (fused) 2.680 / 2.576 (2, 3),
  // the 64->64 k3 (1024^2) layer 2.555-2.579 / 2.013-2.026 (2, 3), 2.048 (2, 2). (Read value by value, 16-bit boxes lost:
  // the 64->64 k3 (256^2) layer 2.447 / 2.615.) Where the boxes only fit one block per SM (the 64->64 k3x7 (512^2) layer: 21 taps per stage) they
  // lost 33% (float32); the ping-pong kernel (the 64->128 k5 (32^2) layer) has no box path (float32 1.048 / 1.320 with a
  // per-value one; bfloat16 boxes transposed as here, issued across tile boundaries, 0.657 against
  // 0.469 + 0.046 for NHWC staging + NHWC boxes;). 16-bit boxes zero channels past the
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

}  // namespace cuda
}  // namespace myops
