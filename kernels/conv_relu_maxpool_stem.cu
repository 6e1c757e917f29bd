// Fused Conv2d -> ReLU -> MaxPool2d for a network's first layer: a short reduction (input
// channels x taps <= 32, e.g. 3 x 3 x 3 on RGB) into at most 64 output channels, under 2x2 /
// stride 2 windows. Variants `stem_tf32` (float32 operands, TF32 mma.sync m16n8k8) and
// `stem_16bit` (float16 / bfloat16 operands, mma.sync m16n8k16), one kernel; fp32 accumulators.
//
// Why a kernel of its own: the 8-channel chunks of the wgmma kernel multiply 3 real channels of
// 8 and pay a whole tile's halo, barriers and epilogue per chunk; such a layer is bound by its
// output (64 channels of pooled pixels for 3 channels of input), so what matters is how few
// instructions each pooled output costs on its way out. Here:
//  * The whole weight lives in registers for the whole kernel: a warp's B fragments for 4 k
//    steps of m16n8k8 x 8 n-tiles are 64 registers (16 bits: 2 k steps of m16n8k16, 32
//    registers), loaded once per block.
//  * The reduction is flattened over (channel, tap) and padded to 32; a lane's k columns are
//    fixed, so its 8 shared-memory offsets (channel plane + tap row + tap column) are computed
//    once per block too. Padded k columns point into a plane of zeros (never at image data:
//    0 x inf would be NaN).
//  * An m16 tile is 2 conv rows x 8 conv columns: rows g and g + 8 of the fragment are the two
//    pixels of one window column, so the vertical max is within a thread (c0 / c2, c1 / c3) and
//    the horizontal one a single shuffle with lane ^ 4. Each lane keeps one pooled value per
//    n-tile (its channel 2t or 2t + 1, by the parity of g), written to a pooled tile in shared
//    memory without bank conflicts.
//  * A block tile is a few pooled rows by up to 128 pooled columns of one image; blocks are
//    persistent and copy the next tile's input halo (cp.async, 16-byte vectors where rows
//    allow) while computing this one; the pooled tile leaves as coalesced NCHW rows (or, into a
//    channels-last output, whole pixels a warp, 8 or 4 channels a thread), with the bias and
//    the ReLU applied there (relu(max(conv) + b) == max(relu(conv + b)): rounding is
//    monotonic), NaN kept as PyTorch keeps it.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "conv_pool_16bit.cuh"
#include "conv_pool_device.cuh"
#include "conv_pool_operands.h"
#include "conv_relu_maxpool_stem.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kKSteps = 4;                   // k steps of 8: the reduction is at most 32 long
constexpr int kMaxReduction = 8 * kKSteps;   // in_channels * taps
constexpr int kMaxOutChannels = 64;          // 8 n-tiles of 8
constexpr int kMaxPooledCols = 128;          // pooled columns of a block tile
constexpr int kTargetMTiles = 64;            // m16 tiles per block tile: 8 per warp
// Floats between channels of the pooled tile: room for the largest tile (kTargetMTiles m16
// tiles of 4 pooled outputs), 4 (mod 32) so that a warp's pooled stores (4 outputs x 8
// channels) hit distinct banks, and a compile-time constant so that the 8 n-tiles' stores
// take immediate offsets.
constexpr int kChannelStride = 4 * kTargetMTiles + 4;
// Floats per k row of the weight staged in shared memory: 8 (mod 32) for the wider n-tile
// counts, so that a warp's B-fragment loads (4 k rows x 8 channels) hit distinct banks.
template <int kNTiles>
constexpr int kWeightRow = 8 * kNTiles + 8;
// Floats added between the planes of consecutive 8-channel groups of the pooled tile (group q
// starts q x (8 kChannelStride + kGroupPad) in): 32 / kNTiles, so that the channels-last
// stores' loads, a warp's lanes (32 / kNTiles pixels) x (kNTiles groups), hit 32 banks.
// A compile-time constant: the staging keeps its immediate offsets.
template <int kNTiles>
constexpr int kGroupPad = kNTiles == 1 ? 0 : 32 / kNTiles;
// The pooled tile's floats for n_tiles n-tiles: 8 n_tiles channel planes and the group pads.
constexpr int pooled_tile_floats(int n_tiles) {
  return 8 * n_tiles * kChannelStride + (n_tiles == 1 ? 0 : 32);
}

