// Fused Conv2d -> ReLU -> MaxPool2d on Hopper's asynchronous warpgroup tensor-core
// instructions (wgmma, sm_90a), fp32 accumulation. One kernel template, three variants:
//   tiled_tf32_wgmma   float32 tensors, TF32 operands (m64nNk8 .tf32);
//   tiled_16bit_wgmma  float16 / bfloat16 tensors, 16-bit operands (m64nNk16 .f16 / .bf16), the
//                      result rounded to the 16-bit type once, at the store;
//   tiled_3xtf32_wgmma float32 tensors with allow_tf32 = False: 3xTF32, each operand staged as a
//                      TF32 big part and a small part, three products per multiply-add
//                      (Tf32SplitOperands: twice the halo and the weights, N = 64 tiles),
//                      the tensor cores' sums restarted every 8 chunks (flush_run).
// What differs between them lives in an operand-traits type (Tf32Operands, HalfOperands<E>,
// Tf32SplitOperands): the element type, the channels per chunk, the weight packing, the halo
// loads, the instruction and the bias / output conversions. Everything else is shared.
//
// Covers the fast-path geometry (fast_path_applies: 3x3 / stride 1 / dilation 1 convolution with
// any padding, 2x2 / stride 2 max-pool inside the conv output); the other variants in
// conv_relu_maxpool.cu and conv_relu_maxpool_half.cu cover everything else.
//
// Implicit GEMM per block tile: M = 256 conv pixels, N = 128 output channels, K = input channels
// x 9 taps, consumed in chunks of 8 (TF32) or 16 (16-bit) channels: one wgmma K per tap. Both
// operands are read by the tensor cores straight from shared memory through wgmma matrix
// descriptors (no swizzle), so the staged layouts are "K-major": the channels of a pixel or of a
// weight row side by side in 16-byte units, a "channel slice" of 4 fp32 or 8 16-bit channels.
// A chunk is two slices (the two core matrices of one wgmma's K), so the staged bytes are the
// same for both element types:
//   input halo   [channel slice 2][halo row][halo col][16 bytes], rows kHaloPitch slots apart
//                (one more than the columns where shared memory allows: no bank conflicts)
//   weights      [tap 9][channel slice 2][out channel 128][16 bytes]
// A wgmma core matrix is 8 rows x 16 bytes. For the weights the 8 rows are 8 output channels
// (contiguous). For the input they are 8 consecutive pixels of one conv row, which are 8
// consecutive 16-byte halo columns wherever the row starts; so one M = 64 operand is an 8 x 8
// pixel square (8 core matrices one halo row apart: the descriptor's stride), and a tap (r, q)
// only moves the descriptor's start address by r halo rows and q columns. No im2col copy.
//
// Loading. The weights are re-laid out once per call, at the start of the same launch: every
// block writes its share of a scratch copy in exactly the staged layout, chunk after chunk, and
// a grid-wide barrier (cooperative launch) follows (given weights packed ahead of time by
// pack_weights_kernel, the kPrepacked twin instances skip both; a large weight over few blocks
// is packed that way too, by a launch of its own on every SM: packs_apart); from then on a
// chunk's weights are one contiguous 36 KB block that thread 0 moves with one bulk copy
// (cp.async.bulk), which completes a per-stage mbarrier that every thread waits on before the
// stage's wgmmas (per-thread 16-byte cp.async copies cost 3-13% more on the H200, in
// docs/PERF.md). The input halo is transposed on the way in: each thread loads one slice's
// channels x 4 columns two steps ahead
// (TF32: 4 channels as 16-byte row loads; 16-bit: 8 channels as 8-byte row loads, so the halo's
// geometry, its thread mapping and the 16 staging registers stay those of the TF32 kernel) and
// writes them to shared memory, as 4 pixels x one slice, one step ahead. Three shared stages.
// Four ways to load those 4 columns (HaloLoad): one vector per channel when input rows split
// into aligned runs of 4; for a tile that covers whole images (VGG block 5's 14 x 14), one vector
// of 4 consecutive pixels of the contiguous image plane, which may wrap to the next row (the
// halo's border then holds zeros written once, at kernel start); for channels-last inputs, one
// 16-byte vector per pixel (a slice's channels are contiguous there: already the staged layout,
// no transpose), in kernel instances of their own; else 4 predicated scalars (16-bit inputs
// that need them on a two-blocks-per-SM tile run on its one-block twin: kScalarHalo).
//
// Block: 2 warpgroups; the tile is four 8 x 8 pixel squares (8 x 32 or 16 x 16 conv pixels, or
// a strip: four consecutive squares of the batch's rows of squares, which may go on at the
// start of the next row, staged as two pieces side by side; whichever wastes least of the
// output), two per warpgroup, each one wgmma per tap, N = 128 output channels (64 when the
// layer has no more, or when its 128-channel tiles are few: kFewTiles): 128 (64) fp32
// accumulators per thread; their layout is the same for k8 TF32 and k16 16-bit wgmmas.
// Persistent: the grid is as many blocks as fit at once and each block walks its tiles' chunks
// as one flat sequence, so the next tile's first chunks load under the current tile's last
// ones. Split reductions (kSplitK): where a layer's tiles are too few for the SMs and its
// reduction is long (VGG-16's blocks 3-5 at batch 1), a cluster of 2-8 blocks shares each
// tile, each block a share of its chunks; the partial sums meet in distributed shared memory
// before the pooling (reduce_split; the split: split_for). Epilogue per tile: wgmma
// accumulator rows are pixels, so the 2 x 2 pool is a max of two registers and one shuffle
// (lane ^ 4) into shared memory, then out coalesced (runs of 4 outputs as one vector where the
// output rows allow: p.vector_out), with bias and ReLU applied after the max
// (and, for 16-bit outputs, the one rounding: rounding is monotonic, so the rounded maximum is
// the maximum of the rounded values).
#include <cuda_runtime.h>

#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "conv_pool_16bit.cuh"
#include "conv_pool_device.cuh"
#include "conv_pool_operands.h"
#include "conv_pool_wgmma.cuh"
#include "conv_relu_maxpool_wgmma.h"

namespace {

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
          bool kOneBlockTwinT = false>
struct WgmmaTile {
  using Operands = OperandsT;             // Tf32Operands or HalfOperands<E>
  static constexpr int kTileRows = kTileRowsT, kTileCols = kTileColsT;
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
  static constexpr int kPooledRows = kTileRows / 2, kPooledCols = kTileCols / 2;
  // + 4 floats: the epilogue's stores of one warp (8 channels x 4 columns) hit 32 banks.
  static constexpr int kPooledPlane = kPooledRows * kPooledCols + 4;
  static constexpr int kPooledBytes = kN * kPooledPlane * 4;
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
  using OneBlockTwin = WgmmaTile<OperandsT, kTileRowsT, kTileColsT, kNT, kShapeT, true>;
  // Whether the kernel has the scalar halo loads (kHaloScalars). Not the 16-bit two-blocks-
  // per-SM instance: 32 scalar loads in flight spilled at its 128-register cap (20 bytes), so
  // launch() runs such inputs on the one-block twin.
  static constexpr bool kScalarHalo = !(kMinBlocksPerSm == 2 && Operands::kChunk == 16);
};

// 8 x 32 conv pixels for wide images (the default problem), 16 x 16 for small ones (VGG block
// 5: 14 x 14), strips of four 8 x 8 squares where a row of squares is not a multiple of 4 long
// (VGG blocks 2-3: 14 and 7 squares); 128 output channels per block, or 64 when there are no
// more (wide and square tiles only: a strip's wider halo would not let two N = 64 blocks share
// an SM; 3xTF32 has N = 64 strips, one block per SM).
template <class Operands, int kN>
using WideTile = WgmmaTile<Operands, 8, 32, kN>;
template <class Operands, int kN>
using SquareTile = WgmmaTile<Operands, 16, 16, kN>;
template <class Operands, int kN = 128>
using StripTile = WgmmaTile<Operands, 8, 32, kN, kStripTile>;
// The N = 64 tiles at one block per SM, without the two-blocks instances' 128-register cap:
// for layers of few tiles (kFewTiles), which have no second block for an SM, and for 16-bit
// inputs that need scalar halo loads (kScalarHalo). The 16-bit square tile is one already.
template <class Operands>
using OneBlockWideTile = typename WideTile<Operands, 64>::OneBlockTwin;
template <class Operands>
using OneBlockSquareTile =
    std::conditional_t<SquareTile<Operands, 64>::kMinBlocksPerSm == 1, SquareTile<Operands, 64>,
                       typename SquareTile<Operands, 64>::OneBlockTwin>;

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
  // Output rows in aligned runs of 4 (width % 4 == 0, an aligned output): the epilogue stores
  // runs of 4 pooled outputs (store_pooled).
  bool vector_out;
};

// Where one tile sits. A strip's squares [0, first_squares) are its first piece (at image,
// out_row0, out_col0, ...), squares [first_squares, squares) the second: the start of the next
// square row, staged from halo column 4 * first_vectors on.
struct TileOrigin {
  int64_t image;
  int channel0;
  int out_row0, out_col0;  // first pooled output
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
    o.out_row0 = 4 * square_row;
    o.out_col0 = 4 * square_col;
    o.in_row0 = 2 * o.out_row0 - s.pad_h;
    const int in_col0 = 2 * o.out_col0 - s.pad_w;
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
    o.next_out_row0 = same_image ? o.out_row0 + 4 : 0;
    o.next_in_row0 = 2 * o.next_out_row0 - s.pad_h;
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
  o.in_row0 = 2 * o.out_row0 - s.pad_h;
  const int in_col0 = 2 * o.out_col0 - s.pad_w;
  o.col_shift = ((in_col0 % 4) + 4) % 4;
  o.staged_col0 = in_col0 - o.col_shift;
  return o;
}

// ---------------------------------------------------------------------------
// Cluster and global-memory wrappers (PTX ISA 7.8+, sm_90); the wgmma, proxy-fence, mbarrier
// and bulk-copy ones are in conv_pool_wgmma.cuh.

