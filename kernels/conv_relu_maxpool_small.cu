// Fused Conv2d -> ReLU -> MaxPool2d for few output channels, one kernel body for three variants:
// `small_fp32` (float32 operands, FFMA on CUDA cores), `small_16bit` (float16 / bfloat16
// operands converted to fp32 in shared memory, the next tile's region copied raw (16-byte
// vectors where every region starts at a multiple of 8 columns) while this one computes; one
// rounding to the 16-bit type at the store) and `small_tf32` (float32 operands,
// TF32 mma.sync on tensor cores; at most 8 output channels and 2x2 / stride 2 windows).
//
// For problems like LeNet's first layer (1 input channel, 6 output channels, 5x5) a 64- or
// 128-channel tensor-core tile multiplies mostly padding: at most 16 output channels are real,
// and the whole reduction (input channels x taps) is a few dozen products. Here a block owns a
// tile of up to 16 x 16 pooled outputs of one image, for all output channels: it stages the input
// region those windows read (every channel, zero outside the image; float32 rows that start and
// end on 16-byte boundaries as 16-byte copies) and all weights in shared memory, then computes
// the tile's pooling windows for all output channels, takes their max, and stores relu(max) for
// every channel. The CUDA-core loops take any convolution and pooling geometry in exact fp32
// (no TF32), so they also serve allow_tf32 = False.
//
// Three inner loops, picked per launch:
//  * patch: a stride-1, dilation-1, 3x3 or 5x5 convolution under 2x2 pooling windows (LeNet).
//    A thread computes one window: its four conv pixels read one (k+1) x (k+1) input patch per
//    channel; the patch is loaded into registers once and every weight load (16-byte
//    broadcasts, one per 4 output channels) feeds the four pixels. Per tap and output channel
//    that is 4 FFMA against 1/4 of a weight load; the FFMAs set the pace, not shared memory.
//  * generic: any geometry; a thread computes one window, one conv pixel at a time, runtime loops.
//  * tensor cores (small_tf32): a warp computes 16 conv pixels (4 windows) x 8 channels per
//    m16n8k8 mma over the flattened (channel, tap) reduction (compute_tile_mma).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "conv_pool_16bit.cuh"
#include "conv_pool_device.cuh"
#include "conv_pool_operands.h"
#include "conv_relu_maxpool_small.h"

