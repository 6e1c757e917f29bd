// Fused Conv2d -> ReLU -> MaxPool2d, forward, float32 NCHW, one kernel launch.
//
// out = max_pool2d(relu(conv2d(x, weight, bias, stride, padding, dilation)),
//                  pool_kernel, pool_stride, pool_padding, dilation=1, ceil_mode)
//
// The convolution output never reaches global memory. Every block owns a tile of
// pooled outputs for one image and one block of output channels, computes the
// convolution outputs those pooling windows read (an 8 x 32 tile of conv pixels,
// so windows that straddle two tiles are simply computed by both), and reduces
// them to pooled outputs in its epilogue.
//
// Variants (the `config` of the Python op; the registry of all of them is
// conv_relu_maxpool_registry.cu, the automatic choice conv_relu_maxpool_choose.cu; this file's
// own kernels, per variant, tiled_choice and flat_choice). A variant's 16-bit member, where it
// has one, is named after it:
//   0 direct          One thread per pooled output, operands read straight from
//                     global memory. Slow, but has no shared-memory or tile limit,
//                     so it runs every configuration PyTorch accepts. The fallback.
//                     (direct_16bit: conv_relu_maxpool_half.cu.)
//   1 tiled_fp32      Shared-memory tiles (below), FFMA on CUDA cores. FP32.
//   2 tiled_tf32      Same tiles, implicit GEMM on tensor cores (mma.sync m16n8k8
//                     TF32, fp32 accumulation), 8 warps of 64 x 64: PyTorch's
//                     default, allow_tf32=True. (tiled_16bit_mma, m16n8k16 over a packed
//                     copy: conv_relu_maxpool_half.cu.)
//   3 tiled_3xtf32    As 2, but each operand is split into a TF32 "big" part and a
//                     TF32 remainder and three products are accumulated: close to
//                     fp32 accuracy on tensor cores, for allow_tf32=False.
//   4 tiled_tf32_16w  As 2 with 16 warps of 64 x 32 (<= 128 registers each).
//   5 tiled_tf32_flat As 2, but the reduction runs over flattened (channel, tap)
//                     pairs: for fewer than 8 input channels (no zero channels
//                     multiplied) and kernels whose 8-channel halo would not fit.
//                     All weights and every input channel's halo are staged;
//                     persistent blocks keep the weights and copy the next tile's
//                     planes while this tile computes (conv_pool_flat_kernel); the
//                     warp tiling depends on the channels and on whether two blocks
//                     share an SM (flat_tiling).
//                     tiled_16bit_flat, for float16 / bfloat16 operands: the planes are
//                     staged as fp32 (persistent blocks copy the next tile's raw with
//                     cp.async and convert them when released), the weights stay 16-bit and
//                     become fp32 as the fragments are read; the TF32 mma multiplies them
//                     exactly, the store rounds once.
//   9 tiled_3xtf32_flat As 5 with 3xTF32 (as 3), float32 only: the fp32-accurate path for
//                     few input channels and large kernels (allow_tf32=False).
//  12 tiled_tf32_flat_wgmma As 5 on Hopper wgmma (sm_90a), float32: 16 warps, each warpgroup
//                     64 pixels x 64 channels per m64n64k8 step, the gathered pixels from
//                     registers, the weights from shared memory (FlatWgmmaMainloop).
//                     tiled_16bit_flat_wgmma, for float16 / bfloat16 operands: m64n64k16
//                     steps with 16-bit operands, the gathered fp32 halo values packed back
//                     to 16 bits (exact), the weights staged 16-bit in the wgmma layout.
// (13, general_wgmma, is the general Hopper kernel in kernels/hopper/: any geometry, float32 in
// TF32 and float16 / bfloat16, chosen on Hopper wherever none of the special kernels applies,
// 14 its 3xTF32 form; 6 and 10 are the wgmma kernels, conv_relu_maxpool_wgmma.cu, 10 with
// 3xTF32; 7 the CUDA-core small_fp32 / small_16bit and 8 its TF32 tensor-core twin small_tf32,
// conv_relu_maxpool_small.cu; 11 the first-layer kernels stem_tf32 / stem_16bit,
// conv_relu_maxpool_stem.cu.)
//
// Chunked tiled variants (1-4), per block of 256 (or 512) threads:
//   * Tile scheduler: blockIdx.x -> (image, tile row, tile col, output-channel
//     block), channel block fastest so blocks sharing an input halo run together.
//   * Mainloop: input channels in chunks of 8. A 3-stage cp.async pipeline stages,
//     per chunk, the input halo (8 channels x halo_rows x halo_cols, zero-filled
//     outside the image: that is the convolution's padding) and the weights
//     (out_block x 8 channels x taps). Implicit GEMM: M = 256 conv pixels,
//     N = out_block channels, K = 8 channels per tap, looped over the taps.
//   * Epilogue: accumulators + bias go to shared memory as a [channel][8][32]
//     tile (reusing the pipeline buffers); each pooled output takes the max of its
//     window's valid pixels (NaN wins, as in PyTorch), applies ReLU and is stored;
//     consecutive threads store consecutive columns.
//   * Fast path (3x3 / stride 1 / dilation 1 conv, 2x2 / stride 2 pool with every
//     window inside the conv output): the staged geometry is compile-time, copies
//     are 16 bytes wide, and the 2x2 max is taken in registers before the store.
// Shared-memory layouts are padded so the mma fragment loads are conflict-free
// for stride 1 (see TilePlan). docs/PERF.md has each version's measurements.
//
// Files by role: sm80/tiled_tile.cuh (constants, TilePlan, tile geometry), sm80/tiled_mainloop.cuh
// and sm80/tiled_kernel.cuh (the chunked tiled kernel and its epilogues), sm80/flat_mainloop.cuh
// and hopper/flat_mainloop.cuh (the flat kernel's mainloops on mma.sync and on wgmma),
// sm80/flat_kernel.cuh; this file: the direct kernel, the tiled and flat variants' kernels per
// variant and their launch, the device query and the tests' queries of the wgmma kernels' plans.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "conv_pool_16bit.cuh"
#include "conv_pool_device.cuh"
#include "conv_pool_epilogue.cuh"
#include "conv_pool_heuristics.h"
#include "conv_pool_layout.h"
#include "conv_pool_operands.h"
#include "conv_pool_wgmma.cuh"
#include "conv_relu_maxpool.h"
#include "conv_relu_maxpool_half.h"
#include "conv_relu_maxpool_small.h"
#include "conv_relu_maxpool_stem.h"
#include "conv_relu_maxpool_tiled.h"
#include "conv_relu_maxpool_wgmma.h"
#include "hopper/general_wgmma.h"
#include "hopper/general_transpose.h"
#include "sm80/flat_kernel.cuh"
#include "sm80/tiled_kernel.cuh"

