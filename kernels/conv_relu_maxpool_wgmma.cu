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
// any padding, 2x2 / stride 2 max-pool inside the conv output) and the same convolution with no
// pool (a 1x1 / stride 1 one: conv -> ReLU; wgmma_3x3_applies); the other variants cover
// everything else.
//
// Files by role: hopper/tiled_tile.cuh (constants, the tile template, the plan),
// hopper/tiled_operands.cuh (the operand traits), hopper/tiled_mainloop.cuh (weight packing,
// halo loads, a chunk's wgmmas, 3xTF32 runs), hopper/tiled_epilogue.cuh (pooling, store, the
// split reduction), hopper/tiled_kernel.cuh (the kernels); this file: the host side (tile and
// split choice, occupancy, launch) and the interface of conv_relu_maxpool_wgmma.h.
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
// (lane ^ 4) into shared memory, then out coalesced (NCHW: runs of 4 outputs as one vector
// where the output rows allow, p.vector_out; channels-last: 16 bytes of consecutive channels
// a lane), with bias and ReLU applied after the max
// (and, for 16-bit outputs, the one rounding: rounding is monotonic, so the rounded maximum is
// the maximum of the rounded values). Without a pool (the tiles' kPool = 1: the same tiles,
// plans and choice on conv outputs), bias, ReLU and the store run straight from the
// accumulators (store_conv_rows, store_conv_channels_last).
#include <cuda_runtime.h>

#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "conv_pool_16bit.cuh"
#include "conv_pool_device.cuh"
#include "conv_pool_heuristics.h"
#include "conv_pool_operands.h"
#include "conv_pool_wgmma.cuh"
#include "conv_relu_maxpool_wgmma.h"
#include "hopper/tiled_kernel.cuh"

