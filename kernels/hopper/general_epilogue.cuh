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

// Plan::pixel_major's floats a pixel as a constant, so that a window's pixels are immediate
// offsets of one address.
template <int kTileId>
constexpr int kPixelPitch = pixel_pitch(Tile<kTileId>::kN);

// Accumulators of channels [pass x pass_channels, + pass_channels) -> tile. Row 16 w + g of a
// square's M = 64 is its pixel (2 w, g), row 16 w + g + 8 pixel (2 w + 1, g) (w: warp of the
// warpgroup, g = lane / 4); accumulator 4 j + v holds channel 8 j + 2 (lane % 4) + v % 2 of
// the first (v < 2) or the second. pixel_major (Plan::pixel_major, one pass): [pixel][channel]
// instead, kPixelPitch floats a pixel, a channel pair one 8-byte store.
template <int kTileId>
__device__ __forceinline__ void stage_accumulators(
    const float (&acc)[Tile<kTileId>::kSquaresPerGroup][Tile<kTileId>::kAccs], float* tile,
    int tile_pitch, int pass, int pass_channels, bool pixel_major) {
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
      if (pixel_major) {
        float* c = tile + pixel * kPixelPitch<kTileId> + channel;
        *reinterpret_cast<float2*>(c) = make_float2(acc[m][4 * j], acc[m][4 * j + 1]);
        *reinterpret_cast<float2*>(c + T::kCols * kPixelPitch<kTileId>) =
            make_float2(acc[m][4 * j + 2], acc[m][4 * j + 3]);
        continue;
      }
      float* c = tile + (channel - first) * tile_pitch + pixel;
      c[0] = acc[m][4 * j];
      c[tile_pitch] = acc[m][4 * j + 1];
      c[T::kCols] = acc[m][4 * j + 2];
      c[tile_pitch + T::kCols] = acc[m][4 * j + 3];
    }
  }
}

// The maximum of a 2 x 2 window of accumulator group j of one square (Plan::paired_pool):
// values 4 j + v and 4 j + v + 2 of a thread are vertical neighbours, lanes g and g ^ 1 (lane ^
// 4) horizontal ones: each lane of the pair keeps one channel's vertical maximum (the odd one
// where g is odd) and sends the other channel's to its partner. Every lane of the warp calls it.
template <int kAccs>
__device__ __forceinline__ float pair_window_max(const float (&acc)[kAccs], int j, bool odd) {
  const float even_channel = max_keeping_nan(acc[4 * j], acc[4 * j + 2]);
  const float odd_channel = max_keeping_nan(acc[4 * j + 1], acc[4 * j + 3]);
  const float kept = odd ? odd_channel : even_channel;
  const float sent = odd ? even_channel : odd_channel;
  return max_keeping_nan(kept, __shfl_xor_sync(0xffffffffu, sent, 4));
}

// Plan::paired_pool (one epilogue pass): the 2 x 2 maxima of the accumulators -> tile, staged
// [channel][window] (the tile's kRows / 2 x kCols / 2 windows, tile_pitch floats a channel: = 4
// mod 32, so that a warp's stores, 8 channels x 4 windows, hit 32 banks; a quarter of the conv
// tile's bytes).
template <int kTileId>
__device__ __forceinline__ void stage_pooled_pairs(
    const float (&acc)[Tile<kTileId>::kSquaresPerGroup][Tile<kTileId>::kAccs], float* tile,
    int tile_pitch) {
  using T = Tile<kTileId>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warpgroup = warp / 4, warp_in_group = warp % 4;
  const int g = lane / 4, pair = lane % 4;
  const bool odd = g & 1;
  constexpr int kWindowCols = T::kCols / 2;
  // This lane's channel 2 pair + odd of each group of 8 at its first square's window (row
  // warp_in_group of the square's 4, column g / 2); a group is 8 tile_pitch floats on, a square
  // a constant offset.
  float* const own = tile + (2 * pair + (odd ? 1 : 0)) * tile_pitch +
                     (warpgroup * T::kSquaresPerGroup / T::kSquareCols) * 4 * kWindowCols +
                     warp_in_group * kWindowCols + g / 2;
#pragma unroll
  for (int m = 0; m < T::kSquaresPerGroup; ++m) {
    const int square = warpgroup * T::kSquaresPerGroup + m;
    const int offset = (square / T::kSquareCols - warpgroup * T::kSquaresPerGroup /
                        T::kSquareCols) * 4 * kWindowCols + (square % T::kSquareCols) * 4;
    float* dst = own + offset;
#pragma unroll
    for (int j = 0; j < T::kN / 8; ++j, dst += 8 * tile_pitch)
      *dst = pair_window_max(acc[m], j, odd);
  }
}

