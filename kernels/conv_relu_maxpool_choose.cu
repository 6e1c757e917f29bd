// The automatic choice of variant (conv_relu_maxpool_choose): the order in which the variants
// are tried for a shape, element type, precision and device, each with the measurement that put
// it there (docs/PERF.md has the runs). What each variant can run is the registry's
// (conv_relu_maxpool_registry.cu); the tiles, splits and plans inside a variant are chosen by
// its own host code (conv_relu_maxpool_wgmma.cu, hopper/general_wgmma.cu, ...).
#include <algorithm>

#include "conv_pool_heuristics.h"
#include "conv_pool_shape.h"
#include "conv_relu_maxpool.h"
#include "conv_relu_maxpool_small.h"
#include "conv_relu_maxpool_tiled.h"

using namespace conv_pool_heuristics;

extern "C" int conv_relu_maxpool_choose(const ConvPoolShape* s, int config, bool allow_tf32,
                                        const ConvPoolDevice* device) {
  if (config != kVariantAuto) return config;
  auto runs = [&](int variant) {
    return conv_relu_maxpool_unsupported(s, variant, device) == nullptr;
  };
  // Fewer than 8 input channels off the 3x3 / 2x2 path: the flat kernel `flat` (mma.sync), or
  // its wgmma mainloop `flat_wgmma` where the mma.sync one's blocks of 64 channels run one per
  // SM (the reasons are at the float32 rule below); -1 where the flat kernel does not apply.
  auto flat_choice = [&](int flat, int flat_wgmma) {
    if (s->in_channels >= kTiledChannelChunk || fast_path_applies(*s) || !runs(flat)) return -1;
    return flat_conv_pool_one_block_per_sm(*s, flat, *device) && runs(flat_wgmma) ? flat_wgmma
                                                                                 : flat;
  };
  // float16 / bfloat16: on Hopper the wgmma kernel for the fast-path geometry (any channel
  // counts: with at most 32 output channels its N = 64 blocks multiply zeros, not measured
  // against tiled_16bit_mma), else the mma.sync kernel wherever it fits, else the direct one
  // (allow_tf32 does not apply: the products are exact in fp32 either way).
  // Off the fast path, as for float32: the CUDA-core kernel for at most 16 output channels, the
  // flat reduction for fewer than 8 input channels (tiled_16bit_mma pads channels to 16).
  // A first layer (a reduction of at most 32, e.g. RGB x 3 x 3, into 17-64 channels under a
  // 2x2 / 2 pool) on Hopper: the stem kernel (rgb_stem, docs/PERF.md). Elsewhere, and for
  // at most 16 channels (the small kernels' range), what was measured before it.
  // The stem kernel takes images of at most kStemMaxInChannels channels (conv_pool_heuristics.h
  // says why).
  const bool stem = device->compute_capability == 90 && s->out_channels > 16 &&
                    s->in_channels <= kStemMaxInChannels;
  // Few-channel first layers of 3 x 3 to 7 x 7 taps on Hopper that fill the SMs
  // (kFewChannelGeneralMinTaps; in float32 NCHW from 5 x 5): the general kernel rather than
  // the flat ones.
  const int64_t tile_pixels = 256, tile_channels = 64;
  const bool layout_16bit = s->channels_last && s->element != kElementFloat32;
  const bool float32_nchw = !s->channels_last && s->element == kElementFloat32;
  const bool few_channel_general =
      device->compute_capability == 90 && s->in_channels < kTiledChannelChunk &&
      !fast_path_applies(*s) &&
      s->out_channels >= (layout_16bit ? kFewChannelGeneralMinOut16ChannelsLast
                                       : kNarrowBlockMaxChannels + 1) &&
      s->taps() >= (float32_nchw ? kFewChannelGeneralMinTapsFloat32Nchw
                                 : kFewChannelGeneralMinTaps) &&
      s->taps() <= kFewChannelGeneralMaxTaps &&
      std::max(s->stride_h, s->stride_w) <=
          (layout_16bit ? kFewChannelGeneralMaxStride16ChannelsLast : kFewChannelGeneralMaxStride) &&
      int64_t(s->batch) * s->conv_height * s->conv_width *
              ((s->out_channels + tile_channels - 1) / tile_channels) >=
          tile_pixels * device->sm_count &&
      runs(kVariantGeneralWgmma);
  // The 3 x 3 / 2 x 2 path's odd conv outputs on Hopper (kFastPathOddGeneralMinBatch).
  const bool odd_general = device->compute_capability == 90 && fast_path_applies(*s) &&
                           s->batch >= kFastPathOddGeneralMinBatch &&
                           (s->conv_height % 2 != 0 || s->conv_width % 2 != 0) &&
                           runs(kVariantGeneralWgmma);
  if (s->element != kElementFloat32) {
    if (stem && runs(kVariantStem)) return kVariantStem;
    if (odd_general) return kVariantGeneralWgmma;
    if (runs(kVariantWgmma)) return kVariantWgmma;
    if (runs(kVariantSmall)) return kVariantSmall;
    if (few_channel_general) return kVariantGeneralWgmma;
    // As for float32 below: the flat kernel, on its wgmma mainloop where that measured faster.
    if (const int flat = flat_choice(kVariantFlat, kVariantFlatWgmma); flat >= 0)
      return flat;
    // Hopper, everything else: the general wgmma kernel (any kernel size, stride, dilation and
    // pool), which streams the weights through its stages.
    if (runs(kVariantGeneralWgmma)) return kVariantGeneralWgmma;
    return runs(kVariantTiledMma) ? kVariantTiledMma : kVariantDirect;
  }
  // At most 16 output channels and a short reduction: tensor-core tiles would multiply mostly
  // padding; the CUDA-core kernel computes every channel of a window per thread, in fp32. With
  // TF32 allowed, at most 8 channels and 2x2 / stride 2 windows, the same kernel's tensor-core
  // loop (small_tf32), unless its CUDA-core patch loop applies: that one measured as fast or
  // faster (LeNet 16.7 us against 17.7), the generic loop slower (a 3-channel 5x5 / stride 2
  // layer: 65 us against 36; docs/PERF.md).
  if (allow_tf32 && runs(kVariantSmallTf32) && !small_conv_pool_patch_loop(*s))
    return kVariantSmallTf32;
  if (runs(kVariantSmall)) return kVariantSmall;
  if (allow_tf32 && stem && runs(kVariantStem)) return kVariantStem;
  // fp32-accurate tensor-core paths (3xTF32) as the TF32 ones below: the flat reduction for
  // fewer than 8 input channels off the fast path (AlexNet's first layer took `direct`, whose
  // 8-channel tiles do not fit its 11 x 11 halo), the 3 x 3 wgmma kernel on its path, then on
  // Hopper the general kernel's 3xTF32 form wherever it runs, else the 8-channel mma.sync
  // chunks. With x split in registers (no split copy) the general form took 0.35-0.90x of
  // tiled_3xtf32's kernel time on each of the 8 zoo and fuzz layers that the former reduction
  // and channel thresholds gave tiled_3xtf32 (16 -> 64 to 48 -> 104 1 x 1 layers, reductions
  // of 16-48 terms; 3-24 outputs over many tiles), and tiled_3xtf32 took 1.55x its time on
  // random narrow layers of few tiles (H100, docs/PERF.md).
  if (!allow_tf32) {
    if (s->in_channels < kTiledChannelChunk && !fast_path_applies(*s) &&
        runs(kVariantTiled3xTf32Flat))
      return kVariantTiled3xTf32Flat;
    if (runs(kVariantTiled3xTf32Wgmma)) return kVariantTiled3xTf32Wgmma;
    if (runs(kVariantGeneral3xTf32Wgmma)) return kVariantGeneral3xTf32Wgmma;
    if (runs(kVariantTiled3xTf32)) return kVariantTiled3xTf32;
    return runs(kVariantTiled3xTf32Flat) ? kVariantTiled3xTf32Flat : kVariantDirect;
  }
  // Fewer than 8 input channels off the fast path: the flattened reduction skips the
  // zero channels an 8-channel chunk would multiply, and it fits large kernels
  // (lenet_c1 0.41 -> 0.12 ms, alexnet_c1 6.3 -> 0.16 ms on the H200). On the fast
  // path the pipelined chunks measured faster still (rgb_stem 0.60 vs 0.81 ms).
  // On Hopper, where the mma.sync flat kernel's blocks of 64 channels run one per SM (large
  // kernels: its 16 warps latency-bound, docs/PERF.md), its wgmma mainloop: AlexNet's first
  // layer 97 -> 77 us, ResNet's 7 x 7 / 2 stem 269 -> 234. Where two blocks share an SM (5 x 5
  // and 3 x 3 kernels over few channels) and for at most 32 channels (half of the wgmma's N = 64
  // would be zeros) the mma.sync one measured faster (11-54%).
  if (few_channel_general) return kVariantGeneralWgmma;
  if (const int flat = flat_choice(kVariantFlat, kVariantFlatWgmma); flat >= 0)
    return flat;
  // Hopper: the wgmma kernel for the fast-path geometry, with blocks of 128 output channels, or
  // of 64 for up to 64 (rgb_stem: 0.25 ms vs 0.60 ms for tiled_tf32_16w, same process).
  // Also for 32 or fewer, where half its N = 64 is zeros: tiled_tf32's blocks of 32 do no less
  // work per output channel block and took 10-46% longer on four layers of 24 and 32 output
  // channels (as did tiled_3xtf32 against tiled_3xtf32_wgmma, 17-31% on the
  // H200, docs/PERF.md).
  if (odd_general) return kVariantGeneralWgmma;
  if (runs(kVariantWgmma)) return kVariantWgmma;
  // Hopper, everything else: the general wgmma kernel.
  if (runs(kVariantGeneralWgmma)) return kVariantGeneralWgmma;
  // 16 warps for 33..64 output channels on the fast path (conv_pool_heuristics.h).
  const bool wide = s->out_channels > kNarrowBlockMaxChannels &&
                    s->out_channels <= kMidBlockMaxChannels && fast_path_applies(*s);
  const int chunked = wide ? kVariantTiledTf32Wide : kVariantTiledMma;
  if (runs(chunked)) return chunked;
  if (runs(kVariantFlat)) return kVariantFlat;
  return kVariantDirect;
}
