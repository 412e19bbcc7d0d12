#pragma once
// GroupNorm's normalise pass run *alongside* the conv that produces its input (the fused
// conv_transpose2d_gelu_group_norm op): a few persistent blocks, on a higher-priority stream,
// take the (image, group) items, each in a few parts, in image order; a part waits until every
// conv block of its image has counted itself done (ConvEpilogue::tiles_done: after its output and
// tile partials, fence + atomic add), reduces its group's tile partials (the same fixed order as
// group_norm_stats_from_tiles, so the same bits) and normalises its share of the group's planes in
// place.
// Why: the conv leaves part of the DRAM bandwidth unused and the separate pass is pure memory
// traffic, so run on a few SMs it fits in that spare bandwidth.
// Safe in any launch order while the follower blocks are fewer than the block slots the process
// has: the conv never waits for them, so its blocks always find a slot (launched after the conv,
// or serialised, they find their images done). Off under MPS with an SM share
// (group_norm_follow_blocks), where the device's SM count does not tell those slots.
#include "cuda/common/launch.cuh"

namespace myops {
namespace cuda {

// y: contiguous [N, C, HW], normalised in place (gamma / beta nullable, in y's dtype);
// tile_stats: [N][C][tiles][3] as the conv epilogue writes them (double for float64, else
// float); tiles_done: [N] counters, image n complete at blocks_per_image; `blocks`: how many
// persistent blocks (the launch takes at most one per item); l2_hints: L2Hint flags
// (kL2FollowerEvictFirst is the pass's). sm_90 only (bulk copies): the host
// takes it with the Hopper conv kernel only.
cudaError_t group_norm_follow(void* y, DType dtype, int64_t N, int64_t C, int64_t HW, int64_t num_groups,
                              const void* tile_stats, int64_t tiles, double eps, const void* gamma,
                              const void* beta, const unsigned* tiles_done, unsigned blocks_per_image, int blocks,
                              unsigned l2_hints, cudaStream_t stream);

// Whether the pass takes GroupNorm of C channels in num_groups groups (a group's per-channel
// affine maps live in shared memory).
bool group_norm_follow_supported(int64_t C, int64_t num_groups);

// The shape of a fused call, as far as the overlap's payoff goes.
struct FollowShape {
  int64_t N, C, HW, num_groups;
  int elem_bytes;          // of the output
  double flops_per_value;  // the conv's multiply-adds x 2 per output value
};

// Follower blocks for a call of shape s on a device of `sms` multiprocessors: sms / 4 where the
// overlap is expected to pay (group_norm_follow_pays: the rule and its data), else 0 (the separate
// statistics and normalise passes). Option::GnFollowers = k forces k blocks whatever the shape (0: off).
int group_norm_follow_blocks(int sms, const FollowShape& s);

// The L2Hint flags for the conv and its followers in dtype (group_norm_follow.cu: the data);
// (16-bit only: see group_norm_follow.cu)
unsigned group_norm_follow_l2_hints(DType dtype);

}  // namespace cuda
}  // namespace myops
