#!/usr/bin/env bash
# Builds the cuda_extension module in place: cuda_extension*.so lands in the repository root,
# so `import cuda_extension` works from there (and from tests/, via tests/conftest.py).
#
# Sources: binding.cpp + kernels/*.cu + kernels/*.cpp, with the flags in setup.py (the same build
# as `pip install --no-build-isolation -e .`). Incremental: ninja recompiles only the sources whose
# text, headers (depfiles) or command lines changed. `--force` makes setuptools hand every build
# to ninja: on its own it compares only file times, so it would skip a build whose flags or
# TORCH_CUDA_ARCH_LIST changed. The cost of --force is a relink, about a second. A build stopped
# part way (a time cap, Ctrl-C) keeps the objects it finished, all but its last one: the next
# build compiles only the rest.
#
# Before anything is written, utils/build_env.py checks torch, the CUDA toolkit (CUDA_HOME /
# CUDA_PATH, else the nvcc on PATH, else /usr/local/cuda), their CUDA major versions, and picks
# TORCH_CUDA_ARCH_LIST (kept if set, else the visible GPU, 9.0 as 9.0a, else 9.0a). Each problem
# is reported as one line and a non-zero exit.
#
# Prints one line per finished compile ([k/n] source, elapsed time); --verbose streams everything.
# Outputs: build/build.log (full build output), build/ptxas.log (ptxas -v report of every
# kernels/*.cu: registers, stack, spills; parsed by tests/test_build.py).
#
# Environment: PYTHON (interpreter, default python3), MAX_JOBS (parallel compiles, default: cores,
# at most one per 2 GiB of free memory), CUDA_HOME, TORCH_CUDA_ARCH_LIST.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: bash utils/compile.sh [-v|--verbose] [-h|--help]

Build the cuda_extension module in place (incrementally) from binding.cpp and kernels/.
  -v, --verbose   stream the full build output (it is always saved to build/build.log)
  -h, --help      show this help
Environment: PYTHON, MAX_JOBS, CUDA_HOME, TORCH_CUDA_ARCH_LIST (see the header of this file).
USAGE
}

verbose=0
for argument in "$@"; do
  case "$argument" in
    -h|--help) usage; exit 0 ;;
    -v|--verbose) verbose=1 ;;
    *) echo "compile.sh: error: unknown argument '$argument' (try --help)" >&2; exit 2 ;;
  esac
done

