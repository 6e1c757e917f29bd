// The chunked tiled kernels' mainloops: one stage's halo and weights through cp.async
// (load_stage), the TF32 / 3xTF32 tensor-core mainloop (mma.sync m16n8k8) and the FFMA one.
#pragma once

#include "tiled_tile.cuh"

namespace conv_pool_mma {

// ---------------------------------------------------------------------------
// Mainloop pieces shared by all tiled variants.

// One stage: the input halo of channels [c0, c0 + 8) and their weights.
template <int kBlockThreads, bool kFast>
__device__ __forceinline__ void load_stage(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                           const TilePlan& p, const TileCoords& tc,
                                           const int2* weight_gather, int chunk, float* stage) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int c0 = chunk * kChannelChunk;
  const float* image = ops.x + tc.image * ops.x_stride[0];
  if constexpr (kFast) {
    // Input halo as 4-float vectors from an aligned column. With width % 4 == 0 a
    // vector is either wholly inside the row or wholly padding.
    constexpr int kVectors = kChannelChunk * fast::kHaloRows * fast::kHaloVectors;
    for (int idx = threadIdx.x; idx < kVectors; idx += kBlockThreads) {
      const int c = idx / (fast::kHaloRows * fast::kHaloVectors);
      const int rest = idx - c * (fast::kHaloRows * fast::kHaloVectors);
      const int halo_row = rest / fast::kHaloVectors;
      const int vec = rest - halo_row * fast::kHaloVectors;
      const int h = tc.in_row0 + halo_row;
      const int w0 = tc.staged_col0 + 4 * vec;
      const bool row_valid = c0 + c < s.in_channels && h >= 0 && h < s.in_height;
      const float* src_row = image + int64_t(c0 + c) * ops.x_stride[1] + int64_t(h) * ops.x_stride[2];
      float* dst = stage + c * fast::kHaloPlane + halo_row * fast::kHaloCols + 4 * vec;
      if (p.vector_input) {
        const bool valid = row_valid && w0 >= 0 && w0 < s.in_width;
        cp_async_16(dst, valid ? src_row + w0 : ops.x, valid);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool valid = row_valid && w0 + e >= 0 && w0 + e < s.in_width;
          cp_async_4(dst + e, valid ? src_row + int64_t(w0 + e) * ops.x_stride[3] : ops.x, valid);
        }
      }
    }
  } else {
    // Input halo: one warp per (channel, halo row), lanes along the row.
    for (int row = warp; row < kChannelChunk * p.halo_rows; row += kBlockThreads / 32) {
      const int c = row / p.halo_rows;
      const int halo_row = row - c * p.halo_rows;
      const int h = tc.in_row0 + halo_row;
      const bool row_valid = c0 + c < s.in_channels && h >= 0 && h < s.in_height;
      const float* src_row = image + int64_t(c0 + c) * ops.x_stride[1] + int64_t(h) * ops.x_stride[2];
      float* dst_row = stage + c * p.halo_plane + halo_row * p.halo_cols;
      for (int col = lane; col < p.halo_cols; col += 32) {
        const int w = tc.in_col0 + col;
        const bool valid = row_valid && w >= 0 && w < s.in_width;
        cp_async_4(dst_row + col, valid ? src_row + int64_t(w) * ops.x_stride[3] : ops.x, valid);
      }
    }
  }

  float* weights = stage + kChannelChunk * p.halo_plane;
  if (kFast && p.vector_weights) {
    // A contiguous weight's 8 channels x 9 taps of one output channel are 72
    // consecutive floats, staged as 18 vectors; in_channels * 9 % 4 == 0, so the
    // channel tail ends on a vector boundary.
    constexpr int kVectorsPerRow = kChannelChunk * fast::kTaps / 4;
    const int64_t row_length = int64_t(s.in_channels) * fast::kTaps;
    for (int idx = threadIdx.x; idx < p.out_block * kVectorsPerRow; idx += kBlockThreads) {
      const int k = idx / kVectorsPerRow;
      const int vec = idx - k * kVectorsPerRow;
      const int offset = c0 * fast::kTaps + 4 * vec;
      const bool valid = tc.channel0 + k < s.out_channels && offset < row_length;
      cp_async_16(weights + k * fast::kWeightRow + 4 * vec,
                  valid ? ops.weight + (tc.channel0 + k) * row_length + offset : ops.weight, valid);
    }
    return;
  }
  // Weights: one warp per output channel, lanes along its (channel, tap) entries,
  // which are contiguous in global memory for a contiguous weight.
  const int entries = kChannelChunk * s.taps();
  const int channels_left = s.in_channels - c0;
  for (int k = warp; k < p.out_block; k += kBlockThreads / 32) {
    const bool k_valid = tc.channel0 + k < s.out_channels;
    const float* src = ops.weight + int64_t(tc.channel0 + k) * ops.weight_stride[0] +
                       int64_t(c0) * ops.weight_stride[1];
    float* dst = weights + k * p.weight_row;
    for (int e = lane; e < entries; e += 32) {
      const int2 gather = weight_gather[e];
      const bool valid = k_valid && e < channels_left * s.taps();
      cp_async_4(dst + gather.y, valid ? src + gather.x : ops.weight, valid);
    }
  }
}

