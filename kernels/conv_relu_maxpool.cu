// Fused Conv2d -> ReLU -> MaxPool2d, forward, float32 NCHW, one kernel launch.
//
// out = max_pool2d(relu(conv2d(x, weight, bias, stride, padding, dilation)),
//                  pool_kernel, pool_stride, pool_padding, dilation=1, ceil_mode)
//
// The convolution output never reaches global memory. Every block owns a tile of
// pooled outputs for one image and one block of output channels, computes the
// convolution outputs those pooling windows read (an 8 x 32 tile of conv pixels,
// so windows that straddle two tiles are simply computed by both), and reduces
// them to pooled outputs in its epilogue.
//
// Variants (the `config` of the Python op; the table is tiled_choice, the
// automatic choice conv_relu_maxpool_choose):
//   0 direct          One thread per pooled output, operands read straight from
//                     global memory. Slow, but has no shared-memory or tile limit,
//                     so it runs every configuration PyTorch accepts. The fallback.
//   1 tiled_fp32      Shared-memory tiles (below), FFMA on CUDA cores. FP32.
//   2 tiled_tf32      Same tiles, implicit GEMM on tensor cores (mma.sync m16n8k8
//                     TF32, fp32 accumulation), 8 warps of 64 x 64: PyTorch's
//                     default, allow_tf32=True.
//   3 tiled_3xtf32    As 2, but each operand is split into a TF32 "big" part and a
//                     TF32 remainder and three products are accumulated: close to
//                     fp32 accuracy on tensor cores, for allow_tf32=False.
//   4 tiled_tf32_16w  As 2 with 16 warps of 64 x 32 (<= 128 registers each).
//   5 tiled_tf32_flat As 2, but the reduction runs over flattened (channel, tap)
//                     pairs: for fewer than 8 input channels (no zero channels
//                     multiplied) and kernels whose 8-channel halo would not fit.
//                     All weights and every input channel's halo are staged;
//                     persistent blocks keep the weights and copy the next tile's
//                     planes while this tile computes (conv_pool_flat_kernel); the
//                     warp tiling depends on the channels and on whether two blocks
//                     share an SM (flat_tiling).
//  12 tiled_16bit_flat As 5 for float16 / bfloat16 operands: the planes are staged as
//                     fp32 (persistent blocks copy the next tile's raw with cp.async and
//                     convert them when released), the weights stay 16-bit and become
//                     fp32 as the fragments are read; the TF32 mma multiplies them
//                     exactly, the store rounds once.
//  14 tiled_3xtf32_flat As 5 with 3xTF32 (as 3), float32 only: the fp32-accurate path for
//                     few input channels and large kernels (allow_tf32=False).
//  18 tiled_tf32_flat_wgmma As 5 on Hopper wgmma (sm_90a), float32: 16 warps, each warpgroup
//                     64 pixels x 64 channels per m64n64k8 step, the gathered pixels from
//                     registers, the weights from shared memory (FlatWgmmaMainloop).
//  19 tiled_16bit_flat_wgmma As 18 for float16 / bfloat16 operands: m64n64k16 steps with
//                     16-bit operands, the gathered fp32 halo values packed back to 16 bits
//                     (exact), the weights staged 16-bit in the wgmma layout; planes as 12.
// (20, general_wgmma, is the general Hopper kernel in kernels/hopper/: any geometry, float32 in
// TF32 and float16 / bfloat16, chosen on Hopper wherever none of the special kernels applies;
// 6, 10 and 15 are the wgmma kernels, conv_relu_maxpool_wgmma.cu, 15 with 3xTF32; 7 and 11
// the CUDA-core small_fp32 / small_16bit and 13 their TF32 tensor-core twin small_tf32,
// conv_relu_maxpool_small.cu; 8 and 9 the other 16-bit kernels, conv_relu_maxpool_half.cu;
// 16 and 17 the first-layer kernels stem_tf32 / stem_16bit, conv_relu_maxpool_stem.cu.)
//
// Chunked tiled variants (1-4), per block of 256 (or 512) threads:
//   * Tile scheduler: blockIdx.x -> (image, tile row, tile col, output-channel
//     block), channel block fastest so blocks sharing an input halo run together.
//   * Mainloop: input channels in chunks of 8. A 3-stage cp.async pipeline stages,
//     per chunk, the input halo (8 channels x halo_rows x halo_cols, zero-filled
//     outside the image: that is the convolution's padding) and the weights
//     (out_block x 8 channels x taps). Implicit GEMM: M = 256 conv pixels,
//     N = out_block channels, K = 8 channels per tap, looped over the taps.
//   * Epilogue: accumulators + bias go to shared memory as a [channel][8][32]
//     tile (reusing the pipeline buffers); each pooled output takes the max of its
//     window's valid pixels (NaN wins, as in PyTorch), applies ReLU and is stored;
//     consecutive threads store consecutive columns.
//   * Fast path (3x3 / stride 1 / dilation 1 conv, 2x2 / stride 2 pool with every
//     window inside the conv output): the staged geometry is compile-time, copies
//     are 16 bytes wide, and the 2x2 max is taken in registers before the store.
// Shared-memory layouts are padded so the mma fragment loads are conflict-free
// for stride 1 (see TilePlan). docs/PERF.md has each version's measurements.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "conv_pool_16bit.cuh"
#include "conv_pool_device.cuh"
#include "conv_pool_epilogue.cuh"
#include "conv_pool_operands.h"
#include "conv_pool_wgmma.cuh"
#include "conv_relu_maxpool.h"
#include "conv_relu_maxpool_half.h"
#include "conv_relu_maxpool_small.h"
#include "conv_relu_maxpool_stem.h"
#include "conv_relu_maxpool_wgmma.h"
#include "hopper/general_wgmma.h"

