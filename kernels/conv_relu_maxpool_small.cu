// Fused Conv2d -> ReLU -> MaxPool2d on CUDA cores (FFMA, fp32) for few output channels:
// variants `small_fp32` (float32 operands) and `small_16bit` (float16 / bfloat16 operands,
// converted to fp32 in shared memory, the next tile's region copied raw while this one computes;
// one rounding to the 16-bit type at the store).
//
// For problems like LeNet's first layer (1 input channel, 6 output channels, 5x5) a tensor-core
// tile multiplies mostly padding: at most 16 output channels are real, and the whole reduction
// (input channels x taps) is a few dozen products. Here a block owns a tile of up to 16 x 16
// pooled outputs of one image, for all output channels: it stages the input region those windows
// read (every channel, zero outside the image) and all weights in shared memory, then each
// thread computes the conv pixels of one pooling window for all output channels at once, takes
// their max, and stores relu(max) for every channel. Any convolution and pooling geometry; exact
// fp32 (no TF32), so it also serves allow_tf32 = False.
//
// Two inner loops, picked per launch:
//  * patch: a stride-1, dilation-1, 3x3 or 5x5 convolution under 2x2 pooling windows (LeNet).
//    The four conv pixels of a window read one (k+1) x (k+1) input patch per channel; the patch
//    is loaded into registers once and every weight load (16-byte broadcasts, one per 4 output
//    channels) feeds the four pixels. Per tap and output channel that is 4 FFMA against 1/4 of
//    a weight load; the FFMAs set the pace, not shared memory.
//  * generic: any geometry; one conv pixel of the window at a time, runtime loops.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "conv_pool_16bit.cuh"
#include "conv_pool_device.cuh"
#include "conv_pool_operands.h"
#include "conv_relu_maxpool_small.h"

