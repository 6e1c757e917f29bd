// Fused Conv2d -> ReLU -> MaxPool2d for float16 and bfloat16 tensors (x, weight, bias and the
// output all in one 16-bit type), products accumulated in fp32, the result rounded to the
// 16-bit type once, at the store. Rounding is monotonic, so rounding the pooled maximum gives
// the same value as PyTorch's max over rounded conv outputs; ReLU commutes with it too.
//
// Variants (the `config` of the Python op; the automatic choice is in conv_relu_maxpool.cu):
//   8 direct_16bit     One thread per pooled output, operands read straight from global memory
//                      (any strides), fp32 FMA. Slow, no tile or shared-memory limit: it runs
//                      every configuration PyTorch accepts, and it is the plain reference the
//                      fast kernel is checked against.
//   9 tiled_16bit_mma  Implicit GEMM on the tensor cores (mma.sync m16n8k16, .f16 or .bf16
//                      operands, fp32 accumulators), any convolution geometry.
//
// tiled_16bit_mma, per call (three launches on the caller's stream):
//   1. pack_weights: weight (any strides) -> workspace [out channel][tap][channel], channels
//      padded with zeros to a multiple of 16 (Cp).
//   2. pack_input: x (any strides: NCHW, channels-last, sliced) -> workspace NHWC with Cp
//      channels, through a 32 x 32 shared-memory transpose, so reads and writes coalesce.
//   3. conv_pool_mma16_kernel. A block owns one image, a block of 32 / 64 / 128 output channels
//      and the pooled outputs whose windows lie in an 8 x 32 tile of conv pixels (the tiling of
//      the float kernels: windows that straddle two tiles are computed by both). GEMM:
//      M = 256 conv pixels, N = the channel block, K = taps x Cp, walked in steps of one tap x
//      16 channels. Each step stages A = [256 pixels][16 channels] (the pixel's input under
//      this tap; zeros in the padding) and B = [N channels][16 channels] with 16-byte cp.async
//      copies (a pixel's 16 channels are 32 contiguous bytes of the packed input), 4 stages in
//      flight. Rows are padded to 24 halves (48 bytes, 12 words): the fragment loads of a warp
//      (8 rows x 4 words) then hit 32 different banks. 8 warps as 4 (pixels) x 2 (channels); a
//      warp owns 64 pixels x N/2 channels = 4 x N/16 m16n8 tiles.
//      Epilogue: accumulators + bias -> an fp32 [channel][pixel] tile in shared memory (reusing
//      the stages), then each pooled output = relu(max of its window), NaN kept as PyTorch
//      does, rounded to 16 bits and stored NCHW, consecutive threads on consecutive columns.
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type";
// g = lane / 4, t = lane % 4; each 32-bit register holds two consecutive-k elements, the
// lower k in the low half):
//   A (16 x 16, row-major): a0 = (row g, k 2t..2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t+8..),
//                           a3 = (g + 8, 2t+8..)
//   B (16 x 8, "col"):      b0 = (k 2t..2t+1, col g), b1 = (k 2t+8.., col g)
//   C/D (16 x 8, fp32):     c0, c1 = (row g, cols 2t, 2t+1), c2, c3 = (row g + 8, same cols)
// With A rows = pixels and K = channels stored contiguously per pixel, every A or B register is
// one aligned 32-bit shared-memory load.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "conv_pool_16bit.cuh"
#include "conv_pool_device.cuh"
#include "conv_pool_epilogue.cuh"
#include "conv_relu_maxpool_half.h"