namespace {

constexpr int kThreads = 256;  // direct kernel, FFMA mainloop, and the 8-warp tensor-core one
constexpr int kTileRows = 8;   // conv rows per block tile
constexpr int kTileCols = 32;  // conv cols per block tile: two m16 fragments per row
constexpr int kChannelChunk = 8;  // input channels per pipeline stage = mma K
constexpr int kStages = 3;
// Row length of the epilogue tile (conv_pool_epilogue.cuh): 260 = 4 (mod 32).
constexpr int kEpilogueRow = conv_pool_epilogue::kRow;
static_assert(kTileRows == conv_pool_epilogue::kTileRows &&
                  kTileCols == conv_pool_epilogue::kTileCols,
              "the shared epilogue tile is the block tile");
// Fast path: a channel's pooled 4 x 16 tile; 68 = 4 (mod 32) keeps the stores of one
// warp (8 columns x 4 channel pairs) on 32 different banks.
constexpr int kPooledRow = (kTileRows / 2) * (kTileCols / 2) + 4;

// ---------------------------------------------------------------------------
// Tiling of one problem, computed once on the host (make_tile_plan).
struct TilePlan {
  int out_block;           // output channels per block
  int pooled_rows;         // pooled outputs per tile, vertically
  int pooled_cols;         // ... and horizontally
  int tiles_h, tiles_w;    // tiles per image
  int channel_blocks;      // ceil(out_channels / out_block)
  int channel_chunks;      // ceil(in_channels / kChannelChunk)
  int halo_rows, halo_cols;
  int halo_plane;          // floats per staged input channel, = 8 (mod 32)
  int taps_padded;         // taps rounded up to odd: conflict-free B fragments
  int weight_row;          // floats per staged output channel, = 4 (mod 8)
  int stage_floats;        // one pipeline stage: input halo + weights
  int smem_bytes;
  int64_t blocks;
  // Fast path (3x3 / stride 1 / dilation 1 conv, 2x2 / stride 2 pool with every
  // window inside the conv output): compile-time smem geometry, 16-byte copies.
  bool fast;
  bool vector_input;    // x NCHW-contiguous, width % 4 == 0, 16-byte aligned
  bool vector_weights;  // weight contiguous, in_channels * 9 % 4 == 0, 16-byte aligned
  // Flat-K variant: the reduction (channel, tap) flattened and padded to a multiple of 8.
  int k_padded;
  // Flat-K: the epilogue tile has its own shared memory (so the next tile's input planes can be
  // copied during this one's epilogue) and blocks loop over tiles; else the epilogue reuses
  // the input planes and every block computes one tile.
  bool flat_persistent;
  // Flat-K, 16-bit, persistent: the next tile's planes are copied raw (cp.async, 8 bytes) into a
  // buffer of their own and converted to fp32 when released (with p.vector_input only).
  bool flat_raw_planes;
};

// The fast path's staged geometry. The input halo row is staged from the 16-byte
// aligned column at or left of the tile's first input column, so it holds up to 3
// extra columns: 34 needed + 3 -> 40 (10 vectors of 4).
namespace fast {
constexpr int kHaloRows = kTileRows + 2;
constexpr int kHaloCols = 40;
constexpr int kHaloVectors = kHaloCols / 4;
constexpr int kHaloPlane = 424;  // 10 * 40 rounded up to 8 (mod 32)
constexpr int kTaps = 9;
constexpr int kWeightRow = 76;   // 8 * 9 rounded up to 4 (mod 8)
static_assert(kHaloPlane >= kHaloRows * kHaloCols && kHaloPlane % 32 == 8, "halo plane");
static_assert(kWeightRow >= kChannelChunk * kTaps && kWeightRow % 8 == 4, "weight row");
}  // namespace fast

int round_up_to_residue(int value, int modulus, int residue) {
  int r = value % modulus;
  return value + ((residue - r) % modulus + modulus) % modulus;
}

// Tile geometry; smem_bytes tells whether it fits (checked by the caller).
TilePlan make_tile_plan(const ConvPoolShape& s, int out_block, bool allow_fast) {
  TilePlan p{};
  p.out_block = out_block;
  p.pooled_rows = (kTileRows - s.pool_h) / s.pool_stride_h + 1;
  p.pooled_cols = (kTileCols - s.pool_w) / s.pool_stride_w + 1;
  p.tiles_h = (s.out_height + p.pooled_rows - 1) / p.pooled_rows;
  p.tiles_w = (s.out_width + p.pooled_cols - 1) / p.pooled_cols;
  p.channel_blocks = (s.out_channels + out_block - 1) / out_block;
  p.channel_chunks = (s.in_channels + kChannelChunk - 1) / kChannelChunk;
  p.fast = allow_fast && fast_path_applies(s);
  if (p.fast) {
    p.halo_rows = fast::kHaloRows;
    p.halo_cols = fast::kHaloCols;
    p.halo_plane = fast::kHaloPlane;
    p.taps_padded = fast::kTaps;
    p.weight_row = fast::kWeightRow;
  } else {
    p.halo_rows = (kTileRows - 1) * s.stride_h + (s.kernel_h - 1) * s.dilation_h + 1;
    p.halo_cols = (kTileCols - 1) * s.stride_w + (s.kernel_w - 1) * s.dilation_w + 1;
    p.halo_plane = round_up_to_residue(p.halo_rows * p.halo_cols, 32, 8);
    p.taps_padded = s.taps() | 1;
    p.weight_row = round_up_to_residue(kChannelChunk * p.taps_padded, 8, 4);
  }
  p.stage_floats = kChannelChunk * p.halo_plane + out_block * p.weight_row;
  const int64_t pipeline = int64_t(kStages) * p.stage_floats;
  const int64_t epilogue = int64_t(out_block) * kEpilogueRow;
  // + 4: the gather table starts at an even float offset (8-byte aligned).
  const int64_t bytes = 4 * (std::max(pipeline, epilogue) + out_block) + 4 +
                        8 * int64_t(kChannelChunk) * s.taps();
  p.smem_bytes = bytes > INT32_MAX ? INT32_MAX : int(bytes);
  p.blocks = int64_t(s.batch) * p.tiles_h * p.tiles_w * p.channel_blocks;
  return p;
}

// Flat-K tiling (tiled_tf32_flat): the same tiles, but the whole (channel, tap) reduction
// is staged once per block and every input channel's halo once per tile. Fits only when
// in_channels * taps is small, which is exactly where the 8-channel chunks of the other
// variants waste most work. Shared memory:
//   weights [out_block][weight_row] (in the operands' type) | halo [in_channels][halo_plane]
//   (fp32) | epilogue tile [out_block][kEpilogueRow] (fp32; persistent, else it reuses the
//   halo) | k_offset [k_padded] (ints) | weight_gather [reduction] (ints) | bias [out_block]
//   (fp32) | 16-bit with p.flat_raw_planes: raw planes [in_channels][halo_plane] (16-byte
//   aligned).
// step_k: k per reduction step (16 for tiled_16bit_flat_wgmma, else 8); the reduction is padded
// to a multiple of it.
TilePlan make_flat_plan(const ConvPoolShape& s, int out_block, int max_shared_bytes,
                        int step_k) {
  TilePlan p = make_tile_plan(s, out_block, false);
  // Halo rows start at the 16-byte aligned column at or left of the first one (up to 3 extra
  // columns) and hold whole 4-column vectors, so they can move as 16-byte copies
  // (p.vector_input, decided at launch).
  p.halo_cols = (p.halo_cols + 3 + 3) / 4 * 4;
  p.halo_plane = round_up_to_residue(p.halo_rows * p.halo_cols, 32, 8);
  const int64_t reduction = int64_t(s.in_channels) * s.taps();
  p.k_padded = int((reduction + step_k - 1) / step_k * step_k);
  p.channel_chunks = 1;
  // B fragment pairs (row g, slots k + 2t and k + 2t + 1: flat_weight_slot) load without bank
  // conflicts when the row is 8 (mod 16) elements: 8-byte fp32 loads go by half-warps (rows
  // g < 4 start 0, 8, 16, 24 words apart), 4-byte 16-bit pairs by warps (rows 4 words apart).
  p.weight_row = round_up_to_residue(p.k_padded, 16, 8);
  const int element_bytes = s.element == kElementFloat32 ? 4 : 2;
  const int64_t weights = int64_t(out_block) * p.weight_row;
  const int64_t halo = int64_t(s.in_channels) * p.halo_plane;
  const int64_t epilogue = int64_t(out_block) * kEpilogueRow;
  const int64_t tables = p.k_padded + reduction + out_block;
  const int64_t persistent_bytes = element_bytes * weights + 4 * (halo + epilogue + tables);
  const int64_t raw_bytes = 16 + 2 * halo;  // + 16: the alignment of the raw planes
  // Blocks loop over tiles of one output-channel block (the weights are staged once per block;
  // the launch makes the grid a multiple of the channel blocks).
  p.flat_persistent = persistent_bytes <= max_shared_bytes;
  p.flat_raw_planes = p.flat_persistent && element_bytes == 2 &&
                      persistent_bytes + raw_bytes <= max_shared_bytes;
  const int64_t bytes =
      p.flat_persistent ? persistent_bytes + (p.flat_raw_planes ? raw_bytes : 0)
                        : element_bytes * weights + 4 * (std::max(halo, epilogue) + tables);
  p.stage_floats = int(std::min<int64_t>(weights + halo, INT32_MAX));
  p.smem_bytes = bytes > INT32_MAX ? INT32_MAX : int(bytes);
  return p;
}

// ---------------------------------------------------------------------------
// Small device helpers.

// 3xTF32 operand split: x ~ big + small, x * y ~ big * big' + small * cross' + cross * small'.
// The tensor cores read the top 19 bits of an fp32 word (truncation to TF32), so x itself is
// the big operand; small = x - trunc(x), exact in fp32, is truncated in turn (|small| <
// 2^-10 |x|, its own truncation and the dropped small * small' below 2^-20 |x y|). cross is x
// clamped to +-FLT_MAX by max.NaN / min.NaN, and small is taken from it: for x = +-inf both are
// finite with x's sign, so the infinity comes from big * big' alone, as from an fp32 product (a
// cross term inf * 0 would add a NaN), and a cross term that overflows has the sign of
// big * big'. A NaN x gives a canonical NaN (0x7fffffff) in both, which the truncation keeps
// even where x's own payload lies in the 13 bits the big part drops. Four instructions, no
// predicates (rounding each part to nearest took ~15 per operand, docs/PERF.md).
__device__ __forceinline__ void split_tf32(float x, uint32_t& small, uint32_t& cross) {
  const float clamped = clamp_to_finite(x);
  cross = __float_as_uint(clamped);
  small = __float_as_uint(clamped - __uint_as_float(cross & 0xffffe000u));
}

// acc[i][j] += a[i] * b[j] in 3xTF32 for m16n8k8 fragments of raw fp32 words (split_tf32:
// the raw words are the big parts), the small terms first.
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void mma_3xtf32(float (&acc)[kMTiles][kNTiles][4],
                                           const uint32_t (&a)[kMTiles][4],
                                           const uint32_t (&b)[kNTiles][2]) {
  uint32_t a_small[kMTiles][4], a_cross[kMTiles][4];
  uint32_t b_small[kNTiles][2], b_cross[kNTiles][2];
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int v = 0; v < 4; ++v) split_tf32(__uint_as_float(a[i][v]), a_small[i][v], a_cross[i][v]);
#pragma unroll
  for (int j = 0; j < kNTiles; ++j)
#pragma unroll
    for (int v = 0; v < 2; ++v) split_tf32(__uint_as_float(b[j][v]), b_small[j][v], b_cross[j][v]);
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      mma_tf32(acc[i][j], a_small[i], b_cross[j]);
      mma_tf32(acc[i][j], a_cross[i], b_small[j]);
      mma_tf32(acc[i][j], a[i], b[j]);
    }
}

// ---------------------------------------------------------------------------
// Where a block's tile sits.
struct TileCoords {
  int64_t image;
  int channel0;     // first output channel of the block
  int out_row0;     // first pooled output row / col
  int out_col0;
  int conv_row0;    // conv pixel at tile position (0, 0); may be negative (pool padding)
  int conv_col0;
  int in_row0;      // input pixel under conv (conv_row0, conv_col0), tap (0, 0)
  int in_col0;
  int col_shift;    // staged halo column of input column in_col0 (fast path: 0..3)
  int staged_col0;  // input column of staged halo column 0 = in_col0 - col_shift
};

template <bool kFast>
__device__ __forceinline__ TileCoords tile_coords(const ConvPoolShape& s, const TilePlan& p,
                                                  int64_t linear = blockIdx.x) {
  TileCoords t;
  const int channel_block = int(linear % p.channel_blocks);
  linear /= p.channel_blocks;
  const int tile_col = int(linear % p.tiles_w);
  linear /= p.tiles_w;
  const int tile_row = int(linear % p.tiles_h);
  t.image = linear / p.tiles_h;
  t.channel0 = channel_block * p.out_block;
  t.out_row0 = tile_row * p.pooled_rows;
  t.out_col0 = tile_col * p.pooled_cols;
  t.conv_row0 = s.window_row0(t.out_row0);
  t.conv_col0 = s.window_col0(t.out_col0);
  t.in_row0 = s.input_row0(t.conv_row0);
  t.in_col0 = s.input_col0(t.conv_col0);
  // The fast path stages rows from a 16-byte aligned column, for 16-byte copies.
  t.col_shift = kFast ? ((t.in_col0 % 4) + 4) % 4 : 0;
  t.staged_col0 = t.in_col0 - t.col_shift;
  return t;
}

// The staged geometry the mainloops index with: compile-time constants on the
// fast path (so every shared-memory load is base + immediate), else from the plan.
template <bool kFast>
struct StageGeometry;

template <>
struct StageGeometry<true> {
  static constexpr int halo_cols = fast::kHaloCols, halo_plane = fast::kHaloPlane;
  static constexpr int taps_padded = fast::kTaps, weight_row = fast::kWeightRow;
  static constexpr int kernel_h = 3, kernel_w = 3, stride_h = 1, stride_w = 1;
  static constexpr int dilation_h = 1, dilation_w = 1;
  int col_shift;
  __device__ StageGeometry(const ConvPoolShape&, const TilePlan&, const TileCoords& tc)
      : col_shift(tc.col_shift) {}
};

template <>
struct StageGeometry<false> {
  int halo_cols, halo_plane, taps_padded, weight_row;
  int kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w;
  static constexpr int col_shift = 0;
  __device__ StageGeometry(const ConvPoolShape& s, const TilePlan& p, const TileCoords&)
      : halo_cols(p.halo_cols), halo_plane(p.halo_plane), taps_padded(p.taps_padded),
        weight_row(p.weight_row), kernel_h(s.kernel_h), kernel_w(s.kernel_w),
        stride_h(s.stride_h), stride_w(s.stride_w), dilation_h(s.dilation_h),
        dilation_w(s.dilation_w) {}
};

// Shared-memory carve-up of a tiled block.
struct SmemLayout {
  float* pipeline;        // kStages stages; reused by the epilogue tile
  float* bias;            // out_block floats
  int2* weight_gather;    // per (channel, tap) of a chunk: {global offset, smem offset}
};