namespace {

constexpr int kMaxThreads = 256;
constexpr int kMaxTile = 16;  // pooled outputs per tile side: one per thread
constexpr int kMaxOutChannels = 16;
constexpr int kMaxReduction = 256;  // in_channels * taps
constexpr int kMaxTensorCoreChannels = 8;  // small_tf32: one mma N
constexpr int kTensorCoreLoop = -1;  // the kernels' inner-loop parameter for small_tf32

struct SmallPlan {
  int tile_h, tile_w;    // pooled outputs per tile, one per thread (patch and generic loops)
  int threads;           // tile_h * tile_w rounded up to whole warps
  int tiles_h, tiles_w;
  int in_rows, in_cols;  // staged input region per channel
  int out_block;         // output channels rounded up to 2, 4, 6, 8, 12 or 16 (the kernel's kOut)
  int patch_kernel;      // 3 or 5: the patch loop applies (see the top); 0: the generic loop
  // small_tf32: the tensor-core loop (2 x 2 / stride 2 windows, at most 8 output channels) and
  // its reduction padded to 8; the per-k offsets into the staged region follow the weights in
  // shared memory (k_padded ints).
  bool tensor_cores;
  int k_padded;
  // Every tile's region starts at a multiple of 4 columns and in_cols is one too: with
  // vector_input (float32 rows in aligned runs of 4, decided at launch) the region moves as
  // 16-byte copies, each wholly inside the image or wholly outside.
  bool aligned_cols;
  bool vector_input;
  int buffers;           // input regions staged: 2 (the next tile's copy overlaps this one) or 1
  // 16 bits: one fp32 region, plus (raw_cols > 0) a raw 16-bit copy of the next tile's region,
  // used when the input moves in 4-byte pairs (raw_input, decided at launch), else the threads
  // load and convert. Its rows are raw_cols words from the even column at or left of the first;
  // or, with raw_vectors (decided at launch: raw_aligned, and input rows in aligned runs of 8),
  // whole 16-byte vectors from the first column, raw_cols = in_cols rounded up to 8.
  int raw_cols;
  bool raw_input;
  bool raw_aligned;  // every tile's region starts at a multiple of 8 columns; in_cols % 4 == 0
  bool raw_vectors;
  int64_t tiles;         // batch * tiles_h * tiles_w
  int smem_bytes;
};

constexpr int weight_row(int out_block) { return (out_block + 3) / 4 * 4; }  // floats per (c, tap)

// 16 bits, raw_vectors: the raw row pitch, whole 8-word vectors.
constexpr int raw_vector_cols(const SmallPlan& p) { return (p.in_cols + 7) / 8 * 8; }

SmallPlan make_plan(const ConvPoolShape& s, bool tensor_cores) {
  SmallPlan p{};
  // A tile no larger than the output, so that a 14 x 14 LeNet image leaves 28 of 224 threads
  // idle instead of 60 of 256.
  p.tile_h = std::min(kMaxTile, s.out_height);
  p.tile_w = std::min(kMaxTile, s.out_width);
  p.threads = (p.tile_h * p.tile_w + 31) / 32 * 32;
  p.tiles_h = (s.out_height + p.tile_h - 1) / p.tile_h;
  p.tiles_w = (s.out_width + p.tile_w - 1) / p.tile_w;
  const int conv_rows = (p.tile_h - 1) * s.pool_stride_h + s.pool_h;
  const int conv_cols = (p.tile_w - 1) * s.pool_stride_w + s.pool_w;
  p.in_rows = (conv_rows - 1) * s.stride_h + (s.kernel_h - 1) * s.dilation_h + 1;
  p.in_cols = (conv_cols - 1) * s.stride_w + (s.kernel_w - 1) * s.dilation_w + 1;
  const int k = s.out_channels;
  p.out_block = k <= 2 ? 2 : k <= 4 ? 4 : k <= 6 ? 6 : k <= 8 ? 8 : k <= 12 ? 12 : kMaxOutChannels;
  const bool patch_geometry = s.stride_h == 1 && s.stride_w == 1 && s.dilation_h == 1 &&
                              s.dilation_w == 1 && s.kernel_h == s.kernel_w &&
                              (s.kernel_h == 3 || s.kernel_h == 5) && s.pool_h == 2 &&
                              s.pool_w == 2;
  // 4 x kOut accumulators and the patch fit 128 registers without spills up to 8 channels.
  p.patch_kernel = patch_geometry && p.out_block <= 8 ? s.kernel_h : 0;
  p.tensor_cores = tensor_cores;
  p.k_padded = tensor_cores ? (s.in_channels * s.taps() + 7) / 8 * 8 : 0;
  p.tiles = int64_t(s.batch) * p.tiles_h * p.tiles_w;
  const int first_col = s.input_col0(s.window_col0(0));
  const int col_step = p.tile_w * s.pool_stride_w * s.stride_w;  // between tiles of a row
  p.aligned_cols = p.in_cols % 4 == 0 && (first_col % 4 + 4) % 4 == 0 &&
                   (p.tiles_w == 1 || col_step % 4 == 0);
  // Weights, the bias row and (small_tf32) the offset table: a multiple of 4 floats, so the
  // regions after them start 16-byte aligned.
  const int64_t weight_floats = int64_t(s.in_channels) * s.taps() * weight_row(p.out_block) +
                                weight_row(p.out_block) + p.k_padded;
  const int64_t region_floats = int64_t(s.in_channels) * p.in_rows * p.in_cols;
  // Double-buffer the input region while that stays within the 48 KB every GPU gives a block
  // (LeNet: 2 x 4 KB); larger regions are staged and consumed one tile at a time.
  p.buffers = 4 * (weight_floats + 2 * region_floats) <= 48 * 1024 ? 2 : 1;
  int64_t raw_bytes = 0;
  if (s.element != kElementFloat32) {
    p.buffers = 1;
    p.raw_aligned = p.in_cols % 4 == 0 && (first_col % 8 + 8) % 8 == 0 &&
                    (p.tiles_w == 1 || col_step % 8 == 0);
    p.raw_cols = (p.in_cols + 2) / 2 * 2;  // in_cols + 1 (the shift) rounded up to even
    // Room for either layout of the raw rows (the launch picks one).
    const int raw_pitch = p.raw_aligned ? std::max(p.raw_cols, raw_vector_cols(p)) : p.raw_cols;
    raw_bytes = 2 * int64_t(s.in_channels) * p.in_rows * raw_pitch;
    if (4 * (weight_floats + region_floats) + raw_bytes > 48 * 1024) {
      p.raw_cols = raw_bytes = 0;
      p.raw_aligned = false;
    }
  }
  p.smem_bytes = int(std::min<int64_t>(
      4 * (weight_floats + p.buffers * region_floats) + raw_bytes, INT32_MAX));
  return p;
}

// kOut accumulators for output channels, from the weights of one (channel, tap): a row of
// weight_row(kOut) floats in shared memory, read as 16-byte broadcasts.
template <int kOut>
struct TapWeights {
  float w[weight_row(kOut)];
  __device__ __forceinline__ void load(const float* row) {
#pragma unroll
    for (int k4 = 0; k4 < weight_row(kOut) / 4; ++k4) {
      const float4 v = reinterpret_cast<const float4*>(row)[k4];  // same address in every lane
      w[4 * k4] = v.x;
      w[4 * k4 + 1] = v.y;
      w[4 * k4 + 2] = v.z;
      w[4 * k4 + 3] = v.w;
    }
  }
  __device__ __forceinline__ void accumulate(float v, float (&acc)[kOut]) const {
#pragma unroll
    for (int k = 0; k < kOut; ++k) acc[k] = fmaf(v, w[k], acc[k]);
  }
};

// Where tile `tile` (image, tile row, tile col) starts: its first pooled output, and the conv
// pixel and input pixel at its staged region's origin (may be negative: padding).
struct SmallTile {
  int64_t image;
  int out_row0, out_col0;
  int conv_row0, conv_col0;
  int in_row0, in_col0;
};

__device__ __forceinline__ SmallTile locate_tile(const ConvPoolShape& s, const SmallPlan& p,
                                                 int64_t tile) {
  SmallTile t;
  const int tile_col = int(tile % p.tiles_w);
  tile /= p.tiles_w;
  const int tile_row = int(tile % p.tiles_h);
  t.image = tile / p.tiles_h;
  t.out_row0 = tile_row * p.tile_h;
  t.out_col0 = tile_col * p.tile_w;
  t.conv_row0 = s.window_row0(t.out_row0);
  t.conv_col0 = s.window_col0(t.out_col0);
  t.in_row0 = s.input_row0(t.conv_row0);
  t.in_col0 = s.input_col0(t.conv_col0);
  return t;
}

// Stages a tile's input region (every channel; zeros outside the image) into `region` as fp32:
// one row per warp and step, lanes along the row, no division per element. float32 moves by
// cp.async (the caller commits and waits); 16-bit words are loaded, converted and stored here,
// 4 rows' loads in flight per warp before their stores (the first tile, and inputs that do not
// move in column pairs; the others go through copy_raw_region / convert_raw_region).
template <class E>
__device__ __forceinline__ void stage_region(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                             const SmallPlan& p, int64_t tile, float* region) {
  const SmallTile t = locate_tile(s, p, tile);
  const auto* x_base = ElementOperands<E>::x(ops);
  const auto* x = x_base + t.image * ops.x_stride[0];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
#pragma unroll(ElementOperands<E>::kFloat ? 1 : 2)
  for (int row = warp; row < s.in_channels * p.in_rows; row += int(blockDim.x) / 32) {
    const int c = row / p.in_rows, h = t.in_row0 + row % p.in_rows;
    const bool row_inside = h >= 0 && h < s.in_height;
    const auto* src = x + c * ops.x_stride[1] + int64_t(h) * ops.x_stride[2];
    float* dst = region + row * p.in_cols;
    for (int col = lane; col < p.in_cols; col += 32) {
      const int w = t.in_col0 + col;
      const bool inside = row_inside && w >= 0 && w < s.in_width;
      if constexpr (ElementOperands<E>::kFloat)
        cp_async_4(dst + col, inside ? src + int64_t(w) * ops.x_stride[3] : x_base, inside);
      else
        dst[col] = inside ? E::to_float(__ldg(src + int64_t(w) * ops.x_stride[3])) : 0.f;
    }
  }
}

// The region of `tile` as 16-byte cp.async copies, one per thread and step over the flattened
// (channel, row, vector) list of rows `cols` elements long from in_col0 (T: float, 4 per copy,
// or a 16-bit word, 8 per copy); no division per row of a warp. Each vector lies wholly inside
// the image or wholly outside (zeros), which the callers' plans guarantee.
template <class T>
__device__ __forceinline__ void copy_region_vectors(const T* x_base, const ConvPoolOperands& ops,
                                                    const ConvPoolShape& s, const SmallPlan& p,
                                                    int64_t tile, int cols, T* dst) {
  constexpr int kPerCopy = 16 / sizeof(T);
  const SmallTile t = locate_tile(s, p, tile);
  const T* x = x_base + t.image * ops.x_stride[0];
  const int vectors = cols / kPerCopy;  // per region row
  const int items = s.in_channels * p.in_rows * vectors;
  for (int i = threadIdx.x; i < items; i += blockDim.x) {
    const int row = i / vectors, w = t.in_col0 + kPerCopy * (i - row * vectors);
    const int c = row / p.in_rows, h = t.in_row0 + (row - c * p.in_rows);
    const bool inside = h >= 0 && h < s.in_height && w >= 0 && w < s.in_width;
    cp_async_16(reinterpret_cast<float*>(dst + kPerCopy * i),
                reinterpret_cast<const float*>(
                    inside ? x + c * ops.x_stride[1] + int64_t(h) * ops.x_stride[2] + w : x_base),
                inside);
  }
}

// float32 with p.vector_input: the region as 16-byte copies (a quarter of stage_region's).
__device__ __forceinline__ void stage_region_vectors(const ConvPoolOperands& ops,
                                                     const ConvPoolShape& s, const SmallPlan& p,
                                                     int64_t tile, float* region) {
  copy_region_vectors(ops.x, ops, s, p, tile, p.in_cols, region);
}

// Raw regions start at the even column at or left of in_col0 (which may be negative): the
// columns they hold before it.
__device__ __forceinline__ int raw_col_shift(int in_col0) { return ((in_col0 % 2) + 2) % 2; }

// 16 bits, p.raw_input: the tile's region copied as it is (4-byte cp.async of column pairs from
// the even column at or left of in_col0; zeros outside the image) into `raw`.
__device__ __forceinline__ void copy_raw_region(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                                const SmallPlan& p, int64_t tile, uint16_t* raw) {
  const SmallTile t = locate_tile(s, p, tile);
  const int col0 = t.in_col0 - raw_col_shift(t.in_col0);
  const uint16_t* x = ops.x16 + t.image * ops.x_stride[0];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  for (int row = warp; row < s.in_channels * p.in_rows; row += int(blockDim.x) / 32) {
    const int c = row / p.in_rows, h = t.in_row0 + row % p.in_rows;
    const bool row_inside = h >= 0 && h < s.in_height;
    const uint16_t* src = x + c * ops.x_stride[1] + int64_t(h) * ops.x_stride[2];
    uint16_t* dst = raw + row * p.raw_cols;
    for (int col = 2 * lane; col < p.raw_cols; col += 2 * 32) {
      const int w = col0 + col;  // even; the width is even: a pair is wholly in or out
      const bool inside = row_inside && w >= 0 && w < s.in_width;
      cp_async_4(reinterpret_cast<float*>(dst + col),
                 reinterpret_cast<const float*>(inside ? src + w : ops.x16), inside);
    }
  }
}

// The raw region of `tile` (copy_raw_region) to fp32 in `region`.
template <class E>
__device__ __forceinline__ void convert_raw_region(const ConvPoolShape& s, const SmallPlan& p,
                                                   int64_t tile, const uint16_t* raw,
                                                   float* region) {
  const int shift = raw_col_shift(locate_tile(s, p, tile).in_col0);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  for (int row = warp; row < s.in_channels * p.in_rows; row += int(blockDim.x) / 32)
    for (int col = lane; col < p.in_cols; col += 32)
      region[row * p.in_cols + col] = E::to_float(raw[row * p.raw_cols + shift + col]);
}

// 16 bits, p.raw_vectors: the tile's region copied as it is into `raw`, as 16-byte copies of 8
// columns from in_col0 (a multiple of 8, and so is the width).
__device__ __forceinline__ void copy_raw_vectors(const ConvPoolOperands& ops,
                                                 const ConvPoolShape& s, const SmallPlan& p,
                                                 int64_t tile, uint16_t* raw) {
  copy_region_vectors(ops.x16, ops, s, p, tile, p.raw_cols, raw);
}

// The raw region of copy_raw_vectors to fp32 in `region`: 4 columns (8 bytes in, 16 out) per
// thread and step.
template <class E>
__device__ __forceinline__ void convert_raw_vectors(const ConvPoolShape& s, const SmallPlan& p,
                                                    const uint16_t* raw, float* region) {
  const int groups = p.in_cols / 4;  // per region row
  const int items = s.in_channels * p.in_rows * groups;
  for (int i = threadIdx.x; i < items; i += blockDim.x) {
    const int row = i / groups, col = 4 * (i - row * groups);
    reinterpret_cast<float4*>(region)[i] =
        to_float4<E>(*reinterpret_cast<const uint2*>(raw + row * p.raw_cols + col));
  }
}

// One tile from its staged region: each thread computes one pooling window for all channels.
template <class E, int kOut, int kPatch>
__device__ __forceinline__ void compute_tile(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                             const SmallPlan& p, int64_t tile,
                                             const float* weights, const float* input) {
  constexpr int kRow = weight_row(kOut);
  const float* bias = weights + s.in_channels * s.taps() * kRow;
  const int plane = p.in_rows * p.in_cols;
  const SmallTile t = locate_tile(s, p, tile);
  const int conv_row0 = t.conv_row0, conv_col0 = t.conv_col0;
  const int local_row = int(threadIdx.x) / p.tile_w, local_col = int(threadIdx.x) % p.tile_w;
  const int out_row = t.out_row0 + local_row, out_col = t.out_col0 + local_col;
  if (local_row >= p.tile_h || out_row >= s.out_height || out_col >= s.out_width) return;
  const int window_row = s.window_row0(out_row);  // conv pixel, may be < 0
  const int window_col = s.window_col0(out_col);

  float best[kOut];
#pragma unroll
  for (int k = 0; k < kOut; ++k) best[k] = -INFINITY;
  if constexpr (kPatch > 0) {
    // Stride 1, dilation 1, kPatch x kPatch kernel, 2x2 window: the region row/col of conv
    // pixel (window_row + i, window_col + j) and tap (r, q) is (.. + i + r, .. + j + q).
    float acc[4][kOut];
#pragma unroll
    for (int px = 0; px < 4; ++px)
#pragma unroll
      for (int k = 0; k < kOut; ++k) acc[px][k] = bias[k];
    const float* in = input + (window_row - conv_row0) * p.in_cols + (window_col - conv_col0);
    const float* w = weights;
    for (int c = 0; c < s.in_channels; ++c, in += plane, w += kPatch * kPatch * kRow) {
      float patch[kPatch + 1][kPatch + 1];
#pragma unroll
      for (int i = 0; i <= kPatch; ++i)
#pragma unroll
        for (int j = 0; j <= kPatch; ++j) patch[i][j] = in[i * p.in_cols + j];
#pragma unroll
      for (int r = 0; r < kPatch; ++r) {
#pragma unroll
        for (int q = 0; q < kPatch; ++q) {
          TapWeights<kOut> tap;
          tap.load(w + (r * kPatch + q) * kRow);
#pragma unroll
          for (int px = 0; px < 4; ++px) tap.accumulate(patch[r + px / 2][q + px % 2], acc[px]);
        }
      }
    }
    // Window pixels outside the conv output (pool padding, ceil mode) are no candidates.
#pragma unroll
    for (int px = 0; px < 4; ++px) {
      const int conv_row = window_row + px / 2, conv_col = window_col + px % 2;
      if (conv_row >= 0 && conv_row < s.conv_height && conv_col >= 0 && conv_col < s.conv_width)
#pragma unroll
        for (int k = 0; k < kOut; ++k) best[k] = max_keeping_nan(best[k], acc[px][k]);
    }
  } else {
    // The window's conv pixels, clipped to the conv output (pool padding is never a maximum).
    const int row_begin = max(window_row, 0);
    const int row_end = min(window_row + s.pool_h, s.conv_height);
    const int col_begin = max(window_col, 0);
    const int col_end = min(window_col + s.pool_w, s.conv_width);
    for (int conv_row = row_begin; conv_row < row_end; ++conv_row) {
      for (int conv_col = col_begin; conv_col < col_end; ++conv_col) {
        float acc[kOut];
#pragma unroll
        for (int k = 0; k < kOut; ++k) acc[k] = bias[k];
        const float* in = input + ((conv_row - conv_row0) * s.stride_h) * p.in_cols +
                          (conv_col - conv_col0) * s.stride_w;
        const float* w = weights;
        for (int c = 0; c < s.in_channels; ++c, in += plane) {
          for (int r = 0; r < s.kernel_h; ++r) {
            const float* in_row = in + r * s.dilation_h * p.in_cols;
            for (int q = 0; q < s.kernel_w; ++q, w += kRow) {
              TapWeights<kOut> tap;
              tap.load(w);
              tap.accumulate(in_row[q * s.dilation_w], acc);
            }
          }
        }
#pragma unroll
        for (int k = 0; k < kOut; ++k) best[k] = max_keeping_nan(best[k], acc[k]);
      }
    }
  }
  const int64_t plane_out = int64_t(s.out_height) * s.out_width;
  auto* out = ElementOperands<E>::out(ops) + t.image * s.out_channels * plane_out +
              int64_t(out_row) * s.out_width + out_col;
#pragma unroll
  for (int k = 0; k < kOut; ++k)
    if (k < s.out_channels) out[k * plane_out] = E::from_float(relu_keeping_nan(best[k]));
}

// The tensor-core loop (small_tf32): TF32 mma.sync m16n8k8, fp32 accumulation, 2 x 2 / stride 2
// windows, up to 8 output channels (N = 8), any convolution geometry. An m-tile is 16 conv
// pixels: conv rows 2r (mma rows 0-7) and 2r + 1 (rows 8-15) of the tile by 8 conv columns
// 8j..8j+7, i.e. the 4 windows of pooled row r, columns 4j..4j+3. The accumulator rows of lane
// (g, t) are pixels (2r, 8j + g) and (2r + 1, 8j + g) for channels 2t, 2t + 1: a window's
// vertical pair sits in one thread and its horizontal pair in lane ^ 4, so the pooling is two
// max and one shuffle per channel, with the bias and ReLU after the max. K: the flattened
// (channel, tap) reduction in steps of 8, read from the staged region through the per-k byte
// offset table (A) and from the staged weights (B); K past the reduction reads 0 (never an
// input value, which could be an infinity times a zero weight). A warp's pass takes kM m-tiles
// of one pooled row (LeNet's 14 x 14 tile: its 4 column groups), so that no m-tile index is
// divided out per m-tile and the row's checks and output row are shared.
template <class E, int kOut>
__device__ __forceinline__ void compute_tile_mma(const ConvPoolOperands& ops,
                                                 const ConvPoolShape& s, const SmallPlan& p,
                                                 int64_t tile, const float* weights,
                                                 const int* k_offset, const float* input) {
  constexpr int kRow = weight_row(kOut);
  constexpr int kM = 4;
  const int reduction = s.in_channels * s.taps();
  const SmallTile t = locate_tile(s, p, tile);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int g = lane / 4, tq = lane % 4;
  const int warps = int(blockDim.x) / 32;
  const int col_groups = (p.tile_w + 3) / 4;
  const int passes_per_row = (col_groups + kM - 1) / kM;
  const int passes = p.tile_h * passes_per_row;
  const int conv_cols = 2 * p.tile_w;  // conv columns the region covers
  const int next_row = 4 * s.stride_h * p.in_cols;  // region bytes from a conv row to the next
  const int full_steps = reduction / 8;
  // This lane's two output channels 2t, 2t + 1: their planes of the image and their biases.
  const int k0 = 2 * tq;
  const int64_t plane_out = int64_t(s.out_height) * s.out_width;
  auto* out = ElementOperands<E>::out(ops) + (t.image * s.out_channels + k0) * plane_out;
  const float* bias = weights + reduction * kRow;
  const float bias0 = k0 < kRow ? bias[k0] : 0.f, bias1 = k0 + 1 < kRow ? bias[k0 + 1] : 0.f;
  const bool store0 = k0 < s.out_channels, store1 = k0 + 1 < s.out_channels;

  for (int pass = warp; pass < passes; pass += warps) {
    const int r = passes_per_row == 1 ? pass : pass / passes_per_row;
    const int j0 = (pass - r * passes_per_row) * kM;
    const char* row = reinterpret_cast<const char*>(input) + 2 * r * next_row;
    float acc[kM][4];
    const char* base[kM];  // this lane's pixel of conv row 2r in m-tile (r, j0 + m)
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const int col = 8 * (j0 + m) + g;  // past the tile: any pixel, not stored
      base[m] = row + 4 * (col < conv_cols ? col : 0) * s.stride_w;
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[m][v] = 0.f;
    }
    // One K step of 8; kPadded: the last one, holding k >= reduction.
    auto step = [&](int k_step, auto padded) {
      constexpr bool kPadded = decltype(padded)::value;
      const int k_low = k_step + tq, k_high = k_low + 4;
      const bool low_ok = !kPadded || k_low < reduction, high_ok = !kPadded || k_high < reduction;
      // Byte offsets of the lane's two k in conv rows 2r and 2r + 1.
      const int low = low_ok ? k_offset[k_low] : 0, high = high_ok ? k_offset[k_high] : 0;
      const int low_next = low + next_row, high_next = high + next_row;
      uint32_t b[2];
      b[0] = low_ok && g < kRow ? __float_as_uint(weights[k_low * kRow + g]) : 0u;
      b[1] = high_ok && g < kRow ? __float_as_uint(weights[k_high * kRow + g]) : 0u;
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        const auto at = [&](int offset) {
          return *reinterpret_cast<const uint32_t*>(base[m] + offset);
        };
        uint32_t a[4] = {at(low), at(low_next), at(high), at(high_next)};
        if (kPadded) {
          if (!low_ok) a[0] = a[1] = 0u;
          if (!high_ok) a[2] = a[3] = 0u;
        }
        mma_tf32(acc[m], a, b);
      }
    };
    for (int k_step = 0; k_step < 8 * full_steps; k_step += 8) step(k_step, std::false_type{});
    if (8 * full_steps < reduction) step(8 * full_steps, std::true_type{});