namespace {

constexpr int kThreads = 256;
constexpr int kTileRows = 8;   // conv rows per block tile
constexpr int kTileCols = 32;  // conv cols per block tile
constexpr int kTilePixels = kTileRows * kTileCols;  // = kThreads: one staged pixel per thread
constexpr int kChunk = 16;      // input channels per K step = mma K
constexpr int kRowHalves = 24;  // staged row: 16 channels + 8 halves of padding (48 bytes)
constexpr int kRowWords = kRowHalves / 2;
constexpr int kStages = 4;
// Epilogue tile row: 260 = 4 (mod 32): a warp's accumulator stores (8 pixels x 4 channel
// pairs) hit 32 different banks.
constexpr int kEpilogueRow = conv_pool_epilogue::kRow;
static_assert(kTileRows == conv_pool_epilogue::kTileRows &&
                  kTileCols == conv_pool_epilogue::kTileCols,
              "the shared epilogue tile is the block tile");
// pack_input's transpose tile: 32 pixels of one input row x 32 channels.
constexpr int kPackTile = 32;
static_assert(kTilePixels == kThreads, "the A loader gives each thread one pixel");

// 16-byte global -> shared copy; src-size 0 writes zeros without reading (padding, tails).
__device__ __forceinline__ void copy_16_bytes_async(void* smem_dst, const void* global_src,
                                                    bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(valid ? 16 : 0));
}

// ---------------------------------------------------------------------------
// direct_16bit: the definition, one pooled output per thread.

template <class E>
__global__ void __launch_bounds__(kThreads)
    conv_pool_direct16_kernel(const ConvPoolOperands ops, const ConvPoolShape s) {
  const auto x = [&](int64_t n, int c, int64_t h, int64_t w) {
    return E::to_float(ops.x16[n * ops.x_stride[0] + c * ops.x_stride[1] + h * ops.x_stride[2] +
                               w * ops.x_stride[3]]);
  };
  const auto weight = [&](int k, int c, int r, int q) {
    return E::to_float(ops.weight16[k * ops.weight_stride[0] + c * ops.weight_stride[1] +
                                    r * ops.weight_stride[2] + q * ops.weight_stride[3]]);
  };
  const auto bias = [&](int k) {
    return ops.bias16 ? E::to_float(ops.bias16[k * ops.bias_stride]) : 0.f;
  };
  const int64_t total = s.output_elements();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x)
    ops.out16[i] = E::from_float(conv_pool_epilogue::direct_pooled_output(s, i, x, weight, bias));
}

// ---------------------------------------------------------------------------
// tiled_16bit_mma: host-side plan.

struct Mma16Plan {
  int out_block;            // output channels per block: 32, 64 or 128
  int pooled_rows, pooled_cols;  // pooled outputs per tile
  int tiles_h, tiles_w;
  int channel_blocks;
  int padded_channels;      // Cp: in_channels rounded up to 16
  int chunks;               // Cp / 16
  int steps;                // taps * chunks
  int smem_bytes;
  int64_t blocks;           // main kernel grid
  int64_t weight_bytes;     // packed weights, rounded up to 256 (the input follows them)
  int64_t input_bytes;      // packed input
  int64_t pack_col_tiles;   // pack_input: 32-pixel tiles per input row
  int64_t pack_channel_tiles;  // ... and 32-channel tiles per pixel
  int64_t pack_blocks;
};

int out_block_for(int out_channels) {
  return out_channels > 64 ? 128 : out_channels > 32 ? 64 : 32;
}

