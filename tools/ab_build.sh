#!/usr/bin/env bash
# A compile-time A/B on one machine, in one device call: the tree as built (A) against the same
# tree with a patch applied, against another whole tree, or against a module built elsewhere (B).
#
#   AB_PATCH=scratch/change.diff AB_CMD="python3 tools/kernel_breakdown.py ..." \
#     bash tools/ab_build.sh OUT
#   AB_TREE=scratch_ab/daf8bce AB_CMD="python3 -m utils.profiling --suite --dtype float16" \
#     bash tools/ab_build.sh OUT
#   AB_PREBUILT=scratch_ab/b.tar.gz AB_CMD="python3 tools/kernel_breakdown.py ..." \
#     bash tools/ab_build.sh OUT
#
# Run it after a build (gpu_check.sh's `ab` stage does). It keeps A's module, then makes B:
# with AB_PATCH (`git diff` format) it applies the patch to the working files and rebuilds with
# utils/compile.sh (ninja recompiles only the objects the patch touches); with AB_TREE (a
# directory holding another commit's files, e.g. `git archive <commit> | tar -x -C DIR`, for
# changes a patch cannot carry, such as a re-laid-out tree) it builds that tree with its own
# utils/compile.sh, in place; with AB_PREBUILT (an archive of `tools/prebuilt.sh pack` made
# elsewhere from another commit whose Python files are this tree's: a kernel change) it builds
# nothing and takes the archive's module. Then it runs AB_CMD AB_ROUNDS times (default 2) for
# each, alternating A, B, A, B, ... (a patch's or an archive's B: that module copied into place
# before each run; a tree's B: AB_CMD run inside the tree), so that drift over the call falls on
# both. Logs: OUT/ab_A_<round>.log, OUT/ab_B_<round>.log. On exit, failed or not, a patch is
# reversed and A's module is back in place (the next build recompiles the objects the patch
# touched).
set -euo pipefail
out=${1:?usage: AB_PATCH=FILE, AB_TREE=DIR or AB_PREBUILT=ARCHIVE, AB_CMD=COMMAND ab_build.sh OUT}
patch=${AB_PATCH:-}
tree=${AB_TREE:-}
prebuilt=${AB_PREBUILT:-}
command=${AB_CMD:?AB_CMD is the command to run against each build}
rounds=${AB_ROUNDS:-2}
set_count=0
for setting in "$patch" "$tree" "$prebuilt"; do
  if [ -n "$setting" ]; then set_count=$((set_count + 1)); fi
done
if [ "$set_count" -ne 1 ]; then
  echo "ab_build.sh: set one of AB_PATCH (a patch file in git diff format), AB_TREE (a tree)" \
    "and AB_PREBUILT (an archive of tools/prebuilt.sh pack)" >&2
  exit 2
fi
mkdir -p "$out"

modules=(cuda_extension*.so)
if [ ${#modules[@]} -ne 1 ] || [ ! -f "${modules[0]}" ]; then
  echo "ab_build.sh: expected one built cuda_extension*.so here (run the build first)" >&2
  exit 2
fi
module=${modules[0]}
keep=$(mktemp -d)
cp "$module" "$keep/A.so"

if [ -n "$tree" ]; then
  [ -f "$tree/utils/compile.sh" ] || { echo "ab_build.sh: $tree has no utils/compile.sh" >&2; exit 2; }
  tree=$(cd "$tree" && pwd)
  echo "=== ab: building B (the tree in $tree)"
  (cd "$tree" && bash utils/compile.sh)
elif [ -n "$prebuilt" ]; then
  # (the listing whole before grep, as in tools/prebuilt.sh: grep -q would cut tar's pipe)
  names=$(tar -tzf "$prebuilt") || { echo "ab_build.sh: cannot read $prebuilt" >&2; exit 2; }
  grep -qx "$module" <<< "$names" ||
    { echo "ab_build.sh: $prebuilt holds no $module (A's module)" >&2; exit 2; }
  tar -xzOf "$prebuilt" "$module" > "$keep/B.so"
  sources=$(tar -xzOf "$prebuilt" build/inputs.sha256 2>/dev/null || echo "unknown")
  echo "=== ab: B is the module in $prebuilt (sources $sources)"
  if cmp -s "$keep/A.so" "$keep/B.so"; then
    echo "ab_build.sh: $prebuilt holds the same module as A" >&2
    exit 3
  fi
  trap 'cp "$keep/A.so" "$module"' EXIT
  trap 'exit 143' TERM INT  # a stage's time cap: still restore
else
  git apply --check "$patch"
  git apply "$patch"
  restore() {
    git apply -R "$patch" || echo "ab_build.sh: could not reverse $patch" >&2
    cp "$keep/A.so" "$module"
  }
  trap restore EXIT
  trap 'exit 143' TERM INT  # a stage's time cap: still restore

  echo "=== ab: building B (A with $patch)"
  bash utils/compile.sh
  cp "$module" "$keep/B.so"
  if cmp -s "$keep/A.so" "$keep/B.so"; then
    echo "ab_build.sh: the patch left the module unchanged" >&2
    exit 3
  fi
fi

for ((round = 1; round <= rounds; ++round)); do
  for side in A B; do
    echo "=== ab: $side, round $round: $command"
    dir=.
    if [ -n "$tree" ]; then
      [ "$side" = B ] && dir=$tree
    else
      cp "$keep/$side.so" "$module"
    fi
    (cd "$dir" && bash -c "$command") 2>&1 | tee "$out/ab_${side}_${round}.log"
  done
done
