// The 3 x 3 Hopper kernel's epilogue: the 2 x 2 max of the accumulators, bias, ReLU and the
// coalesced store of the pooled tile (NCHW or channels-last); without a pool, bias, ReLU and
// the store from the accumulators (NCHW through a small per-warp staging, channels-last
// straight); and the split reduction's sum of a cluster's partial accumulators through
// distributed shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../conv_pool_device.cuh"
#include "../conv_pool_wgmma.cuh"
#include "tiled_mainloop.cuh"

namespace tiled_wgmma {

// 2 x 2 max of the accumulators into pooled[channel][pooled row][pooled col]. Row 16 w + g of
// a square's M = 64 is pixel (2 w, g), row 16 w + g + 8 is pixel (2 w + 1, g): values v and
// v + 2 are vertical neighbours, lanes g and g ^ 1 (lane ^ 4) horizontal ones.
template <class Tile>
__device__ __forceinline__ void pool_accumulators(const float (&acc)[2][Tile::kAccRegs],
                                                  float* pooled) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warpgroup = warp / 4, warp_in_group = warp % 4;
  const int group = lane / 4, thread_in_group = lane % 4;
  const bool odd = group & 1;
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int square = 2 * warpgroup + m;
    const int pooled_row = (square / Tile::kSquareCols) * 4 + warp_in_group;
    const int pooled_col = (square % Tile::kSquareCols) * 4 + group / 2;
#pragma unroll
    for (int j = 0; j < Tile::kN / 8; ++j) {
      const float even_channel = max_keeping_nan(acc[m][4 * j], acc[m][4 * j + 2]);
      const float odd_channel = max_keeping_nan(acc[m][4 * j + 1], acc[m][4 * j + 3]);
      // The even lane of the pair stores channel 2t, the odd one 2t + 1: each keeps its own
      // channel's vertical maximum and sends the other to its partner (one shuffle, not two).
      const float kept = odd ? odd_channel : even_channel;
      const float sent = odd ? even_channel : odd_channel;
      const int channel = 8 * j + 2 * thread_in_group + (odd ? 1 : 0);
      pooled[channel * Tile::kPooledPlane + pooled_row * Tile::kPooledCols + pooled_col] =
          max_keeping_nan(kept, __shfl_xor_sync(0xffffffffu, sent, 4));
    }
  }
}

// Where pooled pixel (pooled_row, pooled_col) of the tile lands in the output; false where it
// does not exist (past the output's edge, or in a strip's missing squares). A strip's squares
// from first_squares on are its second piece: the next square row, from column 0.
template <class Tile>
__device__ __forceinline__ bool pooled_output(const ConvPoolShape& s, const TileOrigin& o,
                                              int pooled_row, int pooled_col, int64_t& image,
                                              int& out_row, int& out_col) {
  image = o.image;
  out_row = o.out_row0 + pooled_row;
  out_col = o.out_col0 + pooled_col;
  if constexpr (Tile::kStrip) {
    const int square = pooled_col / Tile::kSquareOut;
    if (square >= o.squares) return false;
    if (square >= o.first_squares) {
      image = o.next_image;
      out_row = o.next_out_row0 + pooled_row;
      out_col = pooled_col - Tile::kSquareOut * o.first_squares;
    }
  }
  return out_row < s.out_height && out_col < s.out_width;
}