// TF32 tensor-core mainloop. 8 warps as 4 (pixels) x 2 (channels); a warp owns
// 64 pixels (two tile rows) x out_block/2 channels: 4 x kNTiles mma tiles.
// kSplit = true is 3xTF32: big*big + big*small + small*big per product.
template <int kOutBlockT, bool kSplit, int kWarpsNT = 2>
struct TensorCoreMainloop {
  static constexpr int kOutBlock = kOutBlockT;
  static constexpr int kWarpsN = kWarpsNT;  // warps along the channels; 4 along the pixels
  static constexpr int kThreads = 32 * 4 * kWarpsN;
  static constexpr int kWarpChannels = kOutBlock / kWarpsN;
  static constexpr int kMTiles = 4;
  static constexpr int kNTiles = kWarpChannels / 8;
  float acc[kMTiles][kNTiles][4];

  __device__ __forceinline__ TensorCoreMainloop() { conv_pool_epilogue::zero_mma_accumulators(acc); }

  template <class Geometry>
  __device__ __forceinline__ void compute(const float* stage, const Geometry& g) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_m = warp % 4, warp_n = warp / 4;
    const int group = lane / 4, thread_in_group = lane % 4;
    const float* input = stage;
    const float* weights = stage + kChannelChunk * g.halo_plane;

    // A fragment (pixel, channel) addresses for tap (0, 0). Fragment rows are
    // pixels; m-tile i covers tile row 2 * warp_m + i / 2, cols (i % 2) * 16 + [0, 16).
    int a_offset[kMTiles];
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
      const int tile_row = 2 * warp_m + i / 2;
      const int tile_col = (i % 2) * 16 + group;
      a_offset[i] = thread_in_group * g.halo_plane + tile_row * g.stride_h * g.halo_cols +
                    tile_col * g.stride_w + g.col_shift;
    }
    const int a_next8_pixels = 8 * g.stride_w;
    const int a_next4_channels = 4 * g.halo_plane;
    int b_offset[kNTiles];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j)
      b_offset[j] = (warp_n * kWarpChannels + j * 8 + group) * g.weight_row +
                    thread_in_group * g.taps_padded;
    const int b_next4_channels = 4 * g.taps_padded;

    // Fully unrolled when the geometry is compile-time (fast path), except for
    // 3xTF32, whose three fragment sets per tap would otherwise spill.
