// The 3 x 3 Hopper kernel (conv_relu_maxpool_wgmma.cu; a 2 x 2 / 2 pool, or none): its
// constants, the tile template (WgmmaTile: rows, columns and channels of a block's tile, its
// pooling, its shared-memory layout and occupancy), the tile shapes, and the host plan a launch
// hands the kernel (WgmmaPlan, TileOrigin: where a tile lies in the conv output).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "../conv_pool_device.cuh"
#include "../conv_pool_operands.h"

namespace tiled_wgmma {

constexpr int kThreads = 256;  // two warpgroups
constexpr int kTaps = 9;
constexpr int kStages = 3;
// A step issues the wgmmas of taps [0, kSplitTap), then the halo loads and stores, then the
// rest: a warp blocks in wgmma issue until the tensor cores have room, so loads placed after
// all 18 ran while the queue was nearly empty (H200: 7-12% slower; the split at
// 3, 5 or 7 measured within 4% of each other, and moving the two barriers between the halves
// too was 2-7% slower).
constexpr int kSplitTap = 5;
constexpr int kSliceBytes = 16;  // one channel slice of one pixel or weight row
// Strip tiles number their first squares in an int (4 * tile, plus up to 3).
constexpr int64_t kMaxStripSquares = INT32_MAX - 4;

// How a tile's four 8 x 8 pixel squares lie in the conv output.
enum TileShape : int {
  kBlockTile = 0,  // one kTileRows x kTileCols block of the image
  kStripTile = 1,  // four consecutive squares of the sequence (image, square row, square col):
                   // a run of one square row, which may go on at the start of the next one
                   // (of the same or the next image). Two pieces, staged side by side.
};

template <class OperandsT, int kTileRowsT, int kTileColsT, int kNT, TileShape kShapeT = kBlockTile,
          bool kOneBlockTwinT = false, int kPoolT = 2>
struct WgmmaTile {
  using Operands = OperandsT;             // Tf32Operands or HalfOperands<E>
  static constexpr int kTileRows = kTileRowsT, kTileCols = kTileColsT;
  // The pool window and stride: 2 (2 x 2 / 2, pooled through shared memory), or 1 (no pool:
  // conv -> ReLU, stored from the accumulators, store_conv_rows). kPooled*: outputs.
  static constexpr int kPool = kPoolT;
  static_assert(kPool == 1 || kPool == 2, "a 2 x 2 / 2 pool or none");
  static constexpr int kSquareOut = 8 / kPool;  // outputs per 8 x 8 conv square, per side
  static constexpr bool kStrip = kShapeT == kStripTile;
  static constexpr int kN = kNT;          // output channels per block = N of every wgmma
  // The one-block-per-SM twin of a two-blocks-per-SM tile (OneBlockWideTile, TF32's
  // OneBlockSquareTile), never given packed weights (only the copy packed apart: packs_apart).
  static constexpr bool kOneBlockTwin = kOneBlockTwinT;
  static constexpr int kAccs = kN / 2;    // accumulators per thread per 8 x 8 pixel square
  // 3xTF32 (Operands::kSplit): every weight row is staged twice, its small part then its big
  // part (rows [0, kN) and [kN, 2 kN) of each slice), so that one N = 2 kN wgmma multiplies the
  // big halo by both: 2 kN accumulators per square, the first half the two cross terms
  // (mma_cross adds small halo * big weights there), the second big * big, summed into the
  // first at the tile's end. The halo is staged twice too (big, then small: kHaloCopies).
  static constexpr bool kSplit = Operands::kSplit;
  static constexpr int kWeightN = kSplit ? 2 * kN : kN;  // staged weight rows per slice
  static constexpr int kAccRegs = kSplit ? 2 * kAccs : kAccs;  // per thread per square
  static constexpr int kHaloCopies = kSplit ? 2 : 1;
  static constexpr int kSquareCols = kTileCols / 8;  // 8 x 8 pixel squares per tile row
  static_assert((kTileRows / 8) * kSquareCols == 4, "four 8 x 8 squares, two per warpgroup");
  static_assert(!kStrip || kTileRows == 8, "a strip is one row of squares");
  // Staged halo: the input rows/cols the tile's 3x3 windows read; each row starts at the
  // 4-column aligned column at or left of the first one (col_shift 0..3 extra columns), so
  // that 4 columns of one channel are one 16-byte (fp32) or 8-byte (16-bit) load. A strip's
  // two pieces of k and 4 - k squares take ceil((8 k + 2 + col_shift) / 4) vectors each: 12 at
  // most (col_shift 3, k = 1..3), where one piece of 4 takes 10.
  static constexpr int kHaloRows = kTileRows + 2;
  static constexpr int kHaloCols = kStrip ? 48 : (kTileCols + 2 + 3 + 3) / 4 * 4;
  static constexpr int kHaloVectors = kHaloCols / 4;
  static constexpr int kHaloUnits = 2 * kHaloRows * kHaloVectors;  // (slice, row, vector)
  static_assert(kHaloUnits <= kThreads, "one halo unit per thread");
  // Plane loads: units (slice, 4 consecutive pixels of the image plane).
  static constexpr int kMaxPlaneVectors = kThreads / 2;
  static constexpr int kWeightTapBytes = 2 * kWeightN * kSliceBytes;
  // One chunk's weights in the staged layout, [tap][channel slice][out channel][16 bytes]
  // (3xTF32: [tap][channel slice][small, big][out channel][16 bytes]), in 4-byte words (the
  // workspace's unit).
  static constexpr int kWeightChunkWords = kTaps * 2 * kWeightN * 4;
  static constexpr int kWeightChunkBytes = kTaps * kWeightTapBytes;
  static constexpr int kPooledRows = kTileRows / kPool, kPooledCols = kTileCols / kPool;
  // + 4 floats: the epilogue's stores of one warp (8 channels x 4 columns) hit 32 banks.
  // Without a pool, in its place, each warp's staging of 8 channels (store_conv_rows): 36
  // floats a channel (2 rows x 2 squares x 8 columns + 4), at most the smallest pooled tile.
  static constexpr int kPooledPlane = kPooledRows * kPooledCols + 4;
  static constexpr int kConvStagingPitch = 36;
  static constexpr int kPooledBytes =
      kPool == 2 ? kN * kPooledPlane * 4 : (kThreads / 32) * 8 * kConvStagingPitch * 4;
  static constexpr int kBiasBytes = kN * 4;
  // N = 64 fits two blocks per SM (<= 128 registers, 110 KB (8 x 32) or 112 KB (16 x 16) of
  // shared memory each): one block's epilogue and barriers then overlap the other's wgmmas.
  // Not the 16-bit 16 x 16 tile: capped so, it was 2.5% slower on a layer of many tiles (H200,
  // docs/PERF.md). Not 3xTF32's: its doubled stages fill an SM.
  static constexpr int kMinBlocksPerSm =
      (kN == 64 && !kOneBlockTwin && !kSplit && (kTileRows == 8 || Operands::kChunk == 8)) ? 2
                                                                                          : 1;
  // Shared memory of a block whose halo rows are `pitch` 16-byte slots apart.
  static constexpr int smem_bytes(int pitch) {
    return kStages * (kHaloCopies * 2 * kHaloRows * pitch * kSliceBytes + kWeightChunkBytes) +
           kPooledBytes + kBiasBytes + kStages * 8;
  }
  // Halo row pitch in 16-byte slots. kHaloCols is a multiple of 8 slots (128 bytes), so rows
  // of kHaloCols slots all start at bank 0, and a warp's halo stores (4 consecutive slots per
  // thread, threads along a row's vectors, then the rows) fall into 2 of the 8 16-byte bank
  // groups: 4-way conflicts. One slot more moves each row a bank group on, and the stores
  // spread over all 8. Kept at kHaloCols where the extra slot would not leave room for the
  // tile's blocks per SM (the TF32 16 x 16 N = 64 tile: 227 KB for two blocks, plus the
  // 1 KB per block the driver reserves).
  static constexpr int kHaloPitch =
      kMinBlocksPerSm * (smem_bytes(kHaloCols + 1) + 1024) <= 227 * 1024 + 1024
          ? kHaloCols + 1
          : kHaloCols;
  static constexpr int kSlicePlaneBytes = kHaloRows * kHaloPitch * kSliceBytes;
  static constexpr int kHaloCopyBytes = 2 * kSlicePlaneBytes;  // one copy: two slices
  static constexpr int kHaloBytes = kHaloCopies * kHaloCopyBytes;
  static constexpr int kStageBytes = kHaloBytes + kWeightChunkBytes;
  static constexpr int kPipelineBytes = kStages * kStageBytes;
  // + one "weights landed" mbarrier per stage
  static constexpr int kBarrierOffset = kPipelineBytes + kPooledBytes + kBiasBytes;
  static constexpr int kSmemBytes = kBarrierOffset + kStages * 8;
  static_assert(kSmemBytes == smem_bytes(kHaloPitch), "one sum");
  static_assert(kBarrierOffset % 8 == 0, "aligned mbarriers");
  static_assert(kWeightChunkBytes % 16 == 0 && kHaloBytes % 16 == 0, "bulk-copy sizes");
  using OneBlockTwin = WgmmaTile<OperandsT, kTileRowsT, kTileColsT, kNT, kShapeT, true, kPoolT>;
  // Whether the kernel has the scalar halo loads (kHaloScalars). Not the 16-bit two-blocks-
  // per-SM instance: 32 scalar loads in flight spilled at its 128-register cap (20 bytes), so
  // launch() runs such inputs on the one-block twin.
  static constexpr bool kScalarHalo = !(kMinBlocksPerSm == 2 && Operands::kChunk == 16);
  // Whether the tile writes channels-last outputs: not without a pool
  // (store_conv_channels_last) at the two-blocks-per-SM instances' register cap, whose
  // channels-last outputs launch() runs on the one-block twin. (The pooled tiles store from
  // shared memory, store_pooled_channels_last.)
  static constexpr bool kChannelsLastOut = kPool == 2 || kMinBlocksPerSm == 1;
};

// 8 x 32 conv pixels for wide images (the default problem), 16 x 16 for small ones (VGG block
// 5: 14 x 14), strips of four 8 x 8 squares where a row of squares is not a multiple of 4 long
// (VGG blocks 2-3: 14 and 7 squares); 128 output channels per block, or 64 when there are no
// more (wide and square tiles only: a strip's wider halo would not let two N = 64 blocks share
// an SM; 3xTF32 has N = 64 strips, one block per SM). kPool: 2 (the 2 x 2 / 2 pool) or 1.
template <class Operands, int kN, int kPool = 2>
using WideTile = WgmmaTile<Operands, 8, 32, kN, kBlockTile, false, kPool>;
template <class Operands, int kN, int kPool = 2>
using SquareTile = WgmmaTile<Operands, 16, 16, kN, kBlockTile, false, kPool>;
template <class Operands, int kN = 128, int kPool = 2>
using StripTile = WgmmaTile<Operands, 8, 32, kN, kStripTile, false, kPool>;
// The N = 64 tiles at one block per SM, without the two-blocks instances' 128-register cap:
// for layers of few tiles (kFewTiles), which have no second block for an SM, and for 16-bit
// inputs that need scalar halo loads (kScalarHalo). The 16-bit square tile is one already.
template <class Operands, int kPool = 2>
using OneBlockWideTile = typename WideTile<Operands, 64, kPool>::OneBlockTwin;
template <class Operands, int kPool = 2>
using OneBlockSquareTile =
    std::conditional_t<SquareTile<Operands, 64, kPool>::kMinBlocksPerSm == 1,
                       SquareTile<Operands, 64, kPool>,
                       typename SquareTile<Operands, 64, kPool>::OneBlockTwin>;

// How a halo unit's 4 pixels are read (4 elements: 16 bytes fp32, 8 bytes 16-bit).
enum HaloLoad : int {
  kHaloScalars = 0,       // 4 predicated element loads per channel: any strides
  kHaloRowVectors = 1,    // one vector per channel: rows in aligned runs of 4 (width % 4 == 0)
  kHaloPlaneVectors = 2,  // one vector per channel of 4 consecutive pixels of a contiguous
                          // image plane: one tile per image (plane_vectors_apply)
  kHaloPixelVectors = 3,  // one vector per pixel: the slice's channels, contiguous in
                          // channels-last memory (pixel_vectors_apply); a kernel of its own
};

// Division by a divisor fixed for a launch (1 <= d < 2^31) of a dividend 0 <= n < 2^31, as a
// multiply-high, an add and a shift (Granlund and Montgomery's round-up method): the tile loop
// splits a tile index into (image, row, column, channel block) twice per tile, and a layer
// of one chunk per tile (rgb_stem) runs that for every step. With s = ceil(log2 d) and
// m = floor(2^32 (2^s - d) / d) + 1, n / d = (umulhi(n, m) + n) >> s; the sum stays below
// 2^32 because umulhi(n, m) <= n < 2^31.
struct FastDivisor {
  int divisor = 1;
  uint32_t multiplier = 1;
  uint32_t shift = 0;
  FastDivisor() = default;
  explicit FastDivisor(int d) : divisor(d) {
    while ((int64_t(1) << shift) < d) ++shift;
    multiplier =
        uint32_t((uint64_t(1) << 32) * ((uint64_t(1) << shift) - uint64_t(d)) / uint64_t(d) + 1);
  }
  __host__ __device__ __forceinline__ int quotient(int n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t high = __umulhi(uint32_t(n), multiplier);
#else
    const uint32_t high = uint32_t((uint64_t(uint32_t(n)) * multiplier) >> 32);
#endif
    return int((high + uint32_t(n)) >> shift);
  }
  // n = q d + remainder: returns q, sets remainder.
  __host__ __device__ __forceinline__ int divide(int n, int& remainder) const {
    const int q = quotient(n);
    remainder = n - q * divisor;
    return q;
  }
};

struct WgmmaPlan {
  int tiles_h, tiles_w, channel_blocks, chunks;  // strips: tiles_h, tiles_w count squares
  int tiles;  // < 2^30 / chunks (checked on the host), so steps fit in 32 bits too
  HaloLoad halo_load;
  int plane_vectors;    // kHaloPlaneVectors: height * width / 4
  bool vector_weights;  // 16-byte loads of weight rows
  float* packed;        // [channel block][chunk] x Tile::kWeightChunkWords: the workspace, or
                        // the caller's copy packed ahead of time (kPrepacked kernels)
  int squares;  // strips: images x square rows x square cols (<= kMaxStripSquares)
  // Blocks per tile, each reducing a share of its chunks (the kSplitK instances: one cluster
  // per tile, partial sums added through distributed shared memory before the pooling); 1
  // elsewhere.
  int split;
  // p.channel_blocks, p.tiles_w, p.tiles_h and (strips) p.tiles_h * p.tiles_w as divisors
  // (make_plan_with_divisors: only plans that reach tile_origin have them).
  FastDivisor channel_blocks_div, tiles_w_div, tiles_h_div, image_squares_div;
  // The pooled tiles' vector stores: NCHW output rows in aligned runs of 4 (width % 4 == 0,
  // an aligned output: store_pooled), or channels-last pixels whose channels are whole
  // 16-byte vectors (store_pooled_channels_last).
  bool vector_out;
  // The output is channels-last (dense NHWC) rather than NCHW. (A flag, not strides: four more
  // int64 in the plan made the two-blocks-per-SM instances spill.)
  bool channels_last_out;
};

// Where one tile sits. A strip's squares [0, first_squares) are its first piece (at image,
// out_row0, out_col0, ...), squares [first_squares, squares) the second: the start of the next
// square row, staged from halo column 4 * first_vectors on.
struct TileOrigin {
  int64_t image;
  int channel0;
  int out_row0, out_col0;  // first output (pooled, or conv where the tile has no pool)
  int in_row0;             // input row of halo row 0
  int staged_col0;         // input column of halo column 0 (a multiple of 4)
  int col_shift;           // halo column of the tile's first input column, 0..3
  // Strips only (block tiles: first_squares = squares = 4, first_vectors = kHaloVectors).
  int squares;             // squares that exist (the last strip may have fewer than 4)
  int first_squares;       // squares in the first piece
  int first_vectors;       // halo vectors of the first piece
  int next_vectors;        // halo vectors of the second
  int64_t next_image;
  int next_out_row0, next_in_row0, next_staged_col0;  // the second piece's (its out_col0 is 0)
};

template <class Tile>
__host__ __device__ __forceinline__ TileOrigin tile_origin(const ConvPoolShape& s,
                                                           const WgmmaPlan& p, int tile) {
  TileOrigin o;
  int channel_block;
  tile = p.channel_blocks_div.divide(tile, channel_block);
  if constexpr (Tile::kStrip) {
    const int first = 4 * tile;  // its first square, < p.squares
    int rest, square_col;
    o.image = p.image_squares_div.divide(first, rest);
    const int square_row = p.tiles_w_div.divide(rest, square_col);
    o.channel0 = channel_block * Tile::kN;
    o.out_row0 = Tile::kSquareOut * square_row;
    o.out_col0 = Tile::kSquareOut * square_col;
    o.in_row0 = Tile::kPool * o.out_row0 - s.pad_h;
    const int in_col0 = Tile::kPool * o.out_col0 - s.pad_w;
    o.col_shift = ((in_col0 % 4) + 4) % 4;  // the same for every square (8 columns apart)
    o.staged_col0 = in_col0 - o.col_shift;
    o.squares = std::min(4, p.squares - first);
    o.first_squares = std::min(o.squares, p.tiles_w - square_col);
    const auto vectors = [&](int squares) {
      return squares > 0 ? (8 * squares + 2 + o.col_shift + 3) / 4 : 0;
    };
    o.first_vectors = vectors(o.first_squares);
    o.next_vectors = vectors(o.squares - o.first_squares);
    const bool same_image = square_row + 1 < p.tiles_h;
    o.next_image = same_image ? o.image : o.image + 1;
    o.next_out_row0 = same_image ? o.out_row0 + Tile::kSquareOut : 0;
    o.next_in_row0 = Tile::kPool * o.next_out_row0 - s.pad_h;
    o.next_staged_col0 = -s.pad_w - o.col_shift;
    return o;
  }
  o.squares = o.first_squares = 4;
  o.first_vectors = Tile::kHaloVectors;
  o.next_vectors = 0;
  int tile_col, tile_row;
  tile = p.tiles_w_div.divide(tile, tile_col);
  o.image = p.tiles_h_div.divide(tile, tile_row);
  o.channel0 = channel_block * Tile::kN;
  o.out_row0 = tile_row * Tile::kPooledRows;
  o.out_col0 = tile_col * Tile::kPooledCols;
  o.in_row0 = Tile::kPool * o.out_row0 - s.pad_h;
  const int in_col0 = Tile::kPool * o.out_col0 - s.pad_w;
  o.col_shift = ((in_col0 % 4) + 4) % 4;
  o.staged_col0 = in_col0 - o.col_shift;
  return o;
}

}  // namespace tiled_wgmma