__device__ __forceinline__ SmemLayout carve_smem(float* smem, const TilePlan& p) {
  SmemLayout l;
  l.pipeline = smem;
  const int big = max(kStages * p.stage_floats, p.out_block * kEpilogueRow);
  l.bias = smem + big;
  const int gather_offset = big + p.out_block;
  l.weight_gather = reinterpret_cast<int2*>(smem + gather_offset + (gather_offset & 1));
  return l;
}

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

template <class Mainloop, bool kFast>
__global__ void __launch_bounds__(Mainloop::kThreads, 1)
    conv_pool_tiled_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const TilePlan p) {
  extern __shared__ __align__(16) float smem[];
  const SmemLayout smem_layout = carve_smem(smem, p);
  const TileCoords tc = tile_coords<kFast>(s, p);
  const StageGeometry<kFast> geometry(s, p, tc);

  // Gather table of one weight chunk: entry e = (channel c, tap) ->
  // {offset in global memory from (k, c0), offset in the staged row}.
  const int taps = s.taps();
  for (int e = threadIdx.x; e < kChannelChunk * taps; e += Mainloop::kThreads) {
    const int c = e / taps, tap = e - c * taps;
    const int r = tap / s.kernel_w, q = tap - r * s.kernel_w;
    smem_layout.weight_gather[e] = make_int2(
        int(c * ops.weight_stride[1] + r * ops.weight_stride[2] + q * ops.weight_stride[3]),
        c * p.taps_padded + tap);
  }
  for (int k = threadIdx.x; k < Mainloop::kOutBlock; k += Mainloop::kThreads) {
    const int channel = tc.channel0 + k;
    smem_layout.bias[k] =
        (ops.bias != nullptr && channel < s.out_channels) ? ops.bias[channel * ops.bias_stride] : 0.f;
  }
  __syncthreads();

  Mainloop mainloop;
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < p.channel_chunks)
      load_stage<Mainloop::kThreads, kFast>(ops, s, p, tc, smem_layout.weight_gather, st,
                        smem_layout.pipeline + st * p.stage_floats);
    cp_async_commit();
  }
  for (int chunk = 0; chunk < p.channel_chunks; ++chunk) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage `chunk` visible to all; stage `chunk - 1` free to refill
    const int next = chunk + kStages - 1;
    if (next < p.channel_chunks)
      load_stage<Mainloop::kThreads, kFast>(ops, s, p, tc, smem_layout.weight_gather, next,
                        smem_layout.pipeline + (next % kStages) * p.stage_floats);
    cp_async_commit();
    mainloop.compute(smem_layout.pipeline + (chunk % kStages) * p.stage_floats, geometry);
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done reading the stages: reuse them as the tile

  float* tile = smem_layout.pipeline;
  if constexpr (kFast) {
    mainloop.store_pooled_2x2(tile, smem_layout.bias);
    __syncthreads();
    store_pooled_tile<Mainloop::kThreads>(ops, s, p, tc, tile);
  } else {
    mainloop.store(tile, smem_layout.bias);
    __syncthreads();
    pool_and_store<Mainloop::kThreads>(ops, s, p, tc, tile);
  }
}

// Position of flattened reduction entry e in a staged flat weight row: within each step of 8,
// k, k + 4, k + 1, k + 5, ..., so that the two B values of a thread's m16n8k8 fragment
// (k + t and k + t + 4) sit side by side and move as one 8-byte (fp32) or 4-byte (16-bit)
// shared load.
__host__ __device__ __forceinline__ int flat_weight_slot(int e) {
  return (e & ~7) + 2 * (e & 3) + ((e >> 2) & 1);
}

// Flat-K tensor-core mainloop: each mma K step covers 8 consecutive (channel, tap) pairs of the
// flattened reduction, located through a per-k offset table into the staged halo planes.
// Entries past the reduction (the last step's padding) have offset -1 and read as 0.
// Warps: kWarpsM = 16 / kMTiles along the tile's 16 m-tiles of 16 pixels (m-tile
// P = warp_m * kMTiles + i is tile row P / 2, columns (P % 2) * 16 + [0, 16)), kWarpsN along
// the channels. A step loads 2 table entries, 4 gathered A values per m-tile and one B pair per
// n-tile (flat_weight_slot) for kMTiles x kNTiles mmas. The weights are staged in the operands'
// type E and converted to fp32 as the B fragments are read (exact: a 16-bit value fits TF32).
// kSplit (tiled_3xtf32_flat, float32 only): 3xTF32 as TensorCoreMainloop's, three mmas per
// fragment pair from operands split as they are read; the staging is the TF32 kernel's.
template <int kOutBlockT, int kWarpsNT, int kMTilesT, bool kSplitT = false>
struct FlatTensorCoreMainloop {
  static constexpr int kOutBlock = kOutBlockT;
  static constexpr int kWarpsN = kWarpsNT;
  static constexpr int kMTiles = kMTilesT;
  static constexpr bool kSplit = kSplitT;
  static constexpr bool kWgmma = false;
  static constexpr int kStepK = 8;  // k per reduction step (one mma.sync K)
  static constexpr int kWarpsM = conv_pool_epilogue::kTileMTiles / kMTiles;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kWarpChannels = kOutBlock / kWarpsN;
  static constexpr int kNTiles = kWarpChannels / 8;
  // Blocks of 256 threads and at most 64 channels are built for two per SM (<= 128 registers).
  static constexpr int kMinBlocks = kOutBlock <= 64 && kThreads == 256 ? 2 : 1;
  static_assert(kWarpsM * kMTiles == conv_pool_epilogue::kTileMTiles && kNTiles * 8 * kWarpsN ==
                kOutBlock, "warp tiling");
  float acc[kMTiles][kNTiles][4];

  __device__ __forceinline__ FlatTensorCoreMainloop() {
    conv_pool_epilogue::zero_mma_accumulators(acc);
  }

  // Reduction steps [step_begin, step_end) (8 k each); kPadded: the steps may hold padding.
  template <bool kPadded, class E>
  __device__ __forceinline__ void compute_steps(const float* halo,
                                                const typename E::Raw* weights,
                                                const int* k_offset, const ConvPoolShape& s,
                                                const TilePlan& p, int col_shift, int step_begin,
                                                int step_end) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_m = warp % kWarpsM, warp_n = warp / kWarpsM;
    const int group = lane / 4, thread_in_group = lane % 4;
    int a_offset[kMTiles];
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
      const int m_tile = warp_m * kMTiles + i;
      const int tile_row = m_tile / 2;
      const int tile_col = (m_tile % 2) * 16 + group;
      a_offset[i] = tile_row * s.stride_h * p.halo_cols + tile_col * s.stride_w + col_shift;
    }
    const int a_next8_pixels = 8 * s.stride_w;
    int b_offset[kNTiles];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j)
      b_offset[j] = (warp_n * kWarpChannels + j * 8 + group) * p.weight_row + 2 * thread_in_group;

    // Two steps per iteration, except for 64 fp32 accumulators under the 128-register cap (8
    // warps of 32 x 64), which spilled 4 bytes with two, and for 3xTF32's three fragment sets.
    constexpr int kUnroll =
        kSplit || (kMinBlocks == 2 && kMTiles * kNTiles >= 16 && ElementOperands<E>::kFloat) ? 1
                                                                                           : 2;
#pragma unroll kUnroll
    for (int k = 8 * step_begin; k < 8 * step_end; k += 8) {
      const int low = k_offset[k + thread_in_group], high = k_offset[k + thread_in_group + 4];
      uint32_t a[kMTiles][4], b[kNTiles][2];
#pragma unroll
      for (int i = 0; i < kMTiles; ++i) {
        const float* src = halo + a_offset[i];
        if (kPadded) {
          a[i][0] = low < 0 ? 0u : __float_as_uint(src[low]);
          a[i][1] = low < 0 ? 0u : __float_as_uint(src[low + a_next8_pixels]);
          a[i][2] = high < 0 ? 0u : __float_as_uint(src[high]);
          a[i][3] = high < 0 ? 0u : __float_as_uint(src[high + a_next8_pixels]);
        } else {
          a[i][0] = __float_as_uint(src[low]);
          a[i][1] = __float_as_uint(src[low + a_next8_pixels]);
          a[i][2] = __float_as_uint(src[high]);
          a[i][3] = __float_as_uint(src[high + a_next8_pixels]);
        }
      }
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        if constexpr (ElementOperands<E>::kFloat) {
          const float2 pair = *reinterpret_cast<const float2*>(weights + b_offset[j] + k);
          b[j][0] = __float_as_uint(pair.x);
          b[j][1] = __float_as_uint(pair.y);
        } else {
          const uint32_t pair = *reinterpret_cast<const uint32_t*>(weights + b_offset[j] + k);
          b[j][0] = __float_as_uint(E::to_float(uint16_t(pair)));
          b[j][1] = __float_as_uint(E::to_float(uint16_t(pair >> 16)));
        }
      }
      if constexpr (kSplit) {
        static_assert(ElementOperands<E>::kFloat, "3xTF32 is for float32 operands");
        mma_3xtf32(acc, a, b);
      } else {
#pragma unroll
        for (int i = 0; i < kMTiles; ++i)
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) mma_tf32(acc[i][j], a[i], b[j]);
      }
    }
  }

  // Accumulator (pixel, channel) -> tile[channel][pixel], adding the bias.
  __device__ __forceinline__ void store(float* tile, const float* bias) const {
    conv_pool_epilogue::store_mma_accumulators<kMTiles, kNTiles, kWarpChannels>(acc, tile, bias);
  }
};