namespace tiled_wgmma {
namespace {

using namespace conv_pool_heuristics;

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
    // 8 x 8 conv squares: 4 x 4 pooled outputs, or 8 x 8 without a pool
    p.tiles_h = (s.out_height + Tile::kSquareOut - 1) / Tile::kSquareOut;
    p.tiles_w = (s.out_width + Tile::kSquareOut - 1) / Tile::kSquareOut;
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

// Outputs computed per output needed (the whole batch, one channel block): the tile shape
// that wastes less wins.
template <class Tile>
double tile_waste(const ConvPoolShape& s) {
  const WgmmaPlan p = make_plan<Tile>(s);
  return double(p.tiles) / p.channel_blocks * Tile::kPooledRows * Tile::kPooledCols /
         (double(s.batch) * s.out_height * s.out_width);
}

// Strips apply: rows of at least 4 squares (a strip then spans at most two square rows) and
// a square count that fits the plan's int.
template <int kPool>
bool strips_apply(const ConvPoolShape& s) {
  constexpr int kSquareOut = 8 / kPool;
  const int64_t square_rows = (s.out_height + kSquareOut - 1) / kSquareOut,
                square_cols = (s.out_width + kSquareOut - 1) / kSquareOut;
  return square_cols >= 4 && int64_t(s.batch) * square_rows * square_cols <= kMaxStripSquares;
}

// 64 output channels per block when the layer has no more, else 128 (the packing's choice:
// it sees only the weight).
inline bool narrow_blocks(const ConvPoolShape& s) { return s.out_channels <= 64; }


// The tile shape that computes the fewest unused outputs for this geometry (the same
// for every N and element type): the square one where it wastes less than the wide one, a
// strip where `strips` allows them, they apply and they waste less than both; the wide one on
// a tie.
enum class TileKind { kWide, kSquare, kStrip };

template <class Operands, int kPool>
TileKind least_waste(const ConvPoolShape& s, bool strips) {
  const double wide_waste = tile_waste<WideTile<Operands, 64, kPool>>(s);
  const double square_waste = tile_waste<SquareTile<Operands, 64, kPool>>(s);
  if (strips && strips_apply<kPool>(s) &&
      tile_waste<StripTile<Operands, 64, kPool>>(s) < std::min(wide_waste, square_waste))
    return TileKind::kStrip;
  return square_waste < wide_waste ? TileKind::kSquare : TileKind::kWide;
}

// Calls f(Tile()) with the tile the shape runs with: the operands of the shape's element type;
// of the wide, square and (N = 128) strip tiles the one that computes the fewest unused
// outputs (least_waste); 128
// output channels per block, or 64 when the layer has no more, or when the 128-channel tiles
// are few (kFewTiles: the wide or square tile then, the strip has no N = 64 form). A layer of
// no more than 64 channels runs its N = 64 tile two blocks per SM where it has that form, but
// the square one only when its tiles are enough to pair blocks on a 128-SM GPU (capped for two
// blocks, it was 6-9% slower with one block per SM: H200; docs/PERF.md). The same rules with
// and without the pool (kPool), on the outputs each tile computes.
template <class Operands, int kPool, class F>
auto with_operand_tile(const ConvPoolShape& s, F&& f) {
  using Wide64 = WideTile<Operands, 64, kPool>;
  using Square64 = SquareTile<Operands, 64, kPool>;
  using Wide128 = WideTile<Operands, 128, kPool>;
  using Square128 = SquareTile<Operands, 128, kPool>;
  using Strip128 = StripTile<Operands, 128, kPool>;
  if (narrow_blocks(s)) {
    if (least_waste<Operands, kPool>(s, false) == TileKind::kWide) return f(Wide64());
    if (make_plan<Square64>(s).tiles <= 2 * kFewTiles)
      return f(OneBlockSquareTile<Operands, kPool>());
    return f(Square64());
  }
  const TileKind kind = least_waste<Operands, kPool>(s, true);
  const int tiles = kind == TileKind::kStrip    ? make_plan<Strip128>(s).tiles
                    : kind == TileKind::kSquare ? make_plan<Square128>(s).tiles
                                                : make_plan<Wide128>(s).tiles;
  // (Few strips: the wide or square tile, whichever of the two wastes less.)
  const bool square = kind == TileKind::kSquare ||
                      (kind == TileKind::kStrip &&
                       least_waste<Operands, kPool>(s, false) == TileKind::kSquare);
  if (tiles <= kFewTiles)
    return square ? f(OneBlockSquareTile<Operands, kPool>())
                  : f(OneBlockWideTile<Operands, kPool>());
  if (kind == TileKind::kStrip) return f(Strip128());
  return square ? f(Square128()) : f(Wide128());
}

// Calls f(Operands()) with the operand traits of the shape's element type.
template <class F>
auto with_operands(const ConvPoolShape& s, F&& f) {
  if (s.element == kElementFloat16) return f(HalfOperands<Float16>());
  if (s.element == kElementBFloat16) return f(HalfOperands<BFloat16>());
  return f(Tf32Operands());
}

// Calls f(Tile()) with the tile the shape runs with: with_operand_tile's, pooled 2 x 2 / 2 or,
// for a 1 x 1 / 1 pool (none: identity_pool), not pooled.
template <class F>
auto with_tile(const ConvPoolShape& s, F&& f) {
  return with_operands(s, [&](auto operands) {
    using Operands = decltype(operands);
    return identity_pool(s) ? with_operand_tile<Operands, 1>(s, f)
                            : with_operand_tile<Operands, 2>(s, f);
  });
}

// split: the 3xTF32 tiles (float32 shapes only): of the N = 64 wide, square and strip tiles
// the one that wastes least (as above), one block per SM; but not strips for a layer of few
// tiles (kFewTiles, as above), whose wide or square tiles split their reductions over clusters
// (H200: VGG block 3 at batch 1 57 us that way, 102 on strips). Their doubled halo
// and weights leave no room for three stages of N = 128 (N = 64: 210 KB, 217 KB for strips).
template <int kPool, class F>
auto with_split_tile(const ConvPoolShape& s, F&& f) {
  using Operands = Tf32SplitOperands;
  if (least_waste<Operands, kPool>(s, true) == TileKind::kStrip &&
      make_plan<StripTile<Operands, 64, kPool>>(s).tiles > kFewTiles)
    return f(StripTile<Operands, 64, kPool>());
  return least_waste<Operands, kPool>(s, false) == TileKind::kSquare
             ? f(SquareTile<Operands, 64, kPool>())
             : f(WideTile<Operands, 64, kPool>());
}

template <class F>
auto with_tile(const ConvPoolShape& s, bool split, F&& f) {
  if (split) return identity_pool(s) ? with_split_tile<1>(s, f) : with_split_tile<2>(s, f);
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
                   const ConvPoolDevice& device, cudaStream_t stream,
                   const int64_t* out_stride) {
  WgmmaPlan p = make_plan_with_divisors<Tile>(s);
  p.channels_last_out = out_stride != nullptr;
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
      return launch<typename Tile::OneBlockTwin>(ops, s, device, stream, out_stride);
  }
  if constexpr (!Tile::kChannelsLastOut) {
    if (out_stride != nullptr)
      return launch<typename Tile::OneBlockTwin>(ops, s, device, stream, out_stride);
  }
  // 3x3 here: C * 9 % 4 == 0 (fp32) or % 8 == 0 (16-bit).
  p.vector_weights = vectorizable_weights(ops, s, Operands::kSliceChannels);
  // Vector stores: an NCHW output with width % 4 == 0 starts every row 4 elements aligned
  // (store_pooled's runs), one whose rows are multiples of 16 bytes every conv row
  // (store_conv_rows); a channels-last one whose channel count is a multiple of 16 bytes has
  // every pixel 16-byte aligned (store_pooled_channels_last). store_conv_channels_last
  // decides its own.
  const void* out = std::is_same_v<typename Operands::Element, float>
                        ? static_cast<const void*>(ops.out)
                        : static_cast<const void*>(ops.out16);
  constexpr int kElementBytes = sizeof(typename Operands::Element);
  if (p.channels_last_out)
    p.vector_out = s.out_channels % Operands::kOutVector == 0 && aligned(out, 16);
  else if (Tile::kPool == 2)
    p.vector_out = s.out_width % 4 == 0 && aligned(out, 4 * kElementBytes);
  else  // store_conv_rows: rows of 8 outputs, 16-byte aligned
    p.vector_out = s.out_width * kElementBytes % 16 == 0 && aligned(out, 16);
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
}  // namespace tiled_wgmma

using namespace tiled_wgmma;


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
  if (!wgmma_3x3_applies(s))
    return "the wgmma kernel covers only a 3x3 / stride 1 / dilation 1 convolution followed by "
           "a 2x2 / stride 2 pool inside the conv output, or by no pool (1x1 / stride 1)";
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
                                   const int64_t* out_stride, bool split) {
  // Strides: dense channels-last only (what the binding allocates).
  if (out_stride != nullptr) {
    const int64_t c = s.out_channels, w = s.out_width, h = s.out_height;
    if (out_stride[1] != 1 || out_stride[3] != c ||
        out_stride[2] != w * c || (s.batch > 1 && out_stride[0] != h * w * c))
      return cudaErrorInvalidValue;
  }
  return with_tile(s, split, [&](auto tile) {
    return launch<decltype(tile)>(ops, s, device, stream, out_stride);
  });
}