Mma16Plan make_mma16_plan(const ConvPoolShape& s) {
  Mma16Plan p{};
  p.out_block = out_block_for(s.out_channels);
  p.pooled_rows = (kTileRows - s.pool_h) / s.pool_stride_h + 1;
  p.pooled_cols = (kTileCols - s.pool_w) / s.pool_stride_w + 1;
  p.tiles_h = (s.out_height + p.pooled_rows - 1) / p.pooled_rows;
  p.tiles_w = (s.out_width + p.pooled_cols - 1) / p.pooled_cols;
  p.channel_blocks = (s.out_channels + p.out_block - 1) / p.out_block;
  p.padded_channels = (s.in_channels + kChunk - 1) / kChunk * kChunk;
  p.chunks = p.padded_channels / kChunk;
  const int64_t steps = int64_t(s.taps()) * p.chunks;
  p.steps = int(std::min<int64_t>(steps, INT32_MAX));
  const int64_t pipeline = int64_t(kStages) * (kTilePixels + p.out_block) * kRowHalves * 2;
  const int64_t epilogue = int64_t(p.out_block) * kEpilogueRow * 4;
  const int64_t bytes = std::max(pipeline, epilogue) + 4 * int64_t(p.out_block);
  p.smem_bytes = int(std::min<int64_t>(bytes, INT32_MAX));
  p.blocks = int64_t(s.batch) * p.tiles_h * p.tiles_w * p.channel_blocks;
  const int64_t weight_bytes = int64_t(s.out_channels) * s.taps() * p.padded_channels * 2;
  p.weight_bytes = (weight_bytes + 255) / 256 * 256;
  p.input_bytes = int64_t(s.batch) * s.in_height * s.in_width * p.padded_channels * 2;
  p.pack_col_tiles = (int64_t(s.in_width) + kPackTile - 1) / kPackTile;
  p.pack_channel_tiles = (int64_t(p.padded_channels) + kPackTile - 1) / kPackTile;
  p.pack_blocks = int64_t(s.batch) * s.in_height * p.pack_col_tiles * p.pack_channel_tiles;
  return p;
}

// ---------------------------------------------------------------------------
// tiled_16bit_mma: the two packing kernels.

// packed[k][tap][c] = weight[k][c][r][q] for c < in_channels, 0 for the padding channels.
__global__ void __launch_bounds__(kThreads)
    pack_weights_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const Mma16Plan p,
                        uint16_t* packed) {
  const int taps = s.taps();
  const int64_t total = int64_t(s.out_channels) * taps * p.padded_channels;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % p.padded_channels);
    const int64_t rest = i / p.padded_channels;
    const int tap = int(rest % taps);
    const int64_t k = rest / taps;
    const int r = tap / s.kernel_w, q = tap % s.kernel_w;
    packed[i] = c < s.in_channels
                    ? ops.weight16[k * ops.weight_stride[0] + c * ops.weight_stride[1] +
                                   r * ops.weight_stride[2] + q * ops.weight_stride[3]]
                    : uint16_t(0);
  }
}

// packed[n][h][w][c] = x[n][c][h][w] (c < in_channels; 0 for the padding channels). A block
// moves 32 pixels of one input row x 32 channels through shared memory: reads run along w
// (NCHW's contiguous axis), writes along c.
__global__ void __launch_bounds__(kThreads)
    pack_input_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const Mma16Plan p,
                      uint16_t* packed) {
  __shared__ uint16_t tile[kPackTile][kPackTile + 2];  // [channel][pixel]; +2: fewer conflicts
  int64_t linear = blockIdx.x;
  const int channel_tile = int(linear % p.pack_channel_tiles);
  linear /= p.pack_channel_tiles;
  const int col_tile = int(linear % p.pack_col_tiles);
  linear /= p.pack_col_tiles;
  const int h = int(linear % s.in_height);
  const int64_t n = linear / s.in_height;
  const int c0 = channel_tile * kPackTile, w0 = col_tile * kPackTile;
  const int lane = threadIdx.x % kPackTile, row = threadIdx.x / kPackTile;  // 8 rows
  const uint16_t* image_row = ops.x16 + n * ops.x_stride[0] + int64_t(h) * ops.x_stride[2];
  for (int c = row; c < kPackTile; c += kThreads / kPackTile) {
    const int channel = c0 + c, w = w0 + lane;
    tile[c][lane] = (channel < s.in_channels && w < s.in_width)
                        ? image_row[channel * ops.x_stride[1] + w * ops.x_stride[3]]
                        : uint16_t(0);
  }
  __syncthreads();
  uint16_t* packed_row =
      packed + ((n * s.in_height + h) * s.in_width) * int64_t(p.padded_channels);
  for (int w = row; w < kPackTile; w += kThreads / kPackTile) {
    const int pixel = w0 + w, channel = c0 + lane;
    if (pixel < s.in_width && channel < p.padded_channels)
      packed_row[int64_t(pixel) * p.padded_channels + channel] = tile[lane][w];
  }
}

// ---------------------------------------------------------------------------
// tiled_16bit_mma: the main kernel.