started=$(date +%s.%N)
elapsed() {
  awk -v start="$started" -v now="$(date +%s.%N)" 'BEGIN { printf "%.1f s", now - start }'
}
fail() { echo "compile.sh: error: $*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-$(command -v python3 || command -v python || true)}"
[[ -n "$PYTHON" ]] || fail "no python3 on PATH (set PYTHON=/path/to/python)"
command -v "$PYTHON" >/dev/null || fail "PYTHON=$PYTHON is not an executable"

# Pre-checks, before anything is written to build/. utils/build_env.py ends a failure with one
# line "error: <what is wrong and what to do>"; anything else it printed was only noise then.
check_output=$(mktemp)
trap 'rm -f "$check_output"' EXIT
check_status=0
build_env=$("$PYTHON" -m utils.build_env 2>"$check_output") || check_status=$?
if (( check_status != 0 )); then
  last_line=$(tail -n 1 "$check_output")
  [[ "$last_line" == "error: "* ]] && fail "${last_line#error: }"
  # Not build_env's own verdict (a traceback, a broken interpreter): show everything.
  { [[ -z "$build_env" ]] || echo "$build_env"; cat "$check_output"; } >&2
  fail "'$PYTHON -m utils.build_env' failed with exit status $check_status (output above, if any)"
fi
cat "$check_output" >&2   # warnings, if any
eval "$build_env"   # exports CUDA_HOME and TORCH_CUDA_ARCH_LIST, sets BUILD_SUMMARY

if [[ -z "${MAX_JOBS:-}" ]]; then
  # A host compile of a torch-including .cpp peaks near 1.4 GiB: allow 2 GiB per job.
  cores=$(nproc)
  jobs_by_memory=$(awk '/^MemAvailable:/ { print int($2 / (2 * 1048576)) }' /proc/meminfo)
  MAX_JOBS=$(( cores < jobs_by_memory ? cores : jobs_by_memory ))
  (( MAX_JOBS >= 1 )) || MAX_JOBS=1
fi
export MAX_JOBS

log=build/build.log
reports=build/ptxas          # one ptxas report per .cu, kept across incremental builds
mkdir -p "$reports"

# ninja -v prints "[k/n] <command>" when a command finishes, followed by its output: each nvcc
# command's ptxas lines go to a report named after its .cu. A command's output counts once the
# next "[k/n]" line follows it, or the log's end where the build finished ($2 = 1): the last
# block of a build stopped part way (a time cap) may be cut short, so its object is rebuilt.
ptxas_reports() {
  awk -v reports="$reports" -v root="$ROOT/" -v finished="$2" '
    function flush() {
      if (report != "") { printf "%s", lines > report; close(report) }
      report = ""; lines = ""
    }
    /^\[[0-9]+\/[0-9]+\] / {
      flush()
      if ($0 ~ /nvcc/ && match($0, / -c [^ ]+\.cu( |$)/)) {
        source = substr($0, RSTART + 4, RLENGTH - 4); sub(/ $/, "", source)
        if (index(source, root) == 1) source = substr(source, length(root) + 1)
        gsub("/", "__", source)
        report = reports "/" source ".log"
      }
      next
    }
    report != "" && (/^ptxas / || /bytes stack frame/) { lines = lines $0 "\n" }
    END { if (finished) flush() }
  ' "$1"
}

# The objects a previous build finished before it was stopped keep their reports (its log is
# overwritten below), so that they are not compiled again.
[[ -f "$log" ]] && ptxas_reports "$log" 0

# A kernel whose object is up to date but has no report (built by pip, or before reports were
# kept) is recompiled, so that build/ptxas.log always covers every kernels/*.cu.
mapfile -t kernel_sources < <(find kernels -name '*.cu' | sort)
for source in "${kernel_sources[@]}"; do
  if [[ ! -f "$reports/${source//\//__}.log" ]]; then
    find build -path "*/temp.*/${source%.cu}.o" -delete 2>/dev/null || true
  fi
done

progress() {
  local line source
  : > "$log"
  while IFS= read -r line; do
    printf '%s\n' "$line" >> "$log"
    if [[ "$line" =~ ^(\[[0-9]+/[0-9]+\])\ .*\ -c\ ([^ ]+\.(cu|cpp))(\ |$) ]]; then
      source=${BASH_REMATCH[2]#"$ROOT/"}
      echo "compile.sh: ${BASH_REMATCH[1]} $source ($(elapsed))"
    fi
  done
}

echo "compile.sh: building cuda_extension ($BUILD_SUMMARY; $MAX_JOBS jobs)"
status=0
if (( verbose )); then
  "$PYTHON" setup.py build_ext --inplace --force 2>&1 | tee "$log" || status=$?
else
  # The log gets everything; the terminal one line per finished compile (ninja's "[k/n]
  # <command>" lines), with the source it built and the time since the start.
  "$PYTHON" setup.py build_ext --inplace --force 2>&1 | progress || status=$?
fi
if (( status != 0 )); then
  if (( ! verbose )); then
    # A compile error: ninja's FAILED: lines, the commands and the compiler's own messages,
    # without the Python traceback that follows. Anything else (e.g. a link error): all of it.
    if grep -q '^FAILED: ' "$log"; then
      sed -n '/^FAILED: /,/^ninja: build stopped/p' "$log" >&2
    else
      cat "$log" >&2
    fi
  fi
  fail "build failed after $(elapsed) (compiler output above; full log in $log)"
fi

ptxas_reports "$log" 1

: > build/ptxas.log
for source in "${kernel_sources[@]}"; do
  report="$reports/${source//\//__}.log"
  [[ -f "$report" ]] \
    || fail "no ptxas report for $source in $log (is -Xptxas -v still in setup.py?)"
  { echo "== $source"; cat "$report"; } >> build/ptxas.log
done

# Fails here, not in the first test, when the module does not load (e.g. an undefined symbol).
import_error=$("$PYTHON" -c "import torch, cuda_extension" 2>&1) \
  || fail "built, but 'import cuda_extension' failed: $(tail -n 1 <<<"$import_error")"

awk '
  /Compiling entry function/ { kernels++ }
  match($0, /Used [0-9]+ registers/) {
    registers = substr($0, RSTART + 5, RLENGTH - 15) + 0
    if (registers > max_registers) max_registers = registers
  }
  /bytes spill stores/ {
    n = split($0, field, /[ ,]+/)
    for (i = 1; i + 2 <= n; i++) if (field[i + 2] == "spill") spilled += field[i]
  }
  END {
    printf "compile.sh: ptxas: %d kernel(s), at most %d registers/thread, ", kernels, max_registers
    if (spilled) printf "WARNING: %d bytes of spill stores + loads (see build/ptxas.log)\n", spilled
    else print "no spills"
  }
' build/ptxas.log
echo "compile.sh: built $(ls cuda_extension*.so) in $(elapsed)" \
  "(log: $log, ptxas report: build/ptxas.log)"