// Plan::direct_pairs: the bias of the tile's channels channel0 + 32 i + lane, one register per
// 32 channels (zeros past the channels and where there is none), all loads in flight at once;
// store_pooled_pairs shuffles them to the lanes.
template <class E, int kTileId>
__device__ __forceinline__ void load_lane_bias(const ConvPoolShape& s, const ConvPoolOperands& ops,
                                               int channel0,
                                               float (&lane_bias)[Tile<kTileId>::kN / 32]) {
  const typename E::Raw* bias = ElementOperands<E>::bias(ops);
#pragma unroll
  for (int i = 0; i < Tile<kTileId>::kN / 32; ++i) {
    const int channel = channel0 + 32 * i + int(threadIdx.x % 32);
    lane_bias[i] = bias != nullptr && channel < s.out_channels
                       ? E::to_float(bias[int64_t(channel) * ops.bias_stride])
                       : 0.f;
  }
}

// Plan::windows: window w's place in the layer's output (its channel 0's element offset).
__device__ __forceinline__ int64_t window_output(const Plan& p, int w) {
  const int positions = p.window_rows * p.window_cols;
  const int n = w / positions, at = w - n * positions;
  const int ph = at / p.window_cols, pw = at - ph * p.window_cols;
  return n * p.out_stride[0] + ph * p.out_stride[2] + pw * p.out_stride[3];
}

// The output offset of pooled position (out_row, out_col) of image `image`'s channel 0, or
// (kWindows: a windowed launch, Plan::windows > 0) -1 where the launch has no window there.
template <bool kWindows>
__device__ __forceinline__ int64_t output_offset(const ConvPoolShape& s, const Plan& p,
                                                 int64_t image, int out_row, int out_col) {
  if constexpr (kWindows) {
    const int w = out_row * s.out_width + out_col;
    return w < p.windows ? window_output(p, w) : -1;
  }
  return image * p.out_stride[0] + int64_t(out_row) * p.out_stride[2] +
         int64_t(out_col) * p.out_stride[3];
}