// Thread block clusters (PTX ISA 7.8+, sm_90): this block's rank in its cluster and the
// cluster's index in the grid (x: the kernels launch 1-D clusters); a barrier over the
// cluster's threads in two halves (the release orders this thread's shared-memory writes
// before the other blocks' reads after their wait); the address in the shared memory of the
// cluster's block `rank` of what this block's `p` points to, and 16 bytes read from there.
__device__ __forceinline__ int cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return int(rank);
}
__device__ __forceinline__ int cluster_index() {
  uint32_t index;
  asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(index));
  return int(index);
}
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_shared_address(const void* p, int rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(remote)
               : "r"(shared_address(p)), "r"(rank));
  return remote;
}
// (Volatile, so that it stays between the cluster barriers; no memory clobber, so that the
// compiler may keep several in flight.)
__device__ __forceinline__ float4 load_cluster_shared(uint32_t address) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
      : "r"(address));
  return v;
}

// 16 bytes stored to, added into (at L2; no value back) and read back from global memory, all
// at gpu scope (relaxed), so that the load sees this thread's earlier store and reductions
// there rather than a stale L1 line.
__device__ __forceinline__ void store_relaxed(float4* p, const float4& v) {
  asm volatile("st.relaxed.gpu.global.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x),
               "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
__device__ __forceinline__ void red_add(float4* p, const float4& v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y),
               "f"(v.z), "f"(v.w)
               : "memory");
}
__device__ __forceinline__ float4 load_relaxed(const float4* p) {
  float4 v;
  asm volatile("ld.relaxed.gpu.global.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// ---------------------------------------------------------------------------
// Operand traits: what the TF32 and the 16-bit kernels do differently.
//   Element        x, weight, bias and out in global memory (float, or the raw 16-bit word)
//   kChunk         input channels per stage = K of one wgmma = 2 slices
//   kSliceChannels channels per 16-byte slice
//   RowVector      4 consecutive columns of one channel (one halo load)
//   Pixel          one staged 16-byte slice of a pixel or a weight row

// Where pixel j (0..3) of a halo unit goes, in 16-byte slots from the unit's first: j, plus
// `skip` for the pixels from `first_wrapped` on (a plane vector that crosses into the next image
// row continues at the next halo row). Row and scalar units never wrap (first_wrapped = 4).
struct PixelWrap {
  int first_wrapped, skip;
  __device__ __forceinline__ int slot(int j) const { return j >= first_wrapped ? j + skip : j; }
};

struct Tf32Operands {
  using Element = float;
  static constexpr bool kSplit = false;  // 3xTF32: Tf32SplitOperands
  static constexpr int kChunk = 8;
  static constexpr int kSliceChannels = 4;
  using RowVector = float4;
  using Pixel = float4;

  static bool vector_input(const ConvPoolOperands& ops, const ConvPoolShape& s) {
    return vectorizable_input(ops, s);
  }
  static __device__ __forceinline__ const float* input(const ConvPoolOperands& ops) {
    return ops.x;
  }
  static __device__ __forceinline__ const float* weight(const ConvPoolOperands& ops) {
    return ops.weight;
  }
  static __device__ __forceinline__ float* output(const ConvPoolOperands& ops) { return ops.out; }
  static __device__ __forceinline__ float bias(const ConvPoolOperands& ops, int channel) {
    return __ldg(ops.bias + int64_t(channel) * ops.bias_stride);
  }
  static __device__ __forceinline__ float to_output(float v) { return v; }
  // 4 consecutive outputs, 16-byte aligned (store_pooled).
  static __device__ __forceinline__ void store_run(float* out, float a, float b, float c,
                                                   float d) {
    *reinterpret_cast<float4*>(out) = make_float4(a, b, c, d);
  }
  static __device__ __forceinline__ float load(const float* p) { return __ldg(p); }
  static __device__ __forceinline__ float4 load_row(const float* p) {
    return __ldg(reinterpret_cast<const float4*>(p));
  }
  static __device__ __forceinline__ float4 zero_row() { return make_float4(0.f, 0.f, 0.f, 0.f); }
  // fp32: a pixel vector (4 channels) is the same 16-byte load as a row vector (4 columns).
  static __device__ __forceinline__ float4 load_pixel(const float* p) { return load_row(p); }
  static __device__ __forceinline__ float4 zero_pixel() { return zero_row(); }
  static __device__ __forceinline__ float4 make_row(const float (&v)[4]) {
    return make_float4(v[0], v[1], v[2], v[3]);
  }
  // pack_weights' row: element f (= channel i * 9 + tap) of a weight row's slice is word f.
  static __device__ __forceinline__ void put(uint32_t (&row)[36], int f, float v) {
    row[f] = __float_as_uint(v);
  }
  // The slice's channels under `tap` -> the tap's staged 16 bytes.
  static __device__ __forceinline__ float4 weight_slice(const uint32_t (&row)[36], int tap) {
    return make_float4(__uint_as_float(row[tap]), __uint_as_float(row[9 + tap]),
                       __uint_as_float(row[18 + tap]), __uint_as_float(row[27 + tap]));
  }
  // 4 channels x 4 columns (one row vector per channel) -> 4 pixels x 4 channels, pixel j at
  // dst[wrap.slot(j)].
  static __device__ __forceinline__ void store_pixels(const float4 (&c)[4], float4* dst,
                                                      const PixelWrap& wrap) {
    dst[wrap.slot(0)] = make_float4(c[0].x, c[1].x, c[2].x, c[3].x);
    dst[wrap.slot(1)] = make_float4(c[0].y, c[1].y, c[2].y, c[3].y);
    dst[wrap.slot(2)] = make_float4(c[0].z, c[1].z, c[2].z, c[3].z);
    dst[wrap.slot(3)] = make_float4(c[0].w, c[1].w, c[2].w, c[3].w);
  }
  template <int kCount>
  static __device__ __forceinline__ void mma(float (&d)[kCount], uint64_t a, uint64_t b,
                                             bool accumulate) {
    WgmmaSS<Float32>::mma(d, a, b, accumulate);
  }
};

// 3xTF32 (tiled_3xtf32_wgmma: float32 with allow_tf32 = False). Each operand x is staged as a
// big part (x itself: the tensor cores read its top 19 bits, a truncation to TF32) and a small
// part, and a product is big * big' + small * big' + big * small' (the dropped small * small'
// is below 2^-20 |x y|). small = c - trunc(c) + c * 2^-30 with c = x clamped to +-FLT_MAX
// (max.NaN / min.NaN, as split_tf32 in conv_relu_maxpool.cu): finite for x = +-inf, with x's
// sign, and never zero where x is not (the 2^-30 term, an error below 2^-29 |x y| per
// product), so that a cross term with an infinite other operand is an infinity of the sign
// big * big' has, not the NaN of inf * 0; a zero x gives zeros, as fp32 would (0 * inf is NaN
// there too). A NaN becomes the canonical NaN in both parts (min.NaN), which the truncation
// keeps even where x's own payload lies in the 13 bits the big part drops.
struct Tf32SplitOperands : Tf32Operands {
  static constexpr bool kSplit = true;
  static __device__ __forceinline__ void split(float x, float& big, float& small) {
    const float clamped = clamp_to_finite(x);
    asm("min.NaN.f32 %0, %1, 0f7F800000;" : "=f"(big) : "f"(x));
    small = fmaf(clamped, 0x1p-30f,
                 clamped - __uint_as_float(__float_as_uint(clamped) & 0xffffe000u));
  }
  static __device__ __forceinline__ void split(const float4& x, float4& big, float4& small) {
    split(x.x, big.x, small.x);
    split(x.y, big.y, small.y);
    split(x.z, big.z, small.z);
    split(x.w, big.w, small.w);
  }
  // The small halo times the big weights (b: the big rows, kN on from the small ones; N = 64),
  // into the first half of the N = 128 accumulators, beside big halo * small weights. Not into
  // the big * big half: the tensor cores add into fp32 accumulators with an error that grows
  // with each wgmma added to a sum and scales with the sum (not with the terms added), so that
  // half gets one wgmma per tap and the cross terms accumulate in a sum ~2^-11 its size
  // (docs/PERF.md). (Into the second half, ptxas waited for every wgmma before the next:
  // a chain of wgmmas whose accumulators overlap must start at the same register.)
  static __device__ __forceinline__ void mma_cross(float (&d)[64], uint64_t a, uint64_t b,
                                                   bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WGMMA_N64_ASM("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32", "1, 1");
#endif
  }
};

// Two 16-bit values in one 32-bit word, `low` at the lower address (little endian).
__device__ __forceinline__ uint32_t pair(uint16_t low, uint16_t high) {
  return uint32_t(low) | (uint32_t(high) << 16);
}

template <class E>
struct HalfOperands : WgmmaSS<E> {  // its mma(): conv_pool_wgmma.cuh
  using Element = uint16_t;
  static constexpr bool kSplit = false;
  static constexpr int kChunk = 16;
  static constexpr int kSliceChannels = 8;
  using RowVector = uint2;  // columns 0, 1 in x (low, high half), 2, 3 in y
  using Pixel = uint4;      // channels 2i, 2i + 1 in word i (low, high half)

  static bool vector_input(const ConvPoolOperands& ops, const ConvPoolShape& s) {
    return vectorizable_input_16bit(ops, s);
  }
  static __device__ __forceinline__ const uint16_t* input(const ConvPoolOperands& ops) {
    return ops.x16;
  }
  static __device__ __forceinline__ const uint16_t* weight(const ConvPoolOperands& ops) {
    return ops.weight16;
  }
  static __device__ __forceinline__ uint16_t* output(const ConvPoolOperands& ops) {
    return ops.out16;
  }
  static __device__ __forceinline__ float bias(const ConvPoolOperands& ops, int channel) {
    return E::to_float(__ldg(ops.bias16 + int64_t(channel) * ops.bias_stride));
  }
  static __device__ __forceinline__ uint16_t to_output(float v) { return E::from_float(v); }
  // 4 consecutive outputs, 8-byte aligned (store_pooled).
  static __device__ __forceinline__ void store_run(uint16_t* out, float a, float b, float c,
                                                   float d) {
    *reinterpret_cast<uint2*>(out) = make_uint2(pair(to_output(a), to_output(b)),
                                                pair(to_output(c), to_output(d)));
  }
  static __device__ __forceinline__ uint16_t load(const uint16_t* p) { return __ldg(p); }
  static __device__ __forceinline__ uint2 load_row(const uint16_t* p) {
    return __ldg(reinterpret_cast<const uint2*>(p));
  }
  static __device__ __forceinline__ uint2 zero_row() { return make_uint2(0u, 0u); }  // +0.0
  static __device__ __forceinline__ uint4 load_pixel(const uint16_t* p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
  }
  static __device__ __forceinline__ uint4 zero_pixel() { return make_uint4(0u, 0u, 0u, 0u); }
  static __device__ __forceinline__ uint2 make_row(const uint16_t (&v)[4]) {
    return make_uint2(pair(v[0], v[1]), pair(v[2], v[3]));
  }
  // pack_weights' row: element f (= channel i * 9 + tap) is half f % 2 of word f / 2, as in
  // memory. Called for f = 0, 1, 2, ... in order.
  static __device__ __forceinline__ void put(uint32_t (&row)[36], int f, uint16_t v) {
    row[f / 2] = f % 2 == 0 ? uint32_t(v) : row[f / 2] | (uint32_t(v) << 16);
  }
  // The slice's channels under `tap` -> the tap's staged 16 bytes: word j pairs channels 2 j
  // and 2 j + 1, elements f = 18 j + tap and f + 9 (opposite halves of their words).
  static __device__ __forceinline__ uint4 weight_slice(const uint32_t (&row)[36], int tap) {
    uint32_t word[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int f = 18 * j + tap;
      // __byte_perm selectors: low half of the first word + high half of the second, or the
      // high half of the first + the low half of the second.
      word[j] = __byte_perm(row[f / 2], row[(f + 9) / 2], f % 2 == 0 ? 0x7610 : 0x5432);
    }
    return make_uint4(word[0], word[1], word[2], word[3]);
  }
  // 8 channels x 4 columns -> 4 pixels x 8 channels, pixel j at dst[wrap.slot(j)]. Pixel j's
  // word i pairs column j of channels 2i and 2i + 1: the low (j even) or high (j odd) halves of
  // the x (j < 2) or y words.
  static __device__ __forceinline__ void store_pixels(const uint2 (&c)[8], uint4* dst,
                                                      const PixelWrap& wrap) {
    constexpr uint32_t kLowHalves = 0x5410, kHighHalves = 0x7632;  // __byte_perm selectors
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t selector = j % 2 == 0 ? kLowHalves : kHighHalves;
      uint32_t word[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        word[i] = j < 2 ? __byte_perm(c[2 * i].x, c[2 * i + 1].x, selector)
                        : __byte_perm(c[2 * i].y, c[2 * i + 1].y, selector);
      dst[wrap.slot(j)] = make_uint4(word[0], word[1], word[2], word[3]);
    }
  }
};

// ---------------------------------------------------------------------------
// Loading one chunk: global -> registers (load), registers -> shared (store).

// Weights -> workspace, once per launch. Work item = (channel block, chunk, channel slice, out
// channel): one weight row's slice channels x 9 taps (36 fp32 or 72 16-bit values) in, one
// 16-byte vector per tap out; consecutive threads write consecutive vectors.
template <class Tile>
__device__ __forceinline__ void pack_weights(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                             const WgmmaPlan& p) {
  using Operands = typename Tile::Operands;
  using Element = typename Operands::Element;
  constexpr int kN = Tile::kN;
  constexpr int kSliceChannels = Operands::kSliceChannels;
  constexpr int kRowElements = kSliceChannels * 9;  // 36 fp32 or 72 16-bit: 144 bytes
  const int items = p.channel_blocks * p.chunks * 2 * kN;
  for (int item = blockIdx.x * kThreads + threadIdx.x; item < items; item += gridDim.x * kThreads) {
    const int n = item % kN;
    const int slice = (item / kN) % 2;
    const int block_chunk = item / (2 * kN);  // channel block * chunks + chunk
    const int chunk = block_chunk % p.chunks;
    const int k = (block_chunk / p.chunks) * kN + n;
    const int c = chunk * Operands::kChunk + kSliceChannels * slice;
    const int valid_channels =
        k < s.out_channels ? std::min(std::max(s.in_channels - c, 0), kSliceChannels) : 0;
    // Element i * 9 + tap (channel c + i under tap) of the row, in memory order, as 36 words.
    uint32_t row[36];
    if (p.vector_weights) {
      // Contiguous (K, C, 3, 3) with C * 9 a multiple of kSliceChannels, so C is one too: the
      // row's values start 16-byte aligned and are all valid or all past the last channel.
      const uint4* src = reinterpret_cast<const uint4*>(Operands::weight(ops) +
                                                        (int64_t(k) * s.in_channels + c) * 9);
#pragma unroll
      for (int v = 0; v < 9; ++v) {
        const uint4 u = valid_channels > 0 ? __ldg(src + v) : make_uint4(0u, 0u, 0u, 0u);
        row[4 * v] = u.x;
        row[4 * v + 1] = u.y;
        row[4 * v + 2] = u.z;
        row[4 * v + 3] = u.w;
      }
    } else {
      const Element* src = Operands::weight(ops) + int64_t(k) * ops.weight_stride[0];
#pragma unroll
      for (int f = 0; f < kRowElements; ++f) {
        const int i = f / 9, tap = f % 9;
        Operands::put(row, f,
                      i < valid_channels
                          ? Operands::load(src + int64_t(c + i) * ops.weight_stride[1] +
                                           (tap / 3) * ops.weight_stride[2] +
                                           (tap % 3) * ops.weight_stride[3])
                          : Element(0));
      }
    }
    using Pixel = typename Operands::Pixel;
    Pixel* dst = reinterpret_cast<Pixel*>(p.packed) +
                 int64_t(block_chunk) * (Tile::kWeightChunkWords / 4);
#pragma unroll
    for (int tap = 0; tap < 9; ++tap) {
      if constexpr (Tile::kSplit) {  // small part at row n, big at row kN + n
        Pixel* slot = dst + (tap * 2 + slice) * Tile::kWeightN + n;
        Operands::split(Operands::weight_slice(row, tap), slot[kN], slot[0]);
      } else {
        dst[(tap * 2 + slice) * kN + n] = Operands::weight_slice(row, tap);
      }
    }
  }
}

// The input halo of one chunk, one unit per thread: the slice's channels x 4 pixels, loaded
// as one row vector per channel and stored as 4 pixels, or (kPixelVectors: channels-last
// input) loaded and stored as 4 pixels.
template <class Operands, bool kPixelVectors>
struct HaloUnit {
  typename Operands::RowVector channel[Operands::kSliceChannels];
};
template <class Operands>
struct HaloUnit<Operands, true> {
  typename Operands::Pixel pixel[4];
};

// Where one step's loads come from, for this thread, advanced one step at a time: pointer
// increments inside a tile, the tile's geometry (integer divisions) only when a tile starts.
// kPixelVectors: the kernel instance for p.halo_load == kHaloPixelVectors, which has no other
// load (a runtime branch to it in the one kernel made the N = 64 instance spill at its
// 128-register cap).
template <class Tile, bool kPixelVectors>
struct StepLoader {
  using Operands = typename Tile::Operands;
  using Element = typename Operands::Element;
  int unit;            // this thread's halo unit, or -1: threads past the units load weights
                       // only
  int halo_offset;     // the unit's first pixel's 16-byte slot in a stage
  int tile, chunk;     // the step being loaded
  int h, w0;           // input row and first column of the unit
  int channel;         // input channel of the unit's first row vector or pixel vector
  const Element* halo;   // (channel, h, w0)
  const float* weights;  // the chunk's packed weights

  __device__ __forceinline__ StepLoader(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                        const WgmmaPlan& p, int first_tile) {
    const int units = !kPixelVectors && p.halo_load == kHaloPlaneVectors
                          ? 2 * p.plane_vectors
                          : Tile::kHaloUnits;
    unit = int(threadIdx.x) < units ? int(threadIdx.x) : -1;
    tile = first_tile;
    start_tile(ops, s, p);
  }

  // Split reductions: the first tile's loads start at chunk `first` (< p.chunks).
  __device__ __forceinline__ void skip_chunks(const ConvPoolOperands& ops, int first) {
    chunk = first;
    halo += int64_t(first) * Operands::kChunk * ops.x_stride[1];
    channel += first * Operands::kChunk;
    weights += int64_t(first) * Tile::kWeightChunkWords;
  }

  __device__ __forceinline__ void start_tile(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                             const WgmmaPlan& p) {
    chunk = 0;
    const TileOrigin o = tile_origin<Tile>(s, p, tile);
    const int u = max(unit, 0);  // threads without a unit compute unit 0's (unused) geometry
    int slice, halo_row, halo_col;
    int64_t image = o.image;
    if (!kPixelVectors && p.halo_load == kHaloPlaneVectors) {
      // Unit = (slice, 4 consecutive pixels of the plane); the first at input (h, w0). Every
      // pixel of the image has a halo slot (plane_vectors_apply).
      slice = u / p.plane_vectors;
      const int pixel = 4 * (u - slice * p.plane_vectors);
      h = pixel / s.in_width;
      w0 = pixel - h * s.in_width;
      halo_row = h - o.in_row0;
      halo_col = w0 - o.staged_col0;
    } else {
      // Unit = (slice, halo row, 4-column vector). Pixel vectors: the slice varies fastest, so
      // that two neighbouring threads read a pixel's 8 (fp32) or 16 (16-bit) channels of the
      // chunk, 32 contiguous bytes, together.
      int rest;
      if (kPixelVectors) {
        slice = u % 2;
        rest = u / 2;
      } else {
        slice = u / (Tile::kHaloRows * Tile::kHaloVectors);
        rest = u - slice * (Tile::kHaloRows * Tile::kHaloVectors);
      }
      halo_row = rest / Tile::kHaloVectors;
      const int vector = rest - halo_row * Tile::kHaloVectors;
      halo_col = 4 * vector;
      h = o.in_row0 + halo_row;
      w0 = o.staged_col0 + halo_col;
      if (Tile::kStrip && vector >= o.first_vectors) {
        // The strip's second piece, or past both: a row outside every image (zeros, no load)
        // in halo columns that no square reads.
        const int next_vector = vector - o.first_vectors;
        image = o.next_image;
        h = next_vector < o.next_vectors ? o.next_in_row0 + halo_row : -1;
        w0 = o.next_staged_col0 + 4 * next_vector;
      }
    }
    halo_offset = (slice * Tile::kHaloRows + halo_row) * Tile::kHaloPitch + halo_col;
    channel = Operands::kSliceChannels * slice;
    halo = Operands::input(ops) + image * ops.x_stride[0] + int64_t(channel) * ops.x_stride[1] +
           int64_t(h) * ops.x_stride[2] + int64_t(w0) * ops.x_stride[3];
    weights = p.packed + int64_t(o.channel0 / Tile::kN) * p.chunks * Tile::kWeightChunkWords;
  }

  __device__ __forceinline__ void advance(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                          const WgmmaPlan& p) {
    if (++chunk < p.chunks) {
      halo += Operands::kChunk * ops.x_stride[1];
      channel += Operands::kChunk;
      weights += Tile::kWeightChunkWords;
    } else {
      tile += gridDim.x;
      start_tile(ops, s, p);
    }
  }

  // The chunk's packed weights (one contiguous block) -> the stage: one bulk copy, issued by
  // thread 0; `landed` completes its phase when the bytes are in shared memory.
  __device__ __forceinline__ void copy_weights(unsigned char* stage, uint64_t* landed) const {
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(landed, Tile::kWeightChunkBytes);
      bulk_copy_to_shared(stage + Tile::kHaloBytes, weights, Tile::kWeightChunkBytes, landed);
    }
  }

  __device__ __forceinline__ void load_halo(HaloUnit<Operands, kPixelVectors>& staged,
                                            const ConvPoolOperands& ops, const ConvPoolShape& s,
                                            const WgmmaPlan& p) const {
    if (unit < 0) return;
    const bool row_valid = h >= 0 && h < s.in_height;
    if constexpr (kPixelVectors) {
      // The slice's channels are all below in_channels or all past them (pixel_vectors_apply).
      const bool valid = row_valid && channel < s.in_channels;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const bool inside = valid && w0 + j >= 0 && w0 + j < s.in_width;
        staged.pixel[j] = inside ? Operands::load_pixel(halo + j * ops.x_stride[3])
                                 : Operands::zero_pixel();
      }
    } else if (!Tile::kScalarHalo || p.halo_load != kHaloScalars) {
      // Row vectors: width % 4 == 0 and w0 % 4 == 0, so the vector is wholly inside the row or
      // outside. Plane vectors: (h, w0) is inside the image. (No scalars in this instance:
      // launch() does not run it on them.)
      const bool valid = row_valid && w0 >= 0 && w0 < s.in_width;
#pragma unroll
      for (int e = 0; e < Operands::kSliceChannels; ++e)
        staged.channel[e] = (valid && channel + e < s.in_channels)
                                ? Operands::load_row(halo + e * ops.x_stride[1])
                                : Operands::zero_row();
    } else {
#pragma unroll
      for (int e = 0; e < Operands::kSliceChannels; ++e) {
        const bool valid = row_valid && channel + e < s.in_channels;
        Element v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const bool inside = valid && w0 + j >= 0 && w0 + j < s.in_width;
          v[j] = inside ? Operands::load(halo + e * ops.x_stride[1] + j * ops.x_stride[3])
                        : Element(0);
        }
        staged.channel[e] = Operands::make_row(v);
      }
    }
  }

  // (Stores the previous step's loads: the unit's slots and, for plane vectors, where its
  // pixels wrap are the same for every tile, so the loader's state at the next step serves.)
  __device__ __forceinline__ void store_halo_unit(const HaloUnit<Operands, kPixelVectors>& staged,
                                                  unsigned char* stage, const ConvPoolShape& s,
                                                  const WgmmaPlan& p) const {
    if (unit < 0) return;
    typename Operands::Pixel* dst =
        reinterpret_cast<typename Operands::Pixel*>(stage) + halo_offset;
    // 3xTF32: the big parts, and the small ones one halo copy on.
    constexpr int kSmall = Tile::kHaloCopyBytes / kSliceBytes;
    if constexpr (kPixelVectors) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if constexpr (Tile::kSplit) {
          Operands::split(staged.pixel[j], dst[j], dst[kSmall + j]);
        } else {
          dst[j] = staged.pixel[j];
        }
      }
    } else {
      // Computed here rather than kept through the main loop: two registers fewer there.
      const PixelWrap wrap = p.halo_load == kHaloPlaneVectors
                                 ? PixelWrap{s.in_width - w0, Tile::kHaloPitch - s.in_width}
                                 : PixelWrap{4, 0};
      if constexpr (Tile::kSplit) {
        typename Operands::RowVector big[Operands::kSliceChannels],
            small[Operands::kSliceChannels];
#pragma unroll
        for (int e = 0; e < Operands::kSliceChannels; ++e)
          Operands::split(staged.channel[e], big[e], small[e]);
        Operands::store_pixels(big, dst, wrap);
        Operands::store_pixels(small, dst + kSmall, wrap);
      } else {
        Operands::store_pixels(staged.channel, dst, wrap);
      }
    }
  }
};