    // Window pixels outside the conv output (pool padding, ceil mode) are no candidates.
    const int conv_row = t.conv_row0 + 2 * r;
    const bool top_ok = conv_row >= 0 && conv_row < s.conv_height;
    const bool bottom_ok = conv_row + 1 >= 0 && conv_row + 1 < s.conv_height;
    const int out_row = t.out_row0 + r;
    auto* out_row_ptr = out + int64_t(out_row) * s.out_width;
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const int local_col = 8 * (j0 + m) + g, conv_col = t.conv_col0 + local_col;
      const bool col_ok = local_col < conv_cols && conv_col >= 0 && conv_col < s.conv_width;
      float best[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v = col_ok && top_ok ? acc[m][h] : -INFINITY;
        if (col_ok && bottom_ok) v = max_keeping_nan(v, acc[m][2 + h]);
        best[h] = max_keeping_nan(v, __shfl_xor_sync(0xffffffffu, v, 4));
      }
      const int pooled_col = 4 * (j0 + m) + g / 2;  // within the tile
      const int out_col = t.out_col0 + pooled_col;
      if (g % 2 == 0 && pooled_col < p.tile_w && out_row < s.out_height &&
          out_col < s.out_width) {
        if (store0) out_row_ptr[out_col] = E::from_float(relu_keeping_nan(best[0] + bias0));
        if (store1)
          out_row_ptr[plane_out + out_col] = E::from_float(relu_keeping_nan(best[1] + bias1));
      }
    }
  }
}