// Plan::direct_pairs (paired plans without a split): the same 2 x 2 maxima stored from the
// registers, each lane its window's output of one channel (channel 8 j + 2 (lane % 4) + odd of
// each group), after bias (load_lane_bias's) and ReLU, with the arithmetic of pool_tile's
// paired form (so the same values). Nothing goes through shared memory: no barrier. A warp's
// store covers 4 consecutive pooled columns of 8 channels. kWindows: Plan::windows > 0 (its
// own code, so that the unwindowed form keeps the address arithmetic without the window map).
template <class E, int kTileId, bool kWindows>
__device__ __forceinline__ void store_pooled_pairs_of(
    const ConvPoolShape& s, const Plan& p, const ConvPoolOperands& ops, const TileOrigin& o,
    const float (&acc)[Tile<kTileId>::kSquaresPerGroup][Tile<kTileId>::kAccs],
    const float (&lane_bias)[Tile<kTileId>::kN / 32]) {
  using T = Tile<kTileId>;
  using Raw = typename E::Raw;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warpgroup = warp / 4, warp_in_group = warp % 4;
  const int g = lane / 4, pair = lane % 4;
  const bool odd = g & 1;
  // Each square's window of this lane: window row 4 (square row) + warp_in_group, column 4
  // (square column) + g / 2 of the tile's kRows / 2 x kCols / 2, image by image (pooled_window;
  // images is a power of two).
  constexpr int kWindowCols = T::kCols / 2;
  const int image_windows = kWindowCols / p.images;
  const int own = 2 * pair + (odd ? 1 : 0);  // this lane's channel of each group of 8
  const int first = o.channel0 + own;        // ... of group 0
  const int left = s.out_channels - first;   // group j stores where 8 j < left
  const int64_t out_step = 8 * p.out_stride[1];
  // Square by square (one output pointer live: the accumulators leave few registers).
#pragma unroll
  for (int m = 0; m < T::kSquaresPerGroup; ++m) {
    const int square = warpgroup * T::kSquaresPerGroup + m;
    const int window_row = (square / T::kSquareCols) * 4 + warp_in_group;
    const int window_col = (square % T::kSquareCols) * 4 + g / 2;
    const int image = window_col * p.images / kWindowCols;
    const int pooled_col = window_col - image * image_windows;
    const int out_row = o.out_row0 + window_row, out_col = o.out_col0 + pooled_col;
    bool inside = window_row < p.pooled_rows && pooled_col < p.pooled_cols &&
                  out_row < s.out_height && out_col < s.out_width && o.image + image < s.batch;
    const int64_t place = output_offset<kWindows>(s, p, o.image + image, out_row, out_col);
    if constexpr (kWindows) inside = inside && place >= 0;
    Raw* out = ElementOperands<E>::out(ops) + int64_t(first) * p.out_stride[1] + place;
#pragma unroll
    for (int j = 0; j < T::kN / 8; ++j, out += out_step) {
      // (Every lane shuffles: the pair's partner and the bias of channel first + 8 j.)
      const float best = pair_window_max(acc[m], j, odd);
      const float add = __shfl_sync(0xffffffffu, lane_bias[j / 4], 8 * (j % 4) + own);
      if (inside && 8 * j < left) *out = E::from_float(relu_keeping_nan(best + add));
    }
  }
}

template <class E, int kTileId>
__device__ __forceinline__ void store_pooled_pairs(
    const ConvPoolShape& s, const Plan& p, const ConvPoolOperands& ops, const TileOrigin& o,
    const float (&acc)[Tile<kTileId>::kSquaresPerGroup][Tile<kTileId>::kAccs],
    const float (&lane_bias)[Tile<kTileId>::kN / 32]) {
  if (p.windows > 0)
    store_pooled_pairs_of<E, kTileId, true>(s, p, ops, o, acc, lane_bias);
  else
    store_pooled_pairs_of<E, kTileId, false>(s, p, ops, o, acc, lane_bias);
}

// The pooled positions the pooling hands its threads, image by image, row-major: with
// Plan::pool_rect the tile's pooled rectangle clipped to the output (tiles at an image's
// bottom and right edges, and tiles wider than a small image, hold fewer than pooled_rows x
// pooled_cols) and its images to the batch, so that no thread takes a position past them;
// else the whole rectangle, whose positions past the output pooled_window refuses.
struct PooledRect {
  int rows, cols, positions;
};
__device__ __forceinline__ PooledRect pooled_rect(const ConvPoolShape& s, const Plan& p,
                                                  const TileOrigin& o) {
  PooledRect r{p.pooled_rows, p.pooled_cols, p.images * p.pooled_rows * p.pooled_cols};
  if (p.pool_rect) {
    r.rows = min(r.rows, s.out_height - o.out_row0);
    r.cols = min(r.cols, s.out_width - o.out_col0);
    const int64_t images_left = s.batch - o.image;
    r.positions = int(min(int64_t(p.images), images_left)) * r.rows * r.cols;
  }
  return r;
}

