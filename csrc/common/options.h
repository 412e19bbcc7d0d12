#pragma once
// Runtime choices a user or a test makes (myops.backends in Python): which conv engines may run,
// whose conv runs a call, and the switches of the kernels' optional paths. Plain C++ (no torch
// header), so the CUDA sources read them too. One process-wide table, read lock-free per call;
// the plan caches key on what they read.
#include <cstdint>
#include <string>

namespace myops {

// Every option, each an int. Tri-state ones: kAuto, kNever, kAlways.
enum class Option : int {
  ConvSource,      // kAuto (timed where it may pay), kOurs, kCudnn, kCudnnChannelsLast
  Direct,          // engine enabled (1) or not (0); likewise the next three
  FewChannels,
  Mma,             // mma.sync; off leaves the generic kernel for the tensor-core calls
  Wgmma,
  ForceWgmma,      // 1: the Hopper engine for every call it can run
  Tma,             // the Hopper engine's bulk-tensor input loads (0: through registers, never NHWC)
  NhwcStaging,     // tri-state: the Hopper engine's input staged channels-last
  WideTiles,       // tri-state: the Hopper engine's wide tiles (auto: plain convs only)
  Winograd,        // Winograd rows for strict float32 where they apply
  WindowStores,    // the BatchNorm chain's 2 x 2 window stores
  GnFollowers,     // -1: auto; 0: no overlapped normalise pass; k: k follower blocks
  BnStatsBlocks,   // -1: auto; k (1..8): blocks per channel of the batch-statistics reduction
  BnTailPrefetch,  // the BatchNorm tail's persistent, prefetching form
  EarlyLaunch,     // programmatic dependent launch (weight preparation, BatchNorm tail)
  GeluVectors,     // -1: auto; 1, 2 or 4 16-byte vectors per thread in the GELU kernel
  Hopper,          // sm_90 features (clusters, programmatic dependent launch, the Hopper engine)
  CpuReference,    // the CPU conv by our GEMM + col2im reference instead of ATen's (oneDNN)
  RecomputeConv,   // training: act-first family chains recompute the conv in backward (myops/norm_act.py)
  CpuChannelsLast, // tri-state: the CPU conv of an NCHW input by oneDNN's channels-last kernels (auto: timed)
  AtenTraining,    // tri-state: eager training's norm steps by ATen's ops (auto: the CPU; myops/_norm_act_backward.py)
  kCount
};

constexpr int kAuto = -1;
constexpr int kNever = 0;
constexpr int kAlways = 1;
constexpr int kOurs = 1;
constexpr int kCudnn = 2;
constexpr int kCudnnChannelsLast = 3;  // the plain conv only (others take it as kCudnn)

int option(Option o);
void set_option(Option o, int value);
// "conv_source", "direct", ...: the Python names, in Option order; nullptr past the end
const char* option_name(int index);
// Every option's value, as bytes in a string: part of the keys of cached choices that depend on
// them (one copy, no formatting: the timed choice builds its key on every call it may time).
std::string options_key();

}  // namespace myops