// Persistent blocks: the launch starts as many as fit at once and each loops over tiles.
// E: the operands' element type (Float32, Float16, BFloat16); kOut: output channels rounded up;
// kLoop: 3 or 5 (the patch loop), 0 (generic) or kTensorCoreLoop (small_tf32).
template <class E, int kOut, int kLoop>
__device__ __forceinline__ void small_kernel_body(const ConvPoolOperands& ops,
                                                  const ConvPoolShape& s, const SmallPlan& p) {
  constexpr int kRow = weight_row(kOut);
  extern __shared__ __align__(16) float smem[];
  const int reduction = s.in_channels * s.taps();
  float* weights = smem;  // [channel * taps + tap][kRow], then the bias: [kRow]
  int* k_offset = reinterpret_cast<int*>(weights + (reduction + 1) * kRow);  // [p.k_padded]
  // buffers x [channel][in_rows][in_cols]
  float* input = reinterpret_cast<float*>(k_offset + p.k_padded);
  if constexpr (kLoop == kTensorCoreLoop) {
    const int plane = p.in_rows * p.in_cols;
    for (int k = threadIdx.x; k < reduction; k += blockDim.x) {
      const int c = k / s.taps(), tap = k % s.taps();
      const int r = tap / s.kernel_w, q = tap % s.kernel_w;
      k_offset[k] = 4 * (c * plane + r * s.dilation_h * p.in_cols + q * s.dilation_w);  // bytes
    }
  }

  // Weights and bias: staged once per block, for every tile it computes.
  for (int i = threadIdx.x; i < (reduction + 1) * kRow; i += blockDim.x) {
    const int k = i % kRow, e = i / kRow;  // e == reduction: the bias row
    float value = 0.f;
    if (k < s.out_channels) {
      if (e < reduction) {
        const int c = e / s.taps(), tap = e % s.taps();
        const int r = tap / s.kernel_w, q = tap % s.kernel_w;
        value = E::to_float(__ldg(ElementOperands<E>::weight(ops) + k * ops.weight_stride[0] +
                                  c * ops.weight_stride[1] + r * ops.weight_stride[2] +
                                  q * ops.weight_stride[3]));
      } else if (ElementOperands<E>::bias(ops) != nullptr) {
        value = E::to_float(__ldg(ElementOperands<E>::bias(ops) + k * ops.bias_stride));
      }
    }
    weights[i] = value;  // bias directly follows the weights
  }
  const auto compute = [&](int64_t tile, const float* region) {
    if constexpr (kLoop == kTensorCoreLoop)
      compute_tile_mma<E, kOut>(ops, s, p, tile, weights, k_offset, region);
    else
      compute_tile<E, kOut, kLoop>(ops, s, p, tile, weights, region);
  };

  // Persistent blocks: tiles blockIdx.x, + gridDim.x, ...; with two buffers the next tile's
  // input region is copied (cp.async) while this one is computed.
  const int region = s.in_channels * p.in_rows * p.in_cols;
  int64_t tile = blockIdx.x;
  if constexpr (!ElementOperands<E>::kFloat) {
    // 16 bits, one region: with p.raw_input the next tile's region is copied raw (16-byte
    // vectors with p.raw_vectors, else column pairs) while this one is computed, then converted
    // into the region; else loaded and converted after it. One loop with branches: two copies
    // of it, one per kind of raw copy as float32 has below, measured slower on the H200 (LeNet
    // 17.2 against 16.2 us, 28 x 28 images with padding 2 20.2 against 18.8; docs/PERF.md).
    uint16_t* raw = reinterpret_cast<uint16_t*>(input + region);
    if (tile < p.tiles) stage_region<E>(ops, s, p, tile, input);
    for (; tile < p.tiles; tile += gridDim.x) {
      const int64_t next = tile + gridDim.x;
      __syncthreads();  // the region is staged; the raw copy of it has been read
      if (p.raw_input && next < p.tiles) {
        if (p.raw_vectors)
          copy_raw_vectors(ops, s, p, next, raw);
        else
          copy_raw_region(ops, s, p, next, raw);
        cp_async_commit();
      }
      compute(tile, input);
      if (next < p.tiles) {
        if (p.raw_input) cp_async_wait<0>();
        __syncthreads();  // the region is read by all before it is overwritten
        if (p.raw_vectors)
          convert_raw_vectors<E>(s, p, raw, input);
        else if (p.raw_input)
          convert_raw_region<E>(s, p, next, raw, input);
        else
          stage_region<E>(ops, s, p, next, input);
      }
    }
    return;
  }
  // float32: the tile loop in two copies, one per way of staging (p.vector_input), so that
  // neither copy holds the other's loop-invariant values in registers across the compute loop
  // (one loop with a branch took LeNet's instance from 72 to 80 registers: 3 blocks per SM, not 4).
  const auto tile_loop = [&](auto vectors) {
    const auto stage = [&](int64_t tile, float* region) {
      if constexpr (decltype(vectors)::value)
        stage_region_vectors(ops, s, p, tile, region);
      else
        stage_region<E>(ops, s, p, tile, region);
    };
    if (tile < p.tiles) stage(tile, input);
    cp_async_commit();
    for (int step = 0; tile < p.tiles; tile += gridDim.x, ++step) {
      float* current = input + (p.buffers == 2 ? (step % 2) * region : 0);
      const int64_t next = tile + gridDim.x;
      if (p.buffers == 2) {
        if (next < p.tiles) stage(next, input + ((step + 1) % 2) * region);
        cp_async_commit();  // possibly empty: keeps "all but the newest group" = this tile
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      compute(tile, current);
      __syncthreads();  // the region is read by all before it is overwritten
      if (p.buffers == 1 && next < p.tiles) {
        stage(next, input);
        cp_async_commit();
      }
    }
  };
  if (p.vector_input)
    tile_loop(std::true_type{});
  else
    tile_loop(std::false_type{});
}

// Several blocks per SM: 3 while <= 85 registers fit the accumulators.
template <class E, int kOut, int kLoop>
__global__ void __launch_bounds__(kMaxThreads, kOut <= 8 ? 3 : 2)
    conv_pool_small_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const SmallPlan p) {
  small_kernel_body<E, kOut, kLoop>(ops, s, p);
}