// One pooled position of the tile's PooledRect (images side by side: image i's conv columns
// start at i x kCols / images): where its window lies in the staged conv tile (the window's
// first pixel and its rows x cols inside the conv output; kPaired: its maximum's place among
// the staged 2 x 2 windows) and the output address of channel channel_base. False where the
// position lies past the output or the batch (kWindows: or has no window of Plan::windows).
template <class E, int kTileId, bool kPaired, bool kWindows>
__device__ __forceinline__ bool pooled_window(const ConvPoolShape& s, const Plan& p,
                                              const ConvPoolOperands& ops, const TileOrigin& o,
                                              const PooledRect& rect, int position,
                                              int channel_base, int& window, int& rows,
                                              int& cols, typename E::Raw*& out) {
  using T = Tile<kTileId>;
  int image = 0;
  if (p.images > 1) {
    const int image_positions = rect.rows * rect.cols;
    image = position / image_positions;
    position -= image * image_positions;
  }
  const int pooled_row = position / rect.cols;
  const int pooled_col = position - pooled_row * rect.cols;
  const int out_row = o.out_row0 + pooled_row, out_col = o.out_col0 + pooled_col;
  if (out_row >= s.out_height || out_col >= s.out_width || o.image + image >= s.batch)
    return false;
  const int64_t place = output_offset<kWindows>(s, p, o.image + image, out_row, out_col);
  if (kWindows && place < 0) return false;
  const int row_begin = max(pooled_row * s.pool_stride_h, -o.conv_row0);
  const int col_begin = max(pooled_col * s.pool_stride_w, -o.conv_col0);
  rows = min(pooled_row * s.pool_stride_h + s.pool_h, s.conv_height - o.conv_row0) - row_begin;
  cols = min(pooled_col * s.pool_stride_w + s.pool_w, s.conv_width - o.conv_col0) - col_begin;
  // (Paired: pool_2x2_inside, so that the window starts at conv pixel (2 pooled_row, 2
  // pooled_col) of the tile.)
  window = kPaired
               ? pooled_row * (T::kCols / 2) + image * (T::kCols / 2 / p.images) + pooled_col
               : row_begin * T::kCols + image * (T::kCols / p.images) + col_begin;
  out = ElementOperands<E>::out(ops) + int64_t(channel_base) * p.out_stride[1] + place;
  return true;
}

// fold(pixel) for each pixel of a window of rows x cols (pixel: its offset from the window's
// first one, kCols pixels a tile row). A window up to 4 columns wide takes a row loop whose
// column count is a constant, so that a row's loads are immediate offsets of one address with
// no remainder path or convergence barrier (the runtime column loop had both, and an address
// computation of its own for every load); wider windows the runtime loops.
template <int kCols, int kWidth, class Fold>
__device__ __forceinline__ void for_window_rows(int rows, Fold& fold) {
#pragma unroll 1
  for (int r = 0; r < rows; ++r)
#pragma unroll
    for (int c = 0; c < kWidth; ++c) fold(r * kCols + c);
}
template <int kCols, class Fold>
__device__ __forceinline__ void for_window_pixels(int rows, int cols, Fold&& fold) {
  switch (cols) {
    case 1: for_window_rows<kCols, 1>(rows, fold); return;
    case 2: for_window_rows<kCols, 2>(rows, fold); return;
    case 3: for_window_rows<kCols, 3>(rows, fold); return;
    case 4: for_window_rows<kCols, 4>(rows, fold); return;
    default:
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) fold(r * kCols + c);
  }
}

// The maxima over one window of kCount channel planes `step` floats apart (NaN wins, as in
// PyTorch). The window loops run once for all of them: their loads are independent. kPaired:
// the windows' maxima are staged already (stage_pooled_pairs), at the first pixel.
template <int kCount, int kCols, bool kPaired>
__device__ __forceinline__ void window_max(const float* window, int step, int rows, int cols,
                                           float (&best)[kCount]) {
  if constexpr (kPaired) {
#pragma unroll
    for (int j = 0; j < kCount; ++j) best[j] = window[j * step];
  } else {
#pragma unroll
    for (int j = 0; j < kCount; ++j) best[j] = -INFINITY;
    for_window_pixels<kCols>(rows, cols, [&](int pixel) {
#pragma unroll
      for (int j = 0; j < kCount; ++j)
        best[j] = max_keeping_nan(best[j], window[pixel + j * step]);
    });
  }
}

