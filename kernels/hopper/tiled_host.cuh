// The 3 x 3 Hopper kernel's host side, shared by its interface (conv_relu_maxpool_wgmma.cu)
// and its launches (tiled_launch.cuh): a tile's plan, the tile and split choice, and the
// launch configuration of a cluster.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../conv_pool_16bit.cuh"
#include "../conv_pool_device.cuh"
#include "../conv_pool_heuristics.h"
#include "../conv_pool_operands.h"
#include "../conv_pool_wgmma.cuh"
#include "tiled_kernel.cuh"

namespace tiled_wgmma {

// One operand type's launches and weight packing (tiled_launch.cuh), each compiled in a file of
// its own under instances/ (TILED_WGMMA_LAUNCH_INSTANCE, TILED_WGMMA_PACK_INSTANCE), so that
// they build in parallel. Operands: Tf32Operands, HalfOperands<Float16>,
// HalfOperands<BFloat16> or Tf32SplitOperands (launches only).
template <class Operands>
cudaError_t launch_operands(const ConvPoolOperands& ops, const ConvPoolShape& s,
                            const ConvPoolDevice& device, cudaStream_t stream,
                            const int64_t* out_stride);
template <class Operands>
cudaError_t pack_operands(const ConvPoolOperands& ops, const ConvPoolShape& s, float* packed,
                          const ConvPoolDevice& device, cudaStream_t stream);

namespace {

using namespace conv_pool_heuristics;

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

// Calls f(Operands()) with the operand traits of the shape's element type.
template <class F>
auto with_operands(const ConvPoolShape& s, F&& f) {
  if (s.element == kElementFloat16) return f(HalfOperands<Float16>());
  if (s.element == kElementBFloat16) return f(HalfOperands<BFloat16>());
  return f(Tf32Operands());
}

// Calls f(Tile()) with the tile the shape runs with among Operands' tiles: with_split_tile's
// for the 3xTF32 operands, else with_operand_tile's; pooled 2 x 2 / 2 or, for a 1 x 1 / 1 pool
// (none: identity_pool), not pooled.
template <class Operands, class F>
auto with_operands_tile(const ConvPoolShape& s, F&& f) {
  if constexpr (std::is_same_v<Operands, Tf32SplitOperands>)
    return identity_pool(s) ? with_split_tile<1>(s, f) : with_split_tile<2>(s, f);
  else
    return identity_pool(s) ? with_operand_tile<Operands, 1>(s, f)
                            : with_operand_tile<Operands, 2>(s, f);
}

// with_operands_tile for the shape's element type, or (split) the 3xTF32 operands.
template <class F>
auto with_tile(const ConvPoolShape& s, bool split, F&& f) {
  if (split) return with_operands_tile<Tf32SplitOperands>(s, f);
  return with_operands(s, [&](auto operands) {
    return with_operands_tile<decltype(operands)>(s, f);
  });
}

template <class F>
auto with_tile(const ConvPoolShape& s, F&& f) {
  return with_tile(s, false, f);
}

// Calls f(Tile()) with a tile that packs the weights as the one with_tile picks does (the same
// operands and N; the wide tile stands for every shape of that N), but for layers of few
// tiles (kFewTiles), which pack their own. Needs only the shape's channels, kernel size and
// element type.
template <class Operands, class F>
auto with_operands_packing_tile(const ConvPoolShape& s, F&& f) {
  return narrow_blocks(s) ? f(WideTile<Operands, 64>()) : f(WideTile<Operands, 128>());
}

template <class F>
auto with_packing_tile(const ConvPoolShape& s, F&& f) {
  return with_operands(s, [&](auto operands) {
    return with_operands_packing_tile<decltype(operands)>(s, f);
  });
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

}  // namespace
}  // namespace tiled_wgmma