// The shared-memory descriptors of one chunk's tap (0, 0) operands: a tap only adds a
// constant to their start address fields (16-byte units; the sum stays inside shared memory,
// so the field cannot overflow).
struct ChunkDescriptors {
  uint64_t a0[2];  // this warpgroup's two 8 x 8 pixel squares
  uint64_t b0;     // the chunk's weights
};

// square_base[m]: shared address of square m's tap (0, 0) operand in stage 0; stage: the
// stage's byte offset.
template <class Tile>
__device__ __forceinline__ ChunkDescriptors chunk_descriptors(const uint32_t (&square_base)[2],
                                                              uint32_t weights_base,
                                                              uint32_t stage) {
  ChunkDescriptors d;
  d.b0 = matrix_descriptor(weights_base + stage, Tile::kWeightN * kSliceBytes, 8 * kSliceBytes);
#pragma unroll
  for (int m = 0; m < 2; ++m)
    d.a0[m] = matrix_descriptor(square_base[m] + stage, Tile::kSlicePlaneBytes,
                                Tile::kHaloPitch * kSliceBytes);
  return d;
}

// The wgmmas of taps [kFirstTap, kEndTap) of one chunk for this warpgroup: one per tap and
// 8 x 8 pixel square (3xTF32: two, the big halo times the small and big weights side by side,
// then the small halo times the big weights). The first chunk of a tile starts the
// accumulators from zero.
template <class Tile, int kFirstTap, int kEndTap>
__device__ __forceinline__ void mma_taps(float (&acc)[2][Tile::kAccRegs],
                                         const ChunkDescriptors& d, bool first_chunk) {
#pragma unroll
  for (int tap = kFirstTap; tap < kEndTap; ++tap) {
    const int r = tap / 3, q = tap % 3;
    const uint64_t b = d.b0 + uint64_t(tap * Tile::kWeightTapBytes / kSliceBytes);
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const uint64_t a = d.a0[m] + uint64_t(r * Tile::kHaloPitch + q);
      Tile::Operands::mma(acc[m], a, b, !(first_chunk && tap == 0));
      if constexpr (Tile::kSplit)
        Tile::Operands::mma_cross(acc[m], a + uint64_t(Tile::kHaloCopyBytes / kSliceBytes),
                                  b + uint64_t(Tile::kN), true);
    }
  }
}

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
  int out_row = o.out_row0 + pooled_row, out_col = o.out_col0 + pooled_col;
  int64_t image = o.image;
  if constexpr (Tile::kStrip) {
    const int square = pooled_col / 4;
    if (square >= o.squares) return;
    if (square >= o.first_squares) {  // the second piece: the next square row, from column 0
      image = o.next_image;
      out_row = o.next_out_row0 + pooled_row;
      out_col = pooled_col - 4 * o.first_squares;
    }
  }
  if (out_row >= s.out_height || out_col >= s.out_width) return;
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