// window_max over a [pixel][channel] tile (Plan::pixel_major): the maxima of kCount
// consecutive channels (2: one 8-byte load a pixel; 4 or 8: 16-byte ones) at `window` (the
// window's first pixel's first channel), kPitch floats a pixel.
template <int kCount, int kCols, int kPitch>
__device__ __forceinline__ void window_max_pixels(const float* window, int rows, int cols,
                                                  float (&best)[kCount]) {
  static_assert(kCount == 2 || kCount % 4 == 0, "whole 8- or 16-byte vectors");
#pragma unroll
  for (int j = 0; j < kCount; ++j) best[j] = -INFINITY;
  for_window_pixels<kCols>(rows, cols, [&](int offset) {
    const float* pixel = window + offset * kPitch;
    if constexpr (kCount == 2) {
      const float2 v = *reinterpret_cast<const float2*>(pixel);
      best[0] = max_keeping_nan(best[0], v.x);
      best[1] = max_keeping_nan(best[1], v.y);
    } else {
#pragma unroll
      for (int j = 0; j < kCount; j += 4) {
        const float4 v = *reinterpret_cast<const float4*>(pixel + j);
        best[j] = max_keeping_nan(best[j], v.x);
        best[j + 1] = max_keeping_nan(best[j + 1], v.y);
        best[j + 2] = max_keeping_nan(best[j + 2], v.z);
        best[j + 3] = max_keeping_nan(best[j + 3], v.w);
      }
    }
  });
}

// One 16-byte group of channels-last outputs (channels c0 .. c0 + 16 bytes) of the pooled
// position whose window and output address pooled_window gave: its maxima, bias and ReLU, one
// store where the group is whole and aligned. kWide: the window loops take the whole group at
// once, else 2 channels at a time (a multi-pass epilogue's accumulators are still live).
template <class E, int kTileId, bool kPaired, bool kWide>
__device__ __forceinline__ void pool_channel_group(const Plan& p, const float* tile,
                                                   const float* pass_bias, int window, int rows,
                                                   int cols, typename E::Raw* out, int c0,
                                                   int channels) {
  using T = Tile<kTileId>;
  using Raw = typename E::Raw;
  constexpr int kVector = 16 / int(sizeof(Raw));
  union {
    Raw raw[kVector];
    uint4 bits;
  } v;
  constexpr int kAtOnce = kWide ? kVector : 2;
  if (!kPaired && p.pixel_major) {
    // kWide in 16 bits: the whole group at once; 4 channels in the two-block tiles (64 live
    // accumulators); else 2 (4 spilled 8 bytes in the one-block float16 and float32 instances).
    constexpr bool kTwoBlock = T::kSquaresPerGroup * T::kAccs <= 64;
    constexpr int kPixelsAtOnce = kWide && kVector == 8 ? 8 : kTwoBlock ? 4 : 2;
#pragma unroll
    for (int h = 0; h < kVector; h += kPixelsAtOnce) {
      float best[kPixelsAtOnce];
      window_max_pixels<kPixelsAtOnce, T::kCols, kPixelPitch<kTileId>>(
          tile + window * kPixelPitch<kTileId> + c0 + h, rows, cols, best);
#pragma unroll
      for (int j = 0; j < kPixelsAtOnce; ++j)
        v.raw[h + j] = E::from_float(relu_keeping_nan(best[j] + pass_bias[c0 + h + j]));
    }
  } else {
#pragma unroll
    for (int h = 0; h < kVector; h += kAtOnce) {
      float best[kAtOnce];
      window_max<kAtOnce, T::kCols, kPaired>(tile + (c0 + h) * p.tile_pitch + window,
                                             p.tile_pitch, rows, cols, best);
#pragma unroll
      for (int j = 0; j < kAtOnce; ++j)
        v.raw[h + j] = E::from_float(relu_keeping_nan(best[j] + pass_bias[c0 + h + j]));
    }
  }
  Raw* dst = out + c0;
  if (c0 + kVector <= channels && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
    *reinterpret_cast<uint4*>(dst) = v.bits;
  } else {
#pragma unroll
    for (int j = 0; j < kVector; ++j)
      if (c0 + j < channels) dst[j] = v.raw[j];
  }
}