// Flat-K mainloop on Hopper wgmma (tiled_tf32_flat_wgmma for float32 with TF32,
// tiled_16bit_flat_wgmma for float16 / bfloat16): the same tile and table as
// FlatTensorCoreMainloop, but each step is one wgmma per warpgroup with A (the gathered pixels)
// from registers and B (the weights) from shared memory: 16 warps, warp w the tile's m-tile w
// (4 warpgroups of 64 pixels), all 64 channels, in the m16n8 C layout of
// FlatTensorCoreMainloop<64, 1, 1>'s warps (so the epilogue is theirs). A float32 step is
// m64n64k8 TF32: 2 table loads, 4 gathered loads and one wgmma per warp, instead of the
// mma.sync loop's 4 B pair loads and 8 mmas per 32 x 32 warp tile. A 16-bit step is m64n64k16
// with 16-bit operands (kStepK = 16: half as many wgmmas for the same gathers): 2 paired table
// loads, 8 gathered fp32 loads packed back to 16-bit pairs (exact). The tensor cores work while
// the next steps' pixels are gathered (two groups of steps in flight per warpgroup).
// Weights: the wgmma layout of K-major B in the operands' type, [k / kCoreK][channel][kCoreK]
// (core matrices of 8 channels x 16 bytes: 4 fp32 or 8 16-bit k; 1 KB between k groups),
// staged once per block like the others'.
template <class E, int kStepsPerGroupT = 2>
struct FlatWgmmaMainloop {
  static constexpr bool kFloatOperands = ElementOperands<E>::kFloat;
  static constexpr int kOutBlock = 64;
  static constexpr bool kWgmma = true;
  static constexpr int kSteps = kStepsPerGroupT;  // k steps per committed wgmma group
  static constexpr int kStepK = kFloatOperands ? 8 : 16;  // k per step (one wgmma)
  static constexpr int kCoreShift = kFloatOperands ? 2 : 3;
  static constexpr int kCoreK = 1 << kCoreShift;  // k per 16-byte row of a core matrix
  static constexpr int kWarpsM = conv_pool_epilogue::kTileMTiles;
  static constexpr int kThreads = 32 * kWarpsM;
  static constexpr int kWarpChannels = kOutBlock;
  static constexpr int kNTiles = kOutBlock / 8;
  static constexpr int kMinBlocks = 1;
  static constexpr int kGroupBytes = 16 * kOutBlock;  // one k group: 64 channels x 16 bytes
  float acc[1][kNTiles][4];

  __device__ __forceinline__ FlatWgmmaMainloop() {
    conv_pool_epilogue::zero_mma_accumulators(acc);
  }

  // Staged position of weight (channel k, flattened reduction entry e).
  static __device__ __forceinline__ int weight_index(int k, int e) {
    return (e >> kCoreShift) * (kCoreK * kOutBlock) + kCoreK * k + (e & (kCoreK - 1));
  }

  __device__ __forceinline__ float (&accumulators())[32] {
    return reinterpret_cast<float(&)[32]>(acc);
  }

  // One step's A fragment (conv_pool_wgmma.cuh's layout for its K) for the warp's pixels at
  // src: row g at src, row g + 8 at src + next8; table entry k + j gives column j's offset.
  template <bool kPadded>
  static __device__ __forceinline__ void gather(uint32_t (&a)[4], const float* src,
                                                const int* k_offset, int k, int next8) {
    const int t = threadIdx.x % 4;
    if constexpr (kFloatOperands) {
      const int low = k_offset[k + t], high = k_offset[k + t + 4];
      if (kPadded) {
        a[0] = low < 0 ? 0u : __float_as_uint(src[low]);
        a[1] = low < 0 ? 0u : __float_as_uint(src[low + next8]);
        a[2] = high < 0 ? 0u : __float_as_uint(src[high]);
        a[3] = high < 0 ? 0u : __float_as_uint(src[high + next8]);
      } else {
        a[0] = __float_as_uint(src[low]);
        a[1] = __float_as_uint(src[low + next8]);
        a[2] = __float_as_uint(src[high]);
        a[3] = __float_as_uint(src[high + next8]);
      }
    } else {
      // Columns 2t, 2t + 1 and 2t + 8, 2t + 9: two 8-byte table loads (k is a multiple of 16,
      // the table 8-byte aligned).
      const int2 low = *reinterpret_cast<const int2*>(k_offset + k + 2 * t);
      const int2 high = *reinterpret_cast<const int2*>(k_offset + k + 2 * t + 8);
      const auto value = [&](int offset, int row) {
        return kPadded && offset < 0 ? 0.f : src[offset + row];
      };
      a[0] = E::pack(value(low.x, 0), value(low.y, 0));
      a[1] = E::pack(value(low.x, next8), value(low.y, next8));
      a[2] = E::pack(value(high.x, 0), value(high.y, 0));
      a[3] = E::pack(value(high.x, next8), value(high.y, next8));
    }
  }

  static __device__ __forceinline__ void mma(float (&d)[32], const uint32_t (&a)[4],
                                             uint64_t b) {
    if constexpr (kFloatOperands) {
      wgmma_tf32_rs_n64(d, a, b);
    } else if constexpr (std::is_same_v<E, Float16>) {
      wgmma_f16_rs_n64(d, a, b);
    } else {
      wgmma_bf16_rs_n64(d, a, b);
    }
  }

  // Reduction steps [step_begin, step_end) of kStepK k each; every wgmma issued here is
  // complete on return (the caller may then overwrite the planes; the A registers are this
  // call's).
  template <bool kPadded, class Operands>
  __device__ __forceinline__ void compute_steps(const float* halo,
                                                const typename Operands::Raw* weights,
                                                const int* k_offset, const ConvPoolShape& s,
                                                const TilePlan& p, int col_shift, int step_begin,
                                                int step_end) {
    static_assert(std::is_same_v<Operands, E>, "the mainloop's element type");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const int warp = threadIdx.x / 32, group = (threadIdx.x % 32) / 4;
    const int tile_row = warp / 2, tile_col = (warp % 2) * 16 + group;
    const float* src = halo + tile_row * s.stride_h * p.halo_cols + tile_col * s.stride_w +
                       col_shift;
    const int next8 = 8 * s.stride_w;
    const uint64_t b0 = matrix_descriptor(shared_address(weights), kGroupBytes, 128);
    float (&d)[32] = accumulators();
    // Groups of kSteps steps alternate between two register sets: a group's fragments are
    // gathered while the previous group multiplies, and a set is reused only after
    // wgmma_wait<1> has seen the group before (its last reader) complete.
    uint32_t a[2][kSteps][4];
    int step = step_begin;
    for (; step + 2 * kSteps <= step_end; step += 2 * kSteps) {
#pragma unroll
      for (int set = 0; set < 2; ++set) {
#pragma unroll
        for (int i = 0; i < kSteps; ++i)
          gather<kPadded>(a[set][i], src, k_offset, kStepK * (step + set * kSteps + i), next8);
        wgmma_fence();
#pragma unroll
        for (int i = 0; i < kSteps; ++i)
          mma(d, a[set][i],
              b0 + uint64_t(2 * kGroupBytes / 16) * uint64_t(step + set * kSteps + i));
        wgmma_commit();
        wgmma_wait<1>();
      }
    }
    for (; step < step_end; ++step) {  // the rest, one step a group
      gather<kPadded>(a[0][0], src, k_offset, kStepK * step, next8);
      wgmma_fence();
      mma(d, a[0][0], b0 + uint64_t(2 * kGroupBytes / 16) * uint64_t(step));
      wgmma_commit();
      wgmma_wait<0>();
    }
    wgmma_wait<0>();
    fence_registers(d);
#else
    __trap();  // sm_90a only: the host offers the variants only there
#endif
  }

  // Accumulator (pixel, channel) -> tile[channel][pixel], adding the bias.
  __device__ __forceinline__ void store(float* tile, const float* bias) const {
    conv_pool_epilogue::store_mma_accumulators<1, kNTiles, kWarpChannels>(acc, tile, bias);
  }
};

// cp.async.wait_group with a run-time count (the instruction takes an immediate): waits until
// at most `pending` of this thread's newest copy groups are still in flight.
__device__ __forceinline__ void cp_async_wait_at_most(int pending) {
  switch (pending) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<0>(); break;  // in_channels < 8: never more than 6 pending
  }
}

// The reduction steps (kStepK k each) whose last k lies in input channel `c` ("group c"): they
// need planes <= c. A plane is read for the last time by the group of the step holding its
// last k.
template <int kStepK>
struct FlatSchedule {
  int taps, reduction, steps;
  __device__ __forceinline__ int group_begin(int c) const {  // first step of group c
    return c * taps / kStepK;  // the step holding k = c * taps
  }
  __device__ __forceinline__ int last_group(int plane) const {  // group that reads it last
    const int step = ((plane + 1) * taps - 1) / kStepK;
    return min(kStepK * step + kStepK - 1, reduction - 1) / taps;
  }
};

// Halo column of the tile's first input column: rows are staged from the 16-byte aligned
// column at or left of it when they move as 16-byte copies.
__device__ __forceinline__ int flat_col_shift(const TilePlan& p, const TileCoords& tc) {
  return p.vector_input ? ((tc.in_col0 % 4) + 4) % 4 : 0;
}

// Stages input plane `c` of tile `tc` (zeros outside the image) as fp32, one halo row per warp
// and step. float32 moves by cp.async (16 bytes when p.vector_input, else 4); 16-bit words are
// loaded (8 bytes = 4 columns when p.vector_input, else one), converted and stored here, so
// their copy groups are empty and the waits on them return at once.
template <int kBlockThreads, class E = Float32>
__device__ __forceinline__ void stage_flat_plane(const ConvPoolOperands& ops,
                                                 const ConvPoolShape& s, const TilePlan& p,
                                                 const TileCoords& tc, int c, float* plane) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int staged_col0 = tc.in_col0 - flat_col_shift(p, tc);
  // 16-bit: its own loops, so that the float32 instances keep the machine code that was timed
  // (a shared loop with the copy chosen per element type changed their unrolling).
  if constexpr (!ElementOperands<E>::kFloat) {
    const auto* src_plane =
        ElementOperands<E>::x(ops) + tc.image * ops.x_stride[0] + int64_t(c) * ops.x_stride[1];
    for (int halo_row = warp; halo_row < p.halo_rows; halo_row += kBlockThreads / 32) {
      const int h = tc.in_row0 + halo_row;
      const bool row_valid = h >= 0 && h < s.in_height;
      const auto* src_row = src_plane + int64_t(h) * ops.x_stride[2];
      float* dst_row = plane + halo_row * p.halo_cols;
      if (p.vector_input) {
        // As the float32 vectors: unit column stride, width % 4 == 0, 8-byte aligned rows.
#pragma unroll 2
        for (int col = 4 * lane; col < p.halo_cols; col += 4 * 32) {
          const int w = staged_col0 + col;
          float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
          if (row_valid && w >= 0 && w < s.in_width) {
            v = to_float4<E>(__ldg(reinterpret_cast<const uint2*>(src_row + w)));
          }
          *reinterpret_cast<float4*>(dst_row + col) = v;
        }
        continue;
      }
#pragma unroll 4
      for (int col = lane; col < p.halo_cols; col += 32) {
        const int w = staged_col0 + col;
        const bool valid = row_valid && w >= 0 && w < s.in_width;
        dst_row[col] = valid ? E::to_float(__ldg(src_row + int64_t(w) * ops.x_stride[3])) : 0.f;
      }
    }
    return;
  }
  const float* src_plane = ops.x + tc.image * ops.x_stride[0] + int64_t(c) * ops.x_stride[1];
  for (int halo_row = warp; halo_row < p.halo_rows; halo_row += kBlockThreads / 32) {
    const int h = tc.in_row0 + halo_row;
    const bool row_valid = h >= 0 && h < s.in_height;
    const float* src_row = src_plane + int64_t(h) * ops.x_stride[2];
    float* dst_row = plane + halo_row * p.halo_cols;
    if (p.vector_input) {
      // Unit column stride, width % 4 == 0, aligned rows: a vector is wholly in or out.
      for (int col = 4 * lane; col < p.halo_cols; col += 4 * 32) {
        const int w = staged_col0 + col;
        const bool valid = row_valid && w >= 0 && w < s.in_width;
        cp_async_16(dst_row + col, valid ? src_row + w : ops.x, valid);
      }
    } else {
      for (int col = lane; col < p.halo_cols; col += 32) {
        const int w = staged_col0 + col;
        const bool valid = row_valid && w >= 0 && w < s.in_width;
        cp_async_4(dst_row + col, valid ? src_row + int64_t(w) * ops.x_stride[3] : ops.x, valid);
      }
    }
  }
}