// The pooled tile -> out, with bias and ReLU. Each thread keeps one run of `run` pooled
// columns of one row (run = 4 where the output rows split into aligned runs of 4,
// p.vector_out: one 16-byte (fp32) or 8-byte (16-bit) store per run, a quarter of the stores,
// shared loads and address arithmetic; else 1) and walks the channels. A run lies in one
// 8 x 8 square (4 pooled columns), so a strip's two pieces split between runs, and a run of 4
// is wholly inside the output or wholly past its width. One loop for both run lengths: two
// loops under a branch spilled at the two-blocks instances' 128-register cap. kSplitK: only
// the channel groups this block of the cluster summed (reduce_split).
template <class Tile, bool kSplitK = false>
__device__ __forceinline__ void store_pooled(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                             const TileOrigin& o, const float* pooled,
                                             const float* bias, bool vector_out, int split = 1,
                                             int rank = 0) {
  constexpr int kPooledTile = Tile::kPooledRows * Tile::kPooledCols;
  static_assert(kThreads % kPooledTile == 0, "fixed run per thread");
  // Runs of 4 per channel and per row.
  constexpr int kRuns4 = kPooledTile / 4, kRowRuns4 = Tile::kPooledCols / 4;
  const int runs = vector_out ? kRuns4 : kPooledTile;
  const int channel_step = vector_out ? kThreads / kRuns4 : kThreads / kPooledTile;
  const int r = threadIdx.x % runs;
  const int pooled_col = vector_out ? 4 * (r % kRowRuns4) : r % Tile::kPooledCols;
  const int pooled_row = vector_out ? r / kRowRuns4 : r / Tile::kPooledCols;
  int64_t image;
  int out_row, out_col;
  if (!pooled_output<Tile>(s, o, pooled_row, pooled_col, image, out_row, out_col)) return;
  const int k0 = vector_out ? threadIdx.x / kRuns4 : threadIdx.x / kPooledTile;
  const int64_t plane = int64_t(s.out_height) * s.out_width;
  using Operands = typename Tile::Operands;
  typename Operands::Element* out =
      Operands::output(ops) + (image * s.out_channels + o.channel0 + k0) * plane +
               int64_t(out_row) * s.out_width + out_col;
  const float* src = pooled + k0 * Tile::kPooledPlane + pooled_row * Tile::kPooledCols + pooled_col;
  const int channels = min(Tile::kN, s.out_channels - o.channel0);
  const int64_t out_step = channel_step * plane;
  const int src_step = channel_step * Tile::kPooledPlane;
#pragma unroll 4
  for (int k = k0; k < channels; k += channel_step) {
    if (!kSplitK || (k / 8) % split == rank) {
      const float b = bias[k];
      if (vector_out) {
        const float4 v = *reinterpret_cast<const float4*>(src);
        Operands::store_run(out, relu_keeping_nan(v.x + b), relu_keeping_nan(v.y + b),
                            relu_keeping_nan(v.z + b), relu_keeping_nan(v.w + b));
      } else {
        *out = Operands::to_output(relu_keeping_nan(*src + b));
      }
    }
    out += out_step;
    src += src_step;
  }
}