// The 16-bit patch loop for 5-6 channels, held to the float32 instances' 72 registers (under the
// launch bound ptxas gives it 80): 4 blocks of LeNet's 224 threads then fit an SM, not 3. (The
// 2- and 4-channel ones take <= 72 by themselves; a cap could only raise their count.)
template <class E, int kOut, int kLoop>
__global__ void __maxnreg__(72)
    conv_pool_small16_patch_kernel(const ConvPoolOperands ops, const ConvPoolShape s,
                                   const SmallPlan p) {
  small_kernel_body<E, kOut, kLoop>(ops, s, p);
}

// small_tf32: 4 blocks of 256 threads per SM (<= 64 registers).
template <class E, int kOut>
__global__ void __launch_bounds__(kMaxThreads, 4)
    conv_pool_small_mma_kernel(const ConvPoolOperands ops, const ConvPoolShape s,
                               const SmallPlan p) {
  small_kernel_body<E, kOut, kTensorCoreLoop>(ops, s, p);
}

template <class E, int kOut, int kLoop>
cudaError_t launch(const ConvPoolOperands& ops, const ConvPoolShape& s, const SmallPlan& p,
                   cudaStream_t stream) {
  constexpr int kMaxDevices = 64;
  // Per device: the dynamic shared-memory limit already set, the SM count, and the resident
  // blocks per SM for the last (threads, shared memory) launched: the host work of a launch
  // stays a few loads once a shape has run.
  static std::atomic<int> allowed[kMaxDevices];
  static std::atomic<int> sm_count[kMaxDevices];
  static std::atomic<int64_t> resident_key[kMaxDevices], resident[kMaxDevices];
  constexpr bool kCapped = !ElementOperands<E>::kFloat && kLoop > 0 && kOut == 6;
  const auto kernel = [] {  // only the instance launched gets compiled
    if constexpr (kCapped) return conv_pool_small16_patch_kernel<E, kOut, kLoop>;
    else if constexpr (kLoop == kTensorCoreLoop) return conv_pool_small_mma_kernel<E, kOut>;
    else return conv_pool_small_kernel<E, kOut, kLoop>;
  }();
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const bool cached = device < kMaxDevices;
  if (p.smem_bytes > 48 * 1024 &&
      (!cached || allowed[device].load(std::memory_order_acquire) < p.smem_bytes)) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes);
    if (err != cudaSuccess) return err;
    if (cached) allowed[device].store(p.smem_bytes, std::memory_order_release);
  }
  int sms = cached ? sm_count[device].load(std::memory_order_relaxed) : 0;
  if (sms == 0) {
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    if (cached) sm_count[device].store(sms, std::memory_order_relaxed);
  }
  const int64_t key = (int64_t(p.threads) << 32) | p.smem_bytes;
  int per_sm = 0;
  if (cached && resident_key[device].load(std::memory_order_acquire) == key) {
    per_sm = int(resident[device].load(std::memory_order_relaxed));
  } else {
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, p.threads, p.smem_bytes);
    if (err != cudaSuccess) return err;
    if (cached) {
      resident[device].store(per_sm, std::memory_order_relaxed);
      resident_key[device].store(key, std::memory_order_release);
    }
  }
  const int64_t blocks = std::min<int64_t>(p.tiles, int64_t(std::max(per_sm, 1)) * sms);
  kernel<<<unsigned(blocks), p.threads, p.smem_bytes, stream>>>(ops, s, p);
  return cudaGetLastError();
}