struct StemPlan {
  int pooled_rows, pooled_cols;  // a block tile; pooled_cols is a multiple of 4 (one m16 tile)
  int row_tiles, col_tiles, tiles;
  int n_tiles;                   // n-tiles of 8 output channels: 1, 2, 4 or 8
  // The input halo of a tile, per channel plane: halo_rows rows of halo_cols staged elements
  // (the columns a 16-byte vector copy moves), rows `pitch` and planes `plane` elements apart,
  // those chosen so that a warp's gathered loads hit distinct banks on the usual layers.
  // Plane in_channels is zeros. `shift`: columns staged left of the first the tile reads (the
  // vector copies start at a multiple of 16 bytes).
  int halo_rows, halo_cols, pitch, plane, shift;
  int stage_bytes;               // one halo buffer, zero plane included; two are staged
  int smem_bytes;
  bool vector_input;             // 16-byte halo copies (decided at launch)
  bool vector_out;               // whole rows in runs of 4 (decided at launch)
  bool strided_out;              // the output's own strides (a channels-last output)
  // With strided_out: channels a thread stores at once, 8 or 4 (whole-pixel runs), or 1 where
  // the strides or alignment allow no vector (decided at launch).
  int out_vector;
  int64_t out_stride[4];         // (image, channel, row, column), with strided_out
};

int round_up(int x, int m) { return (x + m - 1) / m * m; }

// The smallest n >= at_least whose 4-byte word count is `words` modulo 32, in elements of
// `bytes` (a multiple of 16 bytes).
int with_words_mod32(int at_least, int words, int bytes) {
  const int per_word = 4 / bytes;  // elements per 4-byte word: 1 or 2
  int w = round_up(at_least, per_word) / per_word;
  w = round_up(w, 4);
  while (w % 32 != words) w += 4;
  return w * per_word;
}

StemPlan make_plan(const ConvPoolShape& s) {
  StemPlan p{};
  const int bytes = element_bytes(s);
  const int vector = 16 / bytes;  // elements per 16-byte copy
  p.pooled_cols = std::min(round_up(s.out_width, 4), kMaxPooledCols);
  p.pooled_rows = std::max(1, std::min(s.out_height, kTargetMTiles / (p.pooled_cols / 4)));
  p.row_tiles = (s.out_height + p.pooled_rows - 1) / p.pooled_rows;
  p.col_tiles = (s.out_width + p.pooled_cols - 1) / p.pooled_cols;
  const int64_t tiles = int64_t(s.batch) * p.row_tiles * p.col_tiles;
  p.tiles = int(std::min<int64_t>(tiles, INT32_MAX));
  const int groups = (s.out_channels + 7) / 8;
  p.n_tiles = groups <= 1 ? 1 : groups <= 2 ? 2 : groups <= 4 ? 4 : 8;
  // A tile's conv rows [2 r0, 2 r0 + 2 rows) read input rows 2 r0 stride - pad + [0, halo_rows).
  const int64_t halo_rows =
      (2 * p.pooled_rows - 1) * int64_t(s.stride_h) + (s.kernel_h - 1) * int64_t(s.dilation_h) + 1;
  const int64_t halo_cols =
      (2 * p.pooled_cols - 1) * int64_t(s.stride_w) + (s.kernel_w - 1) * int64_t(s.dilation_w) + 1;
  if (halo_rows * halo_cols > (int64_t(1) << 20)) {  // far past any shared memory: refused
    p.smem_bytes = INT32_MAX;
    return p;
  }
  p.halo_rows = int(halo_rows);
  const int cols = int(halo_cols);
  // Every tile's first column is pad_w left of a multiple of 2 * pooled_cols * stride_w, itself
  // a multiple of 8: the same shift for every tile.
  p.shift = ((-s.pad_w) % vector + vector) % vector;
  p.halo_cols = round_up(p.shift + cols, vector);
  // Banks (docs/PERF.md, by a model of the gathers): rows 12 words (float32) or 24 words
  // (16-bit) past a multiple of 32, planes 8.
  p.pitch = with_words_mod32(p.halo_cols, bytes == 4 ? 12 : 24, bytes);
  p.plane = with_words_mod32(p.halo_rows * p.pitch, 8, bytes);
  p.stage_bytes = (s.in_channels + 1) * p.plane * bytes;  // a multiple of 16
  // The pooled tile (whose memory first holds the weight) and the bias.
  const int pooled_floats = std::max(pooled_tile_floats(p.n_tiles),
                                     kMaxReduction * (8 * p.n_tiles + 8));
  const int64_t smem = 2 * int64_t(p.stage_bytes) + (int64_t(pooled_floats) + 64) * 4;
  p.smem_bytes = int(std::min<int64_t>(smem, INT32_MAX));
  return p;
}