namespace conv_pool_mma {
namespace {

__global__ void conv_pool_direct_kernel(const ConvPoolOperands ops, const ConvPoolShape s) {
  const auto x = [&](int64_t n, int c, int64_t h, int64_t w) {
    return __ldg(ops.x + n * ops.x_stride[0] + c * ops.x_stride[1] + h * ops.x_stride[2] +
                 w * ops.x_stride[3]);
  };
  const auto weight = [&](int k, int c, int r, int q) {
    return __ldg(ops.weight + k * ops.weight_stride[0] + c * ops.weight_stride[1] +
                 r * ops.weight_stride[2] + q * ops.weight_stride[3]);
  };
  const auto bias = [&](int k) { return ops.bias ? ops.bias[k * ops.bias_stride] : 0.f; };
  const int64_t total = s.output_elements();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x)
    ops.out[i] = conv_pool_epilogue::direct_pooled_output(s, i, x, weight, bias);
}

// ---------------------------------------------------------------------------
// Variant table: which kernel and output-channel block each variant runs.

using TiledKernel = void (*)(const ConvPoolOperands, const ConvPoolShape, const TilePlan);

struct TiledChoice {
  TiledKernel kernel;
  int out_block;
  int threads;
};

template <class Mainloop>
TiledChoice pick(bool fast) {
  return {fast ? conv_pool_tiled_kernel<Mainloop, true> : conv_pool_tiled_kernel<Mainloop, false>,
          Mainloop::kOutBlock, Mainloop::kThreads};
}

// The flat kernel of Mainloop for operands of `element` (3xTF32 mainloops: float32 only).
template <class Mainloop>
TiledChoice flat(int element) {
  if constexpr (Mainloop::kSplit) {
    return {conv_pool_flat_kernel<Mainloop, Float32>, Mainloop::kOutBlock, Mainloop::kThreads};
  } else {
    const TiledKernel kernel = element == kElementFloat16 ? conv_pool_flat_kernel<Mainloop, Float16>
                               : element == kElementBFloat16
                                   ? conv_pool_flat_kernel<Mainloop, BFloat16>
                                   : conv_pool_flat_kernel<Mainloop, Float32>;
    return {kernel, Mainloop::kOutBlock, Mainloop::kThreads};
  }
}

// Shared memory the hardware keeps per resident block on top of the dynamic allocation (1 KB on
// sm_80 .. sm_90); `max_shared_bytes` is the per-block opt-in limit, 1 KB under the SM's total.
constexpr int kSmemReservedPerBlock = 1024;

bool two_blocks_per_sm(int smem_bytes, int max_shared_bytes) {
  return 2 * (int64_t(smem_bytes) + kSmemReservedPerBlock) <=
         int64_t(max_shared_bytes) + kSmemReservedPerBlock;
}

// The wgmma flat kernels (tiled_tf32_flat_wgmma, tiled_16bit_flat_wgmma): blocks of 64
// channels, 16 warps.
TiledChoice flat_wgmma(int element) {
  const TiledKernel kernel =
      element == kElementFloat16    ? conv_pool_flat_kernel<FlatWgmmaMainloop<Float16>, Float16>
      : element == kElementBFloat16 ? conv_pool_flat_kernel<FlatWgmmaMainloop<BFloat16>, BFloat16>
                                    : conv_pool_flat_kernel<FlatWgmmaMainloop<Float32>, Float32>;
  using Any = FlatWgmmaMainloop<Float32>;  // the same block for every element type
  return {kernel, Any::kOutBlock, Any::kThreads};
}

bool is_flat_wgmma(int variant) {
  return variant == kVariantFlatWgmma;
}

// The flat kernels' output-channel block: 64 above kNarrowBlockMaxChannels, never 128
// (conv_pool_heuristics.h); the wgmma ones: 64 always.
int flat_out_block(const ConvPoolShape& s, int variant) {
  return is_flat_wgmma(variant) || s.out_channels > conv_pool_heuristics::kNarrowBlockMaxChannels
             ? 64
             : 32;
}

// Their warp tiling (FlatTensorCoreMainloop<out_block, warps N, m-tiles per warp>) for plan `p`:
// blocks of 64 as 8 warps of 32 pixels x 64 channels where two blocks share an SM, else as 16
// warps of 32 x 32 (one block alone: 8 warps of 32 x 64 were 11-24% slower there); blocks of
// 32 as 8 warps of 32 x 32. 3xTF32 (`split`) never takes 32 x 64: its 64 accumulators and three
// fragment sets would not fit 128 registers.
enum class FlatTiling { k64Wide, k64, k32 };

FlatTiling flat_tiling(const TilePlan& p, int max_shared_bytes, bool split) {
  if (p.out_block == 32) return FlatTiling::k32;
  return !split && two_blocks_per_sm(p.smem_bytes, max_shared_bytes) ? FlatTiling::k64Wide
                                                                     : FlatTiling::k64;
}

bool is_split_flat(int variant) { return variant == kVariantTiled3xTf32Flat; }

// The flat kernel of `variant` (tiled_tf32_flat / tiled_3xtf32_flat for float32,
// tiled_16bit_flat else) with the tiling of plan `p`.
TiledChoice flat_choice(const ConvPoolShape& s, const TilePlan& p, int variant,
                        int max_shared_bytes) {
  if (is_flat_wgmma(variant)) return flat_wgmma(s.element);
  if (is_split_flat(variant)) {
    return flat_tiling(p, max_shared_bytes, true) == FlatTiling::k32
               ? flat<FlatTensorCoreMainloop<32, 1, 2, true>>(s.element)
               : flat<FlatTensorCoreMainloop<64, 2, 2, true>>(s.element);
  }
  switch (flat_tiling(p, max_shared_bytes, false)) {
    case FlatTiling::k64Wide: return flat<FlatTensorCoreMainloop<64, 1, 2>>(s.element);
    case FlatTiling::k64: return flat<FlatTensorCoreMainloop<64, 2, 2>>(s.element);
    default: return flat<FlatTensorCoreMainloop<32, 1, 2>>(s.element);
  }
}

// Output channels per block of the chunked tiled variants (1-4) on `s`: on tensor cores the
// widest block the output channels fill well. 3xTF32 takes blocks of 128 channels only where
// they fit and still give every SM a block (batch-1 VGG layers: 64 blocks of 128 for 132 SMs
// took 75 us against 45 for 128 blocks of 64; where they fill it, 13-17% faster than 64,
// docs/PERF.md).
int tiled_out_block(int variant, const ConvPoolShape& s, const ConvPoolDevice& device) {
  using conv_pool_heuristics::kMidBlockMaxChannels;
  using conv_pool_heuristics::kNarrowBlockMaxChannels;
  const int out_channels = s.out_channels;
  const int narrow_or_mid = out_channels > kNarrowBlockMaxChannels ? 64 : 32;
  switch (variant) {
    case kVariantTiledFp32: return CudaCoreMainloop::kOutBlock;
    case kVariantTiledMma: return out_channels > kMidBlockMaxChannels ? 128 : narrow_or_mid;
    case kVariantTiledTf32Wide: return out_channels > kMidBlockMaxChannels ? 128 : 64;
    case kVariantTiled3xTf32:
      if (out_channels > kMidBlockMaxChannels) {
        const TilePlan wide = make_tile_plan(s, 128, true);
        if (wide.blocks >= device.sm_count && wide.smem_bytes <= device.max_shared_bytes)
          return 128;
      }
      return narrow_or_mid;
    default: return 0;
  }
}

// The kernel of a chunked tiled variant with blocks of `out_block` channels (tiled_out_block).
// `fast`: the compile-time 3x3 conv / 2x2 pool geometry (fast_path_applies). Not the flat
// variants (flat_choice).
TiledChoice tiled_choice(int variant, int out_block, bool fast) {
  switch (variant) {
    case kVariantTiledFp32:
      return {conv_pool_tiled_kernel<CudaCoreMainloop, false>, CudaCoreMainloop::kOutBlock,
              CudaCoreMainloop::kThreads};
    case kVariantTiledMma:
      if (out_block == 128) return pick<TensorCoreMainloop<128, false>>(fast);
      if (out_block == 64) return pick<TensorCoreMainloop<64, false>>(fast);
      return pick<TensorCoreMainloop<32, false>>(fast);
    case kVariantTiledTf32Wide:
      if (out_block == 128) return pick<TensorCoreMainloop<128, false, 4>>(fast);
      return pick<TensorCoreMainloop<64, false, 4>>(fast);
    case kVariantTiled3xTf32:
      if (out_block == 128) return pick<TensorCoreMainloop<128, true>>(fast);
      if (out_block == 64) return pick<TensorCoreMainloop<64, true>>(fast);
      return pick<TensorCoreMainloop<32, true>>(fast);
    default:
      return {nullptr, 0, 0};
  }
}

bool is_flat(int variant) {
  return variant == kVariantFlat || variant == kVariantTiled3xTf32Flat || is_flat_wgmma(variant);
}

// The tiling a tiled variant runs with (the fast geometry is not built for FFMA).
TilePlan plan_for(const ConvPoolShape& s, int variant, const ConvPoolDevice& device) {
  if (is_flat(variant))
    return make_flat_plan(s, flat_out_block(s, variant), device.max_shared_bytes,
                          is_flat_wgmma(variant) && s.element != kElementFloat32 ? 16 : 8);
  return make_tile_plan(s, tiled_out_block(variant, s, device),
                        variant != kVariantTiledFp32);
}

bool is_tiled(int variant) {
  return variant == kVariantTiledFp32 || variant == kVariantTiledMma ||
         variant == kVariantTiled3xTf32 || variant == kVariantTiledTf32Wide || is_flat(variant);
}

}  // namespace
}  // namespace conv_pool_mma

