// The mma.sync / FFMA kernels of conv_relu_maxpool.cu (any GPU from Ampere on): their
// constants, the host plan of a problem's tiling (TilePlan, make_tile_plan), where a block's
// tile sits (TileCoords), the staged geometry and shared-memory carve-up, and the 3xTF32
// operand split.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "../conv_pool_16bit.cuh"
#include "../conv_pool_device.cuh"
#include "../conv_pool_epilogue.cuh"
#include "../conv_pool_operands.h"
#include "../conv_relu_maxpool.h"

namespace conv_pool_mma {


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

inline int round_up_to_residue(int value, int modulus, int residue) {
  int r = value % modulus;
  return value + ((residue - r) % modulus + modulus) % modulus;
}

// Tile geometry; smem_bytes tells whether it fits (checked by the caller).
inline TilePlan make_tile_plan(const ConvPoolShape& s, int out_block, bool allow_fast) {
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

}  // namespace conv_pool_mma
