// Pieces shared by the mma.sync kernels of conv_relu_maxpool.cu (fp32 operands) and
// conv_relu_maxpool_half.cu (16-bit operands), which both end in an fp32 tile of 8 x 32 conv
// outputs per output channel in shared memory, and by their two `direct` kernels (the
// definition, one pooled output per thread). Element types only enter through the callers'
// load and store functions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "conv_pool_device.cuh"
#include "conv_pool_shape.h"

namespace conv_pool_epilogue {

constexpr int kTileRows = 8;    // conv rows of a block tile
constexpr int kTileCols = 32;   // conv cols of a block tile
// m16n8 mma tiles of 16 pixels in a block tile (16 consecutive conv columns of one row each).
constexpr int kTileMTiles = kTileRows * kTileCols / 16;
// Row of the fp32 epilogue tile [channel][pixel]: 260 = 4 (mod 32) makes the accumulator
// stores of one warp (8 pixels x 4 channel pairs) hit 32 different banks.
constexpr int kRow = kTileRows * kTileCols + 4;

// Zeroes the m16n8 accumulators of a warp tile (a mainloop's starting state).
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void zero_mma_accumulators(float (&acc)[kMTiles][kNTiles][4]) {
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int j = 0; j < kNTiles; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.f;
}

// m16n8 accumulators (rows = pixels, cols = channels; warps 16 / kMTiles along the pixels, each
// kMTiles consecutive m-tiles, the rest along the channels) + bias -> tile[channel][pixel].
template <int kMTiles, int kNTiles, int kWarpChannels>
__device__ __forceinline__ void store_mma_accumulators(const float (&acc)[kMTiles][kNTiles][4],
                                                       float* tile, const float* bias) {
  constexpr int kWarpsM = kTileMTiles / kMTiles;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = warp % kWarpsM, warp_n = warp / kWarpsM;
  const int group = lane / 4, thread_in_group = lane % 4;
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      const int pixel = (warp_m * kMTiles + i) * 16 + group;
      const int channel = warp_n * kWarpChannels + j * 8 + 2 * thread_in_group;
      tile[channel * kRow + pixel] = acc[i][j][0] + bias[channel];
      tile[(channel + 1) * kRow + pixel] = acc[i][j][1] + bias[channel + 1];
      tile[channel * kRow + pixel + 8] = acc[i][j][2] + bias[channel];
      tile[(channel + 1) * kRow + pixel + 8] = acc[i][j][3] + bias[channel + 1];
    }
}

// Where a block's tile sits: image, first output channel, first pooled output, and the conv
// pixel at tile position (0, 0) (may be negative: pool padding).
struct PooledTile {
  int64_t image;
  int channel0, out_row0, out_col0, conv_row0, conv_col0;
  int out_block, pooled_rows, pooled_cols;  // the tile's extent in channels and pooled outputs
};