#pragma unroll(kSplit ? 1 : 3)
    for (int r = 0; r < g.kernel_h; ++r) {
#pragma unroll(kSplit ? 1 : 3)
      for (int q = 0; q < g.kernel_w; ++q) {
        const int tap = r * g.kernel_w + q;
        const int tap_offset = r * g.dilation_h * g.halo_cols + q * g.dilation_w;
        float a[kMTiles][4];
        float b[kNTiles][2];
#pragma unroll
        for (int i = 0; i < kMTiles; ++i) {
          const float* src = input + a_offset[i] + tap_offset;
          a[i][0] = src[0];
          a[i][1] = src[a_next8_pixels];
          a[i][2] = src[a_next4_channels];
          a[i][3] = src[a_next4_channels + a_next8_pixels];
        }
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          const float* src = weights + b_offset[j] + tap;
          b[j][0] = src[0];
          b[j][1] = src[b_next4_channels];
        }
        // The tensor cores read the top 19 bits of each fp32 word (the low mantissa bits are
        // ignored), so plain TF32 needs no conversion instructions.
        uint32_t a_bits[kMTiles][4], b_bits[kNTiles][2];
#pragma unroll
        for (int i = 0; i < kMTiles; ++i)
#pragma unroll
          for (int v = 0; v < 4; ++v) a_bits[i][v] = __float_as_uint(a[i][v]);
#pragma unroll
        for (int j = 0; j < kNTiles; ++j)
#pragma unroll
          for (int v = 0; v < 2; ++v) b_bits[j][v] = __float_as_uint(b[j][v]);
        if constexpr (kSplit) {
          mma_3xtf32(acc, a_bits, b_bits);
        } else {
#pragma unroll
          for (int i = 0; i < kMTiles; ++i)
#pragma unroll
            for (int j = 0; j < kNTiles; ++j) mma_tf32(acc[i][j], a_bits[i], b_bits[j]);
        }
      }
    }
  }

  // Fast path: 2x2 / stride-2 max-pool straight from the accumulators. A warp's
  // two tile rows (m-tiles i and i + 2) form one pooled row, so the vertical max is
  // in-thread and the horizontal one pairs lanes g and g ^ 1 (lane ^ 4). Bias and
  // ReLU commute with the max (the bias is per channel), so they come after it.
  // Writes pooled[channel][pooled row][pooled col], row length kPooledRow.
  __device__ __forceinline__ void store_pooled_2x2(float* pooled, const float* bias) const {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_m = warp % 4, warp_n = warp / 4;
    const int group = lane / 4, thread_in_group = lane % 4;
    const bool odd = group & 1;
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        float window_max[4];
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const float vertical = max_keeping_nan(acc[half][j][v], acc[half + 2][j][v]);
          window_max[v] = max_keeping_nan(vertical, __shfl_xor_sync(0xffffffffu, vertical, 4));
        }
        // Both lanes of a pair now hold the same maxima: the even one stores the
        // columns of pixels g (values 0, 1), the odd one those of pixels g + 8 (2, 3).
        const int col = half * 8 + group / 2 + (odd ? 4 : 0);
        const int channel = warp_n * kWarpChannels + j * 8 + 2 * thread_in_group;
        float* out = pooled + channel * kPooledRow + warp_m * (kTileCols / 2) + col;
        out[0] = relu_keeping_nan((odd ? window_max[2] : window_max[0]) + bias[channel]);
        out[kPooledRow] = relu_keeping_nan((odd ? window_max[3] : window_max[1]) + bias[channel + 1]);
      }
  }

  // Accumulator (pixel, channel) -> tile[channel][pixel], adding the bias.
  __device__ __forceinline__ void store(float* tile, const float* bias) const {
    conv_pool_epilogue::store_mma_accumulators<kMTiles, kNTiles, kWarpChannels>(acc, tile, bias);
  }
};

// FFMA mainloop on CUDA cores, out_block 64. Thread = 8 pixels of one tile row
// (lane) x 8 output channels (warp): weights are warp-wide broadcasts.
struct CudaCoreMainloop {
  static constexpr int kOutBlock = 64;
  static constexpr int kThreads = 256;
  static constexpr int kPixels = 8;
  static constexpr int kChannels = 8;
  float acc[kPixels][kChannels];

  __device__ __forceinline__ CudaCoreMainloop() {
#pragma unroll
    for (int i = 0; i < kPixels; ++i)
#pragma unroll
      for (int j = 0; j < kChannels; ++j) acc[i][j] = 0.f;
  }

  template <class Geometry>
  __device__ __forceinline__ void compute(const float* stage, const Geometry& g) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tile_row = lane / 4, tile_col0 = (lane % 4) * kPixels;
    const float* input = stage + tile_row * g.stride_h * g.halo_cols + tile_col0 * g.stride_w +
                         g.col_shift;
    const float* weights = stage + kChannelChunk * g.halo_plane + warp * kChannels * g.weight_row;
    for (int c = 0; c < kChannelChunk; ++c) {
      int tap = 0;
      for (int r = 0; r < g.kernel_h; ++r) {
        for (int q = 0; q < g.kernel_w; ++q, ++tap) {
          const float* in = input + c * g.halo_plane + r * g.dilation_h * g.halo_cols +
                            q * g.dilation_w;
          const float* w = weights + c * g.taps_padded + tap;
          float a[kPixels], b[kChannels];
#pragma unroll
          for (int i = 0; i < kPixels; ++i) a[i] = in[i * g.stride_w];
#pragma unroll
          for (int j = 0; j < kChannels; ++j) b[j] = w[j * g.weight_row];
#pragma unroll
          for (int i = 0; i < kPixels; ++i)
#pragma unroll
            for (int j = 0; j < kChannels; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
      }
    }
  }

  __device__ __forceinline__ void store(float* tile, const float* bias) const {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int pixel0 = (lane / 4) * kTileCols + (lane % 4) * kPixels;
#pragma unroll
    for (int j = 0; j < kChannels; ++j) {
      const int channel = warp * kChannels + j;
#pragma unroll
      for (int i = 0; i < kPixels; ++i)
        tile[channel * kEpilogueRow + pixel0 + i] = acc[i][j] + bias[channel];
    }
  }
};

}  // namespace conv_pool_mma