// 16-bit, p.flat_raw_planes and p.vector_input: plane `c` of tile `tc` copied as it is (8-byte
// cp.async, zeros outside the image) into its raw buffer; convert_raw_plane makes it fp32 later.
template <int kBlockThreads>
__device__ __forceinline__ void copy_raw_plane(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                               const TilePlan& p, const TileCoords& tc, int c,
                                               uint16_t* raw) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int staged_col0 = tc.in_col0 - flat_col_shift(p, tc);
  const uint16_t* src_plane = ops.x16 + tc.image * ops.x_stride[0] + int64_t(c) * ops.x_stride[1];
  for (int halo_row = warp; halo_row < p.halo_rows; halo_row += kBlockThreads / 32) {
    const int h = tc.in_row0 + halo_row;
    const bool row_valid = h >= 0 && h < s.in_height;
    const uint16_t* src_row = src_plane + int64_t(h) * ops.x_stride[2];
    uint16_t* dst_row = raw + halo_row * p.halo_cols;
    for (int col = 4 * lane; col < p.halo_cols; col += 4 * 32) {
      const int w = staged_col0 + col;
      const bool valid = row_valid && w >= 0 && w < s.in_width;
      cp_async_8(dst_row + col, valid ? src_row + w : ops.x16, valid);
    }
  }
}

// A raw plane (halo_rows x halo_cols 16-bit words; halo_cols % 4 == 0) to fp32.
template <int kBlockThreads, class E>
__device__ __forceinline__ void convert_raw_plane(const TilePlan& p, const uint16_t* raw,
                                                  float* plane) {
  for (int i = 4 * threadIdx.x; i < p.halo_rows * p.halo_cols; i += 4 * kBlockThreads)
    *reinterpret_cast<float4*>(plane + i) = to_float4<E>(*reinterpret_cast<const uint2*>(raw + i));
}

// E: the operands' element type (Float32 for tiled_tf32_flat, Float16 / BFloat16 for
// tiled_16bit_flat: the staged halo is fp32 either way, the weights are converted as they are
// read, and the TF32 mma multiplies 16-bit values exactly, since their significands fit TF32's).
// Two blocks per SM where the accumulators and shared memory allow (<= 128 registers).
// Persistent plan (p.flat_persistent): the block stages the weights once and loops over tiles
// blockIdx.x, + gridDim.x, ... (of one channel block: the grid is a multiple of them); input
// plane c of the next tile is copied as soon as the last reduction step reading plane c of this
// tile is done, so the copies run under the rest of this tile's steps and its epilogue. Otherwise one tile per block, the epilogue reusing the halo.
// 16-bit planes are loaded and converted by the threads, except with p.flat_raw_planes (and
// 8-byte rows): then each tile starts by copying all the next tile's planes raw, and a released
// plane is converted from there, so the loads run behind the math as the float32 copies do.
template <class Mainloop, class E>
__global__ void __launch_bounds__(Mainloop::kThreads, Mainloop::kMinBlocks)
    conv_pool_flat_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const TilePlan p) {
  constexpr int kBlockThreads = Mainloop::kThreads;
  extern __shared__ __align__(16) float smem[];
  using Raw = typename E::Raw;
  const int taps = s.taps();
  const int reduction = s.in_channels * taps;
  Raw* weights = reinterpret_cast<Raw*>(smem);
  float* halo = reinterpret_cast<float*>(weights + p.out_block * p.weight_row);
  const int halo_floats = s.in_channels * p.halo_plane;
  const int epilogue_floats = p.out_block * kEpilogueRow;
  float* tile = p.flat_persistent ? halo + halo_floats : halo;
  int* k_offset = reinterpret_cast<int*>(
      p.flat_persistent ? tile + epilogue_floats : halo + max(halo_floats, epilogue_floats));
  int* weight_gather = k_offset + p.k_padded;  // reduction entries
  float* bias = reinterpret_cast<float*>(weight_gather + reduction);
  const bool raw_planes = !ElementOperands<E>::kFloat && p.flat_raw_planes && p.vector_input;
  uint16_t* raw = reinterpret_cast<uint16_t*>(
      (reinterpret_cast<uintptr_t>(bias + p.out_block) + 15) & ~uintptr_t(15));
  const FlatSchedule<Mainloop::kStepK> schedule{taps, reduction, p.k_padded / Mainloop::kStepK};
  const int64_t tiles = p.blocks;

  int64_t linear = blockIdx.x;
  TileCoords tc = tile_coords<false>(s, p, linear);
  for (int k = threadIdx.x; k < p.k_padded; k += kBlockThreads) {
    int offset = -1;  // padding: reads as 0
    if (k < reduction) {
      const int c = k / taps, tap = k - c * taps;
      const int r = tap / s.kernel_w, q = tap - r * s.kernel_w;
      offset = c * p.halo_plane + r * s.dilation_h * p.halo_cols + q * s.dilation_w;
      weight_gather[k] = int(c * ops.weight_stride[1] + r * ops.weight_stride[2] +
                             q * ops.weight_stride[3]);
    }
    k_offset[k] = offset;
  }
  const auto* bias_in = ElementOperands<E>::bias(ops);
  for (int k = threadIdx.x; k < p.out_block; k += kBlockThreads) {
    const int channel = tc.channel0 + k;
    bias[k] = (bias_in != nullptr && channel < s.out_channels)
                  ? E::to_float(bias_in[channel * ops.bias_stride])
                  : 0.f;
  }
  __syncthreads();  // gather table ready

  // Copy groups, oldest first: {weights, plane 0}, plane 1, ..., plane C-1 of the first tile;
  // then, during each tile, the next tile's planes in the order they are released.
  const auto* weight_in = ElementOperands<E>::weight(ops);
  if constexpr (ElementOperands<E>::kFloat) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int k = warp; k < p.out_block; k += kBlockThreads / 32) {
      const bool k_valid = tc.channel0 + k < s.out_channels;
      const auto* src = weight_in + int64_t(tc.channel0 + k) * ops.weight_stride[0];
      if constexpr (Mainloop::kWgmma) {  // [e / 4][channel][4]
        for (int e = lane; e < p.k_padded; e += 32) {
          const bool valid = k_valid && e < reduction;
          cp_async_4(weights + Mainloop::weight_index(k, e),
                     valid ? src + weight_gather[e] : weight_in, valid);
        }
        continue;
      }
      Raw* dst = weights + k * p.weight_row;
      for (int e = lane; e < p.k_padded; e += 32) {
        const bool valid = k_valid && e < reduction;
        cp_async_4(dst + flat_weight_slot(e), valid ? src + weight_gather[e] : weight_in, valid);
      }
    }
    for (int c = 0; c < s.in_channels; ++c) {
      stage_flat_plane<kBlockThreads, E>(ops, s, p, tc, c, halo + c * p.halo_plane);
      cp_async_commit();
    }
  } else {
    // 16 bits: the first tile's planes go raw first (when they can), so that they arrive while
    // the threads gather the weights, 8 loads in flight per thread (0 is +0 in both types).
    if (raw_planes) {
      for (int c = 0; c < s.in_channels; ++c)
        copy_raw_plane<kBlockThreads>(ops, s, p, tc, c, raw + c * p.halo_plane);
      cp_async_commit();
    }
    constexpr int kBatch = 8;
    const int weight_elements = p.out_block * p.k_padded;
    for (int i0 = threadIdx.x; i0 < weight_elements; i0 += kBatch * kBlockThreads) {
      Raw v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = i0 + u * kBlockThreads, k = i / p.k_padded, e = i - k * p.k_padded;
        const bool valid = i < weight_elements && tc.channel0 + k < s.out_channels &&
                           e < reduction;
        v[u] = valid ? __ldg(weight_in + int64_t(tc.channel0 + k) * ops.weight_stride[0] +
                             weight_gather[e])
                     : Raw(0);
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = i0 + u * kBlockThreads, k = i / p.k_padded, e = i - k * p.k_padded;
        if (i < weight_elements) {
          if constexpr (Mainloop::kWgmma) {
            weights[Mainloop::weight_index(k, e)] = v[u];
          } else {
            weights[k * p.weight_row + flat_weight_slot(e)] = v[u];
          }
        }
      }
    }
    if (raw_planes) {
      cp_async_wait<0>();
      __syncthreads();
      for (int c = 0; c < s.in_channels; ++c)
        convert_raw_plane<kBlockThreads, E>(p, raw + c * p.halo_plane, halo + c * p.halo_plane);
      __syncthreads();  // before the first tile overwrites the raw planes
    } else {
      for (int c = 0; c < s.in_channels; ++c)
        stage_flat_plane<kBlockThreads, E>(ops, s, p, tc, c, halo + c * p.halo_plane);
    }
  }

  const int64_t stride = p.flat_persistent ? gridDim.x : tiles;
  for (; linear < tiles; linear += stride) {
    const int64_t next_linear = linear + stride;
    const bool has_next = next_linear < tiles;
    const TileCoords next = tile_coords<false>(s, p, has_next ? next_linear : linear);
    int released = 0;  // planes of the next tile issued so far
    const int col_shift = flat_col_shift(p, tc);
    if (raw_planes && has_next) {  // the raw buffer was last read before the epilogue's barrier
      for (int c = 0; c < s.in_channels; ++c)
        copy_raw_plane<kBlockThreads>(ops, s, p, next, c, raw + c * p.halo_plane);
      cp_async_commit();
    }
    Mainloop mainloop;
    for (int c = 0; c < s.in_channels; ++c) {
      // Planes > c of this tile and the `released` ones of the next may still be in flight
      // (none with raw planes: this tile's were converted by the threads).
      if (!raw_planes) cp_async_wait_at_most(s.in_channels - 1 - c + released);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
      // The weights (copied with plane 0 of the block's first tile) are read by the tensor
      // cores: this thread's copies become visible to the async proxy before the barrier.
      if constexpr (Mainloop::kWgmma) fence_proxy_async();
#endif
      __syncthreads();
      const int begin = schedule.group_begin(c);
      const int end = c + 1 < s.in_channels ? schedule.group_begin(c + 1) : schedule.steps;
      if (c + 1 < s.in_channels || reduction % Mainloop::kStepK == 0) {
        mainloop.template compute_steps<false, E>(halo, weights, k_offset, s, p, col_shift,
                                                   begin, end);
      } else {  // the last group ends with the padded step
        mainloop.template compute_steps<false, E>(halo, weights, k_offset, s, p, col_shift,
                                                   begin, end - 1);
        mainloop.template compute_steps<true, E>(halo, weights, k_offset, s, p, col_shift,
                                                  end - 1, end);
      }
      if (has_next && released < s.in_channels && schedule.last_group(released) <= c) {
        if (raw_planes) cp_async_wait<0>();  // the raw copies, issued when this tile began
        __syncthreads();  // every warp is done with the planes released here
        while (released < s.in_channels && schedule.last_group(released) <= c) {
          float* plane = halo + released * p.halo_plane;
          if (raw_planes) {
            convert_raw_plane<kBlockThreads, E>(p, raw + released * p.halo_plane, plane);
          } else {
            stage_flat_plane<kBlockThreads, E>(ops, s, p, next, released, plane);
            cp_async_commit();
          }
          ++released;
        }
      }
    }
    if (!p.flat_persistent) __syncthreads();  // the epilogue tile reuses the halo
    mainloop.store(tile, bias);
    __syncthreads();
    pool_and_store<kBlockThreads, E>(ops, s, p, tc, tile);
    tc = next;
  }
  cp_async_wait<0>();
}

