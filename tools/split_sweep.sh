#!/usr/bin/env bash
# The general kernel's split reduction by hand: tools/kernel_breakdown.py on the given --spec
# layers with $CONV_POOL_GENERAL_SPLIT set to each of SPLITS (default: the cost model's choice,
# then 1 2 4 8 12 16), per dtype in DTYPES (default float32 float16). Needs a GPU.
#   bash tools/split_sweep.sh 1,2048,512,7,7,1,1,0,2,2 32,256,512,14,14,3,2,1,2,2
set -uo pipefail
specs=()
for spec in "$@"; do specs+=(--spec "$spec"); done
for dtype in ${DTYPES:-float32 float16}; do
  for split in ${SPLITS:-model 1 2 4 8 12 16}; do
    echo "=== dtype $dtype split $split"
    if [ "$split" = model ]; then
      python3 tools/kernel_breakdown.py "${specs[@]}" --dtype "$dtype" --configs general_wgmma
    else
      CONV_POOL_GENERAL_SPLIT=$split python3 tools/kernel_breakdown.py "${specs[@]}" \
        --dtype "$dtype" --configs general_wgmma
    fi
  done
done