template <class E>
__device__ __forceinline__ uint32_t tf32_bits(typename E::Raw v) {
  return __float_as_uint(E::to_float(v));
}

// Two 16-bit words as one 32-bit word (`lower` in the low half, at the lower address): an
// m16n8k16 fragment register, or two outputs.
__device__ __forceinline__ uint32_t pair(uint16_t lower, uint16_t upper) {
  return uint32_t(lower) | (uint32_t(upper) << 16);
}

// Stores four consecutive pooled outputs (16 bytes of float32, 8 of 16-bit words).
template <class E>
__device__ __forceinline__ void store4(typename E::Raw* dst, float4 v) {
  if constexpr (ElementOperands<E>::kFloat) {
    *reinterpret_cast<float4*>(dst) = v;
  } else {
    *reinterpret_cast<uint2*>(dst) = make_uint2(pair(E::from_float(v.x), E::from_float(v.y)),
                                                pair(E::from_float(v.z), E::from_float(v.w)));
  }
}

// Stores eight consecutive outputs (32 bytes of float32, 16 of 16-bit words).
template <class E>
__device__ __forceinline__ void store8(typename E::Raw* dst, const float (&v)[8]) {
  if constexpr (ElementOperands<E>::kFloat) {
    reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    *reinterpret_cast<uint4*>(dst) =
        make_uint4(pair(E::from_float(v[0]), E::from_float(v[1])),
                   pair(E::from_float(v[2]), E::from_float(v[3])),
                   pair(E::from_float(v[4]), E::from_float(v[5])),
                   pair(E::from_float(v[6]), E::from_float(v[7])));
  }
}

// Where tile `tile` sits: image, first pooled row and column.
struct StemTile {
  int64_t image;
  int row0, col0;
};

__device__ __forceinline__ StemTile stem_tile(const StemPlan& p, int tile) {
  const int col_tile = tile % p.col_tiles;
  const int rest = tile / p.col_tiles;
  return {rest / p.row_tiles, (rest % p.row_tiles) * p.pooled_rows, col_tile * p.pooled_cols};
}

