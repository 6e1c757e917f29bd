// The general Hopper kernel's epilogue: the tile's accumulators -> shared memory -> bias,
// ReLU and max-pool over any window, stride, padding and ceil mode -> the output, in any
// layout (Plan::out_stride; NCHW and channels-last are the two the binding makes).
//
// The conv tile is staged [channel][pixel] (fp32, tile_pitch floats a channel: = 4 mod 32, so
// that a warp's accumulator stores, 8 pixels x 4 channel pairs, hit 32 banks), n /
// epilogue_passes channels at a time in the pipeline's bytes. Each pooled output takes the
// maximum over its window's pixels that lie inside the conv output (NaN wins, as in PyTorch;
// a window always holds one: PyTorch's padding is at most half the window and a ceil-mode
// window starts inside), then bias and ReLU (the maximum commutes with both; 16-bit outputs
// round once, and rounding is monotonic).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "general_mainloop.cuh"

namespace general_wgmma {

// Accumulators of channels [pass x pass_channels, + pass_channels) -> tile. Row 16 w + g of a
// square's M = 64 is its pixel (2 w, g), row 16 w + g + 8 pixel (2 w + 1, g) (w: warp of the
// warpgroup, g = lane / 4); accumulator 4 j + v holds channel 8 j + 2 (lane % 4) + v % 2 of
// the first (v < 2) or the second.
template <int kTileId>
__device__ __forceinline__ void stage_accumulators(
    const float (&acc)[Tile<kTileId>::kSquaresPerGroup][Tile<kTileId>::kAccs], float* tile,
    int tile_pitch, int pass, int pass_channels) {
  using T = Tile<kTileId>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warpgroup = warp / 4, warp_in_group = warp % 4;
  const int g = lane / 4, pair = lane % 4;
  const int first = pass * pass_channels, last = first + pass_channels;
#pragma unroll
  for (int m = 0; m < T::kSquaresPerGroup; ++m) {
    const int square = warpgroup * T::kSquaresPerGroup + m;
    const int row = (square / T::kSquareCols) * 8 + 2 * warp_in_group;
    const int pixel = row * T::kCols + (square % T::kSquareCols) * 8 + g;
#pragma unroll
    for (int j = 0; j < T::kN / 8; ++j) {
      const int channel = 8 * j + 2 * pair;
      if (channel < first || channel >= last) continue;
      float* c = tile + (channel - first) * tile_pitch + pixel;
      c[0] = acc[m][4 * j];
      c[tile_pitch] = acc[m][4 * j + 1];
      c[T::kCols] = acc[m][4 * j + 2];
      c[tile_pitch + T::kCols] = acc[m][4 * j + 3];
    }
  }
}

// Pooled outputs of channels [pass x pass_channels, + pass_channels) of the tile from the
// staged conv tile: one position's window bounds and output address are worked out once for
// the channels a thread walks. NCHW-like outputs: thread i takes pooled position i % positions
// of channels i / positions, + k_stride, ... (consecutive threads on consecutive output
// columns). Channels-last outputs (unit channel stride): channel i % pass_channels of position
// i / pass_channels (consecutive threads on consecutive channels; pass_channels is a power of
// two).
template <class E, int kTileId>
__device__ __forceinline__ void pool_position(const ConvPoolShape& s, const Plan& p,
                                              const ConvPoolOperands& ops, const TileOrigin& o,
                                              const float* tile, const float* bias,
                                              int position, int k, int k_stride, int channels,
                                              int channel_base, int bias_base) {
  using T = Tile<kTileId>;
  // Image `image` of the tile's (images side by side: its conv columns start at image x
  // kCols / images).
  int image = 0;
  if (p.images > 1) {
    const int image_positions = p.pooled_rows * p.pooled_cols;
    image = position / image_positions;
    position -= image * image_positions;
  }
  const int pooled_row = position / p.pooled_cols;
  const int pooled_col = position - pooled_row * p.pooled_cols;
  const int out_row = o.out_row0 + pooled_row, out_col = o.out_col0 + pooled_col;
  if (out_row >= s.out_height || out_col >= s.out_width || o.image + image >= s.batch) return;
  const int row_begin = max(pooled_row * s.pool_stride_h, -o.conv_row0);
  const int row_end = min(pooled_row * s.pool_stride_h + s.pool_h, s.conv_height - o.conv_row0);
  const int col_begin = max(pooled_col * s.pool_stride_w, -o.conv_col0);
  const int col_end = min(pooled_col * s.pool_stride_w + s.pool_w, s.conv_width - o.conv_col0);
  typename E::Raw* out = ElementOperands<E>::out(ops) + (o.image + image) * p.out_stride[0] +
                         int64_t(channel_base) * p.out_stride[1] +
                         int64_t(out_row) * p.out_stride[2] +
                         int64_t(out_col) * p.out_stride[3];
  const float* window = tile + row_begin * T::kCols + image * (T::kCols / p.images) + col_begin;
  for (; k < channels; k += k_stride) {
    const float* plane = window + k * p.tile_pitch;
    float best = -INFINITY;
    for (int r = 0; r < row_end - row_begin; ++r)
      for (int c = 0; c < col_end - col_begin; ++c)
        best = max_keeping_nan(best, plane[r * T::kCols + c]);
    out[int64_t(k) * p.out_stride[1]] =
        E::from_float(relu_keeping_nan(best + bias[bias_base + k]));
  }
}

template <class E, int kTileId>
__device__ __forceinline__ void pool_tile(const ConvPoolShape& s, const Plan& p,
                                          const ConvPoolOperands& ops, const TileOrigin& o,
                                          const float* tile, const float* bias, int pass,
                                          int pass_channels) {
  const int positions = p.images * p.pooled_rows * p.pooled_cols;
  const int bias_base = pass * pass_channels;
  const int channel_base = o.channel0 + bias_base;
  const int channels = min(pass_channels, s.out_channels - channel_base);
  if (p.out_stride[1] == 1) {
    const int shift = __ffs(pass_channels) - 1;
    for (int i = threadIdx.x; i < positions * pass_channels; i += kThreads)
      pool_position<E, kTileId>(s, p, ops, o, tile, bias, i >> shift, i & (pass_channels - 1),
                                pass_channels, channels, channel_base, bias_base);
  } else if (positions <= kThreads) {
    const int k_stride = kThreads / positions;
    const int k = threadIdx.x / positions;
    if (k < k_stride)
      pool_position<E, kTileId>(s, p, ops, o, tile, bias, threadIdx.x - k * positions, k,
                                k_stride, channels, channel_base, bias_base);
  } else {
    for (int position = threadIdx.x; position < positions; position += kThreads)
      pool_position<E, kTileId>(s, p, ops, o, tile, bias, position, 0, 1, channels,
                                channel_base, bias_base);
  }
}

// The tile's bias (n floats, zeros past the channels and where there is none) into shared
// memory, by threads 0 .. n - 1.
template <class E, int kTileId>
__device__ __forceinline__ void load_bias(const ConvPoolShape& s, const ConvPoolOperands& ops,
                                          const TileOrigin& o, float* bias) {
  if (threadIdx.x < Tile<kTileId>::kN) {
    const int channel = o.channel0 + int(threadIdx.x);
    const typename E::Raw* b = ElementOperands<E>::bias(ops);
    bias[threadIdx.x] = b != nullptr && channel < s.out_channels
                            ? E::to_float(b[int64_t(channel) * ops.bias_stride])
                            : 0.f;
  }
}

// The epilogue of the kThreads threads that hold the accumulators: in epilogue_passes passes
// of pass_channels (n / epilogue_passes) channels, the accumulators into the conv tile, then
// bias, ReLU, max-pool and the store; sync() is their barrier.
template <class E, int kTileId, class Sync>
__device__ __forceinline__ void pool_accumulators(
    const ConvPoolShape& s, const Plan& p, const ConvPoolOperands& ops, const TileOrigin& o,
    const float (&acc)[Tile<kTileId>::kSquaresPerGroup][Tile<kTileId>::kAccs], float* conv_tile,
    const float* bias, int pass_channels, Sync sync) {
  for (int pass = 0; pass < p.epilogue_passes; ++pass) {
    if (pass > 0) sync();  // the last pass's pooling read the tile
    stage_accumulators<kTileId>(acc, conv_tile, p.tile_pitch, pass, pass_channels);
    sync();
    pool_tile<E, kTileId>(s, p, ops, o, conv_tile, bias, pass, pass_channels);
  }
}

}  // namespace general_wgmma
