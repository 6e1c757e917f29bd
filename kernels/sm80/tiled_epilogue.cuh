// The sm_80 kernels' pooling epilogues: the general one (any window, the tiled and flat kernels)
// and the second half of the tiled kernel's 2 x 2 fast path.
#pragma once

#include "tiled_tile.cuh"

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

}  // namespace conv_pool_mma
