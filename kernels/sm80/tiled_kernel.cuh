// The chunked tiled kernel (conv_pool_tiled_kernel: a 3-stage pipeline over 8-channel chunks).
#pragma once

#include "tiled_epilogue.cuh"
#include "tiled_mainloop.cuh"

namespace conv_pool_mma {

template <class Mainloop, bool kFast>
__global__ void __launch_bounds__(Mainloop::kThreads, 1)
    conv_pool_tiled_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const TilePlan p) {
  extern __shared__ __align__(16) float smem[];
  const SmemLayout smem_layout = carve_smem(smem, p);
  const TileCoords tc = tile_coords<kFast>(s, p);
  const StageGeometry<kFast> geometry(s, p, tc);

  // Gather table of one weight chunk: entry e = (channel c, tap) ->
  // {offset in global memory from (k, c0), offset in the staged row}.
  const int taps = s.taps();
  for (int e = threadIdx.x; e < kChannelChunk * taps; e += Mainloop::kThreads) {
    const int c = e / taps, tap = e - c * taps;
    const int r = tap / s.kernel_w, q = tap - r * s.kernel_w;
    smem_layout.weight_gather[e] = make_int2(
        int(c * ops.weight_stride[1] + r * ops.weight_stride[2] + q * ops.weight_stride[3]),
        c * p.taps_padded + tap);
  }
  for (int k = threadIdx.x; k < Mainloop::kOutBlock; k += Mainloop::kThreads) {
    const int channel = tc.channel0 + k;
    smem_layout.bias[k] =
        (ops.bias != nullptr && channel < s.out_channels) ? ops.bias[channel * ops.bias_stride] : 0.f;
  }
  __syncthreads();

  Mainloop mainloop;
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < p.channel_chunks)
      load_stage<Mainloop::kThreads, kFast>(ops, s, p, tc, smem_layout.weight_gather, st,
                        smem_layout.pipeline + st * p.stage_floats);
    cp_async_commit();
  }
  for (int chunk = 0; chunk < p.channel_chunks; ++chunk) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage `chunk` visible to all; stage `chunk - 1` free to refill
    const int next = chunk + kStages - 1;
    if (next < p.channel_chunks)
      load_stage<Mainloop::kThreads, kFast>(ops, s, p, tc, smem_layout.weight_gather, next,
                        smem_layout.pipeline + (next % kStages) * p.stage_floats);
    cp_async_commit();
    mainloop.compute(smem_layout.pipeline + (chunk % kStages) * p.stage_floats, geometry);
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done reading the stages: reuse them as the tile

  float* tile = smem_layout.pipeline;
  if constexpr (kFast) {
    mainloop.store_pooled_2x2(tile, smem_layout.bias);
    __syncthreads();
    store_pooled_tile<Mainloop::kThreads>(ops, s, p, tc, tile);
  } else {
    mainloop.store(tile, smem_layout.bias);
    __syncthreads();
    pool_and_store<Mainloop::kThreads>(ops, s, p, tc, tile);
  }
}

}  // namespace conv_pool_mma