namespace {

constexpr int kMaxThreads = 256;
constexpr int kMaxTile = 16;  // pooled outputs per tile side: one per thread
constexpr int kMaxOutChannels = 16;
constexpr int kMaxReduction = 256;  // in_channels * taps

struct SmallPlan {
  int tile_h, tile_w;    // pooled outputs per tile, one per thread
  int threads;           // tile_h * tile_w rounded up to whole warps
  int tiles_h, tiles_w;
  int in_rows, in_cols;  // staged input region per channel
  int out_block;         // output channels rounded up to 2, 4, 6, 8, 12 or 16 (the kernel's kOut)
  int patch_kernel;      // 3 or 5: the patch loop applies (see the top); 0: the generic loop
  int buffers;           // input regions staged: 2 (the next tile's copy overlaps this one) or 1
  // 16 bits: one fp32 region, plus (raw_cols > 0) a raw 16-bit copy of the next tile's region,
  // rows of raw_cols words from the even column at or left of the first; used when the input
  // moves in 4-byte pairs (raw_input, decided at launch), else the threads load and convert.
  int raw_cols;
  bool raw_input;
  int64_t tiles;         // batch * tiles_h * tiles_w
  int smem_bytes;
};

constexpr int weight_row(int out_block) { return (out_block + 3) / 4 * 4; }  // floats per (c, tap)

SmallPlan make_plan(const ConvPoolShape& s) {
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
  p.tiles = int64_t(s.batch) * p.tiles_h * p.tiles_w;
  const int64_t weight_floats = int64_t(s.in_channels) * s.taps() * weight_row(p.out_block) +
                                weight_row(p.out_block);
  const int64_t region_floats = int64_t(s.in_channels) * p.in_rows * p.in_cols;
  // Double-buffer the input region while that stays within the 48 KB every GPU gives a block
  // (LeNet: 2 x 4 KB); larger regions are staged and consumed one tile at a time.
  p.buffers = 4 * (weight_floats + 2 * region_floats) <= 48 * 1024 ? 2 : 1;
  int64_t raw_bytes = 0;
  if (s.element != kElementFloat32) {
    p.buffers = 1;
    p.raw_cols = (p.in_cols + 2) / 2 * 2;  // in_cols + 1 (the shift) rounded up to even
    raw_bytes = 2 * int64_t(s.in_channels) * p.in_rows * p.raw_cols;
    if (4 * (weight_floats + region_floats) + raw_bytes > 48 * 1024) p.raw_cols = raw_bytes = 0;
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

// Persistent blocks: the launch starts as many as fit at once and each loops over tiles.
// E: the operands' element type (Float32, Float16, BFloat16); kOut: output channels rounded up;
// kPatch: 3, 5 or 0 (generic).
template <class E, int kOut, int kPatch>
__device__ __forceinline__ void small_kernel_body(const ConvPoolOperands& ops,
                                                  const ConvPoolShape& s, const SmallPlan& p) {
  constexpr int kRow = weight_row(kOut);
  extern __shared__ __align__(16) float smem[];
  const int reduction = s.in_channels * s.taps();
  float* weights = smem;  // [channel * taps + tap][kRow], then the bias: [kRow]
  float* input = weights + (reduction + 1) * kRow;  // buffers x [channel][in_rows][in_cols]

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

  // Persistent blocks: tiles blockIdx.x, + gridDim.x, ...; with two buffers the next tile's
  // input region is copied (cp.async) while this one is computed.
  const int region = s.in_channels * p.in_rows * p.in_cols;
  int64_t tile = blockIdx.x;
  if constexpr (!ElementOperands<E>::kFloat) {
    // 16 bits, one region: with p.raw_input the next tile's region is copied raw while this
    // one is computed, then converted into the region; else loaded and converted after it.
    uint16_t* raw = reinterpret_cast<uint16_t*>(input + region);
    if (tile < p.tiles) stage_region<E>(ops, s, p, tile, input);
    for (; tile < p.tiles; tile += gridDim.x) {
      const int64_t next = tile + gridDim.x;
      __syncthreads();  // the region is staged; the raw copy of it has been read
      if (p.raw_input && next < p.tiles) {
        copy_raw_region(ops, s, p, next, raw);
        cp_async_commit();
      }
      compute_tile<E, kOut, kPatch>(ops, s, p, tile, weights, input);
      if (next < p.tiles) {
        if (p.raw_input) cp_async_wait<0>();
        __syncthreads();  // the region is read by all before it is overwritten
        if (p.raw_input)
          convert_raw_region<E>(s, p, next, raw, input);
        else
          stage_region<E>(ops, s, p, next, input);
      }
    }
    return;
  }
  if (tile < p.tiles) stage_region<E>(ops, s, p, tile, input);
  cp_async_commit();
  for (int step = 0; tile < p.tiles; tile += gridDim.x, ++step) {
    float* current = input + (p.buffers == 2 ? (step % 2) * region : 0);
    const int64_t next = tile + gridDim.x;
    if (p.buffers == 2) {
      if (next < p.tiles) stage_region<E>(ops, s, p, next, input + ((step + 1) % 2) * region);
      cp_async_commit();  // possibly empty: keeps "all but the newest group" = this tile
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    compute_tile<E, kOut, kPatch>(ops, s, p, tile, weights, current);
    __syncthreads();  // the region is read by all before it is overwritten
    if (p.buffers == 1 && next < p.tiles) {
      stage_region<E>(ops, s, p, next, input);
      cp_async_commit();
    }
  }
}

// Several blocks per SM: 3 while <= 85 registers fit the accumulators.
template <class E, int kOut, int kPatch>
__global__ void __launch_bounds__(kMaxThreads, kOut <= 8 ? 3 : 2)
    conv_pool_small_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const SmallPlan p) {
  small_kernel_body<E, kOut, kPatch>(ops, s, p);
}

// The 16-bit patch loop for 5-6 channels, held to the float32 instances' 72 registers (under the
// launch bound ptxas gives it 80): 4 blocks of LeNet's 224 threads then fit an SM, not 3. (The
// 2- and 4-channel ones take <= 72 by themselves; a cap could only raise their count.)
template <class E, int kOut, int kPatch>
__global__ void __maxnreg__(72)
    conv_pool_small16_patch_kernel(const ConvPoolOperands ops, const ConvPoolShape s,
                                   const SmallPlan p) {
  small_kernel_body<E, kOut, kPatch>(ops, s, p);
}

template <class E, int kOut, int kPatch>
cudaError_t launch(const ConvPoolOperands& ops, const ConvPoolShape& s, const SmallPlan& p,
                   cudaStream_t stream) {
  constexpr int kMaxDevices = 64;
  // Per device: the dynamic shared-memory limit already set, the SM count, and the resident
  // blocks per SM for the last (threads, shared memory) launched: the host work of a launch
  // stays a few loads once a shape has run.
  static std::atomic<int> allowed[kMaxDevices];
  static std::atomic<int> sm_count[kMaxDevices];
  static std::atomic<int64_t> resident_key[kMaxDevices], resident[kMaxDevices];
  constexpr bool kCapped = !ElementOperands<E>::kFloat && kPatch > 0 && kOut == 6;
  const auto kernel = [] {  // only the instance launched gets compiled
    if constexpr (kCapped) return conv_pool_small16_patch_kernel<E, kOut, kPatch>;
    else return conv_pool_small_kernel<E, kOut, kPatch>;
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
  if constexpr (kOut > 8) {
    return launch<E, kOut, 0>(ops, s, p, stream);  // no patch loop (see make_plan)
  } else {
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

const char* small_conv_pool_unsupported(const ConvPoolShape& s, const ConvPoolDevice& device) {
  if (s.out_channels > kMaxOutChannels) return "more than 16 output channels";
  if (int64_t(s.in_channels) * s.taps() > kMaxReduction)
    return "in_channels * kernel taps is larger than 256";
  const SmallPlan p = make_plan(s);
  if (p.smem_bytes > device.max_shared_bytes)
    return "the input region and weights of a 16 x 16 pooled tile do not fit in shared memory";
  if (p.tiles > INT32_MAX) return "more than 2^31 - 1 tiles";
  return nullptr;
}

cudaError_t small_conv_pool_launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                   cudaStream_t stream) {
  SmallPlan p = make_plan(s);
  p.raw_input = p.raw_cols > 0 && input_rows_in_pairs_16bit(ops, s);
  switch (s.element) {
    case kElementFloat16: return launch_for_element<Float16>(ops, s, p, stream);
    case kElementBFloat16: return launch_for_element<BFloat16>(ops, s, p, stream);
    default: return launch_for_element<Float32>(ops, s, p, stream);
  }
}