// Copies tile `tile`'s input halo into `halo` (zeros outside the image): cp.async where it can
// (float32, or 16-byte vectors), else through registers (16-bit elements one at a time).
template <class E>
__device__ __forceinline__ void load_halo(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                          const StemPlan& p, int tile,
                                          typename E::Raw* halo) {
  using Raw = typename E::Raw;
  constexpr int kVector = 16 / sizeof(Raw);
  const StemTile t = stem_tile(p, tile);
  const Raw* x = ElementOperands<E>::x(ops) + t.image * ops.x_stride[0];
  const int in_row0 = 2 * t.row0 * s.stride_h - s.pad_h;
  const int in_col0 = 2 * t.col0 * s.stride_w - s.pad_w - p.shift;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rows = s.in_channels * p.halo_rows;
  for (int row = warp; row < rows; row += kWarps) {
    const int c = row / p.halo_rows, halo_row = row - c * p.halo_rows;
    const int in_row = in_row0 + halo_row;
    const bool row_inside = in_row >= 0 && in_row < s.in_height;
    const Raw* src_row = x + c * ops.x_stride[1] + int64_t(in_row) * ops.x_stride[2];
    Raw* dst_row = halo + c * p.plane + halo_row * p.pitch;
    if (p.vector_input) {
      // in_col0 is a multiple of kVector and so is the width: each vector is wholly inside
      // the image or wholly outside.
      for (int col = lane * kVector; col < p.halo_cols; col += 32 * kVector) {
        const int in_col = in_col0 + col;
        const bool inside = row_inside && in_col >= 0 && in_col < s.in_width;
        cp_async_16(reinterpret_cast<float*>(dst_row + col),
                    reinterpret_cast<const float*>(inside ? src_row + in_col : x), inside);
      }
    } else {
      for (int col = lane; col < p.halo_cols; col += 32) {
        const int in_col = in_col0 + col;
        const bool inside = row_inside && in_col >= 0 && in_col < s.in_width;
        const Raw* src = inside ? src_row + in_col * ops.x_stride[3] : x;
        if constexpr (ElementOperands<E>::kFloat) {
          cp_async_4(dst_row + col, src, inside);
        } else {
          dst_row[col] = inside ? *src : Raw(0);
        }
      }
    }
  }
}