// Pooled outputs of channels [pass x pass_channels, + pass_channels) of the tile from the
// staged conv tile, then bias and ReLU. A position's window and output address are worked out
// once for the channels a thread takes:
//   * channels-last outputs (unit channel stride): a thread takes 16-byte groups of channels
//     (8 in 16 bits, 4 in float32; pool_channel_group), consecutive threads consecutive
//     positions, so that a warp's reads of a channel plane spread over the banks. The
//     (group, position) pairs go to the threads in turn, group-major, so that every thread
//     has as many; Plan::pool_positions: as in NCHW below, one position a thread and its
//     groups k, k + k_stride, ..., so that a position's window and address are worked out
//     once for all its groups, not once a group;
//   * other layouts (NCHW): a thread takes one position and channels k, k + k_stride, ...
//     (consecutive threads on consecutive output columns), four at a time.
// The window loops take 2 (channels-last) or 4 (NCHW) channels at once, since a multi-pass
// epilogue's accumulators are still live; kWide (Plan::wide_pool, one pass, the accumulators
// dead; one-block tiles): channels-last, a whole 16-byte group at once, so that more loads
// are in flight. (8 channels in NCHW, and 4 or 8 in the two-block tiles' 80-register
// instances, spilled.) kWindows: Plan::windows > 0 (its own code, as store_pooled_pairs_of).
template <class E, int kTileId, bool kPaired, bool kWide, bool kWindows>
__device__ __forceinline__ void pool_tile_of(const ConvPoolShape& s, const Plan& p,
                                             const ConvPoolOperands& ops, const TileOrigin& o,
                                             const float* tile, const float* bias, int pass,
                                             int pass_channels) {
  using T = Tile<kTileId>;
  using Raw = typename E::Raw;
  const PooledRect rect = pooled_rect(s, p, o);
  const int positions = rect.positions;
  const int bias_base = pass * pass_channels;
  const int channel_base = o.channel0 + bias_base;
  const int channels = min(pass_channels, s.out_channels - channel_base);
  const float* pass_bias = bias + bias_base;
  // One position a thread (positions <= kThreads: the threads past the positions take other
  // channels, or channel groups, of the same positions), or every position kThreads apart.
  const int k_stride = positions <= kThreads ? kThreads / positions : 1;
  const int k_first = positions <= kThreads ? int(threadIdx.x) / positions : 0;
  if (p.out_stride[1] == 1) {
    constexpr int kVector = 16 / int(sizeof(Raw));  // pass_channels is a multiple (>= 8)
    const int groups = (channels + kVector - 1) / kVector;
    if (p.pool_positions) {
      if (k_first >= min(k_stride, groups)) return;
      for (int position = int(threadIdx.x) - k_first * positions; position < positions;
           position += kThreads) {
        int window, rows, cols;
        Raw* out;
        if (!pooled_window<E, kTileId, kPaired, kWindows>(s, p, ops, o, rect, position,
                                                          channel_base, window, rows, cols, out))
          continue;
        for (int group = k_first; group < groups; group += k_stride)
          pool_channel_group<E, kTileId, kPaired, kWide>(p, tile, pass_bias, window, rows, cols,
                                                         out, group * kVector, channels);
      }
      return;
    }
    int group = int(threadIdx.x) / positions;
    int position = int(threadIdx.x) - group * positions;
    for (; group < groups; position += kThreads) {
      if (position >= positions) {
        group += position / positions;
        position %= positions;
      }
      if (group >= groups) break;
      int window, rows, cols;
      Raw* out;
      if (!pooled_window<E, kTileId, kPaired, kWindows>(s, p, ops, o, rect, position,
                                                        channel_base, window, rows, cols, out))
        continue;
      pool_channel_group<E, kTileId, kPaired, kWide>(p, tile, pass_bias, window, rows, cols, out,
                                                     group * kVector, channels);
    }
    return;
  }
  if (k_first >= k_stride) return;
  const int64_t channel_step = int64_t(k_stride) * p.out_stride[1];
  for (int position = int(threadIdx.x) - k_first * positions; position < positions;
       position += kThreads) {
    int window, rows, cols;
    Raw* out;
    if (!pooled_window<E, kTileId, kPaired, kWindows>(s, p, ops, o, rect, position,
                                                      channel_base, window, rows, cols, out))
      continue;
    int k = k_first;
    out += int64_t(k) * p.out_stride[1];
    for (; k + 3 * k_stride < channels; k += 4 * k_stride, out += 4 * channel_step) {
      float best[4];
      window_max<4, T::kCols, kPaired>(tile + k * p.tile_pitch + window,
                                       k_stride * p.tile_pitch, rows, cols, best);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        out[j * channel_step] =
            E::from_float(relu_keeping_nan(best[j] + pass_bias[k + j * k_stride]));
    }
    for (; k < channels; k += k_stride, out += channel_step) {
      float best[1];
      window_max<1, T::kCols, kPaired>(tile + k * p.tile_pitch + window, 0, rows, cols, best);
      out[0] = E::from_float(relu_keeping_nan(best[0] + pass_bias[k]));
    }
  }
}