template <class E, int kOut>
cudaError_t launch_for_kernel(const ConvPoolOperands& ops, const ConvPoolShape& s,
                              const SmallPlan& p, cudaStream_t stream) {
  if constexpr (kOut > kMaxTensorCoreChannels) {
    return launch<E, kOut, 0>(ops, s, p, stream);  // no patch loop (see make_plan)
  } else {
    if constexpr (ElementOperands<E>::kFloat)
      if (p.tensor_cores) return launch<E, kOut, kTensorCoreLoop>(ops, s, p, stream);
    switch (p.patch_kernel) {
      case 3: return launch<E, kOut, 3>(ops, s, p, stream);
      case 5: return launch<E, kOut, 5>(ops, s, p, stream);
      default: return launch<E, kOut, 0>(ops, s, p, stream);
    }
  }
}

template <class E>
cudaError_t launch_for_element(const ConvPoolOperands& ops, const ConvPoolShape& s,
                               const SmallPlan& p, cudaStream_t stream) {
  switch (p.out_block) {
    case 2: return launch_for_kernel<E, 2>(ops, s, p, stream);
    case 4: return launch_for_kernel<E, 4>(ops, s, p, stream);
    case 6: return launch_for_kernel<E, 6>(ops, s, p, stream);
    case 8: return launch_for_kernel<E, 8>(ops, s, p, stream);
    case 12: return launch_for_kernel<E, 12>(ops, s, p, stream);
    default: return launch_for_kernel<E, kMaxOutChannels>(ops, s, p, stream);
  }
}

}  // namespace