template <class E, int kNTiles>
__global__ void __launch_bounds__(kThreads, 2)
    conv_pool_stem_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const StemPlan p) {
  using Raw = typename E::Raw;
  extern __shared__ __align__(16) unsigned char smem[];
  // Two halo buffers (p.stage_bytes each), the pooled tile, the bias.
  auto halo = [&](int stage) { return reinterpret_cast<Raw*>(smem + stage * p.stage_bytes); };
  float* pooled = reinterpret_cast<float*>(smem + 2 * p.stage_bytes);
  float* bias = pooled + max(pooled_tile_floats(kNTiles), kMaxReduction * kWeightRow<kNTiles>);
  // The plane of pooled channel c.
  auto plane_of = [pooled](int c) {
    return pooled + c * kChannelStride + (c / 8) * kGroupPad<kNTiles>;
  };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;

  if (blockIdx.x < p.tiles) load_halo<E>(ops, s, p, blockIdx.x, halo(0));
  cp_async_commit();

  // The zero planes (never written by the copies) and the bias.
  for (int stage = 0; stage < 2; ++stage)
    for (int i = threadIdx.x; i < p.plane; i += kThreads)
      halo(stage)[s.in_channels * p.plane + i] = Raw(0);
  const Raw* bias_raw = ElementOperands<E>::bias(ops);
  for (int i = threadIdx.x; i < 8 * kNTiles; i += kThreads)
    bias[i] = bias_raw != nullptr && i < s.out_channels
                  ? E::to_float(bias_raw[i * ops.bias_stride]) : 0.f;

  // The weight as fp32 [k][channel] in the pooled tile's memory (not in use before the first
  // tile's barrier), zeros past the reduction and the channels; rows kWeightRow apart.
  const int taps = s.taps(), reduction = s.in_channels * taps;
  {
    const Raw* weight = ElementOperands<E>::weight(ops);
    for (int i = threadIdx.x; i < kMaxReduction * 8 * kNTiles; i += kThreads) {
      const int k = i / (8 * kNTiles), channel = i % (8 * kNTiles);
      float w = 0.f;
      if (k < reduction && channel < s.out_channels) {
        const int c = k / taps, tap = k - c * taps;
        const int r = tap / s.kernel_w, q = tap - r * s.kernel_w;
        w = E::to_float(weight[channel * ops.weight_stride[0] + c * ops.weight_stride[1] +
                               r * ops.weight_stride[2] + q * ops.weight_stride[3]]);
      }
      pooled[k * kWeightRow<kNTiles> + channel] = w;
    }
  }
  __syncthreads();

  // This lane's k columns: their byte offsets into a halo, relative to a pixel's (tap (0, 0),
  // channel 0) element, and their weights for every n-tile. TF32 (m16n8k8, 4 k steps): columns
  // 8j + t and 8j + t + 4. 16 bits (m16n8k16, 2 k steps, two k per register, the lower in the
  // low half): 16j + 2t, + 1, + 8 and + 9.
  constexpr bool kTf32 = ElementOperands<E>::kFloat;
  constexpr int kSteps = kTf32 ? kKSteps : kKSteps / 2;
  constexpr int kColumns = kTf32 ? 2 : 4;
  int offset[kSteps][kColumns];
  uint32_t b[kSteps][kNTiles][2];
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    int k[kColumns];
#pragma unroll
    for (int col = 0; col < kColumns; ++col) {
      k[col] = kTf32 ? 8 * j + t + 4 * col : 16 * j + 2 * t + (col & 1) + 8 * (col >> 1);
      const bool real = k[col] < reduction;
      const int c = real ? k[col] / taps : s.in_channels;
      const int tap = real ? k[col] - c * taps : 0;
      const int r = tap / s.kernel_w, q = tap - r * s.kernel_w;
      offset[j][col] = int(sizeof(Raw)) *
                       (c * p.plane + r * s.dilation_h * p.pitch + q * s.dilation_w + p.shift);
    }
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      const float* w = pooled + 8 * n + g;  // [k][channel], channel 8n + g
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (kTf32) {
          b[j][n][h] = __float_as_uint(w[k[h] * kWeightRow<kNTiles>]);
        } else {  // exact: the values came from E
          b[j][n][h] = pair(E::from_float(w[k[2 * h] * kWeightRow<kNTiles>]),
                            E::from_float(w[k[2 * h + 1] * kWeightRow<kNTiles>]));
        }
      }
    }
  }

  const int m_cols = p.pooled_cols / 4;     // m16 tiles per pooled row of a tile
  const int row_step = s.stride_h * p.pitch;  // conv row -> halo row
  const int row_bytes = row_step * int(sizeof(Raw));
  int stage = 0;
  for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x, stage ^= 1) {
    if (tile + int(gridDim.x) < p.tiles)
      load_halo<E>(ops, s, p, tile + gridDim.x, halo(stage ^ 1));
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // this tile's halo (and, the first time, the zeros and the bias)

    const StemTile where = stem_tile(p, tile);
    const int rows = min(p.pooled_rows, s.out_height - where.row0);
    const Raw* in = halo(stage);
    int row = warp / m_cols, m_col = warp % m_cols;
    while (row < rows) {
      // Rows g and g + 8 of the m16 tile: conv pixels (2 row, 8 m_col + g) and the one below.
      // Every k step, always: a shorter reduction's padding reads the zero plane (a branch per
      // k step cost more instructions than the multiply-adds it skipped).
      // Addresses in bytes: the offsets and the row step are pre-scaled, so each load's
      // address is one addition.
      const char* pixel = reinterpret_cast<const char*>(in + 2 * row * row_step +
                                                        (8 * m_col + g) * s.stride_w);
      float acc[kNTiles][4];
#pragma unroll
      for (int j = 0; j < kSteps; ++j) {
        uint32_t a[4];
        if constexpr (kTf32) {
          const char* lo = pixel + offset[j][0];
          const char* hi = pixel + offset[j][1];
          a[0] = tf32_bits<E>(*reinterpret_cast<const Raw*>(lo));
          a[1] = tf32_bits<E>(*reinterpret_cast<const Raw*>(lo + row_bytes));
          a[2] = tf32_bits<E>(*reinterpret_cast<const Raw*>(hi));
          a[3] = tf32_bits<E>(*reinterpret_cast<const Raw*>(hi + row_bytes));
        } else {
          auto at = [&](int col, int extra) {
            return *reinterpret_cast<const Raw*>(pixel + offset[j][col] + extra);
          };
          a[0] = pair(at(0, 0), at(1, 0));
          a[1] = pair(at(0, row_bytes), at(1, row_bytes));
          a[2] = pair(at(2, 0), at(3, 0));
          a[3] = pair(at(2, row_bytes), at(3, row_bytes));
        }
#pragma unroll
        for (int n = 0; n < kNTiles; ++n) {
          if (j == 0) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
          if constexpr (kTf32) {
            mma_tf32(acc[n], a, b[j][n]);
          } else {
            mma_16816<E>(acc[n], a, b[j][n]);
          }
        }
      }
      // 2 x 2 max: c0 / c2 and c1 / c3 are one window column; lane ^ 4 holds the other. The
      // even lane of the pair keeps channel 2t, the odd one 2t + 1.
      const bool odd = g & 1;
      float* out = plane_of(2 * t + odd);
      const int pooled_pixel = row * p.pooled_cols + 4 * m_col + g / 2;
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
        const float even_channel = max_keeping_nan(acc[n][0], acc[n][2]);
        const float odd_channel = max_keeping_nan(acc[n][1], acc[n][3]);
        const float other = __shfl_xor_sync(0xffffffffu, odd ? even_channel : odd_channel, 4);
        out[n * (8 * kChannelStride + kGroupPad<kNTiles>) + pooled_pixel] =
            max_keeping_nan(odd ? odd_channel : even_channel, other);
      }
      m_col += kWarps;
      while (m_col >= m_cols) {
        m_col -= m_cols;
        ++row;
      }
    }
    __syncthreads();  // the pooled tile

    // Bias, ReLU, store.
    Raw* out = ElementOperands<E>::out(ops);
    const int64_t plane = int64_t(s.out_height) * s.out_width;
    const int64_t first = where.image * s.out_channels * plane +
                          int64_t(where.row0) * s.out_width + where.col0;
    if (p.out_vector > 1) {
      // A thread takes `vec` (8 or 4) consecutive channels of one pooled pixel, consecutive
      // threads the channel groups of a pixel, then the next pixels: a warp's stores are whole
      // channels-last pixels in a row (512 bytes for 64 16-bit channels). The group pads spread
      // its loads: for 64 channels and vec 8 lane (pixel d, group q) reads bank
      // 4 j + 4 q + P + d mod 32 for its j-th channel (kChannelStride is 4 mod 32), P the
      // warp's first pixel, 32 banks; 8, 16 and 32 channels too (pads 0, 16, 8), other
      // multiples of 8 two lanes a bank.
      const int vec = p.out_vector;
      const int groups = s.out_channels / vec;
      const int cols = min(p.pooled_cols, s.out_width - where.col0);
      const int items = rows * cols * groups;
      const int64_t* os = p.out_stride;
      Raw* image_out = out + where.image * os[0];
      for (int i = threadIdx.x; i < items; i += kThreads) {
        const int pixel = i / groups, group = i - pixel * groups;
        const int r = pixel / cols, col = pixel - r * cols;
        const int channel = vec * group;
        const float* src = plane_of(channel) + r * p.pooled_cols + col;
        Raw* dst = image_out + channel + (where.row0 + r) * os[2] + (where.col0 + col) * os[3];
        float v[8];
        if (vec == 8) {
#pragma unroll
          for (int j = 0; j < 8; ++j)
            v[j] = relu_keeping_nan(src[j * kChannelStride] + bias[channel + j]);
          store8<E>(dst, v);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j)
            v[j] = relu_keeping_nan(src[j * kChannelStride] + bias[channel + j]);
          store4<E>(dst, make_float4(v[0], v[1], v[2], v[3]));
        }
      }
    } else if (p.strided_out) {
      // Any output strides, one channel a thread: a warp takes 32 consecutive pixels of a
      // channel.
      const int cols = min(p.pooled_cols, s.out_width - where.col0);
      const int pixels = rows * cols;
      const int64_t* os = p.out_stride;
      Raw* image_out = out + where.image * os[0];
      for (int i = threadIdx.x; i < pixels * s.out_channels; i += kThreads) {
        const int channel = i / pixels, pixel = i - channel * pixels;
        const int r = pixel / cols, col = pixel - r * cols;
        const float* src = plane_of(channel) + r * p.pooled_cols + col;
        image_out[channel * os[1] + (where.row0 + r) * os[2] + (where.col0 + col) * os[3]] =
            E::from_float(relu_keeping_nan(src[0] + bias[channel]));
      }
    } else if (p.vector_out) {
      // The tile's rows of a channel are one run of `vectors` 4-element vectors (cols ==
      // out_width == pooled_cols): thread i takes vector i % vectors of channels i / vectors,
      // + per_pass, ... (a tile has at most 64 m16 tiles, so vectors <= 64 <= kThreads).
      const int vectors = rows * p.pooled_cols / 4;
      const int per_pass = kThreads / vectors;
      const int v = threadIdx.x % vectors;
      Raw* dst = out + first + 4 * v;
      for (int channel = threadIdx.x / vectors; channel < s.out_channels; channel += per_pass) {
        const float4 m = *reinterpret_cast<const float4*>(plane_of(channel) + 4 * v);
        const float b_channel = bias[channel];
        store4<E>(dst + channel * plane, make_float4(relu_keeping_nan(m.x + b_channel),
                                                     relu_keeping_nan(m.y + b_channel),
                                                     relu_keeping_nan(m.z + b_channel),
                                                     relu_keeping_nan(m.w + b_channel)));
      }
    } else {
      const int cols = min(p.pooled_cols, s.out_width - where.col0);
      for (int channel = warp; channel < s.out_channels; channel += kWarps) {
        const float b_channel = bias[channel];
        const float* src = plane_of(channel);
        Raw* dst = out + first + channel * plane;
        for (int r = 0; r < rows; ++r)
          for (int col = lane; col < cols; col += 32)
            dst[int64_t(r) * s.out_width + col] =
                E::from_float(relu_keeping_nan(src[r * p.pooled_cols + col] + b_channel));
      }
    }
  }
}

