// The general Hopper kernel's plan search (general_search.cu), which the launch
// (general_wgmma.cu) asks for a shape's plan.
#pragma once

#include <cstdint>

#include "../conv_relu_maxpool.h"
#include "general_plan.h"

namespace general_wgmma {

// The host plan's integer arithmetic (the search's and the launch's).
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int round_up(int value, int multiple) { return int(ceil_div(value, multiple) * multiple); }

// A plan found by the search, or why_not: why no plan runs the shape; cost: the cost model's
// estimate (cycles of the busiest SM).
struct Candidate {
  const char* why_not = nullptr;
  Plan plan{};
  double cost = 0.0;
};

// The cheapest (tile, images) that runs `s`, by the cost with or without its copy term (the
// bytes a step's boxes bring at the copy engine's rates), from this thread's cache where it
// holds it (general_plan_cache.h). split: the 3xTF32 form; allow_tma: the warp-specialized
// kernel may run it; x_in_place: the copy engine would read x in place (no slice-planar copy).
Candidate cheapest_plan(const ConvPoolShape& s, const ConvPoolDevice& device, bool split,
                        bool allow_tma, bool x_in_place, bool copy_term);

// The plan: the cheapest by the cost with its copy term where the plan that picks runs at
// least kCopyCostMinSteps steps a block (a step's copies then stream behind the stages at the
// engine's rate, which the term models); with fewer, the stages hold most of a block's
// copies at once and its fixed work decides, so the plan is the cheapest without the term.
Candidate best_plan(const ConvPoolShape& s, const ConvPoolDevice& device, bool split,
                    bool allow_tma, bool x_in_place);

// Whether the copy engine's box rows are whole runs of a phase's slices (Plan::merged_cols):
// from the slice-planar copy, up to the engine's 256 elements (kMergedWordBytes words) a box
// dimension.
bool merged_rows(const Plan& p, bool staged_copy);

}  // namespace general_wgmma