__global__ void conv_pool_direct_kernel(const ConvPoolOperands ops, const ConvPoolShape s) {
  const auto x = [&](int64_t n, int c, int64_t h, int64_t w) {
    return __ldg(ops.x + n * ops.x_stride[0] + c * ops.x_stride[1] + h * ops.x_stride[2] +
                 w * ops.x_stride[3]);
  };
  const auto weight = [&](int k, int c, int r, int q) {
    return __ldg(ops.weight + k * ops.weight_stride[0] + c * ops.weight_stride[1] +
                 r * ops.weight_stride[2] + q * ops.weight_stride[3]);
  };
  const auto bias = [&](int k) { return ops.bias ? ops.bias[k * ops.bias_stride] : 0.f; };
  const int64_t total = s.output_elements();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x)
    ops.out[i] = conv_pool_epilogue::direct_pooled_output(s, i, x, weight, bias);
}

// ---------------------------------------------------------------------------
// Variant table: which kernel and output-channel block each variant runs.

using TiledKernel = void (*)(const ConvPoolOperands, const ConvPoolShape, const TilePlan);

struct TiledChoice {
  TiledKernel kernel;
  int out_block;
  int threads;
};

template <class Mainloop>
TiledChoice pick(bool fast) {
  return {fast ? conv_pool_tiled_kernel<Mainloop, true> : conv_pool_tiled_kernel<Mainloop, false>,
          Mainloop::kOutBlock, Mainloop::kThreads};
}

// The flat kernel of Mainloop for operands of `element` (3xTF32 mainloops: float32 only).
template <class Mainloop>
TiledChoice flat(int element) {
  if constexpr (Mainloop::kSplit) {
    return {conv_pool_flat_kernel<Mainloop, Float32>, Mainloop::kOutBlock, Mainloop::kThreads};
  } else {
    const TiledKernel kernel = element == kElementFloat16 ? conv_pool_flat_kernel<Mainloop, Float16>
                               : element == kElementBFloat16
                                   ? conv_pool_flat_kernel<Mainloop, BFloat16>
                                   : conv_pool_flat_kernel<Mainloop, Float32>;
    return {kernel, Mainloop::kOutBlock, Mainloop::kThreads};
  }
}

// Shared memory the hardware keeps per resident block on top of the dynamic allocation (1 KB on
// sm_80 .. sm_90); `max_shared_bytes` is the per-block opt-in limit, 1 KB under the SM's total.
constexpr int kSmemReservedPerBlock = 1024;

bool two_blocks_per_sm(int smem_bytes, int max_shared_bytes) {
  return 2 * (int64_t(smem_bytes) + kSmemReservedPerBlock) <=
         int64_t(max_shared_bytes) + kSmemReservedPerBlock;
}

// The wgmma flat kernels (tiled_tf32_flat_wgmma, tiled_16bit_flat_wgmma): blocks of 64
// channels, 16 warps.
TiledChoice flat_wgmma(int element) {
  const TiledKernel kernel =
      element == kElementFloat16    ? conv_pool_flat_kernel<FlatWgmmaMainloop<Float16>, Float16>
      : element == kElementBFloat16 ? conv_pool_flat_kernel<FlatWgmmaMainloop<BFloat16>, BFloat16>
                                    : conv_pool_flat_kernel<FlatWgmmaMainloop<Float32>, Float32>;
  using Any = FlatWgmmaMainloop<Float32>;  // the same block for every element type
  return {kernel, Any::kOutBlock, Any::kThreads};
}

bool is_flat_wgmma(int variant) {
  return variant == kVariantTiledTf32FlatWgmma || variant == kVariantTiled16FlatWgmma;
}

// The flat kernels' output-channel block: 64 above 32 channels (several channel blocks above 64:
// blocks of 128, 8 warps of 64 pixels x 64 channels, were 2-27% slower, docs/PERF.md).
// The wgmma ones: 64 always.
int flat_out_block(const ConvPoolShape& s, int variant) {
  return is_flat_wgmma(variant) || s.out_channels > 32 ? 64 : 32;
}

// Their warp tiling (FlatTensorCoreMainloop<out_block, warps N, m-tiles per warp>) for plan `p`:
// blocks of 64 as 8 warps of 32 pixels x 64 channels where two blocks share an SM, else as 16
// warps of 32 x 32 (one block alone: 8 warps of 32 x 64 were 11-24% slower there); blocks of
// 32 as 8 warps of 32 x 32. 3xTF32 (`split`) never takes 32 x 64: its 64 accumulators and three
// fragment sets would not fit 128 registers.
enum class FlatTiling { k64Wide, k64, k32 };

FlatTiling flat_tiling(const TilePlan& p, int max_shared_bytes, bool split) {
  if (p.out_block == 32) return FlatTiling::k32;
  return !split && two_blocks_per_sm(p.smem_bytes, max_shared_bytes) ? FlatTiling::k64Wide
                                                                     : FlatTiling::k64;
}

bool is_split_flat(int variant) { return variant == kVariantTiled3xTf32Flat; }

// The flat kernel of `variant` (tiled_tf32_flat / tiled_3xtf32_flat for float32,
// tiled_16bit_flat else) with the tiling of plan `p`.
TiledChoice flat_choice(const ConvPoolShape& s, const TilePlan& p, int variant,
                        int max_shared_bytes) {
  if (is_flat_wgmma(variant)) return flat_wgmma(s.element);
  if (is_split_flat(variant)) {
    return flat_tiling(p, max_shared_bytes, true) == FlatTiling::k32
               ? flat<FlatTensorCoreMainloop<32, 1, 2, true>>(s.element)
               : flat<FlatTensorCoreMainloop<64, 2, 2, true>>(s.element);
  }
  switch (flat_tiling(p, max_shared_bytes, false)) {
    case FlatTiling::k64Wide: return flat<FlatTensorCoreMainloop<64, 1, 2>>(s.element);
    case FlatTiling::k64: return flat<FlatTensorCoreMainloop<64, 2, 2>>(s.element);
    default: return flat<FlatTensorCoreMainloop<32, 1, 2>>(s.element);
  }
}

// Output channels per block of the chunked tiled variants (1-4) on `s`: on tensor cores the
// widest block the output channels fill well. 3xTF32 takes blocks of 128 channels only where
// they fit and still give every SM a block (batch-1 VGG layers: 64 blocks of 128 for 132 SMs
// took 75 us against 45 for 128 blocks of 64; where they fill it, 13-17% faster than 64,
// docs/PERF.md).
int tiled_out_block(int variant, const ConvPoolShape& s, const ConvPoolDevice& device) {
  const int out_channels = s.out_channels;
  switch (variant) {
    case kVariantTiledFp32: return CudaCoreMainloop::kOutBlock;
    case kVariantTiledTf32: return out_channels > 64 ? 128 : out_channels > 32 ? 64 : 32;
    case kVariantTiledTf32Wide: return out_channels > 64 ? 128 : 64;
    case kVariantTiled3xTf32:
      if (out_channels > 64) {
        const TilePlan wide = make_tile_plan(s, 128, true);
        if (wide.blocks >= device.sm_count && wide.smem_bytes <= device.max_shared_bytes)
          return 128;
      }
      return out_channels > 32 ? 64 : 32;
    default: return 0;
  }
}

// The kernel of a chunked tiled variant with blocks of `out_block` channels (tiled_out_block).
// `fast`: the compile-time 3x3 conv / 2x2 pool geometry (fast_path_applies). Not the flat
// variants (flat_choice).
TiledChoice tiled_choice(int variant, int out_block, bool fast) {
  switch (variant) {
    case kVariantTiledFp32:
      return {conv_pool_tiled_kernel<CudaCoreMainloop, false>, CudaCoreMainloop::kOutBlock,
              CudaCoreMainloop::kThreads};
    case kVariantTiledTf32:
      if (out_block == 128) return pick<TensorCoreMainloop<128, false>>(fast);
      if (out_block == 64) return pick<TensorCoreMainloop<64, false>>(fast);
      return pick<TensorCoreMainloop<32, false>>(fast);
    case kVariantTiledTf32Wide:
      if (out_block == 128) return pick<TensorCoreMainloop<128, false, 4>>(fast);
      return pick<TensorCoreMainloop<64, false, 4>>(fast);
    case kVariantTiled3xTf32:
      if (out_block == 128) return pick<TensorCoreMainloop<128, true>>(fast);
      if (out_block == 64) return pick<TensorCoreMainloop<64, true>>(fast);
      return pick<TensorCoreMainloop<32, true>>(fast);
    default:
      return {nullptr, 0, 0};
  }
}

bool is_flat(int variant) {
  return variant == kVariantTiledTf32Flat || variant == kVariantTiled16Flat ||
         variant == kVariantTiled3xTf32Flat || is_flat_wgmma(variant);
}