// The pooled tile -> a dense channels-last out, with bias and ReLU: 16 bytes of consecutive
// channels a lane (Operands::kOutVector: 4 fp32 or 8 16-bit outputs), two lanes a pixel, 16
// pixels a warp store (32-byte runs; vectors: the channel count is a multiple of kOutVector
// and the output 16-byte aligned, else element stores). Lane 2 q + h reads channels k + kOutVector h + i of
// pixel q, kPooledPlane = 4 (mod 32) words apart: banks 16 h + 4 i + q (fp32, no conflict) or
// 4 i + q (16 bits, 2-way). kSplitK: only the channel groups this block of the cluster summed.
template <class Tile, bool kSplitK = false>
__device__ __forceinline__ void store_pooled_channels_last(const ConvPoolOperands& ops,
                                                           const ConvPoolShape& s,
                                                           const TileOrigin& o,
                                                           const float* pooled,
                                                           const float* bias, bool vectors,
                                                           int split = 1, int rank = 0) {
  using Operands = typename Tile::Operands;
  using Element = typename Operands::Element;
  constexpr int kVector = Operands::kOutVector;
  static_assert(kVector * sizeof(Element) == 16, "16-byte stores");
  constexpr int kPooledTile = Tile::kPooledRows * Tile::kPooledCols;
  static_assert(kPooledTile % 16 == 0 && Tile::kN % (2 * kVector) == 0, "whole warp stores");
  constexpr int kChannelRuns = Tile::kN / (2 * kVector);  // of a warp store
  constexpr int kStores = kPooledTile / 16 * kChannelRuns;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int channels = min(Tile::kN, s.out_channels - o.channel0);
  Element* const out0 = Operands::output(ops);
  // Unrolled twice, but not at the two-blocks-per-SM instances' 128-register cap (spilled).
  constexpr int kUnroll = Tile::kMinBlocksPerSm == 2 ? 1 : 2;
#pragma unroll kUnroll
  for (int store = warp; store < kStores; store += kThreads / 32) {
    const int px = (store / kChannelRuns) * 16 + lane / 2;
    const int k = (store % kChannelRuns) * 2 * kVector + (lane % 2) * kVector;
    if (k >= channels || (kSplitK && (k / 8) % split != rank)) continue;
    int64_t image;
    int out_row, out_col;
    if (!pooled_output<Tile>(s, o, px / Tile::kPooledCols, px % Tile::kPooledCols, image,
                             out_row, out_col))
      continue;
    Element* out = out0 +
                   ((image * s.out_height + out_row) * s.out_width + out_col) * s.out_channels +
                   o.channel0 + k;
    const float* src = pooled + k * Tile::kPooledPlane + px;
    float v[kVector];
#pragma unroll
    for (int i = 0; i < kVector; ++i)
      v[i] = relu_keeping_nan(src[i * Tile::kPooledPlane] + bias[k + i]);
    if (vectors && k + kVector <= channels) {
      Operands::store_vector(out, v);
    } else {
#pragma unroll
      for (int i = 0; i < kVector; ++i)
        if (k + i < channels) out[i] = Operands::to_output(v[i]);
    }
  }
}

// No pool (Tile::kPool == 1), channels-last: the accumulators -> out, with bias and ReLU,
// straight from the registers, where a lane's two channels are neighbours (one store of the
// pair where the channel count is even). Register 4 j + e of square m holds pixel
// (2 w + e / 2, g) of the square (w: warp in its warpgroup, g = lane / 4) and channel
// 8 j + 2 t + e % 2 (t = lane % 4). The four pixel pointers are computed once and the channel
// groups walked outermost. Not in the two-blocks-per-SM instances (kChannelsLastOut: the NHWC
// addresses spilled at their 128-register cap; launch() runs channels-last outputs on their
// one-block twins). kSplitK: only the channel groups this block of the cluster summed
// (reduce_split).
template <class Tile, bool kSplitK = false>
__device__ __forceinline__ void store_conv_channels_last(const ConvPoolOperands& ops,
                                                         const ConvPoolShape& s,
                                                         const TileOrigin& o,
                                                         const float (&acc)[2][Tile::kAccRegs],
                                                         const float* bias, int split = 1,
                                                         int rank = 0) {
  static_assert(Tile::kPool == 1, "the pooled tiles store through store_pooled*");
  using Operands = typename Tile::Operands;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warpgroup = warp / 4, warp_in_group = warp % 4;
  const int group = lane / 4, thread_in_group = lane % 4;
  const int k0 = 2 * thread_in_group;  // this lane's first channel of every group of 8, less 8 j
  const int channels = min(Tile::kN, s.out_channels - o.channel0) - k0;
  // An even channel count: a lane's two channels are one aligned pair (and the odd one exists
  // wherever the even one does).
  const bool pairs = s.out_channels % 2 == 0 &&
                     reinterpret_cast<uintptr_t>(Operands::output(ops)) %
                             (2 * sizeof(typename Operands::Element)) ==
                         0;
  // Where this lane's two pixels of each square start, at channel k0; null where outside.
  typename Operands::Element* dst[2][2];
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int square = 2 * warpgroup + m;
    int64_t image = o.image;
    int row = o.out_row0 + (square / Tile::kSquareCols) * 8 + 2 * warp_in_group;
    int col = o.out_col0 + (square % Tile::kSquareCols) * 8 + group;
    bool inside = true;
    if constexpr (Tile::kStrip) {
      inside = square < o.squares;
      if (square >= o.first_squares) {  // the second piece: the next square row, from column 0
        image = o.next_image;
        row = o.next_out_row0 + 2 * warp_in_group;
        col = 8 * (square - o.first_squares) + group;
      }
    }
    inside = inside && col < s.out_width;
#pragma unroll
    for (int half = 0; half < 2; ++half)
      dst[m][half] =
          inside && row + half < s.out_height
              ? Operands::output(ops) +
                    ((image * s.out_height + row + half) * s.out_width + col) * s.out_channels +
                    o.channel0 + k0
              : nullptr;
  }
