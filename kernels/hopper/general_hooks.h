// The general kernel's hooks: environment variables that override one choice of the host's
// plan, for tuning, tests and A/B measurements. Unset, the plans are the cost model's and the
// rules' own; each hook below says what it changes. Host code only, read at every plan (so a
// test or a tool may set and clear one between calls), through conv_pool_env::hook_env (one
// walk of the environment for a whole call of the op). $CONV_POOL_GENERAL_TRACE, the
// per-block timestamps, lives with its kernel side in general_trace.cuh.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "../conv_pool_env.h"
#include "../conv_pool_heuristics.h"
#include "general_plan.h"

namespace general_wgmma {
namespace hooks {

// Whether $name is set to exactly `value`.
inline bool is(const char* name, const char* value) {
  const char* set = conv_pool_env::hook_env(name);
  return set != nullptr && std::strcmp(set, value) == 0;
}

// $CONV_POOL_GENERAL_TMA=0: the cp.async loaders instead of the warp-specialized kernel.
inline bool tma_allowed() { return !is("CONV_POOL_GENERAL_TMA", "0"); }

// $CONV_POOL_GENERAL_PERSISTENT=1: persistent plans wherever they fit (their epilogue tile
// beside three stages: the paired windows, for which the steps are sized, or the conv tile in
// passes); =0: one tile a block everywhere. Unset: the rule (kPersistentMinRounds: paired
// plans of several rounds of blocks; with the conv tile in passes the zoo's layers took up to
// 2.7x the time of one tile a block on the H200, docs/PERF.md). Returns 1, 0, or -1 for the
// rule.
inline int persistent_mode() {
  if (is("CONV_POOL_GENERAL_PERSISTENT", "1")) return 1;
  return is("CONV_POOL_GENERAL_PERSISTENT", "0") ? 0 : -1;
}

// $CONV_POOL_GENERAL_PAIRED=0: 2 x 2 pools staged as the whole conv tile instead of their
// maxima taken in registers (Plan::paired_pool).
inline bool pairing_allowed() { return !is("CONV_POOL_GENERAL_PAIRED", "0"); }

// $CONV_POOL_GENERAL_CLUSTER=0: split reductions summed through global memory instead of the
// cluster's shared memory.
inline bool cluster_allowed() { return !is("CONV_POOL_GENERAL_CLUSTER", "0"); }

// $CONV_POOL_GENERAL_TMA_MERGED=0: one box a column instead of merged box rows.
inline bool merged_allowed() { return !is("CONV_POOL_GENERAL_TMA_MERGED", "0"); }

// $CONV_POOL_GENERAL_COPY_COST=0: the tile choice's cost never counts the bytes a step's boxes
// bring at the copy engine's measured rates (kCopyBytesPerCycle*; best_plan says where it
// does).
inline bool copy_cost_allowed() { return !is("CONV_POOL_GENERAL_COPY_COST", "0"); }

// $CONV_POOL_GENERAL_SWIZZLE=0: channels-last x read in place one 16-byte slice a box row,
// never in swizzled groups of 32-128 bytes (Plan::x_swizzle).
inline bool swizzle_allowed() { return !is("CONV_POOL_GENERAL_SWIZZLE", "0"); }

// $CONV_POOL_GENERAL_TMA_COPY=1: the warp-specialized kernel always reads x from the launch's
// slice-planar copy, float32 NCHW layers of little work included.
inline bool tma_copy_forced() { return is("CONV_POOL_GENERAL_TMA_COPY", "1"); }

// $CONV_POOL_GENERAL_PACK=1: the weights packed into the workspace even where the producer
// could read them in place.
inline bool weights_packed_forced() { return is("CONV_POOL_GENERAL_PACK", "1"); }

// $CONV_POOL_GENERAL_SEPARATE_PREP=1: the preparation as separate launches (a memset of the
// counters, the packing, the copy of x).
inline bool separate_preparation() { return is("CONV_POOL_GENERAL_SEPARATE_PREP", "1"); }

// $CONV_POOL_GENERAL_POISON_COPY=1: the slice-planar copy's memory set to 0xff bytes (NaN in
// every dtype) before the copy, so that a test sees any slot the kernel reads and the copy
// leaves unwritten (the phases and rows no tap reads).
inline bool copy_poisoned() { return is("CONV_POOL_GENERAL_POISON_COPY", "1"); }

// $CONV_POOL_GENERAL_PDL=1: the warp-specialized kernel launched as the previous kernel's
// programmatic dependent (its blocks' setup under the preparation launch's tail; they wait
// for it before any global access). A launch setting, not the plan's.
inline bool dependent_launch() { return is("CONV_POOL_GENERAL_PDL", "1"); }

// $CONV_POOL_GENERAL_FOLD=0: layers of fewer channels than a chunk run unfolded, one tap a
// chunk step, instead of column-folded (general_fold.cu: kernel_w x C channels and a
// one-column kernel over a folded copy of x).
inline bool fold_allowed() { return !is("CONV_POOL_GENERAL_FOLD", "0"); }

// $CONV_POOL_GENERAL_WINDOWS=1: every 1 x 1 layer under pools whose windows do not overlap runs
// window-major (general_windows.cu: the windows' conv pixels side by side in a copy of x, each
// window's outputs stored in place); =0: none; unset (-1): where the rule says
// (kWindowsMaxWaveShare).
inline int windows_forced() {
  const char* value = conv_pool_env::hook_env("CONV_POOL_GENERAL_WINDOWS");
  if (value == nullptr || (value[0] != '0' && value[0] != '1') || value[1] != '\0') return -1;
  return value[0] - '0';
}

// $CONV_POOL_GENERAL_WIDE_POOL=0: the pooling's window loops take 2 channels at once even where
// the accumulators are dead and could take 16 bytes of channels (Plan::wide_pool). A launch
// setting, not the plan's.
inline bool wide_pool_allowed() { return !is("CONV_POOL_GENERAL_WIDE_POOL", "0"); }

// $CONV_POOL_GENERAL_POOL_POSITIONS=0: a channels-last output's pooling gives a thread (channel
// group, position) pairs in turn instead of one position and its groups (Plan::pool_positions).
// A launch setting, not the plan's.
inline bool pool_positions_enabled() { return !is("CONV_POOL_GENERAL_POOL_POSITIONS", "0"); }

// $CONV_POOL_GENERAL_PIXEL_MAJOR=0: a channels-last output's conv tile staged [channel][pixel]
// as other outputs' are, not [pixel][channel] (Plan::pixel_major). A launch setting, not the
// plan's.
inline bool pixel_major_enabled() { return !is("CONV_POOL_GENERAL_PIXEL_MAJOR", "0"); }

// $CONV_POOL_GENERAL_POOL_RECT=0: Plan::pool_rect off (the pooling's threads over the tile's
// whole pooled rectangle; the first bias read after the first steps). A launch setting, not the
// plan's.
inline bool pool_rect_enabled() { return !is("CONV_POOL_GENERAL_POOL_RECT", "0"); }

// $CONV_POOL_GENERAL_COALESCED_PACK=0: the weight packing reads the weights in the packed
// order, one element a load, not OIHW weights tap first and an OHWI weight's 16 bytes of
// channels as one load (PackJob, general_prepare.cuh). A launch setting, not the plan's.
inline bool coalesced_pack_enabled() { return !is("CONV_POOL_GENERAL_COALESCED_PACK", "0"); }

// $CONV_POOL_GENERAL_LAUNCH_FREE=0: weights under kInPlaceWeightsMinElements are packed by the
// preparation launch even where that launch has nothing else to do (x read in place, no split
// counters), rather than read in place so that the kernel runs alone (weights_in_place,
// general_wgmma.cu). Read after the tile search, so not one of its SearchHooks.
inline bool launch_free_allowed() { return !is("CONV_POOL_GENERAL_LAUNCH_FREE", "0"); }

// $CONV_POOL_GENERAL_SELF_COPY: whether a block may write its own part of x's slice-planar copy
// (Plan::self_copy): by default where self_copy_applies says; "0": never (the preparation
// launch copies x); "force": without kSelfCopyMaxBytes's cap. Read after the tile search.
inline int self_copy_mode() {
  if (is("CONV_POOL_GENERAL_SELF_COPY", "force")) return 2;
  return is("CONV_POOL_GENERAL_SELF_COPY", "0") ? 0 : 1;
}

// $CONV_POOL_GENERAL_DIRECT_PAIRS=0: paired plans without a split stage their windows for the
// pooling loops, as split ones do, instead of storing the windows' outputs from the registers
// (Plan::direct_pairs), and their persistent plans of several rounds reserve the windows' bytes.
inline bool direct_pairs_allowed() { return !is("CONV_POOL_GENERAL_DIRECT_PAIRS", "0"); }

// $CONV_POOL_GENERAL_FILL=0: the split reductions' former fill rule (float32 alone, shares of at
// least kMinSplitSteps steps, two blocks an SM) instead of kFillSplit's (general_search.cu).
inline bool fill_rule_allowed() { return !is("CONV_POOL_GENERAL_FILL", "0"); }

// $CONV_POOL_GENERAL_WAVE_SPLIT=0: layers of several rounds keep whole tiles where
// kWaveSplitShare's rule would split them in two (general_search.cu).
inline bool wave_split_allowed() { return !is("CONV_POOL_GENERAL_WAVE_SPLIT", "0"); }

// $CONV_POOL_GENERAL_NARROW_TAIL=0: every channel block runs the tile's N, where by default the
// last block of a layer whose channels leave it at most half full runs narrower wgmmas
// (Plan::tail_n). Read after the tile search (choose_input), so not one of its SearchHooks.
inline bool narrow_tail_allowed() { return !is("CONV_POOL_GENERAL_NARROW_TAIL", "0"); }

// $CONV_POOL_GENERAL_SUBSAMPLE: which forms run strided layers over only the rows and columns
// their taps read (general_subsample.h): by default every form; "split": the 3xTF32 form
// alone (the TF32 and 16-bit forms reading x's gathered rows instead); "0": none.
inline bool subsample_allowed(bool split) {
  if (is("CONV_POOL_GENERAL_SUBSAMPLE", "0")) return false;
  return split || !is("CONV_POOL_GENERAL_SUBSAMPLE", "split");
}

// $CONV_POOL_GENERAL_CLIP=0: a tile's halo spans its whole conv tile instead of the rows and
// (one image a tile) columns under the pixels its pooling reads (general_search.cu's
// clip_halo).
inline bool clip_allowed() { return !is("CONV_POOL_GENERAL_CLIP", "0"); }

// $CONV_POOL_GENERAL_TRANSPOSE: a layer runs as its transpose (general_transpose.h) where the
// cost model finds that plan cheaper by kTransposeGain (general_wgmma.cu's transpose_chosen
// says which layers may), the default; "0": never; "force": wherever the transposed layer has
// a plan (tests). Read per launch (it picks between two searched plans).
inline int transpose_mode() {
  if (is("CONV_POOL_GENERAL_TRANSPOSE", "force")) return 2;
  return is("CONV_POOL_GENERAL_TRANSPOSE", "0") ? 0 : 1;
}

// $CONV_POOL_GENERAL_SPLIT_REGISTERS=0: the 3xTF32 form reads x's big and small parts from the
// launch's split NHWC copy (the staged form) rather than splitting x in the consumers'
// registers (Plan::split_registers, the default on every tile where one step's stage fits;
// else the staged form: general_search.cu). For A/B timing and tests.
inline bool split_registers_allowed() { return !is("CONV_POOL_GENERAL_SPLIT_REGISTERS", "0"); }

// $CONV_POOL_GENERAL_PLAN_CACHE=0: every plan searched afresh (general_plan_cache.h), to
// time the search or to rule the cache out.
inline bool plan_cache_allowed() { return !is("CONV_POOL_GENERAL_PLAN_CACHE", "0"); }

// $CONV_POOL_GENERAL_SPLIT=k: blocks a tile's reduction is split over (1..kMaxSplit), or 0.
inline int forced_split() {
  const char* value = conv_pool_env::hook_env("CONV_POOL_GENERAL_SPLIT");
  return value == nullptr ? 0 : std::max(0, std::atoi(value));
}

// $CONV_POOL_GENERAL_SPLIT_ROUNDS=k (1..4): a split through L2 may take up to k rounds of
// resident blocks (its shares need not run at once: the last to arrive adds them), so that a
// layer of more than half the resident blocks' tiles may split where the cost says; unset: one
// round (the cost's picks so lost 1.12x on the geometric mean, docs/PERF.md). The cluster
// split, the fill rule and persistent plans stay within one round.
inline int split_rounds() {
  const char* value = conv_pool_env::hook_env("CONV_POOL_GENERAL_SPLIT_ROUNDS");
  return value == nullptr ? 1 : std::clamp(std::atoi(value), 1, 4);
}

// $CONV_POOL_GENERAL_TILE=name ("wide_n128", ...): that tile wherever it runs the shape, or -1.
inline int forced_tile() {
  const char* name = conv_pool_env::hook_env("CONV_POOL_GENERAL_TILE");
  if (name == nullptr) return -1;
  for (int tile = 0; tile < kTileCount; ++tile)
    if (std::strcmp(name, kTileSpecs[tile].name) == 0) return tile;
  return -1;
}

// $CONV_POOL_GENERAL_IMAGES=1, 2 or 4: that many images side by side in a tile, or 0.
inline int forced_images() {
  const char* value = conv_pool_env::hook_env("CONV_POOL_GENERAL_IMAGES");
  if (value == nullptr) return 0;
  const int images = std::atoi(value);
  return images == 1 || images == 2 || images == 4 ? images : 0;
}

// $CONV_POOL_GENERAL_NHWC=0 / 1: float32 inputs without contiguous channels read element by
// element / from an NHWC copy on the cp.async loaders, whatever kNhwcCopyMinWork says; or -1.
inline int forced_nhwc() {
  const char* value = conv_pool_env::hook_env("CONV_POOL_GENERAL_NHWC");
  if (value == nullptr || (value[0] != '0' && value[0] != '1') || value[1] != '\0') return -1;
  return value[0] - '0';
}

// $CONV_POOL_GENERAL_STEP_CHUNKS=k (1..kMaxStepChunks): steps of up to k chunks, the most that
// fit, instead of kMinStepKSteps' worth; or 0.
inline int forced_step_chunks() {
  const char* value = conv_pool_env::hook_env("CONV_POOL_GENERAL_STEP_CHUNKS");
  if (value == nullptr) return 0;
  return std::clamp(std::atoi(value), 0, conv_pool_heuristics::kMaxStepChunks);
}

// $CONV_POOL_GENERAL_EVEN_STEPS=1: a reduction's chunks spread evenly over the chunk steps the
// plan takes (ceil(chunks / steps) a step) instead of full steps and a short last one, whose
// missing chunks the kernel stages and multiplies as zeros; the same number of steps, smaller
// stages. Off: the most chunks a step that fit.
inline bool even_steps() { return is("CONV_POOL_GENERAL_EVEN_STEPS", "1"); }

// $CONV_POOL_GENERAL_GROUP_ROWS=k (k >= 1): steps of at most k kernel rows (a smaller halo a
// stage, so more chunks a step and wider swizzles may fit); or 0.
inline int forced_group_rows() {
  const char* value = conv_pool_env::hook_env("CONV_POOL_GENERAL_GROUP_ROWS");
  return value == nullptr ? 0 : std::max(0, std::atoi(value));
}

// The hooks the tile search reads (general_search.cu: search_plan and plan_tile), read at once
// for the plan cache's key (general_plan_cache.h): a hook the search comes to read belongs here
// too, or the cache would answer for its old value.
struct SearchHooks {
  int merged, persistent, paired, direct, cluster, swizzle, fill, tile, images, split,
      step_chunks, even, group_rows, split_registers, clip, rounds, wave_split;
  static SearchHooks read() {
    return {merged_allowed(),    persistent_mode(), pairing_allowed(),    direct_pairs_allowed(),
            cluster_allowed(),   swizzle_allowed(), fill_rule_allowed(),  forced_tile(),
            forced_images(),     forced_split(),    forced_step_chunks(), even_steps(),
            forced_group_rows(),
            split_registers_allowed(), clip_allowed(), split_rounds(), wave_split_allowed()};
  }
};

}  // namespace hooks
}  // namespace general_wgmma
