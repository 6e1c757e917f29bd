#!/usr/bin/env bash
# Builds the knock-out probe for each PROBE mask given (see gen.py) and runs it on the shapes
# of the last argument (names from probe_main.cu, space-separated, in one argument; all when
# omitted). Needs nvcc and an sm_90a GPU (H200 / H100).
#   bash tools/wgmma_probe/run.sh 0 1 4 "default vgg_b5"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${PROBE_BUILD:-/tmp/wgmma_probe}
mkdir -p "$build"
masks=() shapes=""
for arg in "$@"; do
  if [[ "$arg" =~ ^[0-9]+$ ]]; then masks+=("$arg"); else shapes=$arg; fi
done
[ ${#masks[@]} -eq 0 ] && masks=(0)
python3 "$here/gen.py" "$build/wgmma_probe.cu"
cp "$here/probe_main.cu" "$build/"
for m in "${masks[@]}"; do
  nvcc -O3 -std=c++17 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
    -DCONV_POOL_WITH_WGMMA -DPROBE="$m" -o "$build/probe$m" "$build/probe_main.cu" &
done
wait
for m in "${masks[@]}"; do "$build/probe$m" ${shapes:+"$shapes"}; done
