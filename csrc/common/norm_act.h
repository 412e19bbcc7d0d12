#pragma once
// The choices of the conv + normalisation + activation family (myops::conv_transpose2d_act_stats
// and the Python API above it), shared by the host checks and the kernels.
namespace myops {

// The activation applied to the conv output before its statistics are taken (as F.<name>).
enum class Activation : int { None = 0, Gelu, Silu, Relu, LeakyRelu, Tanh, Sigmoid };

// Which statistics of the activated output the op returns: none, per channel over (N, H, W)
// (BatchNorm's batch statistics), or per (sample, group) (GroupNorm; InstanceNorm is one group
// per channel).
enum class NormStats : int { None = 0, Channel, Group };

}  // namespace myops
