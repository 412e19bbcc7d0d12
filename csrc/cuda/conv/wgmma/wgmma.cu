// The Hopper engine's entry point: the input's TMA map, then the element type's launches
// (wgmma_launch.cuh, compiled per type in wgmma_<type>.cu).
#include "cuda/conv/wgmma/wgmma_launch.cuh"

namespace myops {
namespace cuda {

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
    return conv_wgmma_launch<decltype(tag)>(x, prepared_weight, bias, out, dtype, p, t, ep, tma ? &map : nullptr, stream);
  });
}

}  // namespace cuda
}  // namespace myops