#pragma unroll
  for (int j = 0; j < Tile::kN / 8; ++j) {
    if (kSplitK && j % split != rank) continue;
    const float even_bias = bias[8 * j + k0], odd_bias = bias[8 * j + k0 + 1];
    const bool even_inside = 8 * j < channels, odd_inside = 8 * j + 1 < channels;
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        typename Operands::Element* out = dst[m][half] + 8 * j;
        const float even = relu_keeping_nan(acc[m][4 * j + 2 * half] + even_bias);
        const float odd = relu_keeping_nan(acc[m][4 * j + 2 * half + 1] + odd_bias);
        if (dst[m][half] == nullptr || !even_inside) continue;
        if (pairs) {
          Operands::store_pair(out, even, odd);
        } else {
          out[0] = Operands::to_output(even);
          if (odd_inside) out[1] = Operands::to_output(odd);
        }
      }
  }
}

// No pool, NCHW: the accumulators -> out through a per-warp staging buffer in shared memory
// (Tile::kPooledBytes: 8 channels x 36 floats a warp), one group of 8 channels at a time, so
// that each store is a whole 8-pixel row of one channel: one 16-byte (16-bit) or two (fp32)
// stores where vectors (the output's rows 16-byte aligned) and the row lies inside the output,
// element stores elsewhere. A warp holds rows 2 w and 2 w + 1 (half) of its two squares m,
// columns g, channels 8 j + 2 t + e: lane (g, t) writes staging[2 t + e][half][m][g], pitch 36
// (banks 8 t + g: no conflict), then lane 4 c + 2 half + m stores channel c's row (half, m).
// kSplitK: only the channel groups this block of the cluster summed (reduce_split).
template <class Tile, bool kSplitK = false>
__device__ __forceinline__ void store_conv_rows(const ConvPoolOperands& ops,
                                                const ConvPoolShape& s, const TileOrigin& o,
                                                const float (&acc)[2][Tile::kAccRegs],
                                                float* staging, const float* bias, bool vectors,
                                                int split = 1, int rank = 0) {
  static_assert(Tile::kPool == 1, "the pooled tiles store through store_pooled*");
  using Operands = typename Tile::Operands;
  using Element = typename Operands::Element;
  constexpr int kPitch = Tile::kConvStagingPitch;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warpgroup = warp / 4, warp_in_group = warp % 4;
  const int group = lane / 4, thread_in_group = lane % 4;
  float* mine = staging + warp * 8 * kPitch;
  // This lane's store: channel c of each group, row `half` of square `m`.
  const int c = lane / 4, half = (lane / 2) % 2, m = lane % 2;
  const int square = 2 * warpgroup + m;
  int64_t image = o.image;
  int row = o.out_row0 + (square / Tile::kSquareCols) * 8 + 2 * warp_in_group + half;
  int col = o.out_col0 + (square % Tile::kSquareCols) * 8;
  bool inside = true;
  if constexpr (Tile::kStrip) {
    inside = square < o.squares;
    if (square >= o.first_squares) {  // the second piece: the next square row, from column 0
      image = o.next_image;
      row = o.next_out_row0 + 2 * warp_in_group + half;
      col = 8 * (square - o.first_squares);
    }
  }
  const int columns = inside && row < s.out_height ? min(8, s.out_width - col) : 0;
  const int64_t plane = int64_t(s.out_height) * s.out_width;
  Element* const out0 = Operands::output(ops) +
                        (image * s.out_channels + o.channel0 + c) * plane +
                        int64_t(row) * s.out_width + col;
  const int channels = min(Tile::kN, s.out_channels - o.channel0);
  const float* src = mine + c * kPitch + (2 * half + m) * 8;
  // Unrolled: the accumulators' indices must be known at compile time (registers).
#pragma unroll
  for (int j = 0; j < Tile::kN / 8; ++j) {
    if (kSplitK && j % split != rank) continue;
#pragma unroll
    for (int mm = 0; mm < 2; ++mm)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          mine[(2 * thread_in_group + e) * kPitch + (2 * hh + mm) * 8 + group] =
              acc[mm][4 * j + 2 * hh + e];
    __syncwarp();
    const int channel = 8 * j + c;
    if (columns > 0 && channel < channels) {
      const float b = bias[channel];
      float v[8];
      const float4 lo = *reinterpret_cast<const float4*>(src);
      const float4 hi = *reinterpret_cast<const float4*>(src + 4);
      v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
      v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = relu_keeping_nan(v[i] + b);
      Element* out = out0 + (8 * j) * plane;
      if (vectors && columns == 8) {
        Operands::store_row8(out, v);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i)
          if (i < columns) out[i] = Operands::to_output(v[i]);
      }
    }
    __syncwarp();
  }
}

