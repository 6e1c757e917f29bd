// The general kernel's preparation kernels, run in one launch before it (general_wgmma.cu,
// prepare): the weights packed into the staged layout, the split reduction's counters zeroed,
// the slice-planar copy of x (conv_pool_layout.cuh); and the 3xTF32 form's NHWC copy of x in
// big and small TF32 parts.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../conv_pool_device.cuh"
#include "../conv_pool_layout.cuh"
#include "../conv_pool_wgmma.cuh"
#include "general_plan.h"
#include "general_windows.cuh"

namespace general_wgmma {
namespace {

// The weights in the staged layout, [channel block][chunk run][tap][chunk][slice][n][16 bytes],
// zeros past the channels (and for a short last run's missing chunks), a narrow last block
// (Plan::tail_n) tail_n rows a slice: one thread per 16 bytes.
// 3xTF32 (p.split_operands, Raw = float): packed chunk j holds chunk j / 3 of the weight, its
// big parts (j % 3 = 0, 1) or small parts (2); in the registers form (p.split_registers) each
// chunk two parts, [chunk][part][slice][n][16 bytes], big then small.
template <class Raw>
struct PackJob {
  const Raw* weight;
  int64_t ws0, ws1, ws2, ws3;
  int n;  // the tile's output channels
  Raw* packed;
  int64_t units;  // 16-byte units of the packed weights (0: read in place, nothing to pack)
  // Where a channel's taps are one contiguous run (OIHW, also seen transposed), the threads
  // take the units tap first, so that a warp's loads of a channel read that run (the packed
  // order, rows first, gives each lane of a load its own output channel's row: a sector for
  // every 2 or 4 bytes); where a unit's channels are 16 aligned bytes of the weight (OHWI),
  // one load. Both off under $CONV_POOL_GENERAL_COALESCED_PACK=0 (general_wgmma.cu, prepare).
  bool taps_first, vector_loads;
};

// Block `block` of `blocks` packing blocks (256 threads), grid-stride over the 16-byte units.
template <class Raw, int kSliceChannels>
__device__ __forceinline__ void pack_weights(const PackJob<Raw>& job, const ConvPoolShape& s,
                                             const Plan& p, int64_t block, int64_t blocks) {
  const Raw* weight = job.weight;
  const int64_t ws0 = job.ws0, ws1 = job.ws1, ws2 = job.ws2, ws3 = job.ws3;
  const int n = job.n, taps = s.taps();
  const int parts = p.split_registers ? 2 : 1;
  Raw* packed = job.packed;
  // Units of the blocks of n rows, before a narrow last block's.
  const int64_t full_units = p.tail_n > 0 ? job.units - int64_t(p.tail_n) * 2 * p.step_chunks *
                                                            taps * p.chunk_steps
                                          : job.units;
  const int64_t block_units = int64_t(n) * 2 * parts * p.step_chunks * taps * p.chunk_steps;
  for (int64_t i = block * blockDim.x + threadIdx.x; i < job.units; i += blocks * blockDim.x) {
    // Thread item i: the packed unit's coordinates, the tap first where job.taps_first.
    const bool narrow = i >= full_units;
    const int rows = narrow ? p.tail_n : n;
    int64_t rest = narrow ? i - full_units : i;
    int tap = 0;
    if (job.taps_first) {
      tap = int(rest % taps);
      rest /= taps;
    }
    const int k_in_block = int(rest % rows);
    rest /= rows;
    const int slice = int(rest % 2);
    rest /= 2;
    int part = 0;
    if (p.split_registers) {
      part = int(rest % 2);
      rest /= 2;
    }
    const int chunk_in_run = int(rest % p.step_chunks);
    rest /= p.step_chunks;
    if (!job.taps_first) {
      tap = int(rest % taps);
      rest /= taps;
    }
    const int run = int(rest % p.chunk_steps);
    const int block = narrow ? p.channel_blocks - 1 : int(rest / p.chunk_steps);
    // The unit's index in the packed order: the item itself unless the tap came first.
    int64_t u = i;
    if (job.taps_first) {
      const int64_t in_block =
          ((((int64_t(run) * taps + tap) * p.step_chunks + chunk_in_run) * parts + part) * 2 +
           slice) * rows + k_in_block;
      u = narrow ? full_units + in_block : block * block_units + in_block;
    }
    const int k = block * n + k_in_block;
    int chunk = run * p.step_chunks + chunk_in_run;
    if (p.split_operands && !p.split_registers) {
      part = chunk % 3;
      chunk /= 3;
    }
    const int r = tap / s.kernel_w, q = tap % s.kernel_w;
    const int c0 = (chunk * 2 + slice) * kSliceChannels;
    alignas(16) Raw values[kSliceChannels];
    if (job.vector_loads) {
      // (The host's check: every 16-byte channel group lies wholly inside or past the
      // weight's input channels, at a 16-byte aligned address.)
      uint4 raw = make_uint4(0, 0, 0, 0);
      if (k < s.out_channels && c0 < s.in_channels)
        raw = *reinterpret_cast<const uint4*>(weight + k * ws0 + c0 + r * ws2 + q * ws3);
      *reinterpret_cast<uint4*>(values) = raw;
    } else {
#pragma unroll
      for (int e = 0; e < kSliceChannels; ++e) {
        const int c = c0 + e;
        values[e] = k < s.out_channels && c < s.in_channels
                        ? weight[k * ws0 + c * ws1 + r * ws2 + q * ws3]
                        : Raw(0);
      }
    }
    if constexpr (std::is_same_v<Raw, float>) {
      if (p.split_operands) {
#pragma unroll
        for (int e = 0; e < kSliceChannels; ++e) {
          float big, small;
          split_tf32_operand(values[e], big, small);
          values[e] = (p.split_registers ? part == 1 : part == 2) ? small : big;
        }
      }
    }
    *reinterpret_cast<uint4*>(packed + u * kSliceChannels) =
        *reinterpret_cast<const uint4*>(values);
  }
}

// The launch's preparation, one grid of independent jobs: blocks [0, pack_blocks) zero the split
// reduction's tile counters and pack the weights; the blocks after them (if any) make the
// slice-planar copy of x, one item a thread (kWindows: of a windowed layer's x' from the
// layer's x through `windows`, general_windows.cuh; its own instance, so that the plain
// copy's code carries no window map). One launch where there were up to three: on layers of
// a few tiles each launch costs microseconds of latency (docs/PERF.md).
template <class Raw, int kSliceChannels, bool kWindows>
__global__ void __launch_bounds__(256)
    prepare_kernel(const PackJob<Raw> pack, const ConvPoolShape s, const Plan p,
                   int64_t pack_blocks, const ToSlices<Raw> copy, const WindowSource windows,
                   uint32_t* counters, int counter_words) {
  // The general kernel, when launched as this launch's programmatic dependent
  // ($CONV_POOL_GENERAL_PDL=1), may start its blocks' setup now: it waits for this launch's
  // writes before reading them.
  launch_dependents();
  if (blockIdx.x < pack_blocks) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < counter_words;
         i += pack_blocks * blockDim.x)
      counters[i] = 0;
    pack_weights<Raw, kSliceChannels>(pack, s, p, blockIdx.x, pack_blocks);
    return;
  }
  const int64_t item = (blockIdx.x - pack_blocks) * int64_t(blockDim.x) + threadIdx.x;
  if constexpr (kWindows)
    to_slices_item(copy, item, [&](int64_t, int h, int w) {
      return window_source(windows, copy.stride[0], copy.stride[2], copy.stride[3], h, w);
    });
  else
    to_slices_item(copy, item);
}

