#!/usr/bin/env bash
# One device call: build, test, verify, sanitize and time, logs under $OUT, short table last.
#
#   bash tools/gpu_check.sh [STAGE ...]     stages: env build test verify profile suite
#                                           sanitize bench (default: env build test verify profile)
# Meant for the lent H200 (see docs/PERF.md); each stage's log lands in $OUT/<stage>.log.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(env build test verify profile)
summary=()

run_stage() {  # name, command...
  local name=$1; shift
  local start=$SECONDS
  echo "=== $name: $*"
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$OUT/$name.log"
  summary+=("$(printf '%-10s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - start))" "$(tail -n 1 "$OUT/$name.log" | cut -c1-110)")")
  return $rc
}

sanitize() {
  local cs=compute-sanitizer
  command -v $cs >/dev/null || cs=/usr/local/cuda/bin/compute-sanitizer
  $cs --tool memcheck --error-exitcode 9 python tools/sanitize_cases.py default_small_batch &&
  $cs --tool memcheck --error-exitcode 9 python tools/sanitize_cases.py padded_odd &&
  $cs --tool memcheck --error-exitcode 9 python tools/sanitize_cases.py few_channels_large_kernel &&
  $cs --tool racecheck --error-exitcode 9 python tools/sanitize_cases.py default_small_batch
}

for stage in "${stages[@]}"; do
  case $stage in
    env) run_stage env bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv; python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"; nvcc --version | tail -n 2' ;;
    build) run_stage build bash utils/compile.sh || break ;;
    test) run_stage test python3 -m pytest -q -p no:cacheprovider tests ;;
    verify) run_stage verify python3 -m utils.verification ;;
    profile) run_stage profile python3 -m utils.profiling ;;
    suite) run_stage suite python3 -m utils.profiling --suite --json "$OUT/suite.json" --plot "$OUT/suite.png" ;;
    sanitize) run_stage sanitize sanitize ;;
    bench) run_stage bench python3 tools/bench_variants.py ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