// Split reductions (kSplitK): the p.split blocks of a cluster hold partial sums of one tile, each
// over its share of the chunks, in the same registers. Each block writes its partials to its
// pipeline stages (idle now); then block `rank` adds the p.split partials of the channel groups
// g with g % split == rank (8 channels: accumulators 4 g .. 4 g + 3 of each square, one 16-byte
// load each), in rank order, so every run adds in the same order. Its other accumulators keep
// its own partials, which store_pooled<Tile, true> does not write. Ends with this block's
// arrival at the cluster barrier that the kernel waits at before it exits (the others read its
// stages until then).
template <class Tile>
__device__ __forceinline__ void reduce_split(float (&acc)[2][Tile::kAccRegs], unsigned char* smem,
                                             int split, int rank) {
  constexpr int kGroups = Tile::kN / 8;
  static_assert(2 * Tile::kAccs * kThreads * 4 <= Tile::kPipelineBytes, "partials fit");
  float4* partial = reinterpret_cast<float4*>(smem);  // [square][group][thread]
  __syncthreads();  // both warpgroups' wgmmas are done with the stages
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int g = 0; g < kGroups; ++g)
      partial[(m * kGroups + g) * kThreads + threadIdx.x] =
          make_float4(acc[m][4 * g], acc[m][4 * g + 1], acc[m][4 * g + 2], acc[m][4 * g + 3]);
  cluster_arrive();
  cluster_wait();  // every block's partials are written
  bool mine[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    mine[g] = g % split == rank;
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (mine[g]) acc[m][4 * g + e] = 0.f;
  }
  // Unrolled over the largest cluster, so that every load of every rank is in flight at once.
#pragma unroll
  for (int q = 0; q < kConvPoolMaxCluster; ++q) {
    if (q >= split) break;
    const uint32_t base = cluster_shared_address(partial + threadIdx.x, q);
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        if (!mine[g]) continue;
        const float4 v =
            load_cluster_shared(base + uint32_t((m * kGroups + g) * kThreads * sizeof(float4)));
        acc[m][4 * g] += v.x;
        acc[m][4 * g + 1] += v.y;
        acc[m][4 * g + 2] += v.z;
        acc[m][4 * g + 3] += v.w;
      }
  }
  cluster_arrive();
}

}  // namespace tiled_wgmma