template <class E, int kOutBlock>
struct Mma16Mainloop {
  static constexpr int kWarpChannels = kOutBlock / 2;  // 2 warps along the channels
  static constexpr int kMTiles = 4;                    // 64 pixels per warp
  static constexpr int kNTiles = kWarpChannels / 8;
  static constexpr int kStageHalves = (kTilePixels + kOutBlock) * kRowHalves;
  float acc[kMTiles][kNTiles][4];

  __device__ __forceinline__ Mma16Mainloop() { conv_pool_epilogue::zero_mma_accumulators(acc); }

  // One K step: A = stage[pixel][24 halves], B = stage + 256 rows: [channel][24 halves].
  __device__ __forceinline__ void compute(const uint16_t* stage) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_m = warp % 4, warp_n = warp / 4;
    const int group = lane / 4, thread_in_group = lane % 4;
    const uint32_t* a_words = reinterpret_cast<const uint32_t*>(stage);
    const uint32_t* b_words = a_words + kTilePixels * kRowWords;
    uint32_t a[kMTiles][4], b[kNTiles][2];
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
      const uint32_t* row = a_words + (warp_m * 64 + i * 16 + group) * kRowWords + thread_in_group;
      a[i][0] = row[0];                           // pixel g,     channels 2t, 2t+1
      a[i][1] = row[8 * kRowWords];               // pixel g + 8, channels 2t, 2t+1
      a[i][2] = row[4];                           // pixel g,     channels 2t+8, 2t+9
      a[i][3] = row[8 * kRowWords + 4];           // pixel g + 8, channels 2t+8, 2t+9
    }
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      const uint32_t* row =
          b_words + (warp_n * kWarpChannels + j * 8 + group) * kRowWords + thread_in_group;
      b[j][0] = row[0];  // channels 2t, 2t+1 of output channel g
      b[j][1] = row[4];  // channels 2t+8, 2t+9
    }
#pragma unroll
    for (int i = 0; i < kMTiles; ++i)
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) mma_16816<E>(acc[i][j], a[i], b[j]);
  }

  // Accumulator (pixel, channel) + bias -> tile[channel][pixel], fp32.
  __device__ __forceinline__ void store(float* tile, const float* bias) const {
    conv_pool_epilogue::store_mma_accumulators<kMTiles, kNTiles, kWarpChannels>(acc, tile, bias);
  }
};