// 3xTF32's NHWC copy of x: staged_channels a pixel, staged chunk j holding chunk j / 3 of x
// (8 channels), its big parts (j % 3 = 0, 2) or small parts (1); zeros past the channels.
// A tiled transpose (blockDim 32 x 8, grid: 32 pixels x 32 channels of x a block): x read
// along the pixels (load_channel_tile), then each pixel's 96 staged floats of the block's
// channels as 16-byte stores, consecutive threads along a pixel's run. One thread per staged
// element reading x across its channel planes took 2.4-2.6x as long (docs/PERF.md).
__global__ void __launch_bounds__(256)
    split_to_channels_last_kernel(const float* x, int64_t xs0, int64_t xs1, int64_t xs2,
                                  int64_t xs3, ConvPoolShape s, int staged_channels,
                                  float* staged) {
  __shared__ float tile[32][33];
  const int64_t pixels = int64_t(s.batch) * s.in_height * s.in_width;
  const int64_t pixel0 = int64_t(blockIdx.x) * 32;
  const int channel0 = blockIdx.y * 32;
  load_channel_tile<8>(x, xs0, xs1, xs2, xs3, pixels, s.in_channels, s.in_height,
                       s.in_width, pixel0, channel0, tile);
  __syncthreads();
  // The block's chunks of x (up to 4; staged_channels / 3 is x's channels rounded up to a
  // chunk), 6 16-byte units of a pixel's run each: staged chunk u / 2 (part (u / 2) % 3), half
  // u % 2 of it.
  const int units = std::min(4, (staged_channels / 3 - channel0) / 8) * 6;
  float* run = staged + channel0 / 8 * 24;
  for (int i = threadIdx.y * 32 + threadIdx.x; i < 32 * units; i += 256) {
    const int px = i / units, unit = i - px * units;
    if (pixel0 + px >= pixels) break;
    const int part = unit / 2 % 3, c = unit / 6 * 8 + unit % 2 * 4;
    float4 value;
    float* lanes = &value.x;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float big, small;
      split_tf32_operand(tile[c + e][px], big, small);
      lanes[e] = part == 1 ? small : big;
    }
    *reinterpret_cast<float4*>(run + (pixel0 + px) * staged_channels + unit * 4) = value;
  }
}

}  // namespace
}  // namespace general_wgmma
