#pragma once
// The Hopper engine's kernel launches for one element type T: which kernel build runs a tiling.
// Each type's builds compile in a translation unit of their own (wgmma_<type>.cu), in parallel:
// together they are by far the longest nvcc job of the build.
#include "cuda/conv/wgmma/wgmma_kernels.cuh"

namespace myops {
namespace cuda {
namespace {

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

}  // namespace

template <typename T>
cudaError_t conv_wgmma_launch(const void* x, const void* wprep, const void* bias, void* out, DType dtype,
                              const ConvTranspose2dParams& p, const WgmmaTiling& t, const ConvEpilogue& ep,
                              const CUtensorMap* map, cudaStream_t stream) {
  if (t.q == 2 && t.rows == 16) return launch_tile<T, 2, 16>(x, wprep, bias, out, dtype, p, t, ep, map, stream);
  if constexpr (!std::is_same<T, float>::value)  // 8 x 32 tiles: 16-bit types only (conv_wgmma_tiling)
    if (t.q == 4 && t.rows == 8) return launch_tile<T, 4, 8>(x, wprep, bias, out, dtype, p, t, ep, map, stream);
  if (t.q == 2 && t.rows == 17) return launch_pingpong<T, 2, 17>(x, wprep, bias, out, dtype, p, t, ep, map, stream);
  return cudaErrorInvalidValue;
}

// conv_wgmma_launch<T>'s instantiation: `extern` here, defined in wgmma_<type>.cu
#define MYOPS_WGMMA_LAUNCH(T)                                                                          \
  template cudaError_t conv_wgmma_launch<T>(const void*, const void*, const void*, void*, DType,       \
                                            const ConvTranspose2dParams&, const WgmmaTiling&,           \
                                            const ConvEpilogue&, const CUtensorMap*, cudaStream_t)
extern MYOPS_WGMMA_LAUNCH(float);
extern MYOPS_WGMMA_LAUNCH(__half);
extern MYOPS_WGMMA_LAUNCH(__nv_bfloat16);

}  // namespace cuda
}  // namespace myops