// Every pooled output of the tile from the fp32 epilogue tile: relu(max over the window's conv
// pixels inside the conv output; NaN wins, as in PyTorch), handed to store(NCHW index, value).
template <int kBlockThreads, class Store>
__device__ __forceinline__ void pool_tile(const ConvPoolShape& s, const PooledTile& t,
                                          const float* tile, Store store) {
  // Thread i takes pooled position i % positions (pooled_col fastest: consecutive threads store
  // consecutive columns) of channels i / positions, + k_stride, ...: the window's bounds and the
  // output index are worked out once per tile, not per output (two run-time divisions an output,
  // ~20 instructions each, were a fifth of the flat kernels' epilogue, docs/PERF.md). The
  // last kBlockThreads % positions threads have no position.
  static_assert(kBlockThreads >= kTileRows * kTileCols, "a thread for every pooled position");
  const int positions = t.pooled_rows * t.pooled_cols;  // <= 8 x 32: pooled outputs <= pixels
  const int k_stride = kBlockThreads / positions;
  int k = threadIdx.x / positions;
  const int position = threadIdx.x - k * positions;
  const int pooled_row = position / t.pooled_cols, pooled_col = position % t.pooled_cols;
  const int out_row = t.out_row0 + pooled_row, out_col = t.out_col0 + pooled_col;
  if (k >= k_stride || out_row >= s.out_height || out_col >= s.out_width) return;
  // Window rows/cols in tile coordinates, clipped to the conv output.
  const int row_begin = max(pooled_row * s.pool_stride_h, -t.conv_row0);
  const int row_end = min(pooled_row * s.pool_stride_h + s.pool_h, s.conv_height - t.conv_row0);
  const int col_begin = max(pooled_col * s.pool_stride_w, -t.conv_col0);
  const int col_end = min(pooled_col * s.pool_stride_w + s.pool_w, s.conv_width - t.conv_col0);
  // A whole 3 x 3 window (AlexNet's pool): unrolled, no loop branches.
  const bool whole_3x3 = s.pool_h == 3 && s.pool_w == 3 && row_end - row_begin == 3 &&
                         col_end - col_begin == 3;
  const int64_t plane_outputs = int64_t(s.out_height) * s.out_width;
  const int channel = t.channel0 + k;
  int64_t out_index = (t.image * s.out_channels + channel) * plane_outputs +
                      int64_t(out_row) * s.out_width + out_col;
  const int last = min(t.out_block, s.out_channels - t.channel0);  // channels of this tile
  for (; k < last; k += k_stride, out_index += k_stride * plane_outputs) {
    const float* plane = tile + k * kRow;
    float best = -INFINITY;
    if (whole_3x3) {
      const float* window = plane + row_begin * kTileCols + col_begin;
#pragma unroll
      for (int r = 0; r < 3; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c) best = max_keeping_nan(best, window[r * kTileCols + c]);
    } else {
      for (int r = row_begin; r < row_end; ++r)
        for (int c = col_begin; c < col_end; ++c)
          best = max_keeping_nan(best, plane[r * kTileCols + c]);
    }
    store(out_index, relu_keeping_nan(best));
  }
}

// The definition for output element i (NCHW index): relu(max over the pooling window of
// conv(x, weight) + bias), accumulated in fp32. x(n, c, h, w), weight(k, c, r, q) and bias(k)
// return fp32 values of the operands (whatever their type and strides).
template <class X, class Weight, class Bias>
__device__ __forceinline__ float direct_pooled_output(const ConvPoolShape& s, int64_t i,
                                                      const X& x, const Weight& weight,
                                                      const Bias& bias) {
  int64_t rest = i;
  const int out_col = int(rest % s.out_width);
  rest /= s.out_width;
  const int out_row = int(rest % s.out_height);
  rest /= s.out_height;
  const int k = int(rest % s.out_channels);
  const int64_t n = rest / s.out_channels;
  const float b = bias(k);
  const int row0 = s.window_row0(out_row);
  const int col0 = s.window_col0(out_col);
  float best = -INFINITY;
  for (int conv_row = max(row0, 0); conv_row < min(row0 + s.pool_h, s.conv_height); ++conv_row)
    for (int conv_col = max(col0, 0); conv_col < min(col0 + s.pool_w, s.conv_width); ++conv_col) {
      float acc = b;
      for (int c = 0; c < s.in_channels; ++c)
        for (int r = 0; r < s.kernel_h; ++r) {
          const int64_t h = int64_t(conv_row) * s.stride_h - s.pad_h + int64_t(r) * s.dilation_h;
          if (h < 0 || h >= s.in_height) continue;
          for (int q = 0; q < s.kernel_w; ++q) {
            const int64_t w =
                int64_t(conv_col) * s.stride_w - s.pad_w + int64_t(q) * s.dilation_w;
            if (w < 0 || w >= s.in_width) continue;
            acc = fmaf(x(n, c, h, w), weight(k, c, r, q), acc);
          }
        }
      best = max_keeping_nan(best, acc);
    }
  return relu_keeping_nan(best);
}

}  // namespace conv_pool_epilogue