template <class E, int kOutBlock>
__global__ void __launch_bounds__(kThreads, 1)
    conv_pool_mma16_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const Mma16Plan p,
                           const uint16_t* packed_weights, const uint16_t* packed_input) {
  using Mainloop = Mma16Mainloop<E, kOutBlock>;
  extern __shared__ __align__(16) unsigned char smem[];
  uint16_t* stages = reinterpret_cast<uint16_t*>(smem);
  float* bias = reinterpret_cast<float*>(
      smem + max(kStages * Mainloop::kStageHalves * 2, kOutBlock * kEpilogueRow * 4));

  // Tile scheduler: blockIdx.x -> (image, tile row, tile col, channel block), channel block
  // fastest so that blocks reading the same input run together.
  int64_t linear = blockIdx.x;
  const int channel_block = int(linear % p.channel_blocks);
  linear /= p.channel_blocks;
  const int tile_col = int(linear % p.tiles_w);
  linear /= p.tiles_w;
  const int tile_row = int(linear % p.tiles_h);
  const int64_t image = linear / p.tiles_h;
  const int channel0 = channel_block * kOutBlock;
  const int out_row0 = tile_row * p.pooled_rows, out_col0 = tile_col * p.pooled_cols;
  // Conv pixel at tile position (0, 0); negative with pool padding.
  const int conv_row0 = s.window_row0(out_row0);
  const int conv_col0 = s.window_col0(out_col0);

  for (int k = threadIdx.x; k < kOutBlock; k += kThreads) {
    const int channel = channel0 + k;
    bias[k] = (ops.bias16 != nullptr && channel < s.out_channels)
                  ? E::to_float(ops.bias16[channel * ops.bias_stride])
                  : 0.f;
  }

  // A loader: thread t stages tile pixel t (row t / 32, col t % 32). Pixels outside the conv
  // output are never pooled; they load zeros.
  const int conv_row = conv_row0 + int(threadIdx.x) / kTileCols;
  const int conv_col = conv_col0 + int(threadIdx.x) % kTileCols;
  const bool pixel_valid =
      conv_row >= 0 && conv_row < s.conv_height && conv_col >= 0 && conv_col < s.conv_width;
  const int64_t in_row0 = int64_t(conv_row) * s.stride_h - s.pad_h;  // under tap (0, 0)
  const int64_t in_col0 = int64_t(conv_col) * s.stride_w - s.pad_w;
  const uint16_t* image_input =
      packed_input + image * s.in_height * int64_t(s.in_width) * p.padded_channels;

  auto load_step = [&](int step, uint16_t* stage) {
    const int tap = step / p.chunks, chunk = step - tap * p.chunks;
    const int r = tap / s.kernel_w, q = tap - r * s.kernel_w;
    const int64_t h = in_row0 + int64_t(r) * s.dilation_h;
    const int64_t w = in_col0 + int64_t(q) * s.dilation_w;
    const bool valid = pixel_valid && h >= 0 && h < s.in_height && w >= 0 && w < s.in_width;
    const uint16_t* src = valid ? image_input + (h * s.in_width + w) * p.padded_channels +
                                      chunk * kChunk
                                : packed_input;
    uint16_t* dst = stage + threadIdx.x * kRowHalves;
    copy_16_bytes_async(dst, src, valid);
    copy_16_bytes_async(dst + 8, valid ? src + 8 : src, valid);
    // B: kOutBlock rows of 16 channels = 2 x 16 bytes each.
    uint16_t* weights = stage + kTilePixels * kRowHalves;
    for (int v = threadIdx.x; v < 2 * kOutBlock; v += kThreads) {
      const int k = v / 2, part = v % 2;
      const int channel = channel0 + k;
      const bool k_valid = channel < s.out_channels;
      const uint16_t* wsrc =
          k_valid ? packed_weights + (int64_t(channel) * s.taps() + tap) * p.padded_channels +
                        chunk * kChunk + part * 8
                  : packed_weights;
      copy_16_bytes_async(weights + k * kRowHalves + part * 8, wsrc, k_valid);
    }
  };

  Mainloop mainloop;
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < p.steps) load_step(st, stages + st * Mainloop::kStageHalves);
    cp_async_commit();
  }
  for (int step = 0; step < p.steps; ++step) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // step `step` visible to all; stage of `step - 1` free to refill
    const int next = step + kStages - 1;
    if (next < p.steps) load_step(next, stages + (next % kStages) * Mainloop::kStageHalves);
    cp_async_commit();
    mainloop.compute(stages + (step % kStages) * Mainloop::kStageHalves);
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: reuse them as the epilogue tile

  float* tile = reinterpret_cast<float*>(smem);
  mainloop.store(tile, bias);
  __syncthreads();

  // Each pooled output: relu(max over its window's conv pixels inside the conv output).
  const conv_pool_epilogue::PooledTile t{image,     channel0,      out_row0,
                                         out_col0,  conv_row0,     conv_col0,
                                         kOutBlock, p.pooled_rows, p.pooled_cols};
  conv_pool_epilogue::pool_tile<kThreads>(s, t, tile, [&](int64_t index, float value) {
    ops.out16[index] = E::from_float(value);
  });
}

// ---------------------------------------------------------------------------
// Launchers.

template <class E>
cudaError_t launch_direct16(const ConvPoolOperands& ops, const ConvPoolShape& s,
                            cudaStream_t stream) {
  const int64_t blocks = (s.output_elements() + kThreads - 1) / kThreads;
  const int64_t max_blocks = int64_t(1) << 20;  // grid-stride beyond this
  conv_pool_direct16_kernel<E>
      <<<unsigned(std::min(blocks, max_blocks)), kThreads, 0, stream>>>(ops, s);
  return cudaGetLastError();
}