// 3xTF32 runs. The tensor cores add each wgmma's products into the fp32 accumulators with an
// error that scales with the running sum, so a tile's error grew with its chunks (docs/PERF.md,
// the 3xTF32 error). Every kFlushChunks chunks (576 taps: the default problem's whole reduction is one
// run) the warpgroup waits for its wgmmas, adds the two accumulator halves of the run and moves
// them to this block's master slots (a store for the tile's first run, a reduction at L2 for
// the others: no round trip; red.global.add.f32 flushes subnormal sums to zero, an error below
// 2^-126 a run), and the next chunk's wgmmas start the accumulators from zero;
// the tile's last run then adds the slots back (add_master). The slots follow the packed
// weights in the workspace when a tile has more than kFlushChunks chunks (master_bytes), for
// at most kMasterBlocks blocks (Hopper GPUs have up to 132 SMs; the launch caps its grid
// there); slot i (16 bytes) of this thread is
// master[(blockIdx.x * kMasterSlots + i) * kThreads + threadIdx.x], coalesced per warp.
constexpr int kFlushChunks = 8;
constexpr int kMasterBlocks = 256;
template <class Tile>
constexpr int kMasterSlots = 2 * Tile::kAccs / 4;

template <class Tile>
__device__ __forceinline__ float4* master_slots(const WgmmaPlan& p) {
  float4* master = reinterpret_cast<float4*>(
      p.packed + int64_t(p.channel_blocks) * p.chunks * Tile::kWeightChunkWords);
  return master + int64_t(blockIdx.x) * kMasterSlots<Tile> * kThreads + threadIdx.x;
}

template <class Tile>
__device__ __forceinline__ void flush_run(const float (&acc)[2][Tile::kAccRegs], float4* slots,
                                          bool first_run) {
  constexpr int kGroups = Tile::kAccs / 4, kHalf = Tile::kAccs;
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const float* a = acc[m] + 4 * g;
      const float4 v = make_float4(a[0] + a[kHalf], a[1] + a[kHalf + 1], a[2] + a[kHalf + 2],
                                   a[3] + a[kHalf + 3]);
      float4* slot = slots + (m * kGroups + g) * kThreads;
      if (first_run)
        store_relaxed(slot, v);
      else
        red_add(slot, v);
    }
}