template <class E, int kNTiles>
cudaError_t launch(const ConvPoolOperands& ops, const ConvPoolShape& s, const StemPlan& p,
                   const ConvPoolDevice& device, cudaStream_t stream) {
  constexpr int kMaxDevices = 64;
  // Per device: the dynamic shared-memory limit already set, and the resident blocks per SM
  // for the last shared-memory size launched (the host work stays a few loads).
  static std::atomic<int> allowed[kMaxDevices];
  static std::atomic<int64_t> resident[kMaxDevices];  // smem_bytes << 8 | blocks per SM
  const auto kernel = conv_pool_stem_kernel<E, kNTiles>;
  int current = 0;
  cudaError_t err = cudaGetDevice(&current);
  if (err != cudaSuccess) return err;
  const bool cached = current >= 0 && current < kMaxDevices;
  if (p.smem_bytes > 48 * 1024 &&
      (!cached || allowed[current].load(std::memory_order_acquire) < p.smem_bytes)) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes);
    if (err != cudaSuccess) return err;
    if (cached) allowed[current].store(p.smem_bytes, std::memory_order_release);
  }
  int per_sm = 0;
  const int64_t seen = cached ? resident[current].load(std::memory_order_acquire) : 0;
  if (seen >> 8 == p.smem_bytes && (seen & 0xff) > 0) {
    per_sm = int(seen & 0xff);
  } else {
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, p.smem_bytes);
    if (err != cudaSuccess) return err;
    if (cached) resident[current].store((int64_t(p.smem_bytes) << 8) | (per_sm & 0xff),
                                        std::memory_order_release);
  }
  const int64_t blocks =
      std::min<int64_t>(p.tiles, int64_t(std::max(per_sm, 1)) * std::max(device.sm_count, 1));
  kernel<<<unsigned(blocks), kThreads, p.smem_bytes, stream>>>(ops, s, p);
  return cudaGetLastError();
}