using namespace conv_pool_mma;

static_assert(kTiledChannelChunk == kChannelChunk, "conv_relu_maxpool_tiled.h says the chunk");


extern "C" cudaError_t conv_relu_maxpool_query_device(int device, ConvPoolDevice* info) {
  ConvPoolDevice d{};
  int major = 0, minor = 0, current = 0;
  cudaError_t err = cudaDeviceGetAttribute(&d.max_shared_bytes,
                                           cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (err != cudaSuccess) return err;
  d.compute_capability = 10 * major + minor;
  if (d.compute_capability == 90) {  // the only cluster launches: the wgmma kernels'
    err = cudaGetDevice(&current);
    if (err == cudaSuccess && current != device) err = cudaSetDevice(device);
    if (err != cudaSuccess) return err;
    wgmma_cluster_capacity(d.max_clusters);
    if (current != device) err = cudaSetDevice(current);
  }
  *info = d;
  return err;
}

const char* tiled_conv_pool_unsupported(const ConvPoolShape& s, int variant,
                                        const ConvPoolDevice& device) {
  if (is_flat_wgmma(variant)) {
    if (const char* why = wgmma_unavailable(device)) return why;
  }
  if (!is_tiled(variant)) return "unknown variant";
  if (s.pool_h > kTileRows || s.pool_w > kTileCols)
    return "the pooling window is larger than the 8 x 32 conv tile";
  const TilePlan plan = plan_for(s, variant, device);
  if (plan.smem_bytes > device.max_shared_bytes)
    return "the input halo and weights of one stage do not fit in shared memory";
  if (plan.blocks > INT32_MAX) return "the grid has more than 2^31 - 1 tiles";
  return nullptr;
}

bool flat_conv_pool_one_block_per_sm(const ConvPoolShape& s, int variant,
                                     const ConvPoolDevice& device) {
  return s.out_channels > 32 &&
         flat_tiling(plan_for(s, variant, device), device.max_shared_bytes, false) ==
             FlatTiling::k64;
}

// A wgmma variant with its own element types (the launcher never pairs them else).
static bool wgmma_variant_for(const ConvPoolShape& s, int variant) {
  return variant == kVariantWgmma ||
         (variant == kVariantTiled3xTf32Wgmma && s.element == kElementFloat32);
}

// ... and the shape inside the wgmma kernels' geometry: what the tile queries below answer for.
static bool wgmma_runs(const ConvPoolShape& s, int variant) {
  return wgmma_variant_for(s, variant) && wgmma_3x3_applies(s);
}

extern "C" int64_t conv_relu_maxpool_packed_weight_bytes(const ConvPoolShape* s,
                                                         const ConvPoolDevice* device) {
  return wgmma_packs_weight(*s, *device) ? wgmma_packed_weight_bytes(*s) : 0;
}

extern "C" int conv_relu_maxpool_wgmma_tile_origin(const ConvPoolShape* s, int variant, int tile,
                                                   int64_t* origin) {
  return wgmma_runs(*s, variant)
             ? wgmma_tile_origin(*s, tile, origin, variant == kVariantTiled3xTf32Wgmma)
             : 0;
}

static const char* flat_tiling_name(const ConvPoolShape& s, int variant,
                                    const ConvPoolDevice& device) {
  if (!is_flat(variant)) return nullptr;
  if (is_flat_wgmma(variant)) return "n64_wgmma_m64";
  switch (flat_tiling(plan_for(s, variant, device), device.max_shared_bytes,
                      is_split_flat(variant))) {
    case FlatTiling::k64Wide: return "n64_warp32x64";
    case FlatTiling::k64: return "n64_warp32x32";
    default: return "n32_warp32x32";
  }
}

// The general kernel's plan (split: its 3xTF32 form) for operands `ops` (null: NCHW) as
// "key=value ..." text into `text` (windows: 0 not windowed, 1 x' gathered, 2 x' made by the
// preparation launch's copy; general_windows.cu).
static void general_plan_text(const ConvPoolShape& s, const ConvPoolDevice& device,
                              const ConvPoolOperands* ops, bool split, char* text,
                              int capacity) {
  const general_wgmma::Plan p = general_wgmma_plan(s, device, ops, split);
  // (transposed: the plan is the transposed layer's, general_transpose.h)
  const bool transposed = general_wgmma::transpose_chosen(s, device, ops, split);
  const CopyRows rows =  // of the slice-planar copy (nhwc_copy, tma)
      conv_pool_copy_rows(transposed ? general_wgmma::transposed_shape(s) : s);
  // (2: the windowed x' is the preparation launch's copy, which the blocks then do not make)
  const int windows = !general_wgmma::windows_chosen(s, device, ops, split)  ? 0
                      : general_wgmma::windows_fused(s, device, ops, split) ? 2
                                                                              : 1;
  snprintf(text, size_t(capacity),
           "tile=%s images=%d pooled=%dx%d tiles=%lld split=%d steps=%d step_chunks=%d "
           "group_rows=%d gathered=%d halo=%dx%d phases=%d stage_bytes=%d passes=%d smem=%d "
           "blocks_per_sm=%d nhwc_copy=%d chunks=%d input=%s stages=%d persistent=%d merged=%d "
           "cluster=%d weights=%s paired=%d direct=%d read=%dx%d copy_rows=%d:%x swizzle=%d "
           "tail_n=%d registers=%d windows=%d transposed=%d self_copy=%d",
           general_wgmma::kTileSpecs[p.tile].name, p.images, p.pooled_rows, p.pooled_cols,
           static_cast<long long>(p.tiles), p.split, p.steps, p.step_chunks, p.group_rows,
           int(p.gathered_rows), p.halo_rows, p.halo_cols, __builtin_popcount(p.phase_mask),
           p.stage_bytes, p.epilogue_passes, p.smem_bytes, p.blocks_per_sm, int(p.staged_copy),
           p.chunks,
           p.input == general_wgmma::kTmaInput       ? "tma"
           : p.input == general_wgmma::kPlanarInput ? "planar"
                                                     : "pixel",
           p.stages, int(p.persistent), int(p.merged_cols), int(p.cluster_split),
           p.weights_in_place ? "in_place" : "packed", int(p.paired_pool),
           int(p.direct_pairs), p.read_rows,
           p.read_cols, rows.phases, rows.mask, p.x_swizzle, p.tail_n, int(p.split_registers),
           windows, int(transposed), int(p.self_copy && windows != 2));
}

extern "C" bool conv_relu_maxpool_variant_plan(const ConvPoolShape* s, int variant,
                                               const ConvPoolDevice* device,
                                               const ConvPoolOperands* ops,
                                               ConvPoolPlanInfo* plan) {
  if (conv_relu_maxpool_variant_name(variant, s->element) == nullptr) return false;
  *plan = ConvPoolPlanInfo{};
  plan->variant = variant;
  plan->unsupported = conv_relu_maxpool_unsupported(s, variant, device);
  plan->wgmma_split = 1;
  if (plan->unsupported == nullptr) {
    plan->workspace_bytes = conv_relu_maxpool_workspace_bytes(s, variant, device, ops);
    plan->takes_packed_weight = conv_relu_maxpool_takes_packed_weight(s, variant);
  }
  const bool split_3x = variant == kVariantTiled3xTf32Wgmma;
  if (wgmma_runs(*s, variant)) {
    plan->wgmma_tile = wgmma_tile_name(*s, split_3x);
    plan->wgmma_tiles = wgmma_tile_origin(*s, -1, nullptr, split_3x);
    if (device->compute_capability == 90) {
      plan->wgmma_split = wgmma_split(*s, *device, split_3x);
      plan->packs_weight_apart = wgmma_packs_weight_apart(*s, *device, split_3x);
    }
  }
  plan->flat_tiling = flat_tiling_name(*s, variant, *device);
  plan->out_block = is_tiled(variant) ? plan_for(*s, variant, *device).out_block : 0;
  const bool general_3x = variant == kVariantGeneral3xTf32Wgmma;
  if ((variant == kVariantGeneralWgmma || general_3x) &&
      general_wgmma_unsupported(*s, *device, general_3x) == nullptr)
    general_plan_text(*s, *device, ops, general_3x, plan->general,
                      int(sizeof(plan->general)));
  return true;
}

extern "C" cudaError_t conv_relu_maxpool_pack_weight(const ConvPoolOperands* ops,
                                                     const ConvPoolShape* s, float* packed,
                                                     const ConvPoolDevice* device,
                                                     cudaStream_t stream) {
  if (!wgmma_packs_weight(*s, *device)) return cudaErrorInvalidValue;
  return wgmma_pack_weight_launch(*ops, *s, packed, *device, stream);
}

cudaError_t direct_conv_pool_launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                    cudaStream_t stream) {
  const int64_t blocks = (s.output_elements() + kThreads - 1) / kThreads;
  const int64_t max_blocks = int64_t(1) << 20;  // grid-stride beyond this
  conv_pool_direct_kernel<<<unsigned(std::min(blocks, max_blocks)), kThreads, 0, stream>>>(ops, s);
  return cudaGetLastError();
}