// The tile's earlier runs (flush_run) into its folded accumulators (the first kAccs).
template <class Tile>
__device__ __forceinline__ void add_master(float (&acc)[2][Tile::kAccRegs], const float4* slots) {
  constexpr int kGroups = Tile::kAccs / 4;
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const float4 v = load_relaxed(slots + (m * kGroups + g) * kThreads);
      acc[m][4 * g] += v.x;
      acc[m][4 * g + 1] += v.y;
      acc[m][4 * g + 2] += v.z;
      acc[m][4 * g + 3] += v.w;
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

// kPrepacked: p.packed holds the weights packed by an earlier launch (pack_weights_kernel), so
// this one neither packs nor waits at a grid barrier (and is not launched cooperatively). A
// template parameter rather than a branch: the branch rescheduled the whole kernel.
// kSplitK (with kPrepacked, N = 64, launched in clusters of p.split blocks): the blocks of a
// cluster share one tile, each computing a share of its chunks (reduce_split).
template <class Tile, bool kPixelVectors, bool kPrepacked, bool kSplitK = false>
__global__ void __launch_bounds__(kThreads, Tile::kMinBlocksPerSm)
    conv_pool_wgmma_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const WgmmaPlan p) {
  static_assert(!kSplitK || (kPrepacked && Tile::kN == 64), "split reductions: see launch()");
  // 3xTF32 runs (flush_run), not with split reductions: their blocks hold a share of the
  // chunks each, and their grid is not the one the master slots are laid out for.
  constexpr bool kFlush = Tile::kSplit && !kSplitK;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem[];
  float* pooled = reinterpret_cast<float*>(smem + Tile::kPipelineBytes);
  float* bias = reinterpret_cast<float*>(smem + Tile::kPipelineBytes + Tile::kPooledBytes);
  // weights_landed[stage]: one phase per step that stage holds, completed by its bulk copy.
  uint64_t* weights_landed = reinterpret_cast<uint64_t*>(smem + Tile::kBarrierOffset);
  if (threadIdx.x == 0) {
    for (int stage = 0; stage < kStages; ++stage) mbarrier_init(weights_landed + stage, 1);
    fence_mbarrier_init();
  }

  if (!kPixelVectors && p.halo_load == kHaloPlaneVectors) {
    // Plane loads write only the image's pixels: the halo's border (the padding, the columns
    // left of the image) holds the zeros written here, in every stage, for the whole kernel.
    for (int stage = 0; stage < kStages; ++stage) {
      uint4* halo = reinterpret_cast<uint4*>(smem + stage * Tile::kStageBytes);
      for (int i = threadIdx.x; i < Tile::kHaloBytes / kSliceBytes; i += kThreads)
        halo[i] = make_uint4(0u, 0u, 0u, 0u);
    }
  }
  if constexpr (!kPrepacked) {
    pack_weights<Tile>(ops, s, p);
    // Every block's packed weights are written and visible to the bulk copies (a proxy fence,
    // then the grid barrier, a gpu-scope fence) before any block copies them. The barrier
    // also orders the zeros and the mbarrier initialisation above before their use below.
    fence_proxy_async_global();
    cooperative_groups::this_grid().sync();
  } else {
    __syncthreads();  // the zeros and the mbarrier initialisation above, before their use
  }

  // This block's tiles are blockIdx.x, blockIdx.x + gridDim.x, ...; its loads run over the
  // flat sequence of (tile, chunk) steps, ahead of the tensor cores and across tiles. Split
  // reductions: the cluster's tile, chunks [first_chunk, first_chunk + tile_chunks).
  int first_tile = int(blockIdx.x), my_tiles, tile_chunks = p.chunks, first_chunk = 0, rank = 0;
  if constexpr (kSplitK) {
    first_tile = cluster_index();
    rank = cluster_rank();
    const int share = (p.chunks + p.split - 1) / p.split;
    first_chunk = rank * share;
    tile_chunks = min(share, p.chunks - first_chunk);  // >= 1 (split_for)
    my_tiles = 1;
  } else {
    my_tiles = (p.tiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);
  }
  const int steps = my_tiles * tile_chunks;
  auto next_stage = [](int stage) { return stage == kStages - 1 ? 0 : stage + 1; };

  // Prologue: step 0's halo in stage 0, step 1's in registers; the weights of both in flight.
  StepLoader<Tile, kPixelVectors> loader(ops, s, p, first_tile);
  if constexpr (kSplitK) loader.skip_chunks(ops, first_chunk);
  HaloUnit<typename Tile::Operands, kPixelVectors> halo;
  loader.copy_weights(smem, weights_landed);
  loader.load_halo(halo, ops, s, p);
  loader.store_halo_unit(halo, smem, s, p);
  loader.advance(ops, s, p);
  if (steps > 1) {
    loader.copy_weights(smem + Tile::kStageBytes, weights_landed + 1);
    loader.load_halo(halo, ops, s, p);
  }
  loader.advance(ops, s, p);  // now at step 2
  fence_proxy_async();
  __syncthreads();
  uint32_t phases = 0;  // bit `stage`: parity of the next phase of weights_landed[stage]

  const uint32_t smem_base = shared_address(smem);
  const int warpgroup = threadIdx.x / 128;
  float acc[2][Tile::kAccRegs];  // written by the first wgmma of each tile (accumulate = false)
  int step = 0, stage = 0;
  for (int t = 0; t < my_tiles; ++t) {
    const TileOrigin origin = tile_origin<Tile>(s, p, first_tile + t * int(gridDim.x));
    uint32_t square_base[2];
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const int square = 2 * warpgroup + m;
      const int square_row = square / Tile::kSquareCols, square_col = square % Tile::kSquareCols;
      // A strip's second piece starts at halo column 4 * first_vectors.
      const int halo_col = Tile::kStrip && square >= origin.first_squares
                               ? 4 * origin.first_vectors + 8 * (square - origin.first_squares)
                               : square_col * 8;
      square_base[m] = smem_base + (square_row * 8 * Tile::kHaloPitch + halo_col +
                                    origin.col_shift) * kSliceBytes;
    }
    // The accumulators are touched only by wgmmas inside this loop (ordinary instructions
    // reading them here would make the compiler drain the tensor cores every step), but for
    // the 3xTF32 flushes, after a wait for every wgmma.
    int run = 0;           // chunks of the current run done (kFlush)
    bool flushed = false;  // a run of this tile is in the master slots
    for (int chunk = 0; chunk < tile_chunks; ++chunk, ++step) {
      // Here: `stage` holds this step's halo, visible to the tensor cores, and its weights
      // landed or in flight; the next stage has its weights in flight and its halo in `halo`;
      // the wgmmas of step - 1 may still run, all earlier ones have completed.
      const int stage1 = next_stage(stage), stage2 = next_stage(stage1);
      mbarrier_wait(weights_landed + stage, (phases >> stage) & 1u);
      phases ^= 1u << stage;
      const ChunkDescriptors descriptors = chunk_descriptors<Tile>(
          square_base, smem_base + Tile::kHaloBytes, uint32_t(stage * Tile::kStageBytes));
      const bool fresh = kFlush ? run == 0 : chunk == 0;
      wgmma_fence();
      mma_taps<Tile, 0, kSplitTap>(acc, descriptors, fresh);
      if (step + 1 < steps)
        loader.store_halo_unit(halo, smem + stage1 * Tile::kStageBytes, s, p);
      const bool refill = step + 2 < steps;
      if (refill) loader.load_halo(halo, ops, s, p);
      wgmma_fence();  // the halo code wrote registers (ptxas would insert this fence itself)
      mma_taps<Tile, kSplitTap, kTaps>(acc, descriptors, fresh);
      wgmma_commit();
      // stage2 = (step - 1) % 3 is free once every warpgroup is past step - 1.
      if constexpr (kFlush) {
        if (++run == kFlushChunks && chunk + 1 < tile_chunks) {
          run = 0;
          wgmma_wait<0>();
          fence_registers(acc[0]);
          fence_registers(acc[1]);
          flush_run<Tile>(acc, master_slots<Tile>(p), !flushed);
          flushed = true;
        } else {
          wgmma_wait<1>();
        }
      } else {
        wgmma_wait<1>();
      }
      __syncthreads();
      if (refill) loader.copy_weights(smem + stage2 * Tile::kStageBytes, weights_landed + stage2);
      // step + 1's halo stores become visible to the tensor cores. (Fencing them earlier and
      // dropping this barrier measured 5-11% slower on the H200, docs/PERF.md.)
      fence_proxy_async();
      __syncthreads();
      if (refill) loader.advance(ops, s, p);
      stage = stage1;
    }
    wgmma_wait<0>();
    fence_registers(acc[0]);
    fence_registers(acc[1]);
    if constexpr (Tile::kSplit) {  // the cross terms + big * big, the second half
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int i = 0; i < Tile::kAccs; ++i) acc[m][i] += acc[m][Tile::kAccs + i];
      if (kFlush && flushed) add_master<Tile>(acc, master_slots<Tile>(p));
    }
    if constexpr (kSplitK) reduce_split<Tile>(acc, smem, p.split, rank);
    // The tile's bias, one load per channel into shared memory; its latency overlaps the
    // pooling (a load per output in the store loop below cost 13-24% on the H200: the L1
    // left beside the stages is small, so those loads went to L2).
    const int bias_channel = origin.channel0 + int(threadIdx.x);
    const float tile_bias = (threadIdx.x < Tile::kN && ops.bias != nullptr &&
                             bias_channel < s.out_channels)
                                ? Tile::Operands::bias(ops, bias_channel)
                                : 0.f;
    pool_accumulators<Tile>(acc, pooled);
    if (threadIdx.x < Tile::kN) bias[threadIdx.x] = tile_bias;
    __syncthreads();
    store_pooled<Tile, kSplitK>(ops, s, origin, pooled, bias, p.vector_out, p.split, rank);
    // `pooled` is rewritten only after the next tile's chunk barriers.
  }
  if constexpr (kSplitK) cluster_wait();  // no block of the cluster reads these stages now
#endif
}

// ---------------------------------------------------------------------------
// Host side.

