// The Hopper engine's weight preparation: the A operand of every MMA, in core-matrix order.
#include "cuda/conv/wgmma/wgmma_parts.cuh"

namespace myops {
namespace cuda {
namespace {

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

}  // namespace

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

}  // namespace cuda
}  // namespace myops