const char* small_conv_pool_unsupported(const ConvPoolShape& s, const ConvPoolDevice& device,
                                        bool tensor_cores) {
  if (s.out_channels > kMaxOutChannels) return "more than 16 output channels";
  if (int64_t(s.in_channels) * s.taps() > kMaxReduction)
    return "in_channels * kernel taps is larger than 256";
  if (tensor_cores) {
    if (s.element != kElementFloat32) return "needs float32 input";
    if (s.out_channels > kMaxTensorCoreChannels) return "more than 8 output channels";
    if (s.pool_h != 2 || s.pool_w != 2 || s.pool_stride_h != 2 || s.pool_stride_w != 2)
      return "the tensor-core loop covers only a 2x2 / stride 2 pool";
  }
  const SmallPlan p = make_plan(s, tensor_cores);
  if (p.smem_bytes > device.max_shared_bytes)
    return "the input region and weights of a 16 x 16 pooled tile do not fit in shared memory";
  if (p.tiles > INT32_MAX) return "more than 2^31 - 1 tiles";
  return nullptr;
}

bool small_conv_pool_patch_loop(const ConvPoolShape& s) {
  return make_plan(s, false).patch_kernel != 0;
}

cudaError_t small_conv_pool_launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                   bool tensor_cores, cudaStream_t stream) {
  SmallPlan p = make_plan(s, tensor_cores);
  p.raw_input = p.raw_cols > 0 && input_rows_in_pairs_16bit(ops, s);
  p.raw_vectors = p.raw_input && p.raw_aligned && input_rows_in_runs_of_8_16bit(ops, s);
  if (p.raw_vectors) p.raw_cols = raw_vector_cols(p);
  p.vector_input = s.element == kElementFloat32 && p.aligned_cols && vectorizable_input(ops, s);
  switch (s.element) {
    case kElementFloat16: return launch_for_element<Float16>(ops, s, p, stream);
    case kElementBFloat16: return launch_for_element<BFloat16>(ops, s, p, stream);
    default: return launch_for_element<Float32>(ops, s, p, stream);
  }
}