// The packed weights' geometry: blocks of kN output channels, chunks of input channels (all a
// packing needs of the plan: the weights' layout is the same for every tile shape of one kN).
template <class Tile>
WgmmaPlan packing_plan(const ConvPoolShape& s) {
  WgmmaPlan p{};
  p.channel_blocks = (s.out_channels + Tile::kN - 1) / Tile::kN;
  p.chunks = (s.in_channels + Tile::Operands::kChunk - 1) / Tile::Operands::kChunk;
  p.split = 1;
  return p;
}

template <class Tile>
int64_t packed_weight_bytes(const ConvPoolShape& s) {
  const WgmmaPlan p = packing_plan<Tile>(s);
  return int64_t(p.channel_blocks) * p.chunks * Tile::kWeightChunkWords * int64_t(sizeof(float));
}

// The workspace's master slots after the packed weights (3xTF32 runs: kFlushChunks).
template <class Tile>
int64_t master_bytes(const WgmmaPlan& p) {
  if (!Tile::kSplit || p.chunks <= kFlushChunks) return 0;
  return std::min<int64_t>(p.tiles, kMasterBlocks) * kMasterSlots<Tile> * kThreads *
         int64_t(sizeof(float4));
}

template <class Tile>
WgmmaPlan make_plan(const ConvPoolShape& s) {
  WgmmaPlan p = packing_plan<Tile>(s);
  int64_t tiles;
  if constexpr (Tile::kStrip) {
    p.tiles_h = (s.out_height + 3) / 4;  // 8 x 8 conv squares = 4 x 4 pooled outputs
    p.tiles_w = (s.out_width + 3) / 4;
    const int64_t squares = int64_t(s.batch) * p.tiles_h * p.tiles_w;
    p.squares = int(std::min<int64_t>(squares, kMaxStripSquares));
    tiles = (squares + 3) / 4 * p.channel_blocks;
  } else {
    p.tiles_h = (s.out_height + Tile::kPooledRows - 1) / Tile::kPooledRows;
    p.tiles_w = (s.out_width + Tile::kPooledCols - 1) / Tile::kPooledCols;
    tiles = int64_t(s.batch) * p.tiles_h * p.tiles_w * p.channel_blocks;
  }
  p.tiles = int(std::min<int64_t>(tiles, INT32_MAX));
  return p;
}

// make_plan plus the divisors tile_origin needs: for the plan that is launched (the tile
// choice builds several plans per call for their tile counts alone).
template <class Tile>
WgmmaPlan make_plan_with_divisors(const ConvPoolShape& s) {
  WgmmaPlan p = make_plan<Tile>(s);
  p.channel_blocks_div = FastDivisor(p.channel_blocks);
  p.tiles_w_div = FastDivisor(p.tiles_w);
  p.tiles_h_div = FastDivisor(p.tiles_h);
  if constexpr (Tile::kStrip) {  // (a shape that strips_apply refuses is never launched)
    const int64_t image_squares = int64_t(p.tiles_h) * p.tiles_w;
    p.image_squares_div = FastDivisor(int(std::min<int64_t>(image_squares, INT32_MAX)));
  }
  return p;
}

// kHaloPlaneVectors applies: one tile per image, a contiguous image plane of whole 4-pixel
// vectors (aligned, at least 4 wide so that a vector wraps into the next row at most once),
// every pixel inside the tile's halo, and one unit per thread.
template <class Tile>
bool plane_vectors_apply(const ConvPoolOperands& ops, const ConvPoolShape& s,
                         const WgmmaPlan& p) {
  const int64_t plane = int64_t(s.in_height) * s.in_width;
  if (Tile::kStrip || p.tiles_h != 1 || p.tiles_w != 1 || s.in_width < 4 || plane % 4 != 0 ||
      plane / 4 > Tile::kMaxPlaneVectors)
    return false;
  if (ops.x_stride[3] != 1 || ops.x_stride[2] != s.in_width || ops.x_stride[1] % 4 != 0 ||
      ops.x_stride[0] % 4 != 0 ||
      !aligned(ops.x, sizeof(typename Tile::Operands::RowVector)))
    return false;
  const TileOrigin o = tile_origin<Tile>(s, p, 0);
  return s.in_height - o.in_row0 <= Tile::kHaloRows &&
         s.in_width - o.staged_col0 <= Tile::kHaloCols;
}

// kHaloPixelVectors applies: the slice's channels of a pixel are one aligned 16-byte vector
// (channels-last: unit channel stride, the other strides and x multiples of 16 bytes) and a
// slice is wholly inside the channels or wholly past them.
template <class Tile>
bool pixel_vectors_apply(const ConvPoolOperands& ops, const ConvPoolShape& s) {
  constexpr int kVector = Tile::Operands::kSliceChannels;  // elements in 16 bytes
  return ops.x_stride[1] == 1 && s.in_channels % kVector == 0 && ops.x_stride[0] % kVector == 0 &&
         ops.x_stride[2] % kVector == 0 && ops.x_stride[3] % kVector == 0 &&
         aligned(ops.x, sizeof(typename Tile::Operands::Pixel));
}

// Pooled outputs computed per pooled output needed (the whole batch, one channel block): the
// tile shape that wastes less wins.
template <class Tile>
double tile_waste(const ConvPoolShape& s) {
  const WgmmaPlan p = make_plan<Tile>(s);
  return double(p.tiles) / p.channel_blocks * Tile::kPooledRows * Tile::kPooledCols /
         (double(s.batch) * s.out_height * s.out_width);
}

// The weights packed ahead of time (conv_relu_maxpool_pack_weight), for launches that then
// skip the packing. Ends with the proxy fence of the in-kernel packing; the kernel boundary
// orders the rest.
template <class Tile>
__global__ void __launch_bounds__(kThreads)
    pack_weights_kernel(const ConvPoolOperands ops, const ConvPoolShape s, const WgmmaPlan p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  pack_weights<Tile>(ops, s, p);
  fence_proxy_async_global();
#endif
}

// Strips apply: rows of at least 4 squares (a strip then spans at most two square rows) and
// a square count that fits the plan's int.
inline bool strips_apply(const ConvPoolShape& s) {
  const int64_t square_rows = (s.out_height + 3) / 4, square_cols = (s.out_width + 3) / 4;
  return square_cols >= 4 && int64_t(s.batch) * square_rows * square_cols <= kMaxStripSquares;
}

// 64 output channels per block when the layer has no more, else 128 (the packing's choice:
// it sees only the weight).
inline bool narrow_blocks(const ConvPoolShape& s) { return s.out_channels <= 64; }

// A layer whose 128-channel tiles number no more than this runs 64-channel blocks: twice
// the blocks, so twice the SMs share the in-kernel packing, and each block's chunk steps are
// shorter (H200: 18-38% less time for batch-1 and batch-8 VGG layers). Still one
// round of tiles on a Hopper GPU of 128 SMs or more (the H100 SXM and the H200 have 132).
// Such a layer packs its own weights whatever it is given: weights packed ahead of time are
// laid out for N = 128 (the packing sees the weight, not the batch), and the 128-channel
// blocks that read them were slower on all but one of the layers measured
// (docs/PERF.md).
constexpr int kFewTiles = 64;

// The tile shape that computes the fewest unused pooled outputs for this geometry (the same
// for every N and element type): the square one where it wastes less than the wide one, a
// strip where `strips` allows them, they apply and they waste less than both; the wide one on
// a tie.
enum class TileKind { kWide, kSquare, kStrip };

template <class Operands>
TileKind least_waste(const ConvPoolShape& s, bool strips) {
  const double wide_waste = tile_waste<WideTile<Operands, 64>>(s);
  const double square_waste = tile_waste<SquareTile<Operands, 64>>(s);
  if (strips && strips_apply(s) &&
      tile_waste<StripTile<Operands, 64>>(s) < std::min(wide_waste, square_waste))
    return TileKind::kStrip;
  return square_waste < wide_waste ? TileKind::kSquare : TileKind::kWide;
}

// Calls f(Tile()) with the tile the shape runs with: the operands of the shape's element type;
// of the wide, square and (N = 128) strip tiles the one that computes the fewest unused pooled
// outputs (least_waste); 128
// output channels per block, or 64 when the layer has no more, or when the 128-channel tiles
// are few (kFewTiles: the wide or square tile then, the strip has no N = 64 form). A layer of
// no more than 64 channels runs its N = 64 tile two blocks per SM where it has that form, but
// the square one only when its tiles are enough to pair blocks on a 128-SM GPU (capped for two
// blocks, it was 6-9% slower with one block per SM: H200; docs/PERF.md).
template <class Operands, class F>
auto with_operand_tile(const ConvPoolShape& s, F&& f) {
  if (narrow_blocks(s)) {
    if (least_waste<Operands>(s, false) == TileKind::kWide) return f(WideTile<Operands, 64>());
    if (make_plan<SquareTile<Operands, 64>>(s).tiles <= 2 * kFewTiles)
      return f(OneBlockSquareTile<Operands>());
    return f(SquareTile<Operands, 64>());
  }
  const TileKind kind = least_waste<Operands>(s, true);
  const int tiles = kind == TileKind::kStrip    ? make_plan<StripTile<Operands>>(s).tiles
                    : kind == TileKind::kSquare ? make_plan<SquareTile<Operands, 128>>(s).tiles
                                                : make_plan<WideTile<Operands, 128>>(s).tiles;
  // (Few strips: the wide or square tile, whichever of the two wastes less.)
  const bool square = kind == TileKind::kSquare ||
                      (kind == TileKind::kStrip &&
                       least_waste<Operands>(s, false) == TileKind::kSquare);
  if (tiles <= kFewTiles)
    return square ? f(OneBlockSquareTile<Operands>()) : f(OneBlockWideTile<Operands>());
  if (kind == TileKind::kStrip) return f(StripTile<Operands>());
  return square ? f(SquareTile<Operands, 128>()) : f(WideTile<Operands, 128>());
}

// Calls f(Operands()) with the operand traits of the shape's element type.
template <class F>
auto with_operands(const ConvPoolShape& s, F&& f) {
  if (s.element == kElementFloat16) return f(HalfOperands<Float16>());
  if (s.element == kElementBFloat16) return f(HalfOperands<BFloat16>());
  return f(Tf32Operands());
}

