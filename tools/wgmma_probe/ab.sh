#!/usr/bin/env bash
# A/B timing of two versions of the wgmma kernel in one run: BEFORE (a saved kernels/ folder,
# e.g. `mkdir -p scratch/before && git archive REV kernels | tar -x -C scratch/before`, then
# scratch/before/kernels; or a saved copy of conv_relu_maxpool_wgmma.cu alone, which then uses
# today's headers in kernels/) against kernels/ now, both through the probe launcher (PROBE 0:
# the whole kernel, outputs checked), alternating old, new, old, new so drift shows. Needs nvcc
# and an sm_90a GPU.
#   bash tools/wgmma_probe/ab.sh scratch/before/kernels "default vgg_b3"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
before=$(realpath "$1")
shapes=${2:-}
build=${PROBE_BUILD:-/tmp/wgmma_ab}
mkdir -p "$build/old" "$build/new"
python3 "$here/gen.py" "$build/new/wgmma_probe.cu"
PROBE_SOURCE="$before" python3 "$here/gen.py" "$build/old/wgmma_probe.cu"
for v in old new; do
  cp "$here/probe_main.cu" "$build/$v/"
  nvcc -O3 -std=c++17 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
    -DCONV_POOL_WITH_WGMMA -DPROBE=0 -o "$build/$v/probe" "$build/$v/probe_main.cu" &
done
wait
for round in 1 2; do
  for v in old new; do
    echo "== $v, round $round"
    "$build/$v/probe" ${shapes:+"$shapes"}
  done
done