template <class E>
cudaError_t launch_for_element(const ConvPoolOperands& ops, const ConvPoolShape& s,
                               const StemPlan& p, const ConvPoolDevice& device,
                               cudaStream_t stream) {
  switch (p.n_tiles) {
    case 1: return launch<E, 1>(ops, s, p, device, stream);
    case 2: return launch<E, 2>(ops, s, p, device, stream);
    case 4: return launch<E, 4>(ops, s, p, device, stream);
    default: return launch<E, 8>(ops, s, p, device, stream);
  }
}

}  // namespace

const char* stem_conv_pool_unsupported(const ConvPoolShape& s, const ConvPoolDevice& device) {
  if (int64_t(s.in_channels) * s.taps() > kMaxReduction)
    return "in_channels * kernel taps is larger than 32";
  if (s.out_channels > kMaxOutChannels) return "more than 64 output channels";
  if (s.pool_h != 2 || s.pool_w != 2 || s.pool_stride_h != 2 || s.pool_stride_w != 2 ||
      s.pool_pad_h != 0 || s.pool_pad_w != 0)
    return "the pooling in registers covers only a 2x2 / stride 2 pool without padding";
  if (2 * s.out_height > s.conv_height || 2 * s.out_width > s.conv_width)
    return "a pooling window reaches past the conv output (ceil mode)";
  const StemPlan p = make_plan(s);
  if (p.smem_bytes > device.max_shared_bytes)
    return "the input halo and pooled tile of a block do not fit in shared memory";
  if (int64_t(s.batch) * p.row_tiles * p.col_tiles > INT32_MAX) return "more than 2^31 - 1 tiles";
  return nullptr;
}