template <class F>
auto with_tile(const ConvPoolShape& s, F&& f) {
  return with_operands(s, [&](auto operands) {
    return with_operand_tile<decltype(operands)>(s, f);
  });
}

// split: the 3xTF32 tiles (float32 shapes only): of the N = 64 wide, square and strip tiles
// the one that wastes least (as above), one block per SM; but not strips for a layer of few
// tiles (kFewTiles, as above), whose wide or square tiles split their reductions over clusters
// (H200: VGG block 3 at batch 1 57 us that way, 102 on strips). Their doubled halo
// and weights leave no room for three stages of N = 128 (N = 64: 210 KB, 217 KB for strips).
template <class F>
auto with_tile(const ConvPoolShape& s, bool split, F&& f) {
  if (split) {
    using Operands = Tf32SplitOperands;
    if (least_waste<Operands>(s, true) == TileKind::kStrip &&
        make_plan<StripTile<Operands, 64>>(s).tiles > kFewTiles)
      return f(StripTile<Operands, 64>());
    return least_waste<Operands>(s, false) == TileKind::kSquare ? f(SquareTile<Operands, 64>())
                                                                : f(WideTile<Operands, 64>());
  }
  return with_tile(s, f);
}

// Calls f(Tile()) with a tile that packs the weights as the one with_tile picks does (the same
// operands and N; the wide tile stands for every shape of that N), but for layers of few
// tiles (kFewTiles), which pack their own. Needs only the shape's channels, kernel size and
// element type.
template <class F>
auto with_packing_tile(const ConvPoolShape& s, F&& f) {
  return with_operands(s, [&](auto operands) {
    using Operands = decltype(operands);
    return narrow_blocks(s) ? f(WideTile<Operands, 64>()) : f(WideTile<Operands, 128>());
  });
}

// Once per kernel and device: raise its dynamic shared-memory limit (a constant) and ask how
// many blocks fit on an SM. Returns that count, or a negative cudaError_t.
template <class Tile, bool kPixelVectors, bool kPrepacked, bool kSplitK = false>
int prepare_kernel(int device) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> blocks_per_sm[kMaxDevices];  // 0 = not yet asked
  if (device >= 0 && device < kMaxDevices) {
    const int known = blocks_per_sm[device].load(std::memory_order_acquire);
    if (known > 0) return known;
  }
  const auto kernel = conv_pool_wgmma_kernel<Tile, kPixelVectors, kPrepacked, kSplitK>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes);
  int blocks = 0;
  if (err == cudaSuccess)
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads,
                                                        Tile::kSmemBytes);
  if (err != cudaSuccess) return -int(err);
  if (blocks < 1) return -int(cudaErrorInvalidConfiguration);
  if (device >= 0 && device < kMaxDevices)
    blocks_per_sm[device].store(blocks, std::memory_order_release);
  return blocks;
}

// Whether the tile's kernels have prepacked twins. Not the two-blocks-per-SM instances (N = 64):
// TF32's wide prepacked twin spilled at the 128-register cap (8 bytes), and two co-resident
// blocks already hide part of the packing behind each other.
template <class Tile>
constexpr bool takes_packed_weight() {
  return Tile::kMinBlocksPerSm == 1 && !Tile::kSplit;
}

// Without packed weights, every block of a launch packs a share of them at its start. Where
// the shares are large (a large weight over few blocks: VGG-16's blocks 4-5 at batch 1), a
// kernel of its own on every SM packs them into the workspace instead, and the kernel
// instance that reads packed weights runs on that copy, still in L2 (H200: VGG
// block 5 at batch 1 119 -> 77 us of kernel time, block 4 90 -> 83, block 5 at batch 8 80 ->
// 78; below this share the second launch added ~1 us of event time for nothing). In packed
// weight elements per block.
constexpr int64_t kPackApartElements = 32768;

template <class Tile>
bool packs_apart(const WgmmaPlan& p, const ConvPoolDevice& device) {
  const int64_t blocks =
      std::min<int64_t>(p.tiles, int64_t(Tile::kMinBlocksPerSm) * std::max(device.sm_count, 1));
  const int64_t elements =
      int64_t(p.channel_blocks) * Tile::kN * p.chunks * Tile::Operands::kChunk * kTaps;
  return takes_packed_weight<Tile>() && elements >= kPackApartElements * blocks;
}

// Launches one kernel instance: persistent, as many blocks as are resident at once;
// cooperative (for the grid barrier after the weight packing) unless the weights came packed.
template <class Tile, bool kPixelVectors, bool kPrepacked>
cudaError_t launch_instance(const ConvPoolOperands& ops, const ConvPoolShape& s, WgmmaPlan p,
                            const ConvPoolDevice& device, cudaStream_t stream) {
  int current = -1;
  const cudaError_t err = cudaGetDevice(&current);
  if (err != cudaSuccess) return err;
  const int blocks_per_sm = prepare_kernel<Tile, kPixelVectors, kPrepacked>(current);
  if (blocks_per_sm < 0) return cudaError_t(-blocks_per_sm);
  p.packed = kPrepacked ? const_cast<float*>(ops.packed_weight) : ops.workspace;
  int blocks = std::min(p.tiles, blocks_per_sm * std::max(device.sm_count, 1));
  if (master_bytes<Tile>(p) > 0) blocks = std::min(blocks, kMasterBlocks);
  void* args[] = {const_cast<ConvPoolOperands*>(&ops), const_cast<ConvPoolShape*>(&s), &p};
  const void* kernel =
      reinterpret_cast<const void*>(conv_pool_wgmma_kernel<Tile, kPixelVectors, kPrepacked>);
  if constexpr (kPrepacked)
    return cudaLaunchKernel(kernel, dim3(blocks), dim3(kThreads), args, Tile::kSmemBytes, stream);
  else
    return cudaLaunchCooperativeKernel(kernel, dim3(blocks), dim3(kThreads), args,
                                       Tile::kSmemBytes, stream);
}

// Split reductions: the N = 64 tiles of one block per SM that read packed weights (the tiles
// of layers of few tiles, kFewTiles; every 3xTF32 tile) can run a tile's chunks over the blocks
// of a cluster, when
// the layer's tiles leave SMs idle. Cluster sizes 2 to 8 (the portable limit), each block
// given at least kMinSplitChunks chunks. Cost model, fitted on the H200 (VGG-16's blocks 3-5
// at batch 1 and block 5 at batch 8, every split from 1 to 8 forced, float32 and float16;
// docs/PERF.md): kernel time ~ rounds x (chunks per block + kRoundChunks), ~1 us a chunk,
// where rounds = tiles over the clusters that run at once (ConvPoolDevice::max_clusters; for
// no split, one block per SM); the least cost wins, the smaller split on a tie.
constexpr int kMinSplitChunks = 4;
constexpr int kRoundChunks = 7;  // a round's fixed time (prologue, epilogue, reduction)

template <class Tile>
constexpr bool splits() {
  return (takes_packed_weight<Tile>() || Tile::kSplit) && Tile::kN == 64 && !Tile::kStrip;
}

// The blocks per tile for this plan (1: no split).
template <class Tile>
int split_for(const WgmmaPlan& p, const ConvPoolDevice& device) {
  int best = 1;
  if constexpr (splits<Tile>()) {
    const auto rounds = [&](int64_t at_once) { return (p.tiles + at_once - 1) / at_once; };
    int64_t best_cost = rounds(std::max(device.sm_count, 1)) * (p.chunks + kRoundChunks);
    for (int split = 2; split <= kConvPoolMaxCluster; ++split) {
      const int share = (p.chunks + split - 1) / split;
      if (share < kMinSplitChunks || (split - 1) * share >= p.chunks ||
          device.max_clusters[split] < 1 || int64_t(p.tiles) * split > INT32_MAX)
        continue;
      const int64_t cost = rounds(device.max_clusters[split]) * (share + kRoundChunks);
      if (cost < best_cost) {
        best = split;
        best_cost = cost;
      }
    }
  }
  (void)p;
  (void)device;
  return best;
}

// A kernel that fills an SM (more than half its shared memory), for the cluster occupancy.
__global__ void one_block_per_sm_probe() {}