cudaError_t tiled_conv_pool_launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                   int variant, const ConvPoolDevice& device,
                                   cudaStream_t stream) {
  if (!is_tiled(variant)) return cudaErrorInvalidValue;
  TilePlan plan = plan_for(s, variant, device);
  // Row vectors: 16 bytes of float32 (cp.async), or 8 bytes of 16-bit words (tiled_16bit_flat).
  plan.vector_input = (plan.fast || is_flat(variant)) &&
                      (s.element == kElementFloat32 ? vectorizable_input(ops, s)
                                                    : vectorizable_input_16bit(ops, s));
  plan.vector_weights = plan.fast && vectorizable_weights(ops, s);
  const TiledChoice choice = is_flat(variant) ? flat_choice(s, plan, variant,
                                                           device.max_shared_bytes)
                                              : tiled_choice(variant, plan.out_block, plan.fast);
  const TiledKernel kernel = choice.kernel;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         plan.smem_bytes);
  if (err != cudaSuccess) return err;
  int64_t grid = plan.blocks;
  if (plan.flat_persistent) {
    // As many blocks as are resident at once, rounded down to a multiple of the channel blocks:
    // each loops over tiles blockIdx.x, + gridDim.x, ..., which then all have the channel block
    // of its first (the fastest index of tile_coords), whose weights it stages once.
    int per_sm = 0;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, choice.threads,
                                                        plan.smem_bytes);
    if (err != cudaSuccess) return err;
    grid = std::min<int64_t>(grid, int64_t(std::max(per_sm, 1)) * device.sm_count);
    grid = std::max<int64_t>(grid / plan.channel_blocks, 1) * plan.channel_blocks;
  }
  kernel<<<unsigned(grid), choice.threads, plan.smem_bytes, stream>>>(ops, s, plan);
  return cudaGetLastError();
}
