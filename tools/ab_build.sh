#!/usr/bin/env bash
# A compile-time A/B on one machine, in one device call: the tree as built (A) against the same
# tree with a patch applied (B).
#
#   AB_PATCH=scratch/change.diff AB_CMD="python3 tools/kernel_breakdown.py ..." \
#     bash tools/ab_build.sh OUT
#
# Run it after a build (gpu_check.sh's `ab` stage does). It keeps A's module, applies AB_PATCH
# (`git diff` format) to the working files, rebuilds with utils/compile.sh (ninja recompiles only
# the objects the patch touches), keeps B's module, then runs AB_CMD AB_ROUNDS times (default 2)
# for each, alternating A, B, A, B, ... with that module copied into place before each run, so
# that drift over the call falls on both. Logs: OUT/ab_A_<round>.log, OUT/ab_B_<round>.log. On
# exit, failed or not, the patch is reversed and A's module is back in place (the next build
# recompiles the objects the patch touched).
set -euo pipefail
out=${1:?usage: AB_PATCH=FILE AB_CMD=COMMAND bash tools/ab_build.sh OUT}
patch=${AB_PATCH:?AB_PATCH names a patch file in git diff format}
command=${AB_CMD:?AB_CMD is the command to run against each build}
rounds=${AB_ROUNDS:-2}
mkdir -p "$out"

modules=(cuda_extension*.so)
if [ ${#modules[@]} -ne 1 ] || [ ! -f "${modules[0]}" ]; then
  echo "ab_build.sh: expected one built cuda_extension*.so here (run the build first)" >&2
  exit 2
fi
module=${modules[0]}
keep=$(mktemp -d)
cp "$module" "$keep/A.so"

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

for ((round = 1; round <= rounds; ++round)); do
  for side in A B; do
    cp "$keep/$side.so" "$module"
    echo "=== ab: $side, round $round: $command"
    bash -c "$command" 2>&1 | tee "$out/ab_${side}_${round}.log"
  done
done