// A launch of `clusters` clusters of `split` blocks of kThreads threads (1-D). Not copyable:
// config points at its own attribute.
struct ClusterLaunch {
  cudaLaunchAttribute cluster;
  cudaLaunchConfig_t config{};
  ClusterLaunch(int clusters, int split, int shared_bytes, cudaStream_t stream) {
    config.gridDim = dim3(unsigned(clusters) * unsigned(split));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = size_t(shared_bytes);
    config.stream = stream;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = unsigned(split);
    cluster.val.clusterDim.y = cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// The weights -> the workspace, by a kernel of its own on every SM (docs/PERF.md); the
// operands the kernel instance for packed weights then reads.
template <class Tile>
cudaError_t pack_into_workspace(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                const WgmmaPlan& p, const ConvPoolDevice& device,
                                cudaStream_t stream, ConvPoolOperands& packed_ops) {
  WgmmaPlan packing = p;
  packing.packed = ops.workspace;
  const int64_t items = int64_t(p.channel_blocks) * p.chunks * 2 * Tile::kN;
  const int64_t blocks = std::min<int64_t>((items + kThreads - 1) / kThreads,
                                           int64_t(8) * std::max(device.sm_count, 1));
  // (The wide tile of the same operands and N packs the same layout: no new instance.)
  pack_weights_kernel<WideTile<typename Tile::Operands, Tile::kN>>
      <<<unsigned(blocks), kThreads, 0, stream>>>(ops, s, packing);
  packed_ops = ops;
  packed_ops.packed_weight = ops.workspace;
  return cudaGetLastError();
}

// The split instance, p.tiles clusters of p.split blocks (one tile each, not persistent).
template <class Tile, bool kPixelVectors>
cudaError_t launch_split_instance(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                  WgmmaPlan p, cudaStream_t stream) {
  int current = -1;
  const cudaError_t err = cudaGetDevice(&current);
  if (err != cudaSuccess) return err;
  const int blocks_per_sm = prepare_kernel<Tile, kPixelVectors, true, true>(current);
  if (blocks_per_sm < 0) return cudaError_t(-blocks_per_sm);
  p.packed = const_cast<float*>(ops.packed_weight);
  const ClusterLaunch clusters(p.tiles, p.split, Tile::kSmemBytes, stream);
  return cudaLaunchKernelEx(&clusters.config,
                            conv_pool_wgmma_kernel<Tile, kPixelVectors, true, true>, ops, s, p);
}

template <class Tile>
cudaError_t launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                   const ConvPoolDevice& device, cudaStream_t stream) {
  WgmmaPlan p = make_plan_with_divisors<Tile>(s);
  using Operands = typename Tile::Operands;
  if (plane_vectors_apply<Tile>(ops, s, p)) {
    p.halo_load = kHaloPlaneVectors;
    p.plane_vectors = int(int64_t(s.in_height) * s.in_width / 4);
  } else if (Operands::vector_input(ops, s)) {
    p.halo_load = kHaloRowVectors;
  } else {
    p.halo_load = pixel_vectors_apply<Tile>(ops, s) ? kHaloPixelVectors : kHaloScalars;
  }
  if constexpr (!Tile::kScalarHalo) {
    if (p.halo_load == kHaloScalars)
      return launch<typename Tile::OneBlockTwin>(ops, s, device, stream);
  }
  // 3x3 here: C * 9 % 4 == 0 (fp32) or % 8 == 0 (16-bit).
  p.vector_weights = vectorizable_weights(ops, s, Operands::kSliceChannels);
  // (The output is contiguous NCHW: with width % 4 == 0 every row starts 4 elements aligned.)
  const void* out = std::is_same_v<typename Operands::Element, float>
                        ? static_cast<const void*>(ops.out)
                        : static_cast<const void*>(ops.out16);
  p.vector_out = s.out_width % 4 == 0 && aligned(out, 4 * sizeof(typename Operands::Element));
  const bool pixel_vectors = p.halo_load == kHaloPixelVectors;
  if (ops.packed_weight != nullptr) {
    if constexpr (takes_packed_weight<Tile>() && !Tile::kOneBlockTwin) {
      if (wgmma_takes_packed_weight(s))
        return pixel_vectors ? launch_instance<Tile, true, true>(ops, s, p, device, stream)
                             : launch_instance<Tile, false, true>(ops, s, p, device, stream);
    }
    return cudaErrorInvalidValue;  // the caller checks wgmma_takes_packed_weight
  }
  if constexpr (splits<Tile>()) {
    p.split = split_for<Tile>(p, device);
    if (p.split > 1) {
      // The weights packed apart (as below), then the tiles' chunks over clusters.
      ConvPoolOperands packed_ops;
      const cudaError_t err = pack_into_workspace<Tile>(ops, s, p, device, stream, packed_ops);
      if (err != cudaSuccess) return err;
      return pixel_vectors ? launch_split_instance<Tile, true>(packed_ops, s, p, stream)
                           : launch_split_instance<Tile, false>(packed_ops, s, p, stream);
    }
  }
  if constexpr (takes_packed_weight<Tile>()) {
    if (packs_apart<Tile>(p, device)) {
      // The packing on every SM, a kernel of its own, into the workspace; then the instance
      // that reads packed weights, from there (still in L2).
      ConvPoolOperands packed_ops;
      const cudaError_t err = pack_into_workspace<Tile>(ops, s, p, device, stream, packed_ops);
      if (err != cudaSuccess) return err;
      return pixel_vectors
                 ? launch_instance<Tile, true, true>(packed_ops, s, p, device, stream)
                 : launch_instance<Tile, false, true>(packed_ops, s, p, device, stream);
    }
  }
  return pixel_vectors ? launch_instance<Tile, true, false>(ops, s, p, device, stream)
                       : launch_instance<Tile, false, false>(ops, s, p, device, stream);
}

}  // namespace

void wgmma_cluster_capacity(int (&max_clusters)[kConvPoolMaxCluster + 1]) {
  for (int& n : max_clusters) n = 0;
#if defined(CONV_POOL_WITH_WGMMA)
  int device = 0, shared = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess)
    return;
  const int bytes = shared / 2 + 1024;
  if (cudaFuncSetAttribute(one_block_per_sm_probe, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           bytes) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  for (int split = 2; split <= kConvPoolMaxCluster; ++split) {
    const ClusterLaunch probe(1, split, bytes, nullptr);
    if (cudaOccupancyMaxActiveClusters(&max_clusters[split], one_block_per_sm_probe,
                                       &probe.config) != cudaSuccess) {
      cudaGetLastError();  // not a sticky error: no split of this size
      max_clusters[split] = 0;
    }
  }
#endif
}

const char* wgmma_unavailable(const ConvPoolDevice& device) {
#if !defined(CONV_POOL_WITH_WGMMA)
  (void)device;
  return "the module was built without sm_90a code (TORCH_CUDA_ARCH_LIST has no 9.0a)";
#else
  return device.compute_capability != 90 ? "wgmma needs a compute capability 9.0 GPU (Hopper)"
                                         : nullptr;
#endif
}

const char* wgmma_conv_pool_unsupported(const ConvPoolShape& s, const ConvPoolDevice& device,
                                        bool split) {
#if !defined(CONV_POOL_WITH_WGMMA)
  (void)s;
  (void)split;
  return wgmma_unavailable(device);
#else
  if (const char* why = wgmma_unavailable(device)) return why;
  if (!fast_path_applies(s))
    return "the wgmma kernel covers only a 3x3 / stride 1 / dilation 1 convolution followed by "
           "a 2x2 / stride 2 pool inside the conv output";
  if (split && s.element != kElementFloat32) return "needs float32 input";
  return with_tile(s, split, [&](auto tile) -> const char* {
    using Tile = decltype(tile);
    if (Tile::kSmemBytes > device.max_shared_bytes)
      return "its pipeline does not fit in shared memory";
    const WgmmaPlan p = make_plan<Tile>(s);
    if (int64_t(p.tiles) * p.chunks >= INT32_MAX / 2)
      return "more than 2^30 (tile, channel chunk) steps";
    return nullptr;
  });
#endif
}

// Not the two-blocks-per-SM tiles nor their twins (takes_packed_weight, kOneBlockTwin); not a
// layer of few tiles, which runs N = 64 on weights packed for N = 128 (kFewTiles).
bool wgmma_takes_packed_weight(const ConvPoolShape& s) {
  const int packed_n = with_packing_tile(s, [](auto tile) { return decltype(tile)::kN; });
  return with_tile(s, [&](auto tile) {
    using Tile = decltype(tile);
    return takes_packed_weight<Tile>() && !Tile::kOneBlockTwin && Tile::kN == packed_n;
  });
}

bool wgmma_packs_weight_apart(const ConvPoolShape& s, const ConvPoolDevice& device, bool split) {
  return with_tile(s, split, [&](auto tile) {
    using Tile = decltype(tile);
    const WgmmaPlan p = make_plan<Tile>(s);
    return packs_apart<Tile>(p, device) || split_for<Tile>(p, device) > 1;
  });
}

int wgmma_split(const ConvPoolShape& s, const ConvPoolDevice& device, bool split) {
  return with_tile(s, split, [&](auto tile) {
    using Tile = decltype(tile);
    return split_for<Tile>(make_plan<Tile>(s), device);
  });
}

const char* wgmma_tile_name(const ConvPoolShape& s, bool split) {
  return with_tile(s, split, [](auto tile) -> const char* {
    using Tile = decltype(tile);
    if constexpr (Tile::kStrip) return Tile::kN == 64 ? "strip_n64" : "strip_n128";
    if constexpr (Tile::kTileRows == 16) return Tile::kN == 64 ? "square_n64" : "square_n128";
    return Tile::kN == 64 ? "wide_n64" : "wide_n128";
  });
}

int wgmma_tile_origin(const ConvPoolShape& s, int tile, int64_t* origin, bool split) {
  return with_tile(s, split, [&](auto t) {
    using Tile = decltype(t);
    const WgmmaPlan p = make_plan_with_divisors<Tile>(s);
    if (tile >= 0 && tile < p.tiles) {
      const TileOrigin o = tile_origin<Tile>(s, p, tile);
      origin[0] = o.image;
      origin[1] = o.channel0;
      origin[2] = o.out_row0;
      origin[3] = o.out_col0;
    }
    return p.tiles;
  });
}

bool wgmma_packs_weight(const ConvPoolShape& s, const ConvPoolDevice& device) {
#if !defined(CONV_POOL_WITH_WGMMA)
  (void)s;
  (void)device;
  return false;
#else
  return device.compute_capability == 90 && s.kernel_h == 3 && s.kernel_w == 3;
#endif
}

int64_t wgmma_conv_pool_workspace_bytes(const ConvPoolShape& s, bool split) {
  return with_tile(s, split, [&](auto tile) {
    using Tile = decltype(tile);
    return packed_weight_bytes<Tile>(s) + master_bytes<Tile>(make_plan<Tile>(s));
  });
}

int64_t wgmma_packed_weight_bytes(const ConvPoolShape& s) {
  return with_packing_tile(s, [&](auto tile) { return packed_weight_bytes<decltype(tile)>(s); });
}

cudaError_t wgmma_pack_weight_launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                     float* packed, const ConvPoolDevice& device,
                                     cudaStream_t stream) {
  return with_packing_tile(s, [&](auto tile) {
    using Tile = decltype(tile);
    WgmmaPlan p = packing_plan<Tile>(s);
    p.vector_weights = vectorizable_weights(ops, s, Tile::Operands::kSliceChannels);
    p.packed = packed;
    // One work item per (channel block, chunk, slice, out channel), a grid-stride loop.
    const int64_t items = int64_t(p.channel_blocks) * p.chunks * 2 * Tile::kN;
    const int64_t blocks = std::min<int64_t>((items + kThreads - 1) / kThreads,
                                             int64_t(8) * std::max(device.sm_count, 1));
    pack_weights_kernel<Tile><<<unsigned(blocks), kThreads, 0, stream>>>(ops, s, p);
    return cudaGetLastError();
  });
}

cudaError_t wgmma_conv_pool_launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                   const ConvPoolDevice& device, cudaStream_t stream,
                                   bool split) {
  return with_tile(s, split, [&](auto tile) {
    return launch<decltype(tile)>(ops, s, device, stream);
  });
}
