// Runs a ConvPlan (select.cu chose it): the engine's weight preparation and its forward launch.
#include "common/options.h"
#include "cuda/conv/conv_transpose2d.cuh"
#include "cuda/conv/generic/generic.cuh"

namespace myops {
namespace cuda {

cudaError_t conv_prepare_weight(const void* weight, void* prepared, DType dtype,
                                const ConvTranspose2dParams& p, const ConvPlan& plan, bool after_staging,
                                cudaStream_t stream) {
  if (plan.engine == ConvEngine::Wgmma)
    return conv_wgmma_prepare_weight(weight, prepared, dtype, p, after_staging, stream);
  if (plan.engine == ConvEngine::Mma) return conv_mma_prepare_weight(weight, prepared, dtype, p, plan.tiling, stream);
  return conv_generic_prepare_weight(weight, prepared, dtype, p, stream);
}

int conv_plan_window_rows(const ConvTranspose2dParams& p, const ConvPlan& plan, DType dtype) {
  if (option(Option::WindowStores) == 0) return 0;
  const bool ok = plan.engine == ConvEngine::Wgmma && conv_wgmma_stores_windows(plan.wg, dtype) && p.sH == 1 &&
                  p.sW == 1 && p.OH >= 2 && p.OW >= 2;
  return ok ? plan.wg.rows : 0;
}

bool conv_plan_counts_tiles(const ConvPlan& plan) {
  return plan.engine == ConvEngine::Wgmma && conv_wgmma_counts_tiles(plan.wg);
}

int64_t conv_plan_blocks_per_image(const ConvTranspose2dParams& p, const ConvPlan& plan) {
  return plan.engine == ConvEngine::Wgmma ? conv_wgmma_blocks_per_image(p, plan.wg) : 0;
}

cudaError_t conv_transpose2d_forward(const void* x, const void* prepared_weight, const void* bias,
                                     void* out, DType dtype, Fp32Math fp32_math,
                                     const ConvTranspose2dParams& p, const ConvPlan& plan,
                                     const ConvEpilogue& ep, cudaStream_t stream) {
  if (ep.pool_windows && conv_plan_window_rows(p, plan, dtype) == 0) return cudaErrorInvalidValue;
  if (ep.tiles_done != nullptr && (!conv_plan_counts_tiles(plan) || ep.tile_stats == nullptr)) return cudaErrorInvalidValue;
  if (plan.engine == ConvEngine::Wgmma) return conv_wgmma_forward(x, prepared_weight, bias, out, dtype, p, plan.wg, ep, stream);
  if (plan.engine == ConvEngine::Mma) return conv_mma_forward(x, prepared_weight, bias, out, dtype, p, plan.tiling, ep, stream);
  if (plan.engine == ConvEngine::Direct) return conv_direct_forward(x, prepared_weight, bias, out, dtype, p, plan.direct, ep, stream);
  if (plan.engine == ConvEngine::FewChannels) return conv_few_channels_forward(x, prepared_weight, bias, out, dtype, p, plan.few_channels, ep, stream);
  return conv_generic_forward(x, prepared_weight, bias, out, dtype, fp32_math, p, ep, stream);
}

}  // namespace cuda
}  // namespace myops
