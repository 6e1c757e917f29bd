// The general Hopper kernel's plan search (general_search.h): for a shape on a device, the
// tile, the images side by side, a step's staging and the split of the reduction that the cost
// model finds cheapest, within shared memory and the copy engine's limits. Host code only; the
// launch (general_wgmma.cu) settles how x is read (choose_input) on the plan found here.
#include <algorithm>
#include <cstdint>

#include "../conv_pool_heuristics.h"
#include "../conv_pool_layout.h"
#include "../conv_relu_maxpool_wgmma.h"
#include "general_hooks.h"
#include "general_plan_cache.h"
#include "general_search.h"

namespace general_wgmma {

bool merged_rows(const Plan& p, bool staged_copy) {
  return staged_copy && kMergedColWords * p.phase_cols <= kMaxTmaBox && hooks::merged_allowed();
}

namespace {

using namespace conv_pool_heuristics;
using namespace hooks;

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
  const int weight_slice_bytes = t.n * kSliceBytes * weight_parts(p);
  bool found = false;
  int64_t best_volume = 0;
  int best_work = 0;
  // First only steps whose K-step counts (a whole group's, the last group's) the kernel issues
  // unrolled; then any.
  const int forced_rows = forced_group_rows(), forced_chunks = forced_step_chunks();
  const bool even_steps = hooks::even_steps();
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
      // Takes step_chunks where its stages fit and its swizzle is wider than the pick's.
      const auto try_pick = [&](int step_chunks) {
        const int x_swizzle = tma && swizzle ? x_swizzle_bytes(s, step_chunks) : 0;
        if (x_swizzle <= pick_swizzle) return false;
        const int halo_bytes =
            tma ? p.images * p.phases *
                      tma_plane_bytes(halo_rows, p.phase_cols, step_chunks, x_swizzle)
                : round_up(2 * step_chunks * halo_rows * p.row_pitch * kSliceBytes, 128);
        const int weight_bytes = taps * 2 * step_chunks * weight_slice_bytes;
        const int stage_bytes = round_up(halo_bytes + weight_bytes, stage_alignment(x_swizzle));
        const int fixed = fixed_bytes(p, t, taps * step_chunks);
        if (int64_t(kStages) * stage_bytes + fixed > budget) return false;
        if (!any_count && !(static_ksteps(taps * step_chunks) &&
                            static_ksteps(last_taps * step_chunks)))
          return false;
        pick = step_chunks;
        pick_swizzle = x_swizzle;
        pick_halo = halo_bytes;
        pick_stage = stage_bytes;
        return true;
      };
      for (int step_chunks = wanted; step_chunks >= 1; --step_chunks)
        if (try_pick(step_chunks) && (pick_swizzle == 0 || pick_swizzle == 128)) break;
      if (pick == 0) continue;
      if (even_steps) {
        // The same chunk steps, evenly filled, unless that narrows the swizzle (try_pick takes
        // a wider one than pick_swizzle, and changes nothing where it refuses).
        const int even = int(ceil_div(p.chunks, ceil_div(p.chunks, pick)));
        const int swizzle_before = pick_swizzle--;
        if (even >= pick || !try_pick(even)) pick_swizzle = swizzle_before;
      }
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

// The clip (unless $CONV_POOL_GENERAL_CLIP=0), on a plan staged for its whole conv tile: the
// halo holds only the input under the conv pixels its pooling reads, read_rows and (one image
// a tile) read_cols, with the same steps (a small image's tile lies mostly past its edge). The
// squares' pixels past them read on into the stage's next slots, values that only conv pixels
// no window reads take; the stage runs at least that far past its halo (its weights, or
// padding), so those reads stay in it. Left whole where that would make the stage larger.
void clip_halo(const ConvPoolShape& s, const TileSpec& t, Plan& p) {
  const bool tma = p.input == kTmaInput;
  const int tile_rows = 8 * t.square_rows, tile_cols = 8 * t.square_cols;
  const int conv_cols = p.images == 1 ? p.read_cols : tile_cols / p.images;
  const int image_cols = (conv_cols - 1) * s.stride_w + (s.kernel_w - 1) * s.dilation_w + 1;
  const int image_span = p.images > 1 ? round_up(image_cols, s.stride_w) : image_cols;
  const int halo_cols = p.images * image_span;
  const int phase_cols = int(ceil_div(tma ? image_cols : halo_cols, s.stride_w));
  const int row_pitch = tma ? phase_cols : p.phases * phase_cols;
  const int row_rate = p.gathered_rows ? 1 : s.stride_h;  // halo rows a conv row
  const int halo_rows = p.halo_rows - (tile_rows - p.read_rows) * row_rate;
  const int halo_bytes =
      tma ? p.images * p.phases *
                tma_plane_bytes(halo_rows, phase_cols, p.step_chunks, p.x_swizzle)
          : round_up(2 * p.step_chunks * halo_rows * row_pitch * kSliceBytes, 128);
  // 16-byte slots (W-byte groups in a swizzled stage) past the last one staged.
  const int past = (tile_rows - p.read_rows) * row_rate * row_pitch + tile_cols -
                   p.images * conv_cols;
  const int past_bytes = past * std::max(kSliceBytes, p.x_swizzle);
  const int stage_bytes = round_up(halo_bytes + std::max(p.weight_stage_bytes, past_bytes),
                                   stage_alignment(p.x_swizzle));
  if (stage_bytes > p.stage_bytes) return;
  p.image_cols = image_cols;
  p.image_span = image_span;
  p.halo_cols = halo_cols;
  p.phase_cols = phase_cols;
  p.row_pitch = row_pitch;
  p.halo_rows = halo_rows;
  p.halo_bytes = halo_bytes;
  p.stage_bytes = stage_bytes;
}

// The plan of tile `tile_id` with `images` images side by side for `s` (why_not set where it
// cannot run it); registers: 3xTF32's registers form (Plan::split_registers); x_in_place: the
// copy engine would read x in place (no slice-planar copy); copy_term: the cost counts a step's
// copies (best_plan says where).
Candidate plan_tile(const ConvPoolShape& s, const ConvPoolDevice& device, int tile_id,
                    int images, bool split, bool registers, bool allow_tma, bool x_in_place,
                    int want_split, bool copy_term) {
  Candidate c;
  const TileSpec& t = kTileSpecs[tile_id];
  Plan& p = c.plan;
  p.tile = tile_id;
  p.images = images;
  p.split_operands = split;
  p.split_registers = split && registers;
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
  // 3xTF32: three chunks a chunk of x staged, or (split_registers) x's own chunks.
  p.chunks = (split && !p.split_registers ? 3 : 1) * int(ceil_div(s.in_channels, chunk));
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
  // The cost's copy term counts the whole tile's halo, so the clip leaves the tile choice as
  // it was (counting the clipped bytes moved it to tiles that measured slower: docs/PERF.md).
  const int whole_halo_bytes = p.halo_bytes;
  if (clip_allowed()) clip_halo(s, t, p);
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
  // A persistent plan of several rounds never splits (the splits below over several rounds
  // leave persistent plans whole), so a direct one stages nothing; a persistent plan of one
  // round ($CONV_POOL_GENERAL_PERSISTENT=1) may split, and then stages its windows.
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
                   2 * kSliceBytes * weight_parts(p);
  // Whole chunks (a short run's missing ones: zeros); the staged 3xTF32: three a chunk of x.
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
  const int64_t split_rounds = cluster || p.persistent ? 1 : hooks::split_rounds();
  const bool fill_split = s.element == kElementFloat32 && !p.split_operands;
  const double copy_rate = !tma || !copy_term ? 0.0
                           : merged_rows(p, !x_in_place) ? kCopyBytesPerCycleMerged
                                                            : kCopyBytesPerCycleSlices;
  int forced_steps = 0, fill = 1;  // the tuning hook's split's steps; the fill rule's split
  for (int split = 1; split <= kMaxSplit && split <= p.steps; ++split) {
    const int split_steps = int(ceil_div(p.steps, split));
    // A split runs where the steps divide into it and its blocks are all resident (or fit
    // $CONV_POOL_GENERAL_SPLIT_ROUNDS rounds of them); the tuning hook
    // $CONV_POOL_GENERAL_SPLIT (want_split) takes it then, whatever the cost says.
    // Cluster splits: a power of two up to the portable cluster, one block an SM (their kernel
    // instance's registers), every cluster at once (16 tiles of 8 blocks, one more than the
    // H200's 15 clusters, took two rounds: 1.6x the time of 4 blocks).
    const bool cluster_runs = !cluster || split == 1 ||
                              ((split & (split - 1)) == 0 && split <= kConvPoolMaxCluster &&
                               p.tiles <= device.max_clusters[split] &&
                               p.tiles * split <= device.sm_count);
    const bool runs =
        ceil_div(p.steps, split_steps) == split && p.tiles * split <= slots * split_rounds &&
        cluster_runs;
    if (split == want_split && runs) forced_steps = split_steps;
    // The fill rule (kFillSplit): the most blocks a tile, one an SM.
    if (fill_rule && runs && split <= kFillSplit && split_steps >= kFillSplitMinSteps &&
        p.tiles * split <= device.sm_count && (cluster || fill_split))
      fill = split;
    // (split_registers: a step's three wgmmas a chunk count as the staged form's three steps.)
    const int split_kstep_sets = split_steps * (p.split_registers ? 3 : 1);
    if (split > 1 && (!runs || split_kstep_sets < kMinSplitSteps)) continue;
    // The busiest SM's blocks run one after another on its tensor cores (two at a time share
    // them); their fixed work overlaps where two are resident.
    // (split_registers: three wgmmas a K step, as the staged form's three chunks.)
    const double k_steps = double(p.chunks) * s.taps() * (p.split_registers ? 3 : 1) / split;
    const double blocks = double(ceil_div(p.tiles * split, device.sm_count));
    // Partials through the cluster: each block stages its tile and reads its share of all.
    const double reduce =
        split > 1 ? (cluster ? 2.0 : split + 1.0) * tile_bytes / kPartialBytesPerCycle : 0.0;
    const double overlap = p.blocks_per_sm == 2 && blocks >= 2 ? kSharedSmFixed : 1.0;
    // With the copy term: a step's boxes at the copy engine's rate into the SM, which its
    // blocks share, where that is longer than its wgmmas.
    const double copy_cycles =
        copy_rate > 0.0 ? double(p.steps) / split *
                              (whole_halo_bytes / copy_rate +
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
  // The wave rule (kWaveSplitShare): two shares a tile where the whole tiles' last round leaves
  // SMs idle. The cost stays the whole tiles', so that the tile choice is as it was.
  const int64_t sms = device.sm_count;
  const double whole_rounds = double(ceil_div(p.tiles, sms));
  if (wave_split_allowed() && p.split == 1 && !cluster && !p.persistent && !p.split_operands &&
      p.blocks_per_sm == 1 && p.tiles > sms && p.steps >= kWaveSplitMinSteps &&
      double(ceil_div(2 * p.tiles, sms)) / 2.0 <= kWaveSplitShare * whole_rounds) {
    p.split = 2;
    p.split_steps = int(ceil_div(p.steps, 2));
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
// (general_hooks.h) restrict the candidates where that leaves one. 3xTF32's registers form
// (unless $CONV_POOL_GENERAL_SPLIT_REGISTERS=0) falls back to the staged form where one step's
// stage does not fit (its weights are two parts a chunk of x, the staged form's one a staged
// chunk), so that it runs every layer the staged form runs.
Candidate search_plan(const ConvPoolShape& s, const ConvPoolDevice& device, bool split,
                      bool allow_tma, bool x_in_place, bool copy_term) {
  Candidate best, forced;
  best.why_not = forced.why_not = "no tile";
  const int want_tile = forced_tile(), want_images = forced_images();
  const int want_split = forced_split();
  const bool registers = split && split_registers_allowed();
  for (int tile = 0; tile < kTileCount; ++tile)
    for (int images = 1; images <= kTileSpecs[tile].square_cols; images *= 2) {
      if (images > 1 && images > s.batch) break;
      Candidate c = plan_tile(s, device, tile, images, split, registers, allow_tma, x_in_place,
                              want_split, copy_term);
      if (c.why_not != nullptr && registers)
        c = plan_tile(s, device, tile, images, split, false, allow_tma, x_in_place, want_split,
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

}  // namespace

Candidate cheapest_plan(const ConvPoolShape& s, const ConvPoolDevice& device, bool split,
                        bool allow_tma, bool x_in_place, bool copy_term) {
  const int flags = int(split) | int(allow_tma) << 1 | int(x_in_place) << 2 | int(copy_term) << 3;
  return cached_plan<Candidate>(s, device, flags, [&] {
    return search_plan(s, device, split, allow_tma, x_in_place, copy_term);
  });
}

Candidate best_plan(const ConvPoolShape& s, const ConvPoolDevice& device, bool split,
                    bool allow_tma, bool x_in_place) {
  if (copy_cost_allowed()) {
    const Candidate c = cheapest_plan(s, device, split, allow_tma, x_in_place, true);
    if (c.why_not != nullptr || c.plan.split_steps >= kCopyCostMinSteps) return c;
  }
  return cheapest_plan(s, device, split, allow_tma, x_in_place, false);
}

}  // namespace general_wgmma