template <class E, int kOutBlock>
cudaError_t launch_mma16(const ConvPoolOperands& ops, const ConvPoolShape& s, const Mma16Plan& p,
                         cudaStream_t stream) {
  uint16_t* packed_weights = reinterpret_cast<uint16_t*>(ops.workspace);
  uint16_t* packed_input =
      reinterpret_cast<uint16_t*>(reinterpret_cast<unsigned char*>(ops.workspace) +
                                  p.weight_bytes);
  const int64_t weight_elements = int64_t(s.out_channels) * s.taps() * p.padded_channels;
  const int64_t weight_blocks = std::min<int64_t>((weight_elements + kThreads - 1) / kThreads,
                                                  int64_t(1) << 20);
  pack_weights_kernel<<<unsigned(weight_blocks), kThreads, 0, stream>>>(ops, s, p,
                                                                         packed_weights);
  pack_input_kernel<<<unsigned(p.pack_blocks), kThreads, 0, stream>>>(ops, s, p, packed_input);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const auto kernel = conv_pool_mma16_kernel<E, kOutBlock>;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes);
  if (err != cudaSuccess) return err;
  kernel<<<unsigned(p.blocks), kThreads, p.smem_bytes, stream>>>(ops, s, p, packed_weights,
                                                                  packed_input);
  return cudaGetLastError();
}

template <class E>
cudaError_t launch_mma16_for(const ConvPoolOperands& ops, const ConvPoolShape& s,
                             cudaStream_t stream) {
  const Mma16Plan p = make_mma16_plan(s);
  switch (p.out_block) {
    case 32: return launch_mma16<E, 32>(ops, s, p, stream);
    case 64: return launch_mma16<E, 64>(ops, s, p, stream);
    default: return launch_mma16<E, 128>(ops, s, p, stream);
  }
}

bool is_16bit(const ConvPoolShape& s) {
  return s.element == kElementFloat16 || s.element == kElementBFloat16;
}

}  // namespace

const char* half_conv_pool_unsupported(const ConvPoolShape& s, int variant,
                                       const ConvPoolDevice& device) {
  if (!is_16bit(s)) return "needs float16 or bfloat16 input";
  if (variant == kVariantDirect) return nullptr;
  if (variant != kVariantTiledMma) return "unknown variant";
  if (device.compute_capability < 80)
    return "needs compute capability 8.0 or newer (mma.sync with 16-bit inputs)";
  if (s.pool_h > kTileRows || s.pool_w > kTileCols)
    return "the pooling window is larger than the 8 x 32 conv tile";
  const Mma16Plan p = make_mma16_plan(s);
  if (p.smem_bytes > device.max_shared_bytes)
    return "the pipeline stages or the epilogue tile do not fit in shared memory";
  if (p.blocks > INT32_MAX) return "the grid has more than 2^31 - 1 tiles";
  if (p.pack_blocks > INT32_MAX) return "the input packing grid has more than 2^31 - 1 blocks";
  if (int64_t(s.taps()) * p.chunks > INT32_MAX) return "the reduction has more than 2^31 steps";
  return nullptr;
}

int64_t half_conv_pool_workspace_bytes(const ConvPoolShape& s, int variant) {
  if (variant != kVariantTiledMma || !is_16bit(s)) return 0;
  const Mma16Plan p = make_mma16_plan(s);
  return p.weight_bytes + p.input_bytes;
}

cudaError_t half_conv_pool_launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                  int variant, cudaStream_t stream) {
  const bool bf16 = s.element == kElementBFloat16;
  if (variant == kVariantDirect)
    return bf16 ? launch_direct16<BFloat16>(ops, s, stream) : launch_direct16<Float16>(ops, s, stream);
  if (variant == kVariantTiledMma)
    return bf16 ? launch_mma16_for<BFloat16>(ops, s, stream)
                : launch_mma16_for<Float16>(ops, s, stream);
  return cudaErrorInvalidValue;
}