cudaError_t stem_conv_pool_launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                  const ConvPoolDevice& device, cudaStream_t stream,
                                  const int64_t* out_stride) {
  StemPlan p = make_plan(s);
  p.strided_out = out_stride != nullptr;
  for (int d = 0; d < 4; ++d) p.out_stride[d] = p.strided_out ? out_stride[d] : 0;
  if (s.element == kElementFloat32) {
    p.vector_input = vectorizable_input(ops, s);
  } else {
    p.vector_input = input_rows_in_runs_of_8_16bit(ops, s);
  }
  // Stores of `vec` elements: a pointer aligned to vec elements, and for a strided output
  // unit channel stride with the other strides and the channel count multiples of vec.
  const void* out = s.element == kElementFloat32 ? static_cast<const void*>(ops.out)
                                                 : static_cast<const void*>(ops.out16);
  const int bytes = element_bytes(s);
  auto vectors_of = [&](int vec) {
    return aligned(out, vec * bytes) && s.out_channels % vec == 0 && p.out_stride[1] == 1 &&
           p.out_stride[0] % vec == 0 && p.out_stride[2] % vec == 0 &&
           p.out_stride[3] % vec == 0;
  };
  p.out_vector = !p.strided_out ? 0 : vectors_of(8) ? 8 : vectors_of(4) ? 4 : 1;
  const bool out_aligned = aligned(out, 4 * bytes);
  p.vector_out = !p.strided_out && out_aligned && p.col_tiles == 1 &&
                 p.pooled_cols == s.out_width;
  switch (s.element) {
    case kElementFloat16: return launch_for_element<Float16>(ops, s, p, device, stream);
    case kElementBFloat16: return launch_for_element<BFloat16>(ops, s, p, device, stream);
    default: return launch_for_element<Float32>(ops, s, p, device, stream);
  }
}
