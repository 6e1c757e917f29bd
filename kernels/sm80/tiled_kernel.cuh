// The chunked tiled kernel (conv_pool_tiled_kernel: a 3-stage pipeline over 8-channel chunks)
// and its pooling epilogues, general and the 2 x 2 fast path's.
#pragma once

#include "tiled_mainloop.cuh"

namespace conv_pool_mma {

// Epilogue: pooled = relu(max over the window's valid conv pixels), stored NCHW in the
// element type E; consecutive threads store consecutive columns.
template <int kBlockThreads, class E = Float32>
__device__ __forceinline__ void pool_and_store(const ConvPoolOperands& ops,
                                               const ConvPoolShape& s, const TilePlan& p,
                                               const TileCoords& tc, const float* tile) {
  const conv_pool_epilogue::PooledTile t{tc.image,     tc.channel0,   tc.out_row0,
                                         tc.out_col0,  tc.conv_row0,  tc.conv_col0,
                                         p.out_block,  p.pooled_rows, p.pooled_cols};
  auto* out = ElementOperands<E>::out(ops);
  conv_pool_epilogue::pool_tile<kBlockThreads>(
      s, t, tile, [&](int64_t index, float value) { out[index] = E::from_float(value); });
}

// Fast-path epilogue, second half: the pooled tile (store_pooled_2x2) to global
// memory, consecutive threads on consecutive columns. Every 2x2 window lies inside
// the conv output (the plan guarantees it), so only the tile's tails are masked.
template <int kBlockThreads>
__device__ __forceinline__ void store_pooled_tile(const ConvPoolOperands& ops,
                                                  const ConvPoolShape& s, const TilePlan& p,
                                                  const TileCoords& tc, const float* pooled) {
  constexpr int kPooledCols = kTileCols / 2, kPooledTile = kPooledCols * kTileRows / 2;
  for (int idx = threadIdx.x; idx < p.out_block * kPooledTile; idx += kBlockThreads) {
    const int pooled_col = idx % kPooledCols;
    const int pooled_row = (idx / kPooledCols) % (kTileRows / 2);
    const int k = idx / kPooledTile;
    const int out_row = tc.out_row0 + pooled_row, out_col = tc.out_col0 + pooled_col;
    const int channel = tc.channel0 + k;
    if (out_row >= s.out_height || out_col >= s.out_width || channel >= s.out_channels) continue;
    const int64_t out_index =
        ((tc.image * s.out_channels + channel) * s.out_height + out_row) * int64_t(s.out_width) +
        out_col;
    ops.out[out_index] = pooled[k * kPooledRow + pooled_row * kPooledCols + pooled_col];
  }
}

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