// The tiling a tiled variant runs with (the fast geometry is not built for FFMA).
TilePlan plan_for(const ConvPoolShape& s, int variant, const ConvPoolDevice& device) {
  if (is_flat(variant))
    return make_flat_plan(s, flat_out_block(s, variant), device.max_shared_bytes,
                          variant == kVariantTiled16FlatWgmma ? 16 : 8);
  return make_tile_plan(s, tiled_out_block(variant, s, device),
                        variant != kVariantTiledFp32);
}

bool is_tiled(int variant) {
  return variant == kVariantTiledFp32 || variant == kVariantTiledTf32 ||
         variant == kVariantTiled3xTf32 || variant == kVariantTiledTf32Wide || is_flat(variant);
}

}  // namespace

extern "C" cudaError_t conv_relu_maxpool_query_device(int device, ConvPoolDevice* info) {
  ConvPoolDevice d{};
  int major = 0, minor = 0, current = 0;
  cudaError_t err = cudaDeviceGetAttribute(&d.max_shared_bytes,
                                           cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (err != cudaSuccess) return err;
  d.compute_capability = 10 * major + minor;
  if (d.compute_capability == 90) {  // the only cluster launches: the wgmma kernels'
    err = cudaGetDevice(&current);
    if (err == cudaSuccess && current != device) err = cudaSetDevice(device);
    if (err != cudaSuccess) return err;
    wgmma_cluster_capacity(d.max_clusters);
    if (current != device) err = cudaSetDevice(current);
  }
  *info = d;
  return err;
}

extern "C" const char* conv_relu_maxpool_variant_name(int variant) {
  switch (variant) {
    case kVariantDirect: return "direct";
    case kVariantTiledFp32: return "tiled_fp32";
    case kVariantTiledTf32: return "tiled_tf32";
    case kVariantTiled3xTf32: return "tiled_3xtf32";
    case kVariantTiledTf32Wide: return "tiled_tf32_16w";
    case kVariantTiledTf32Flat: return "tiled_tf32_flat";
    case kVariantTiledTf32Wgmma: return "tiled_tf32_wgmma";
    case kVariantSmallFp32: return "small_fp32";
    case kVariantSmallTf32: return "small_tf32";
    case kVariantDirect16: return "direct_16bit";
    case kVariantTiled16Mma: return "tiled_16bit_mma";
    case kVariantTiled16Wgmma: return "tiled_16bit_wgmma";
    case kVariantSmall16: return "small_16bit";
    case kVariantTiled16Flat: return "tiled_16bit_flat";
    case kVariantTiled3xTf32Flat: return "tiled_3xtf32_flat";
    case kVariantTiled3xTf32Wgmma: return "tiled_3xtf32_wgmma";
    case kVariantStemTf32: return "stem_tf32";
    case kVariantStem16: return "stem_16bit";
    case kVariantTiledTf32FlatWgmma: return "tiled_tf32_flat_wgmma";
    case kVariantTiled16FlatWgmma: return "tiled_16bit_flat_wgmma";
    case kVariantGeneralWgmma: return "general_wgmma";
    default: return nullptr;
  }
}

extern "C" const char* conv_relu_maxpool_unsupported(const ConvPoolShape* s, int variant,
                                                      const ConvPoolDevice* device) {
  if (variant == kVariantGeneralWgmma) return general_wgmma_unsupported(*s, *device);
  if (variant == kVariantDirect16 || variant == kVariantTiled16Mma)
    return half_conv_pool_unsupported(*s, variant, *device);
  const bool sixteen_bit_only = variant == kVariantTiled16Wgmma || variant == kVariantSmall16 ||
                                variant == kVariantTiled16Flat || variant == kVariantStem16 ||
                                variant == kVariantTiled16FlatWgmma;
  if (sixteen_bit_only && s->element == kElementFloat32) return "needs float16 or bfloat16 input";
  if (variant == kVariantTiled16Wgmma) return wgmma_conv_pool_unsupported(*s, *device);
  if (variant == kVariantSmall16) return small_conv_pool_unsupported(*s, *device, false);
  if (variant == kVariantStem16) return stem_conv_pool_unsupported(*s, *device);
  if (s->element != kElementFloat32 && !sixteen_bit_only && variant >= 0 &&
      variant < kVariantCount)
    return "needs float32 input";
  if (variant == kVariantDirect) return nullptr;
  if (variant == kVariantTiledTf32Wgmma) return wgmma_conv_pool_unsupported(*s, *device);
  if (variant == kVariantTiled3xTf32Wgmma) return wgmma_conv_pool_unsupported(*s, *device, true);
  if (variant == kVariantSmallFp32 || variant == kVariantSmallTf32)
    return small_conv_pool_unsupported(*s, *device, variant == kVariantSmallTf32);
  if (variant == kVariantStemTf32) return stem_conv_pool_unsupported(*s, *device);
  if (is_flat_wgmma(variant)) {
    if (const char* why = wgmma_unavailable(*device)) return why;
  }
  if (!is_tiled(variant)) return "unknown variant";
  if (s->pool_h > kTileRows || s->pool_w > kTileCols)
    return "the pooling window is larger than the 8 x 32 conv tile";
  const TilePlan plan = plan_for(*s, variant, *device);
  if (plan.smem_bytes > device->max_shared_bytes)
    return "the input halo and weights of one stage do not fit in shared memory";
  if (plan.blocks > INT32_MAX) return "the grid has more than 2^31 - 1 tiles";
  return nullptr;
}

// The mma.sync flat kernel `variant` (tiled_tf32_flat, tiled_16bit_flat) runs `s` in blocks of
// 64 channels, one per SM: where its wgmma twin took over (docs/PERF.md).
static bool flat_runs_one_block_per_sm(const ConvPoolShape& s, int variant,
                                       const ConvPoolDevice& device) {
  return s.out_channels > 32 &&
         flat_tiling(plan_for(s, variant, device), device.max_shared_bytes, false) ==
             FlatTiling::k64;
}

extern "C" int conv_relu_maxpool_choose(const ConvPoolShape* s, int config, bool allow_tf32,
                                        const ConvPoolDevice* device) {
  if (config != kVariantAuto) return config;
  auto runs = [&](int variant) {
    return conv_relu_maxpool_unsupported(s, variant, device) == nullptr;
  };
  // float16 / bfloat16: on Hopper the wgmma kernel for the fast-path geometry (any channel
  // counts: with at most 32 output channels its N = 64 blocks multiply zeros, not measured
  // against tiled_16bit_mma), else the mma.sync kernel wherever it fits, else the direct one
  // (allow_tf32 does not apply: the products are exact in fp32 either way).
  // Off the fast path, as for float32: the CUDA-core kernel for at most 16 output channels, the
  // flat reduction for fewer than 8 input channels (tiled_16bit_mma pads channels to 16).
  // A first layer (a reduction of at most 32, e.g. RGB x 3 x 3, into 17-64 channels under a
  // 2x2 / 2 pool) on Hopper: the stem kernel (rgb_stem, docs/PERF.md). Elsewhere, and for
  // at most 16 channels (the small kernels' range), what was measured before it.
  const bool stem = device->compute_capability == 90 && s->out_channels > 16;
  if (s->element != kElementFloat32) {
    if (stem && runs(kVariantStem16)) return kVariantStem16;
    if (runs(kVariantTiled16Wgmma)) return kVariantTiled16Wgmma;
    if (runs(kVariantSmall16)) return kVariantSmall16;
    if (s->in_channels < kChannelChunk && !fast_path_applies(*s) && runs(kVariantTiled16Flat)) {
      // As for float32 below: the wgmma mainloop where blocks of 64 channels run one per SM.
      if (flat_runs_one_block_per_sm(*s, kVariantTiled16Flat, *device) &&
          runs(kVariantTiled16FlatWgmma))
        return kVariantTiled16FlatWgmma;
      return kVariantTiled16Flat;
    }
    // Hopper, everything else: the general wgmma kernel (any kernel size, stride, dilation and
    // pool), which streams the weights through its stages.
    if (runs(kVariantGeneralWgmma)) return kVariantGeneralWgmma;
    return runs(kVariantTiled16Mma) ? kVariantTiled16Mma : kVariantDirect16;
  }
  // At most 16 output channels and a short reduction: tensor-core tiles would multiply mostly
  // padding; the CUDA-core kernel computes every channel of a window per thread, in fp32. With
  // TF32 allowed, at most 8 channels and 2x2 / stride 2 windows, the same kernel's tensor-core
  // loop (small_tf32), unless its CUDA-core patch loop applies: that one measured as fast or
  // faster (LeNet 16.7 us against 17.7), the generic loop slower (a 3-channel 5x5 / stride 2
  // layer: 65 us against 36; docs/PERF.md).
  if (allow_tf32 && runs(kVariantSmallTf32) && !small_conv_pool_patch_loop(*s))
    return kVariantSmallTf32;
  if (runs(kVariantSmallFp32)) return kVariantSmallFp32;
  if (allow_tf32 && stem && runs(kVariantStemTf32)) return kVariantStemTf32;
  // fp32-accurate tensor-core paths (3xTF32) as the TF32 ones below: the flat reduction for
  // fewer than 8 input channels off the fast path (AlexNet's first layer took `direct`, whose
  // 8-channel tiles do not fit its 11 x 11 halo), else the 8-channel chunks where they fit.
  if (!allow_tf32) {
    if (s->in_channels < kChannelChunk && !fast_path_applies(*s) && runs(kVariantTiled3xTf32Flat))
      return kVariantTiled3xTf32Flat;
    if (runs(kVariantTiled3xTf32Wgmma)) return kVariantTiled3xTf32Wgmma;
    if (runs(kVariantTiled3xTf32)) return kVariantTiled3xTf32;
    return runs(kVariantTiled3xTf32Flat) ? kVariantTiled3xTf32Flat : kVariantDirect;
  }
  // Fewer than 8 input channels off the fast path: the flattened reduction skips the
  // zero channels an 8-channel chunk would multiply, and it fits large kernels
  // (lenet_c1 0.41 -> 0.12 ms, alexnet_c1 6.3 -> 0.16 ms on the H200). On the fast
  // path the pipelined chunks measured faster still (rgb_stem 0.60 vs 0.81 ms).
  // On Hopper, where the mma.sync flat kernel's blocks of 64 channels run one per SM (large
  // kernels: its 16 warps latency-bound, docs/PERF.md), its wgmma mainloop: AlexNet's first
  // layer 97 -> 77 us, ResNet's 7 x 7 / 2 stem 269 -> 234. Where two blocks share an SM (5 x 5
  // and 3 x 3 kernels over few channels) and for at most 32 channels (half of the wgmma's N = 64
  // would be zeros) the mma.sync one measured faster (11-54%).
  if (s->in_channels < kChannelChunk && !fast_path_applies(*s) && runs(kVariantTiledTf32Flat)) {
    if (flat_runs_one_block_per_sm(*s, kVariantTiledTf32Flat, *device) &&
        runs(kVariantTiledTf32FlatWgmma))
      return kVariantTiledTf32FlatWgmma;
    return kVariantTiledTf32Flat;
  }
  // Hopper: the wgmma kernel for the fast-path geometry, with blocks of 128 output channels, or
  // of 64 for up to 64 (rgb_stem: 0.25 ms vs 0.60 ms for tiled_tf32_16w, same process).
  // Also for 32 or fewer, where half its N = 64 is zeros: tiled_tf32's blocks of 32 do no less
  // work per output channel block and took 10-46% longer on four layers of 24 and 32 output
  // channels (as did tiled_3xtf32 against tiled_3xtf32_wgmma, 17-31% on the
  // H200, docs/PERF.md).
  if (runs(kVariantTiledTf32Wgmma)) return kVariantTiledTf32Wgmma;
  // Hopper, everything else: the general wgmma kernel.
  if (runs(kVariantGeneralWgmma)) return kVariantGeneralWgmma;
  // 16 warps measured 8% faster than 8 for 33..64 output channels on the fast path
  // (rgb_stem) and within noise elsewhere (docs/PERF.md).
  const bool wide = s->out_channels > 32 && s->out_channels <= 64 && fast_path_applies(*s);
  const int chunked = wide ? kVariantTiledTf32Wide : kVariantTiledTf32;
  if (runs(chunked)) return chunked;
  if (runs(kVariantTiledTf32Flat)) return kVariantTiledTf32Flat;
  return kVariantDirect;
}

// A wgmma variant with its own element types (the launcher never pairs them else).
static bool wgmma_variant_for(const ConvPoolShape& s, int variant) {
  const bool float32 = s.element == kElementFloat32;
  return ((variant == kVariantTiledTf32Wgmma || variant == kVariantTiled3xTf32Wgmma) &&
          float32) ||
         (variant == kVariantTiled16Wgmma && !float32);
}

// ... and the shape inside the wgmma kernels' geometry: what the tile queries below answer for.
static bool wgmma_runs(const ConvPoolShape& s, int variant) {
  return wgmma_variant_for(s, variant) && fast_path_applies(s);
}

extern "C" int64_t conv_relu_maxpool_workspace_bytes(const ConvPoolShape* s, int variant,
                                                     const ConvPoolDevice* device,
                                                     const ConvPoolOperands* ops) {
  if (variant == kVariantGeneralWgmma) return general_wgmma_workspace_bytes(*s, *device, ops);
  if (variant == kVariantTiled16Mma) return half_conv_pool_workspace_bytes(*s, variant);
  return wgmma_variant_for(*s, variant)
             ? wgmma_conv_pool_workspace_bytes(*s, variant == kVariantTiled3xTf32Wgmma)
             : 0;
}

extern "C" int64_t conv_relu_maxpool_packed_weight_bytes(const ConvPoolShape* s,
                                                         const ConvPoolDevice* device) {
  return wgmma_packs_weight(*s, *device) ? wgmma_packed_weight_bytes(*s) : 0;
}

extern "C" bool conv_relu_maxpool_takes_packed_weight(const ConvPoolShape* s, int variant) {
  return wgmma_variant_for(*s, variant) && variant != kVariantTiled3xTf32Wgmma &&
         wgmma_takes_packed_weight(*s);
}

extern "C" const char* conv_relu_maxpool_wgmma_tile(const ConvPoolShape* s, int variant) {
  return wgmma_runs(*s, variant) ? wgmma_tile_name(*s, variant == kVariantTiled3xTf32Wgmma)
                                 : nullptr;
}

extern "C" int conv_relu_maxpool_wgmma_tile_origin(const ConvPoolShape* s, int variant, int tile,
                                                   int64_t* origin) {
  return wgmma_runs(*s, variant)
             ? wgmma_tile_origin(*s, tile, origin, variant == kVariantTiled3xTf32Wgmma)
             : 0;
}

extern "C" bool conv_relu_maxpool_packs_weight_apart(const ConvPoolShape* s, int variant,
                                                     const ConvPoolDevice* device) {
  return wgmma_runs(*s, variant) && device->compute_capability == 90 &&
         wgmma_packs_weight_apart(*s, *device, variant == kVariantTiled3xTf32Wgmma);
}

extern "C" int conv_relu_maxpool_wgmma_split(const ConvPoolShape* s, int variant,
                                             const ConvPoolDevice* device) {
  return wgmma_runs(*s, variant) && device->compute_capability == 90
             ? wgmma_split(*s, *device, variant == kVariantTiled3xTf32Wgmma)
             : 1;
}

extern "C" const char* conv_relu_maxpool_flat_tiling(const ConvPoolShape* s, int variant,
                                                      const ConvPoolDevice* device) {
  if (!is_flat(variant)) return nullptr;
  if (is_flat_wgmma(variant)) return "n64_wgmma_m64";
  switch (flat_tiling(plan_for(*s, variant, *device), device->max_shared_bytes,
                      is_split_flat(variant))) {
    case FlatTiling::k64Wide: return "n64_warp32x64";
    case FlatTiling::k64: return "n64_warp32x32";
    default: return "n32_warp32x32";
  }
}

extern "C" int conv_relu_maxpool_tiled_out_block(const ConvPoolShape* s, int variant,
                                                 const ConvPoolDevice* device) {
  return is_tiled(variant) ? plan_for(*s, variant, *device).out_block : 0;
}

extern "C" int conv_relu_maxpool_general_plan(const ConvPoolShape* s, const ConvPoolDevice* device,
                                             char* text, int capacity) {
  if (general_wgmma_unsupported(*s, *device) != nullptr) return 0;
  const general_wgmma::Plan p = general_wgmma_plan(*s, *device, nullptr);
  const int written = snprintf(
      text, size_t(capacity),
      "tile=%s pooled=%dx%d tiles=%lld split=%d steps=%d step_chunks=%d group_rows=%d "
      "gathered=%d halo=%dx%d phases=%d stage_bytes=%d passes=%d smem=%d blocks_per_sm=%d",
      general_wgmma::kTileSpecs[p.tile].name, p.pooled_rows, p.pooled_cols,
      static_cast<long long>(p.tiles), p.split, p.steps, p.step_chunks, p.group_rows, int(p.gathered_rows),
      p.halo_rows, p.halo_cols, __builtin_popcount(p.phase_mask), p.stage_bytes,
      p.epilogue_passes, p.smem_bytes, p.blocks_per_sm);
  return written < capacity ? written : capacity - 1;
}

extern "C" cudaError_t conv_relu_maxpool_pack_weight(const ConvPoolOperands* ops,
                                                     const ConvPoolShape* s, float* packed,
                                                     const ConvPoolDevice* device,
                                                     cudaStream_t stream) {
  if (!wgmma_packs_weight(*s, *device)) return cudaErrorInvalidValue;
  return wgmma_pack_weight_launch(*ops, *s, packed, *device, stream);
}

extern "C" cudaError_t conv_relu_maxpool_launch(const ConvPoolOperands* ops,
                                                const ConvPoolShape* s, int variant,
                                                const ConvPoolDevice* device,
                                                cudaStream_t stream, const int64_t* out_stride) {
  if (variant == kVariantGeneralWgmma)
    return general_wgmma_launch(*ops, *s, *device, stream, out_stride);
  if (out_stride != nullptr) return cudaErrorInvalidValue;
  if (variant == kVariantDirect16 || variant == kVariantTiled16Mma)
    return half_conv_pool_launch(*ops, *s, variant, stream);
  if (variant == kVariantTiledTf32Wgmma || variant == kVariantTiled16Wgmma ||
      variant == kVariantTiled3xTf32Wgmma)
    return wgmma_conv_pool_launch(*ops, *s, *device, stream,
                                  variant == kVariantTiled3xTf32Wgmma);
  if (variant == kVariantSmallFp32 || variant == kVariantSmall16 || variant == kVariantSmallTf32)
    return small_conv_pool_launch(*ops, *s, variant == kVariantSmallTf32, stream);
  if (variant == kVariantStemTf32 || variant == kVariantStem16)
    return stem_conv_pool_launch(*ops, *s, *device, stream);
  if (variant == kVariantDirect) {
    const int64_t blocks = (s->output_elements() + kThreads - 1) / kThreads;
    const int64_t max_blocks = int64_t(1) << 20;  // grid-stride beyond this
    conv_pool_direct_kernel<<<unsigned(std::min(blocks, max_blocks)), kThreads, 0, stream>>>(*ops,
                                                                                            *s);
    return cudaGetLastError();
  }
  if (!is_tiled(variant)) return cudaErrorInvalidValue;
  TilePlan plan = plan_for(*s, variant, *device);
  // Row vectors: 16 bytes of float32 (cp.async), or 8 bytes of 16-bit words (tiled_16bit_flat).
  plan.vector_input = (plan.fast || is_flat(variant)) &&
                      (s->element == kElementFloat32 ? vectorizable_input(*ops, *s)
                                                     : vectorizable_input_16bit(*ops, *s));
  plan.vector_weights = plan.fast && vectorizable_weights(*ops, *s);
  const TiledChoice choice = is_flat(variant) ? flat_choice(*s, plan, variant,
                                                           device->max_shared_bytes)
                                              : tiled_choice(variant, plan.out_block, plan.fast);
  const TiledKernel kernel = choice.kernel;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         plan.smem_bytes);
  if (err != cudaSuccess) return err;
  int64_t grid = plan.blocks;
  if (plan.flat_persistent) {
    // As many blocks as are resident at once, rounded down to a multiple of the channel blocks:
    // each loops over tiles blockIdx.x, + gridDim.x, ..., which then all have the channel block
    // of its first (the fastest index of tile_coords), whose weights it stages once.
    int per_sm = 0;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, choice.threads,
                                                        plan.smem_bytes);
    if (err != cudaSuccess) return err;
    grid = std::min<int64_t>(grid, int64_t(std::max(per_sm, 1)) * device->sm_count);
    grid = std::max<int64_t>(grid / plan.channel_blocks, 1) * plan.channel_blocks;
  }
  kernel<<<unsigned(grid), choice.threads, plan.smem_bytes, stream>>>(*ops, *s, plan);
  return cudaGetLastError();
}