template <class E, int kTileId, bool kPaired = false, bool kWide = false>
__device__ __forceinline__ void pool_tile(const ConvPoolShape& s, const Plan& p,
                                          const ConvPoolOperands& ops, const TileOrigin& o,
                                          const float* tile, const float* bias, int pass,
                                          int pass_channels) {
  if (p.windows > 0)
    pool_tile_of<E, kTileId, kPaired, kWide, true>(s, p, ops, o, tile, bias, pass, pass_channels);
  else
    pool_tile_of<E, kTileId, kPaired, kWide, false>(s, p, ops, o, tile, bias, pass,
                                                    pass_channels);
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
// bias, ReLU, max-pool and the store; sync() is their barrier. Plan::paired_pool (where kPairs:
// the warp-specialized kernel) stages their 2 x 2 maxima in one pass
// instead, so that the accumulators are dead while it pools.
template <class E, int kTileId, bool kPairs, class Sync>
__device__ __forceinline__ void pool_accumulators(
    const ConvPoolShape& s, const Plan& p, const ConvPoolOperands& ops, const TileOrigin& o,
    const float (&acc)[Tile<kTileId>::kSquaresPerGroup][Tile<kTileId>::kAccs], float* conv_tile,
    const float* bias, int pass_channels, Sync sync) {
  if (kPairs && p.paired_pool) {
    stage_pooled_pairs<kTileId>(acc, conv_tile, p.tile_pitch);
    sync();
    pool_tile<E, kTileId, true>(s, p, ops, o, conv_tile, bias, 0, Tile<kTileId>::kN);
    return;
  }
  if constexpr (kPairs && Tile<kTileId>::kMinBlocks == 1) {
    if (p.wide_pool) {  // one pass: the accumulators are dead once staged
      stage_accumulators<kTileId>(acc, conv_tile, p.tile_pitch, 0, Tile<kTileId>::kN,
                                  p.pixel_major);
      sync();
      pool_tile<E, kTileId, false, true>(s, p, ops, o, conv_tile, bias, 0, Tile<kTileId>::kN);
      return;
    }
  }
  for (int pass = 0; pass < p.epilogue_passes; ++pass) {
    if (pass > 0) sync();  // the last pass's pooling read the tile
    stage_accumulators<kTileId>(acc, conv_tile, p.tile_pitch, pass, pass_channels,
                                p.pixel_major);
    sync();
    pool_tile<E, kTileId>(s, p, ops, o, conv_tile, bias, pass, pass_channels);
  }
}

}  // namespace general_wgmma
