// Host side of the general Hopper kernel in its two forms, the warp-specialized one fed by the
// tensor copy engine (general_ws_kernel.cuh, kTmaInput: the default where the engine's limits
// allow) and the one whose warps copy with cp.async (general_kernel.cuh: 3xTF32, strides above
// 8, float32 NCHW layers of little work): the plan (form, tile, staging, shared memory,
// workspace), the shape limits, and the launch with its preparation: the weights packed, a copy
// of x where the kernel cannot read it in place (conv_pool_layout.h), the tensor map of x.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../conv_pool_device.cuh"
#include "../conv_pool_heuristics.h"
#include "../conv_pool_layout.h"
#include "../conv_pool_layout.cuh"
#include "../conv_pool_operands.h"
#include "../conv_relu_maxpool_wgmma.h"
#include "general_hooks.h"
#include "general_plan_cache.h"
#include "general_prepare.cuh"
#include "general_trace.cuh"
#include "general_wgmma.h"

namespace general_wgmma {
namespace {

using namespace conv_pool_heuristics;
using namespace hooks;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int round_up(int value, int multiple) { return int(ceil_div(value, multiple) * multiple); }

// Shared memory the hardware keeps per resident block beside the dynamic allocation, and an
// SM's total (the opt-in per-block limit is 1 KB under it on sm_80 .. sm_90).
constexpr int kReservedPerBlock = 1024;

int sm_shared_bytes(const ConvPoolDevice& device) {
  return device.max_shared_bytes + kReservedPerBlock;
}

double k_step_cycles(const TileSpec& t) {
  const double squares = t.square_rows * t.square_cols;
  return squares * std::max(t.n / 2.0, kSharedMemoryShare * (64.0 + t.n) * 32.0 / 128.0);
}

struct Candidate {
  const char* why_not = nullptr;
  Plan plan{};
  double cost = 0.0;
};

// Shared memory beside the stages: the tile's bias, the K-step table, and (cp.async loaders) the
// halo columns' slots and kStages mbarriers, or (kTmaInput) kMaxStages full and empty ones; a
// word for the split reduction's verdict.
int fixed_bytes(const Plan& p, const TileSpec& t, int kstep_entries) {
  const int common = t.n * 4 + round_up(kstep_entries * 4, 16) + 8;
  return p.input == kTmaInput ? common + 2 * kMaxStages * 8
                              : common + kMaxHaloCols * 4 + kStages * 8;
}

// kTmaInput: the bytes of one (image, column phase) box, a step's 2 x step_chunks slices of
// halo_rows x phase_cols 16-byte slots, padded to 128 bytes (each box lands 128-byte aligned),
// or with a swizzled stage (Plan::x_swizzle) to the swizzle's pattern of 8 x W bytes.
int stage_alignment(int swizzle) { return std::max(128, 8 * swizzle); }
int tma_plane_bytes(int halo_rows, int phase_cols, int step_chunks, int swizzle) {
  return round_up(2 * step_chunks * halo_rows * phase_cols * kSliceBytes,
                  stage_alignment(swizzle));
}

// Plan::x_swizzle for an x read in place: the widest W of 128, 64 and 32 bytes that divides a
// pixel's channels and a step's run of chunks (32 bytes a chunk); 0 where none does (an odd
// number of 16-byte slices).
int x_swizzle_bytes(const ConvPoolShape& s, int step_chunks) {
  const int channel_bytes = s.in_channels * (kSliceBytes / slice_channels(s.element));
  for (int w = 128; w >= 32; w /= 2)
    if (channel_bytes % w == 0 && 2 * step_chunks * kSliceBytes % w == 0) return w;
  return 0;
}

// The reduction's staging for a tile: kernel rows per step (group_rows), row mode and chunks per
// step, the one that moves the fewest halo bytes per chunk among those whose three stages fit
// `budget` (each with as many chunks a step, up to kMinStepKSteps' worth, as fit; in swizzled
// stages, as the widest swizzle allows). kTmaInput
// (p.input) stages its own halo layout and keeps each box within the copy engine's limits;
// `swizzle`: x is read in place into swizzled stages where its channels allow.
bool stage_reduction(const ConvPoolShape& s, const TileSpec& t, Plan& p, int budget,
                     bool swizzle) {
  const bool tma = p.input == kTmaInput;
  const int tile_rows = 8 * t.square_rows;
  const int weight_slice_bytes = t.n * kSliceBytes;
  bool found = false;
  int64_t best_volume = 0;
  int best_work = 0;
  // First only steps whose K-step counts (a whole group's, the last group's) the kernel issues
  // unrolled; then any.
  const int forced_rows = forced_group_rows(), forced_chunks = forced_step_chunks();
  const int most_rows = forced_rows > 0 ? std::min(s.kernel_h, forced_rows) : s.kernel_h;
  for (int any_count = 0; any_count < 2 && !found; ++any_count)
  for (int gathered = 0; gathered < 2; ++gathered) {
    if (tma && gathered && s.stride_h > kMaxTmaStride) continue;
    for (int group_rows = gathered ? 1 : most_rows; group_rows >= 1; --group_rows) {
      const int taps = group_rows * s.kernel_w;
      if (taps > kMaxStageTaps) continue;
      const int halo_rows = gathered ? tile_rows
                                     : (tile_rows - 1) * s.stride_h +
                                           (group_rows - 1) * s.dilation_h + 1;
      if (tma && (gathered ? halo_rows * s.stride_h : halo_rows) > kMaxTmaBox) continue;
      const int wanted = std::min<int>(
          {kMaxStepChunks, forced_chunks > 0 ? forced_chunks : int(ceil_div(kMinStepKSteps, taps)),
           p.chunks});
      // The most chunks a step that fit; with swizzled stages the widest swizzle among the
      // step sizes that fit, then the most chunks (H200: a 64- or 128-byte swizzle of fewer
      // chunks a step 0.81-0.95x the time of the 32- or 64-byte one of more, docs/PERF.md).
      int pick = 0, pick_swizzle = -1, pick_halo = 0, pick_stage = 0;
      const int groups = int(ceil_div(s.kernel_h, group_rows));
      const int last_taps = (s.kernel_h - (groups - 1) * group_rows) * s.kernel_w;
      for (int step_chunks = wanted; step_chunks >= 1; --step_chunks) {
        const int x_swizzle = tma && swizzle ? x_swizzle_bytes(s, step_chunks) : 0;
        if (x_swizzle <= pick_swizzle) continue;
        const int halo_bytes =
            tma ? p.images * p.phases *
                      tma_plane_bytes(halo_rows, p.phase_cols, step_chunks, x_swizzle)
                : round_up(2 * step_chunks * halo_rows * p.row_pitch * kSliceBytes, 128);
        const int weight_bytes = taps * 2 * step_chunks * weight_slice_bytes;
        const int stage_bytes = round_up(halo_bytes + weight_bytes, stage_alignment(x_swizzle));
        const int fixed = fixed_bytes(p, t, taps * step_chunks);
        if (int64_t(kStages) * stage_bytes + fixed > budget) continue;
        if (!any_count && !(static_ksteps(taps * step_chunks) &&
                            static_ksteps(last_taps * step_chunks)))
          continue;
        pick = step_chunks;
        pick_swizzle = x_swizzle;
        pick_halo = halo_bytes;
        pick_stage = stage_bytes;
        if (x_swizzle == 0 || x_swizzle == 128) break;
      }
      if (pick == 0) continue;
      // Halo bytes per chunk of the reduction.
      const int64_t volume = int64_t(groups) * pick_halo / pick;
      const int work = taps * pick;
      if (!found || volume < best_volume || (volume == best_volume && work > best_work)) {
        found = true;
        best_volume = volume;
        best_work = work;
        p.gathered_rows = gathered != 0;
        p.group_rows = group_rows;
        p.groups = groups;
        p.step_chunks = pick;
        p.halo_rows = halo_rows;
        p.halo_bytes = pick_halo;
        p.weight_stage_bytes = taps * 2 * pick * weight_slice_bytes;
        p.stage_bytes = pick_stage;
        p.x_swizzle = pick_swizzle;
      }
    }
  }
  return found;
}

// Whether the copy engine's box rows are whole runs of a phase's slices (Plan::merged_cols):
// from the slice-planar copy, up to the engine's 256 elements (kMergedWordBytes words) a box
// dimension.
bool merged_rows(const Plan& p, bool staged_copy) {
  return staged_copy && kMergedColWords * p.phase_cols <= kMaxTmaBox && merged_allowed();
}

// The plan of tile `tile_id` with `images` images side by side for `s` (why_not set where it
// cannot run it); x_in_place: the copy engine would read x in place (no slice-planar copy);
// copy_term: the cost counts a step's copies (best_plan says where).
Candidate plan_tile(const ConvPoolShape& s, const ConvPoolDevice& device, int tile_id,
                    int images, bool split, bool allow_tma, bool x_in_place, int want_split,
                    bool copy_term) {
  Candidate c;
  const TileSpec& t = kTileSpecs[tile_id];
  Plan& p = c.plan;
  p.tile = tile_id;
  p.images = images;
  p.split_operands = split;
  if (split && (t.n != 64 || t.square_rows * t.square_cols != 4)) {
    c.why_not = "3xTF32 runs the N = 64 tiles of two squares a warpgroup";
    return c;
  }
  // Conv pixels of the tile, and of one image's share of it.
  const int tile_rows = 8 * t.square_rows, tile_cols = 8 * t.square_cols;
  const int share_cols = tile_cols / images;
  if (s.pool_h > tile_rows || s.pool_w > share_cols) {
    c.why_not = "the pooling window is larger than the tile";
    return c;
  }
  p.pooled_rows = (tile_rows - s.pool_h) / s.pool_stride_h + 1;
  p.pooled_cols = (share_cols - s.pool_w) / s.pool_stride_w + 1;
  p.tiles_h = int(ceil_div(s.out_height, p.pooled_rows));
  p.tiles_w = int(ceil_div(s.out_width, p.pooled_cols));
  if (images > 1) {
    if (p.tiles_h > 1 || p.tiles_w > 1) {
      c.why_not = "an image does not fit its share of the tile";
      return c;
    }
    p.pooled_rows = s.out_height;
    p.pooled_cols = s.out_width;
  }
  // A tile's windows start pool_stride apart from its first pixel, and none lies past the
  // output.
  const int windows_h = std::min(p.pooled_rows, s.out_height);
  const int windows_w = std::min(p.pooled_cols, s.out_width);
  p.read_rows = std::min(tile_rows, (windows_h - 1) * s.pool_stride_h + s.pool_h);
  p.read_cols =
      std::min(tile_cols, (images - 1) * share_cols + (windows_w - 1) * s.pool_stride_w + s.pool_w);
  p.channel_blocks = int(ceil_div(s.out_channels, t.n));
  p.tiles = ceil_div(s.batch, images) * p.tiles_h * p.tiles_w * p.channel_blocks;
  if (p.tiles > INT32_MAX) {
    c.why_not = "the grid has more than 2^31 - 1 tiles";
    return c;
  }
  const int chunk = chunk_channels(s.element);
  p.chunks = (split ? 3 : 1) * int(ceil_div(s.in_channels, chunk));
  p.image_cols = (share_cols - 1) * s.stride_w + (s.kernel_w - 1) * s.dilation_w + 1;
  p.image_span = images > 1 ? round_up(p.image_cols, s.stride_w) : p.image_cols;
  p.halo_cols = images * p.image_span;
  if (p.halo_cols > kMaxHaloCols) {
    c.why_not = "a tile's input columns are more than 256 (stride and kernel too wide)";
    return c;
  }
  p.phase_mask = 0;
  for (int q = 0; q < s.kernel_w; ++q) p.phase_mask |= 1u << ((q * s.dilation_w) % s.stride_w);
  p.phases = __builtin_popcount(p.phase_mask);
  // The warp-specialized kernel where the copy engine can bring the halo: every image's phases
  // as boxes of ceil(image_cols / stride_w) columns read every stride_w-th (3xTF32 keeps the
  // cp.async loaders).
  const int tma_cols = int(ceil_div(p.image_cols, s.stride_w));
  const bool tma = allow_tma && s.stride_w <= kMaxTmaStride && tma_cols * s.stride_w <= kMaxTmaBox;
  p.input = tma ? kTmaInput : kPixelInput;  // choose_input settles the cp.async loaders' path
  p.phase_cols = tma ? tma_cols : int(ceil_div(p.halo_cols, s.stride_w));
  p.row_pitch = tma ? p.phase_cols : p.phases * p.phase_cols;
  // Two blocks per SM where the tile is built for it and they fit; else one.
  const int two_block_budget = sm_shared_bytes(device) / 2 - kReservedPerBlock;
  const int min_blocks = split ? 1 : t.min_blocks;  // 3xTF32: 255 registers a thread
  // Swizzled stages where x is read in place (their padding may not fit where plain ones do).
  const bool swizzle = tma && x_in_place && swizzle_allowed();
  // 2 x 2 / 2 pools inside the conv output take their windows' maxima in registers and stage
  // those alone (Plan::paired_pool), in one epilogue pass: a quarter of the conv tile.
  const bool pairable = tma && pool_2x2_inside(s) && pairing_allowed();
  const int paired_pitch = (tile_rows / 2) * (tile_cols / 2) + 4;
  const int window_bytes = round_up(t.n * paired_pitch * 4, 128);  // the staged windows
  // Stored from the registers (plans without a split, unless direct_pairs_allowed says no), the
  // windows take no shared memory.
  const bool direct = pairable && direct_pairs_allowed();
  const int persistent = persistent_mode();
  // Persistent plans on request ($CONV_POOL_GENERAL_PERSISTENT=1) size their steps so that the
  // paired windows fit beside three stages (the rule's plans are the ones where they do).
  const int reserved = pairable && persistent == 1 ? window_bytes : 0;
  auto staged = [&](int budget) {
    return (swizzle && stage_reduction(s, t, p, budget - reserved, true)) ||
           stage_reduction(s, t, p, budget - reserved, false);
  };
  const bool two_blocks = min_blocks == 2 && staged(two_block_budget);
  if (!two_blocks && !staged(device.max_shared_bytes)) {
    c.why_not = "one stage of the input halo and weights does not fit in shared memory";
    return c;
  }
  p.chunk_steps = int(ceil_div(p.chunks, p.step_chunks));
  p.steps = p.chunk_steps * p.groups;
  p.slice_plane = tma ? p.halo_rows * p.phase_cols : p.halo_rows * p.row_pitch;
  p.plane_bytes =
      tma ? tma_plane_bytes(p.halo_rows, p.phase_cols, p.step_chunks, p.x_swizzle) : 0;
  p.box_rows = p.gathered_rows ? p.halo_rows * s.stride_h : p.halo_rows;
  const int budget = two_blocks ? two_block_budget : device.max_shared_bytes;
  const int kstep_entries = p.group_rows * s.kernel_w * p.step_chunks;
  const int fixed = fixed_bytes(p, t, kstep_entries);
  p.tile_pitch = tile_rows * tile_cols + 4;
  auto epilogue_bytes = [&](int passes) {
    return round_up((t.n / passes) * p.tile_pitch * 4, 128);
  };
  // The warp-specialized kernel is persistent where three stages and an epilogue tile of its
  // own fit: the paired windows on layers of more than kPersistentMinRounds rounds of resident
  // blocks (the rule), or where the hook asks for it (persistent_mode), as many channels of the
  // conv tile a pass as fit beside the stages. A block's producer then loads its next tile's
  // steps while the consumers pool this one, as many steps ahead as the stages that fit. (Layers
  // of one round keep one tile a block: their split reductions need it.)
  p.persistent = false;
  p.epilogue_offset = 0;
  int region = 0;
  const bool rounds =
      p.tiles > int64_t(kPersistentMinRounds) * device.sm_count * (two_blocks ? 2 : 1);
  // A plan of several rounds never splits (its tiles outnumber the resident blocks), so a
  // direct one stages nothing; a persistent plan of one round ($CONV_POOL_GENERAL_PERSISTENT=1)
  // may split, and then stages its windows.
  static_assert(kPersistentMinRounds >= 1, "a plan of several rounds must not split");
  const int paired_bytes = direct && rounds ? 0 : window_bytes;
  if (tma && pairable && (persistent == 1 || (persistent == -1 && rounds)) &&
      kStages * p.stage_bytes + paired_bytes + fixed <= budget) {
    p.persistent = true;
    p.epilogue_passes = 1;
    p.stages = std::min(kMaxStages, (budget - fixed - paired_bytes) / p.stage_bytes);
    p.epilogue_offset = p.stages * p.stage_bytes;
    region = p.epilogue_offset + paired_bytes;
  } else if (tma && persistent == 1) {
    int passes = 1;
    while (passes < t.n / 8 && kStages * p.stage_bytes + epilogue_bytes(passes) + fixed > budget)
      passes *= 2;
    if (kStages * p.stage_bytes + epilogue_bytes(passes) + fixed <= budget) {
      p.persistent = true;
      p.epilogue_passes = passes;
      p.stages = std::min(kMaxStages, (budget - fixed - epilogue_bytes(passes)) / p.stage_bytes);
      p.epilogue_offset = p.stages * p.stage_bytes;
      region = p.epilogue_offset + epilogue_bytes(passes);
    }
  }
  if (!p.persistent) {
    p.stages = tma ? std::min(kMaxStages, (budget - fixed) / p.stage_bytes) : kStages;
    // Epilogue: in the stages' bytes, as many channels at a time as the budget holds beside
    // the fixed parts.
    const int pipeline = p.stages * p.stage_bytes;
    p.epilogue_passes = 1;
    while (p.epilogue_passes < t.n / 8 &&
           std::max(pipeline, (t.n / p.epilogue_passes) * p.tile_pitch * 4) + fixed > budget)
      p.epilogue_passes *= 2;
    region = round_up(std::max(pipeline, (t.n / p.epilogue_passes) * p.tile_pitch * 4), 16);
  }
  p.paired_pool = pairable && p.epilogue_passes == 1;
  p.bias_offset = region;
  p.kstep_table_offset = region + t.n * 4;
  p.col_slot_offset = round_up(p.kstep_table_offset + kstep_entries * 4, 16);
  p.barrier_offset = tma ? p.col_slot_offset : p.col_slot_offset + kMaxHaloCols * 4;
  p.smem_bytes = p.barrier_offset + (tma ? 2 * kMaxStages : kStages) * 8 + 8;
  if (p.smem_bytes > device.max_shared_bytes) {
    c.why_not = "one stage of the input halo and weights does not fit in shared memory";
    return c;
  }
  p.blocks_per_sm =
      std::max(1, std::min(min_blocks, sm_shared_bytes(device) /
                                           (p.smem_bytes + kReservedPerBlock)));
  p.packed_bytes = int64_t(p.channel_blocks) * t.n * p.chunk_steps * p.step_chunks * s.taps() *
                   2 * kSliceBytes;
  // Whole chunks (a short run's missing ones: zeros); 3xTF32: three a chunk of x.
  p.staged_channels = p.chunks * chunk;

  // Cost: waves of blocks; per SM and wave, its blocks' K steps and their fixed work. Layers
  // of fewer tiles than the SMs hold split each tile's steps over `split` blocks, where that
  // pays for the partial sums' round trip through L2 (kPartialBytesPerCycle for the last block
  // of a tile, which reads them all).
  const double fixed_cycles = 4.0 * t.square_rows * t.square_cols * t.n + kPipelineFillCycles;
  const int64_t slots = int64_t(device.sm_count) * p.blocks_per_sm;  // resident at once
  const double tile_bytes = 4.0 * 64 * t.square_rows * t.square_cols * t.n;
  p.split = 1;
  p.split_steps = p.steps;
  // Split reductions through the cluster's shared memory where the warp-specialized kernel runs
  // one tile a block, the whole conv tile fits its stages (one epilogue pass) and the layer has
  // few tiles (kClusterSplitMaxTiles).
  const bool cluster = tma && !p.persistent && cluster_allowed() && p.epilogue_passes == 1 &&
                       p.tiles <= kClusterSplitMaxTiles;
  const bool fill_rule = fill_rule_allowed();  // kFillSplit's rule ($CONV_POOL_GENERAL_FILL)
  const bool fill_split = s.element == kElementFloat32 && !p.split_operands;
  const double copy_rate = !tma || !copy_term ? 0.0
                           : merged_rows(p, !x_in_place) ? kCopyBytesPerCycleMerged
                                                            : kCopyBytesPerCycleSlices;
  int forced_steps = 0, fill = 1;  // the tuning hook's split's steps; the fill rule's split
  for (int split = 1; split <= kMaxSplit && split <= p.steps; ++split) {
    const int split_steps = int(ceil_div(p.steps, split));
    // A split runs where the steps divide into it and its blocks are all resident; the tuning
    // hook $CONV_POOL_GENERAL_SPLIT (want_split) takes it then, whatever the cost says.
    // Cluster splits: a power of two up to the portable cluster, one block an SM (their kernel
    // instance's registers), every cluster at once (16 tiles of 8 blocks, one more than the
    // H200's 15 clusters, took two rounds: 1.6x the time of 4 blocks).
    const bool cluster_runs = !cluster || split == 1 ||
                              ((split & (split - 1)) == 0 && split <= kConvPoolMaxCluster &&
                               p.tiles <= device.max_clusters[split] &&
                               p.tiles * split <= device.sm_count);
    const bool runs =
        ceil_div(p.steps, split_steps) == split && p.tiles * split <= slots && cluster_runs;
    if (split == want_split && runs) forced_steps = split_steps;
    // The fill rule (kFillSplit): the most blocks a tile, one an SM.
    if (fill_rule && runs && split <= kFillSplit && split_steps >= kFillSplitMinSteps &&
        p.tiles * split <= device.sm_count && (cluster || fill_split))
      fill = split;
    if (split > 1 && (!runs || split_steps < kMinSplitSteps)) continue;
    // The busiest SM's blocks run one after another on its tensor cores (two at a time share
    // them); their fixed work overlaps where two are resident.
    const double k_steps = double(p.chunks) * s.taps() / split;
    const double blocks = double(ceil_div(p.tiles * split, device.sm_count));
    // Partials through the cluster: each block stages its tile and reads its share of all.
    const double reduce =
        split > 1 ? (cluster ? 2.0 : split + 1.0) * tile_bytes / kPartialBytesPerCycle : 0.0;
    const double overlap = p.blocks_per_sm == 2 && blocks >= 2 ? kSharedSmFixed : 1.0;
    // With the copy term: a step's boxes at the copy engine's rate into the SM, which its
    // blocks share, where that is longer than its wgmmas.
    const double copy_cycles =
        copy_rate > 0.0 ? double(p.steps) / split *
                              (p.halo_bytes / copy_rate +
                               p.weight_stage_bytes / kCopyBytesPerCycleMerged)
                        : 0.0;
    const double cost =
        blocks * (std::max(k_steps * k_step_cycles(t), copy_cycles) + overlap * fixed_cycles) +
        reduce;
    if (split == 1 || cost < c.cost) {
      c.cost = cost;
      p.split = split;
      p.split_steps = split_steps;
    }
    // ($CONV_POOL_GENERAL_FILL=0: the former fill rule, float32 alone, two blocks an SM.)
    if (!fill_rule && fill_split && split <= kFillSplit && split > p.split) {
      p.split = split;
      p.split_steps = split_steps;
    }
  }
  if (fill > p.split && (fill_split || p.split > 1)) {
    p.split = fill;
    p.split_steps = int(ceil_div(p.steps, fill));
  }
  if (forced_steps > 0) {
    p.split = want_split;
    p.split_steps = forced_steps;
  }
  p.cluster_split = cluster && p.split > 1;
  if (p.cluster_split) {
    p.blocks_per_sm = 1;
    p.paired_pool = false;  // (the cluster sums partial tiles, then pools)
  }
  if (p.paired_pool) p.tile_pitch = paired_pitch;
  p.direct_pairs = direct && p.paired_pool && p.split == 1;
  p.partial_bytes = p.split > 1 && !p.cluster_split
                        ? int64_t(p.tiles) * p.split * int64_t(tile_bytes) + 4 * p.tiles
                        : 0;
  // Blocks of the launch: one a (tile, split share), or as many as are resident at once.
  p.grid = p.persistent ? std::min<int64_t>(p.tiles * p.split, slots) : p.tiles * p.split;
  return c;
}

// The cheapest (tile, images) that runs `s`, fewer images on a tie, by the cost with or
// without its copy term; why_not of the last one tried when none does. The hooks
// (general_hooks.h) restrict the candidates where that leaves one.
Candidate search_plan(const ConvPoolShape& s, const ConvPoolDevice& device, bool split,
                      bool allow_tma, bool x_in_place, bool copy_term) {
  Candidate best, forced;
  best.why_not = forced.why_not = "no tile";
  const int want_tile = forced_tile(), want_images = forced_images();
  const int want_split = forced_split();
  for (int tile = 0; tile < kTileCount; ++tile)
    for (int images = 1; images <= kTileSpecs[tile].square_cols; images *= 2) {
      if (images > 1 && images > s.batch) break;
      Candidate c = plan_tile(s, device, tile, images, split, allow_tma, x_in_place, want_split,
                              copy_term);
      if (c.why_not != nullptr) {
        if (best.why_not != nullptr) best.why_not = c.why_not;
        continue;
      }
      if (best.why_not != nullptr || c.cost < best.cost) best = c;
      if ((want_tile < 0 || tile == want_tile) && (want_images == 0 || images == want_images) &&
          (forced.why_not != nullptr || c.cost < forced.cost))
        forced = c;
    }
  return (want_tile >= 0 || want_images > 0) && forced.why_not == nullptr ? forced : best;
}

// search_plan's answer, from this thread's cache where it holds it (general_plan_cache.h).
Candidate cheapest_plan(const ConvPoolShape& s, const ConvPoolDevice& device, bool split,
                        bool allow_tma, bool x_in_place, bool copy_term) {
  const int flags = int(split) | int(allow_tma) << 1 | int(x_in_place) << 2 | int(copy_term) << 3;
  return cached_plan<Candidate>(s, device, flags, [&] {
    return search_plan(s, device, split, allow_tma, x_in_place, copy_term);
  });
}

// The plan: the cheapest by the cost with its copy term where the plan that picks runs at
// least kCopyCostMinSteps steps a block (a step's copies then stream behind the stages at the
// engine's rate, which the term models); with fewer, the stages hold most of a block's
// copies at once and its fixed work decides, so the plan is the cheapest without the term.
Candidate best_plan(const ConvPoolShape& s, const ConvPoolDevice& device, bool split,
                    bool allow_tma, bool x_in_place) {
  if (copy_cost_allowed()) {
    const Candidate c = cheapest_plan(s, device, split, allow_tma, x_in_place, true);
    if (c.why_not != nullptr || c.plan.split_steps >= kCopyCostMinSteps) return c;
  }
  return cheapest_plan(s, device, split, allow_tma, x_in_place, false);
}

// Whether x's channels are contiguous and every stride and its address whole 16-byte slices
// (channels-last); ops == nullptr stands for NCHW.
bool pixel_slices(const ConvPoolShape& s, const ConvPoolOperands* ops) {
  const int per_slice = slice_channels(s.element);
  return ops != nullptr && ops->x_stride[1] == 1 && s.in_channels % per_slice == 0 &&
         ops->x_stride[0] % per_slice == 0 && ops->x_stride[2] % per_slice == 0 &&
         ops->x_stride[3] % per_slice == 0 && aligned16(input_data(s, *ops));
}

// Whether the copy engine reads x in place (channels-last slices, every stride positive: not an
// expanded x) rather than from the launch's slice-planar copy ($CONV_POOL_GENERAL_TMA_COPY=1
// copies always: a tuning and test hook); ops == nullptr stands for NCHW.
bool x_in_place(const ConvPoolShape& s, const ConvPoolOperands* ops) {
  return pixel_slices(s, ops) && ops->x_stride[0] > 0 && ops->x_stride[2] > 0 &&
         ops->x_stride[3] > 0 && !tma_copy_forced();
}

// Whether the warp-specialized kernel may take `s` read from `ops`: not the 3xTF32 form, not
// with the hook that keeps the cp.async loaders, and not a large float32 x without contiguous
// channels (NCHW) whose elements feed few multiply-adds (kTmaCopyMinWork): those the cp.async
// loaders read in place, element by element, where the copy engine needs a copy of x first.
bool tma_for(const ConvPoolShape& s, const ConvPoolOperands* ops, bool split) {
  if (split || !tma_allowed()) return false;
  const int64_t x_elements = int64_t(s.batch) * s.in_channels * s.in_height * s.in_width;
  return s.element != kElementFloat32 || pixel_slices(s, ops) ||
         int64_t(s.out_channels) * s.taps() >= kTmaCopyMinWork ||
         x_elements <= kTmaCopyMaxSmallInput || tma_copy_forced();
}

// The weight's elements from one tap to the next (along the kernel's columns, or its rows
// where it has one column).
int64_t weight_tap_stride(const ConvPoolShape& s, const int64_t* stride) {
  return s.kernel_w > 1 ? stride[3] : stride[2];
}

// Whether the producer can bring each step's weights straight from the weight tensor
// (Plan::weights_in_place): blocks of at most kInPlaceWeightsMaxRounds rounds on the device, at
// least kInPlaceWeightsMinElements weights, channels contiguous in whole 16-byte slices, every
// stride positive and a multiple of 16 bytes, the address 16-byte aligned, and the kernel's
// taps one run of equal strides (1 x 1, or channels-last weights); ops == nullptr stands for a
// contiguous (NCHW) weight. The box (a step's channel slices of n output channels over a
// group's taps) must fit the copy engine's 256 elements a dimension.
bool weights_in_place(const ConvPoolShape& s, const ConvPoolOperands* ops, const Plan& p,
                      const ConvPoolDevice& device) {
  if (p.input != kTmaInput || p.split_operands || weights_packed_forced()) return false;
  if (p.tiles * p.split >
          int64_t(kInPlaceWeightsMaxRounds) * device.sm_count * p.blocks_per_sm ||
      int64_t(s.out_channels) * s.in_channels * s.taps() < kInPlaceWeightsMinElements)
    return false;
  const int per_slice = slice_channels(s.element);
  const int box_taps = p.group_rows * s.kernel_w;
  if (s.in_channels % per_slice != 0 || 2 * p.step_chunks > kMaxTmaBox || box_taps > kMaxTmaBox)
    return false;
  int64_t stride[4] = {int64_t(s.in_channels) * s.taps(), 1, int64_t(s.kernel_w), 1};
  if (ops != nullptr) {
    for (int d = 0; d < 4; ++d) stride[d] = ops->weight_stride[d];
    if (!aligned16(weight_data(s, *ops))) return false;
  }
  if (stride[1] != 1 || stride[0] <= 0 || stride[0] % per_slice != 0) return false;
  if (s.taps() == 1) return true;
  // Tap (r, q) r x kernel_w + q tap strides on: rows kernel_w tap strides apart.
  const int64_t tap = weight_tap_stride(s, stride);
  return tap > 0 && tap % per_slice == 0 &&
         (s.kernel_h == 1 || stride[2] == int64_t(s.kernel_w) * tap);
}

// Column phases of the slice-planar copy (conv_pool_layout.h): the column stride where the
// producer's boxes read merged rows (a phase's columns one run), else 1; and the slots of one
// of its rows.
int copy_phases(const ConvPoolShape& s, const Plan& p) { return p.merged_cols ? s.stride_w : 1; }
// The phases of the copy some box reads (bit r: columns r mod stride_w): a tile's boxes start at
// column conv_col0 x stride_w - pad_w, so its offset r (Plan::phase_mask) is the phase of
// column r - pad_w.
uint32_t copy_phase_mask(const ConvPoolShape& s, const Plan& p) {
  const int phases = copy_phases(s, p);
  if (phases == 1) return 1u;
  uint32_t mask = 0;
  for (int r = 0; r < phases; ++r)
    if ((p.phase_mask >> r) & 1u) mask |= 1u << phase_run(r - s.pad_w, phases).phase;
  return mask;
}
int64_t staged_row_slots(const ConvPoolShape& s, const Plan& p) {
  return int64_t(conv_pool_phase_width(s.in_width, copy_phases(s, p))) * copy_phases(s, p);
}

// How the kernel reads x. kTmaInput: in place (x_in_place) or from the launch's slice-planar
// copy, its box rows merged where they fit (merged_rows). The cp.async loaders: by 16-byte
// pixel slices where the channels are contiguous and 16-byte aligned (channels-last), read in
// place. Other 16-bit inputs are copied to NHWC first; other float32 inputs too where each
// input element feeds enough work (kNhwcCopyMinWork), else they are read element by element
// (4-byte copies, the transpose on the way in).
void choose_input(const ConvPoolShape& s, const ConvPoolOperands* ops,
                  const ConvPoolDevice& device, Plan& p) {
  const int per_slice = slice_channels(s.element);
  const bool slices = pixel_slices(s, ops);
  if (p.input == kTmaInput) {
    p.staged_copy = !x_in_place(s, ops);
    if (p.staged_copy) p.x_swizzle = 0;  // (the plan's search reads x_in_place the same way)
    p.merged_cols = merged_rows(p, p.staged_copy);
    p.staged_channels = round_up(s.in_channels, per_slice);
    p.staged_input_bytes = p.staged_copy ? int64_t(s.batch) * s.in_height *
                                               staged_row_slots(s, p) * p.staged_channels *
                                               element_bytes(s)
                                         : 0;
    p.weights_in_place = weights_in_place(s, ops, p, device);
    if (p.weights_in_place) p.packed_bytes = 0;
    const int n = kTileSpecs[p.tile].n;
    p.tail_n = narrow_tail_allowed() ? tail_width(s.out_channels - (p.channel_blocks - 1) * n, n)
                                     : 0;
    if (p.tail_n > 0 && !p.weights_in_place)  // (packed_rows: the last block's slices narrower)
      p.packed_bytes -= p.packed_bytes / p.channel_blocks / n * (n - p.tail_n);
    return;
  }
  p.tail_n = 0;
  p.staged_copy = !slices || p.split_operands;
  if (s.element == kElementFloat32 && !slices && !p.split_operands) {
    const int forced = forced_nhwc();
    p.staged_copy = forced >= 0 ? forced == 1
                                : int64_t(s.out_channels) * s.taps() >= kNhwcCopyMinWork;
  }
  p.input = slices || p.staged_copy ? kPixelInput : kPlanarInput;
  p.staged_input_bytes = p.staged_copy ? int64_t(s.batch) * s.in_height * s.in_width *
                                             p.staged_channels * element_bytes(s)
                                       : 0;
}

int64_t region_bytes(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// The driver's tensor-map encoder, through the runtime (no driver library linked), or nullptr.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return PFN_cuTensorMapEncodeTiled_v12000(nullptr);
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  return encoder;
}

// kTmaInput: the 5-D view of x the producer's boxes come from, innermost first: (channel in a
// slice, column, row, slice, image), on the slice-planar copy or on x itself (channels-last: a
// slice 16 bytes on from the previous). A box: a step's 2 x step_chunks slices of phase_cols
// columns read every stride_w-th and halo_rows rows (read every stride_h-th for gathered
// rows), landing [slice][row][column][16 bytes]. A swizzled stage (p.x_swizzle = W): W-byte
// groups of channels for slices, landing [group][row][column][W bytes] swizzled. Merged
// columns (p.merged_cols): (column of a phase x 8-byte word of its slice, column phase, row,
// slice, image) on the copy, whose rows hold stride_w phases of ceil(width / stride_w)
// columns each, a box row one run of phase_cols slices of one phase. Raw words: no
// conversion; out of bounds: zeros.
cudaError_t encode_x_map(const ConvPoolShape& s, const ConvPoolOperands& ops, const Plan& p,
                         CUtensorMap* map) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  const int bytes = element_bytes(s);
  const cuuint64_t width = cuuint64_t(s.in_width), height = cuuint64_t(s.in_height);
  cuuint64_t dims[5], strides[4];
  const void* address;
  dims[1] = width;
  if (p.staged_copy) {
    const cuuint64_t slices = cuuint64_t(p.staged_channels / slice_channels(s.element));
    const cuuint64_t row = cuuint64_t(staged_row_slots(s, p));  // slots of a row
    const cuuint64_t phase_slots = row / cuuint64_t(copy_phases(s, p));
    address = p.staged_input;
    dims[0] = p.merged_cols ? cuuint64_t(kMergedColWords) * phase_slots
                            : cuuint64_t(slice_channels(s.element));
    if (p.merged_cols) dims[1] = cuuint64_t(copy_phases(s, p));
    dims[3] = slices;
    strides[0] = p.merged_cols ? kSliceBytes * phase_slots : kSliceBytes;
    strides[1] = kSliceBytes * row;
    strides[2] = kSliceBytes * row * height;
    strides[3] = kSliceBytes * row * height * slices;
  } else {  // (choose_input: in_channels a multiple of the slice's, or of x_swizzle bytes)
    const int group = pixel_slots(p) * kSliceBytes;  // bytes of a box row
    address = input_data(s, ops);
    dims[0] = cuuint64_t(group / bytes);
    dims[3] = cuuint64_t(s.in_channels * bytes / group);
    strides[0] = cuuint64_t(ops.x_stride[3] * bytes);
    strides[1] = cuuint64_t(ops.x_stride[2] * bytes);
    strides[2] = cuuint64_t(group);
    strides[3] = cuuint64_t(ops.x_stride[0] * bytes);
  }
  dims[2] = height;
  dims[4] = cuuint64_t(s.batch);
  const cuuint32_t box[5] = {
      cuuint32_t(p.merged_cols ? kMergedColWords * p.phase_cols
                               : pixel_slots(p) * slice_channels(s.element)),
      cuuint32_t(p.merged_cols ? 1 : p.phase_cols * s.stride_w), cuuint32_t(p.box_rows),
      cuuint32_t(2 * p.step_chunks / pixel_slots(p)), 1};
  const cuuint32_t element_strides[5] = {1, cuuint32_t(p.merged_cols ? 1 : s.stride_w),
                                         cuuint32_t(p.gathered_rows ? s.stride_h : 1), 1, 1};
  const CUresult result =
      encode(map,
             p.merged_cols ? CU_TENSOR_MAP_DATA_TYPE_UINT64
             : bytes == 4  ? CU_TENSOR_MAP_DATA_TYPE_UINT32
                           : CU_TENSOR_MAP_DATA_TYPE_UINT16,
             5, const_cast<void*>(address), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE,
             p.x_swizzle == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
             : p.x_swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
             : p.x_swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                 : CU_TENSOR_MAP_SWIZZLE_NONE,
             CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// Plan::weights_in_place: the 5-D view of the weight the producer's weight boxes come from,
// innermost first: (channel in a slice, output channel, slice, tap, -). A box, a step's weights:
// its 2 x step_chunks slices of n output channels over group_rows x kernel_w taps, landing as
// [tap][slice][n][16 bytes] (the packed layout's step); out of bounds (channels past the
// weight's, a short last run's chunks, a short last group's taps): zeros.
cudaError_t encode_weight_map(const ConvPoolShape& s, const ConvPoolOperands& ops, const Plan& p,
                              CUtensorMap* map) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  const int bytes = element_bytes(s);
  const int per_slice = slice_channels(s.element);
  const int64_t tap_stride = s.taps() == 1 ? per_slice : weight_tap_stride(s, ops.weight_stride);
  const cuuint64_t dims[5] = {cuuint64_t(per_slice), cuuint64_t(s.out_channels),
                              cuuint64_t(s.in_channels / per_slice), cuuint64_t(s.taps()), 1};
  const cuuint64_t strides[4] = {cuuint64_t(ops.weight_stride[0] * bytes), kSliceBytes,
                                 cuuint64_t(tap_stride * bytes), kSliceBytes};
  const cuuint32_t box[5] = {cuuint32_t(per_slice), cuuint32_t(kTileSpecs[p.tile].n),
                             cuuint32_t(2 * p.step_chunks),
                             cuuint32_t(p.group_rows * s.kernel_w), 1};
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUresult result =
      encode(map, bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32 : CU_TENSOR_MAP_DATA_TYPE_UINT16,
             5, const_cast<void*>(weight_data(s, ops)), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
             CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// The preparation launch (prepare_kernel): the split counters zeroed (a memset instead where
// `separate`), the weights packed, and with copy_x the slice-planar copy of x.
template <class Raw, int kSliceChannels>
cudaError_t prepare(const Raw* weight, const ConvPoolOperands& ops, const ConvPoolShape& s,
                    const Plan& p, bool copy_x, bool separate, cudaStream_t stream) {
  const PackJob<Raw> pack{weight,
                          ops.weight_stride[0],
                          ops.weight_stride[1],
                          ops.weight_stride[2],
                          ops.weight_stride[3],
                          kTileSpecs[p.tile].n,
                          static_cast<Raw*>(const_cast<void*>(p.packed)),
                          p.packed_bytes / kSliceBytes};
  const int64_t units = pack.units;
  // At least one block: the packing blocks also zero the counters.
  const int64_t pack_blocks = std::clamp<int64_t>(ceil_div(units, 256), 1, 4 * 1024);
  uint32_t* counters = static_cast<uint32_t*>(const_cast<void*>(p.counters));
  int counter_words = p.split > 1 && !p.cluster_split ? int(p.tiles) : 0;
  if (separate && counter_words > 0) {
    if (cudaError_t error = cudaMemsetAsync(counters, 0, size_t(4) * counter_words, stream);
        error != cudaSuccess)
      return error;
    counter_words = 0;
  }
  ToSlices<Raw> copy{};
  int64_t copy_blocks = 0;
  if (copy_x) {
    copy = to_slices_job<Raw>(input_data(s, ops), ops.x_stride, s.batch, s.in_channels,
                              s.in_height, s.in_width, copy_phases(s, p), copy_phase_mask(s, p),
                              conv_pool_copy_rows(s), p.staged_channels / kSliceChannels,
                              const_cast<void*>(p.staged_input));
    static_assert(ToSlices<Raw>::kBlockThreads == 256, "the copy's blocks are the launch's");
    copy_blocks = ceil_div(copy.items(), 256);
  }
  if (units == 0 && counter_words == 0 && copy_blocks == 0) return cudaSuccess;  // nothing to do
  prepare_kernel<Raw, kSliceChannels><<<unsigned(pack_blocks + copy_blocks), 256, 0, stream>>>(
      pack, s, p, pack_blocks, copy, counters, counter_words);
  return cudaGetLastError();
}

}  // namespace
}  // namespace general_wgmma

using general_wgmma::Plan;

const char* general_wgmma_unsupported(const ConvPoolShape& s, const ConvPoolDevice& device,
                                      bool split) {
  if (const char* why = wgmma_unavailable(device)) return why;
  if (split && s.element != kElementFloat32) return "3xTF32 takes float32 operands";
  if (s.kernel_w > general_wgmma::kMaxKernelCols) return "the kernel is wider than 64 columns";
  if (s.stride_w > general_wgmma::kMaxStrideW) return "the column stride is above 32";
  // (Whether a plan exists does not depend on the cost: one pass, without the copy term.)
  return general_wgmma::cheapest_plan(s, device, split,
                                      general_wgmma::tma_for(s, nullptr, split), false, false)
      .why_not;
}

Plan general_wgmma_plan(const ConvPoolShape& s, const ConvPoolDevice& device,
                        const ConvPoolOperands* ops, bool split) {
  if (general_wgmma::fold_applies(s, split)) {  // the folded layer's plan (general_fold.cu)
    const ConvPoolShape f = general_wgmma::folded_shape(s);
    const ConvPoolOperands folded = general_wgmma::folded_operands(f, nullptr, nullptr);
    return general_wgmma_plan(f, device, &folded, split);
  }
  Plan p = general_wgmma::best_plan(s, device, split, general_wgmma::tma_for(s, ops, split),
                                    general_wgmma::x_in_place(s, ops))
               .plan;
  general_wgmma::choose_input(s, ops, device, p);
  return p;
}

int64_t general_wgmma_workspace_bytes(const ConvPoolShape& s, const ConvPoolDevice& device,
                                      const ConvPoolOperands* ops, bool split) {
  if (general_wgmma::fold_applies(s, split)) {  // the folded layer's, then x' and w'
    const ConvPoolShape f = general_wgmma::folded_shape(s);
    const ConvPoolOperands folded = general_wgmma::folded_operands(f, nullptr, nullptr);
    const int64_t inner = general_wgmma_workspace_bytes(f, device, &folded, split);
    return general_wgmma::region_bytes(inner) + general_wgmma::fold_bytes(f);
  }
  const Plan p = general_wgmma_plan(s, device, ops, split);
  return general_wgmma::region_bytes(p.packed_bytes) +
         general_wgmma::region_bytes(p.staged_input_bytes) + p.partial_bytes;
}

cudaError_t general_wgmma_launch(const ConvPoolOperands& ops, const ConvPoolShape& s,
                                 const ConvPoolDevice& device, cudaStream_t stream,
                                 const int64_t* out_stride, bool split) {
  using namespace general_wgmma;
  if (fold_applies(s, split)) {  // x' and w' after the folded layer's workspace, then its launch
    const ConvPoolShape f = folded_shape(s);
    const ConvPoolOperands layout = folded_operands(f, nullptr, nullptr);
    const int64_t inner = region_bytes(general_wgmma_workspace_bytes(f, device, &layout, split));
    unsigned char* region = reinterpret_cast<unsigned char*>(ops.workspace) + inner;
    ConvPoolOperands folded;
    if (cudaError_t error = fold_inputs(ops, s, f, region, stream, &folded); error != cudaSuccess)
      return error;
    return general_wgmma_launch(folded, f, device, stream, out_stride, split);
  }
  Plan p = general_wgmma_plan(s, device, &ops, split);
  if (out_stride != nullptr) {
    for (int d = 0; d < 4; ++d) p.out_stride[d] = out_stride[d];
  } else {
    p.out_stride[3] = 1;
    p.out_stride[2] = s.out_width;
    p.out_stride[1] = p.out_stride[2] * s.out_height;
    p.out_stride[0] = p.out_stride[1] * s.out_channels;
  }
  unsigned char* workspace = reinterpret_cast<unsigned char*>(ops.workspace);
  p.packed = workspace;
  p.staged_input = workspace + region_bytes(p.packed_bytes);
  unsigned char* partials = workspace + region_bytes(p.packed_bytes) +
                            region_bytes(p.staged_input_bytes);
  p.partials = partials;
  p.counters = partials + (p.partial_bytes - 4 * p.tiles);
  // The slice-planar copy of x rides in the preparation launch (with
  // $CONV_POOL_GENERAL_SEPARATE_PREP=1: conv_pool_to_slices' own launch).
  const bool separate = separate_preparation();
  const bool copy_in_preparation = p.input == kTmaInput && p.staged_copy && !separate;
  if (p.input == kTmaInput && p.staged_copy && copy_poisoned()) {
    if (cudaError_t error = cudaMemsetAsync(const_cast<void*>(p.staged_input), 0xff,
                                            size_t(p.staged_input_bytes), stream);
        error != cudaSuccess)
      return error;
  }
  cudaError_t prepared =
      s.element == kElementFloat32
          ? prepare<float, 4>(ops.weight, ops, s, p, copy_in_preparation, separate, stream)
          : prepare<uint16_t, 8>(ops.weight16, ops, s, p, copy_in_preparation, separate,
                                 stream);
  if (prepared != cudaSuccess) return prepared;
  if (p.split_operands) {
    const int64_t elements = int64_t(s.batch) * s.in_height * s.in_width * p.staged_channels;
    const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(elements, 256), 16 * 1024));
    split_to_channels_last_kernel<<<blocks, 256, 0, stream>>>(
        ops.x, ops.x_stride[0], ops.x_stride[1], ops.x_stride[2], ops.x_stride[3], s,
        p.staged_channels, static_cast<float*>(const_cast<void*>(p.staged_input)));
    if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) return error;
    return general_wgmma_launch_float32_3xtf32(ops, s, p, stream);
  }
  if (p.input == kTmaInput) {
    if (p.staged_copy && !copy_in_preparation) {
      if (cudaError_t error = conv_pool_to_slices(
              input_data(s, ops), ops.x_stride, element_bytes(s), s.batch, s.in_channels,
              s.in_height, s.in_width, copy_phases(s, p), copy_phase_mask(s, p),
              conv_pool_copy_rows(s), p.staged_channels / slice_channels(s.element),
              const_cast<void*>(p.staged_input), stream);
          error != cudaSuccess)
        return error;
    }
    CUtensorMap x_map, weight_map{};
    if (cudaError_t error = encode_x_map(s, ops, p, &x_map); error != cudaSuccess) return error;
    if (p.weights_in_place) {
      if (cudaError_t error = encode_weight_map(s, ops, p, &weight_map); error != cudaSuccess)
        return error;
    }
    p.wide_pool = hooks::wide_pool_allowed() && p.out_stride[1] == 1 &&
                  p.epilogue_passes == 1 && !p.paired_pool && !p.cluster_split;
    if (trace_path() != nullptr) {
      if (cudaError_t error = trace_begin(p, stream); error != cudaSuccess) return error;
    }
    const cudaError_t launched =
        s.element == kElementFloat32   ? launch_ws<Float32>(ops, s, p, x_map, weight_map, stream)
        : s.element == kElementFloat16 ? launch_ws<Float16>(ops, s, p, x_map, weight_map, stream)
                                       : launch_ws<BFloat16>(ops, s, p, x_map, weight_map, stream);
    return launched == cudaSuccess && p.trace != nullptr ? trace_end(p, stream) : launched;
  }
  if (p.staged_copy) {
    if (cudaError_t error = conv_pool_to_channels_last(
            input_data(s, ops), ops.x_stride, element_bytes(s), s.batch, s.in_channels,
            s.in_height, s.in_width,
            p.staged_channels, const_cast<void*>(p.staged_input), stream);
        error != cudaSuccess)
      return error;
  }
  switch (s.element) {
    case kElementFloat32:
      return general_wgmma_launch_float32(ops, s, p, stream);
    case kElementFloat16:
      return general_wgmma_launch_float16(ops, s, p, stream);
    default:
      return general_wgmma_launch_bfloat16(ops, s, p, stream);
  }
}
