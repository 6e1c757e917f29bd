#!/usr/bin/env bash
# One device call: build, test, verify, time, sanitize, logs under $OUT, short table last.
#
#   bash tools/gpu_check.sh [STAGE[:SECONDS] ...]
#
# Stages: env build test verify profile suite suite16 layouts bench host vgg16 distributed
# notebook sanitize general zoo zoo16 zoo_fp32 zooab fuzz breakdown fewchannel networks netbreak
# gtest ncu trace swizzle ab (default: env build test verify profile). networks:
# tools/bench_networks.py (issue 32's models; NETWORKS_ARGS picks a slice, its lists
# comma-separated: "--models vgg16,alexnet --batches 32"; NETWORKS_RESUME=docs/networks_h200.json
# keeps that file's rows and runs the rest (NETWORKS_REDO="misses" measures the rows that miss a bar
# again), and a cap over 120 s stops it cleanly a minute early) into $OUT/networks.json; gtest: the
# general kernel's GPU tests only. TEST_ARGS (default tests) gives the test stage other pytest
# arguments as shell words, e.g. only the files that use the GPU, or
# TEST_ARGS='tests/test_gpu_correctness.py -k "disallowed or fp32"'.
# general: the general kernel's correctness sweep and timing table (tools/check_general.py:
# each of its forms, dense and channels-last inputs) into $OUT/general.json.
# zoo / zoo16: ZOO_LIMIT (default 40) layers of the zoo in float32 / float16; zoo_fp32: the
# float32 zoo with allow_tf32 = False for every target, against eager (cuDNN's fp32); fuzz: the
# 150-geometry performance fuzz from case FUZZ_START (default 0) into $OUT/fuzz_<start>.json
# (the JSONs are written after every case); breakdown: tools/kernel_breakdown.py on the zoo's
# slowest classes, its large 16-bit 1 x 1 layers (NCHW and channels-last) and the stem kernel's
# few-tile layers, or with BREAKDOWN_ARGS set runs of the tool with those arguments, ';' between
# runs (e.g. "--json docs/zoo_h200_float32.json --all --plan paired=1 --configs
# auto,auto@HOOK=1 --summary; --json docs/zoo_h200_float16.json --all --summary"); fewchannel: the
# tool on 11 first layers of 1-3 channels (stems, 11 x 11 / 4, 5 x 5, 3 x 3, batch 1-128) in
# float16 channels-last, float32 both layouts and bfloat16, FEWCHANNEL_CONFIGS (default
# auto,auto@CONV_POOL_GENERAL_FOLD=0) against auto, FEWCHANNEL_SPECS (space-separated
# kernel_breakdown specs) instead of those layers, FEWCHANNEL_FORMS (';'-separated, e.g.
# "float16 --channels-last;float32") instead of those four forms. sanitize: compute-sanitizer
# over the list in sanitize(), each run's line number in the log, SANITIZE_FROM=n from line n
# on. SECONDS caps one stage (timeout), so a long stage cannot eat the others' device time.
# Each stage's log lands in $OUT/<stage>.log;
# the suite also writes $OUT/suite.json and $OUT/suite.png, suite16 (the suite in float16, then
# bfloat16) $OUT/suite_float16.json and $OUT/suite_bfloat16.json, vgg16 $OUT/vgg16.json, notebook
# $OUT/quickstart.ipynb (executed copy). The notebook stage installs the Jupyter wheels in .whl/
# into /tmp/site first (the device image has no Jupyter). Fetch them here (x86-64, CPython 3.12),
# list .whl in the device call's `carry`, and keep .whl/ out of git (.git/info/exclude):
#   for p in nbclient nbformat ipykernel jupyter_client jupyter_core traitlets tornado pyzmq \
#       fastjsonschema jsonschema jsonschema-specifications referencing rpds-py comm debugpy \
#       ipython ipython_pygments_lexers decorator jedi parso matplotlib-inline pexpect \
#       ptyprocess prompt_toolkit wcwidth stack_data asttokens executing pure_eval \
#       nest_asyncio platformdirs; do
#     python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
#       --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#       --platform manylinux1_x86_64 -d .whl "$p"; done
#
# PREBUILT=<archive> (tools/prebuilt.sh pack, carried with the call) lets the build stage
# unpack the module built here instead of building it there.
#
# The device machine's copy of the tree may carry an older .git; to record the commit the files
# came from in the JSON outputs, start it as `SOURCE_COMMIT=<hash> bash tools/gpu_check.sh ...`
# with the hash written out here (`$(git rev-parse HEAD)` run on the device reads its stale .git).
set -uo pipefail
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(env build test verify profile)
summary=()
# A SOURCE_COMMIT that is this checkout's own HEAD while the tree differs from it was most
# likely read here (the header's warning): say so at the top of the output.
if [ -n "${SOURCE_COMMIT:-}" ] && [ "$SOURCE_COMMIT" = "$(git rev-parse HEAD 2>/dev/null)" ] &&
   [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null | head -n 1)" ]; then
  echo "warning: SOURCE_COMMIT=$SOURCE_COMMIT is this checkout's HEAD, but its tracked files differ"
  echo "         from it; the JSONs will name a commit the files did not come from."
fi

run_stage() {  # name, seconds (0 = no cap), command...
  local name=$1 seconds=$2; shift 2
  local start=$SECONDS
  echo "=== $name: $*"
  if (( seconds > 0 )); then
    timeout "$seconds" "$@" > "$OUT/$name.log" 2>&1
  else
    "$@" > "$OUT/$name.log" 2>&1
  fi
  local rc=$?
  tail -n 25 "$OUT/$name.log"
  summary+=("$(printf '%-13s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - start))" "$(tail -n 1 "$OUT/$name.log" | cut -c1-100)")")
  archive
  return $rc
}

# The device tool brings back only a few files (the first by name): everything else travels as
# one archive, refreshed after every stage so that a call cut off by its time limit still
# carries the stages it finished.
archive() {
  tar -czf "$OUT/logs.tgz.part" -C "$OUT" --exclude 'logs.tgz*' . 2>/dev/null &&
    mv "$OUT/logs.tgz.part" "$OUT/logs.tgz"
}

breakdown() {  # the zoo's slowest classes kernel by kernel, and the stem kernel on few tiles
  local k="python3 tools/kernel_breakdown.py"
  if [ -n "${BREAKDOWN_ARGS:-}" ]; then  # runs of the tool's own arguments instead, ';' apart
    local run runs
    IFS=';' read -ra runs <<< "$BREAKDOWN_ARGS"
    for run in "${runs[@]}"; do
      # shellcheck disable=SC2086  # several words
      $k $run || return
    done
    return
  fi
  $k --json docs/zoo_h200_float32.json densenet121_c112_p2s2_b1 inception_v3_c80_p2s2_b128 \
     resnext50_32x4d_c30_p2s2_b128 vgg16_c8_p3s2_b128 || return
  $k --json docs/zoo_h200_float16.json shufflenet_v2_x1_0_c1_p2s2_b1 --configs auto,general_wgmma \
     || return
  # Large 16-bit NCHW 1 x 1 layers: the preparation launch (the slice-planar copy of x) beside
  # the convolution, and the convolution without it (channels-last x, read in place).
  local large="densenet121_c5_p2s2_b128 inception_v3_c12_p2s2_b128 inception_v3_c80_p2s2_b128"
  # shellcheck disable=SC2086  # $large holds several names
  $k --json docs/zoo_h200_float16.json $large || return
  # shellcheck disable=SC2086
  $k --json docs/zoo_h200_float16.json $large --channels-last || return
  for spec in 1,24,58,28,28,1,1,0,2,2 8,24,58,28,28,1,1,0,2,2 1,3,64,224,224,3,1,1,2,2 \
      8,3,64,224,224,3,1,1,2,2 1,3,32,224,224,3,2,1,2,2; do
    $k --spec $spec --dtype float16 --configs auto,stem_16bit,general_wgmma || return
    $k --spec $spec --configs auto,stem_tf32,general_wgmma || return
  done
}

fewchannel() {  # first layers of few channels in four dtype-layouts, each config against auto
  local spec form args=()
  # shellcheck disable=SC2086  # FEWCHANNEL_SPECS is a list of specs
  for spec in ${FEWCHANNEL_SPECS:-32,3,64,224,224,7,2,3,3,2,1 8,3,64,224,224,7,2,3,3,2,1 \
      1,3,64,224,224,7,2,3,3,2,1 128,3,64,224,224,7,2,3,3,2,1 32,3,64,224,224,11,4,2,3,2 \
      1,3,64,224,224,11,4,2,3,2 32,3,64,224,224,5,1,2,2,2 32,3,32,224,224,3,2,1,3,2,1 \
      32,3,64,224,224,3,1,1,2,2 32,3,96,224,224,7,2,3,2,2 32,1,32,128,128,7,2,3,2,2}; do
    args+=(--spec "$spec")
  done
  local forms
  local all="float16 --channels-last;float32;float32 --channels-last;bfloat16"
  IFS=';' read -ra forms <<< "${FEWCHANNEL_FORMS:-$all}"
  for form in "${forms[@]}"; do
    echo "== $form"
    # shellcheck disable=SC2086  # $form is a dtype and maybe --channels-last
    python3 tools/kernel_breakdown.py "${args[@]}" --dtype $form --summary \
      --configs "${FEWCHANNEL_CONFIGS:-auto,auto@CONV_POOL_GENERAL_FOLD=0}" || return
  done
}

sanitize() {
  local cs=compute-sanitizer
  command -v $cs >/dev/null || cs=/usr/local/cuda/bin/compute-sanitizer
  # One run per line: tool, then tools/sanitize_cases.py's arguments (case [variants [dtype
  # [prepacked]]] [NAME=VALUE ...], the last setting a hook of the general kernel). The kernels
  # changed last first, so that a time cap cuts the ones checked before; the first failure
  # stops the list. Each run's line number heads its output ("[n] tool args"); SANITIZE_FROM=n
  # starts at line n, so that a later call goes on where a capped one stopped.
  local tool args line=0
  while read -r tool args; do
    line=$((line + 1))
    [ "$line" -lt "${SANITIZE_FROM:-1}" ] && continue
    echo "[$line] $tool $args"
    # shellcheck disable=SC2086  # args holds several words
    $cs --tool "$tool" --error-exitcode 9 python3 tools/sanitize_cases.py $args < /dev/null || return $?
  done <<'RUNS'
memcheck  general_pool_rows general_wgmma float16 CONV_POOL_GENERAL_TILE=square_n128
racecheck general_pool_rows_channels_last general_wgmma bfloat16 CONV_POOL_GENERAL_TILE=wide_n128
memcheck  general_pool_rows_channels_last general_wgmma float32 CONV_POOL_GENERAL_TILE=tall_n64
memcheck  general_wide_windows general_wgmma float16
memcheck  general_wide_windows_channels_last general_wgmma bfloat16
racecheck general_wide_windows_channels_last general_wgmma float32
memcheck  general_wide_windows general_wgmma float32 CONV_POOL_GENERAL_WIDE_POOL=0
memcheck  folded_many_pixels general_wgmma float16
memcheck  folded_many_pixels general_wgmma float32
memcheck  few_channels_large_kernel general_wgmma bfloat16
memcheck  general_even_steps general_wgmma float16 CONV_POOL_GENERAL_EVEN_STEPS=1
racecheck general_even_steps general_wgmma bfloat16 CONV_POOL_GENERAL_EVEN_STEPS=1
memcheck  general_self_copy general_wgmma float16 CONV_POOL_GENERAL_POISON_COPY=1
racecheck general_self_copy general_wgmma bfloat16
memcheck  general_self_copy general_wgmma float32 CONV_POOL_GENERAL_PDL=1
memcheck  general_wave_split general_wgmma float16
racecheck general_wave_split general_wgmma bfloat16
memcheck  general_strided_channels_last general_wgmma bfloat16 CONV_POOL_GENERAL_POOL_POSITIONS=0 CONV_POOL_GENERAL_PIXEL_MAJOR=0
racecheck general_split_channels_last general_wgmma float16 CONV_POOL_GENERAL_POOL_POSITIONS=0 CONV_POOL_GENERAL_PIXEL_MAJOR=0
memcheck  general_large_kernel_channels_last general_wgmma float32 CONV_POOL_GENERAL_POOL_POSITIONS=0 CONV_POOL_GENERAL_PIXEL_MAJOR=0
memcheck  general_tall_channels_last general_wgmma bfloat16 CONV_POOL_GENERAL_TRANSPOSE=force
racecheck general_tall_channels_last general_wgmma float16 CONV_POOL_GENERAL_TRANSPOSE=force
memcheck  general_tall general_wgmma float16 CONV_POOL_GENERAL_TRANSPOSE=force
memcheck  general_tall general_wgmma float32 CONV_POOL_GENERAL_TRANSPOSE=force
memcheck  general_windows general_wgmma float16 CONV_POOL_GENERAL_WINDOWS=1
racecheck general_windows general_wgmma bfloat16 CONV_POOL_GENERAL_WINDOWS=1
memcheck  general_windows_channels_last general_wgmma float32 CONV_POOL_GENERAL_WINDOWS=1
memcheck  general_windows general_wgmma float32 CONV_POOL_GENERAL_WINDOWS=1
memcheck  general_windows general_wgmma float16 CONV_POOL_GENERAL_WINDOWS=1 CONV_POOL_GENERAL_SEPARATE_PREP=1
memcheck  general_split general_wgmma float16
racecheck general_split general_wgmma float32
memcheck  general_strided_channels_last general_wgmma bfloat16
racecheck general_pointwise general_wgmma float16
memcheck  general_paired_channels_last general_wgmma float16 CONV_POOL_GENERAL_PERSISTENT=1
memcheck  general_split_channels_last general_3xtf32_wgmma float32
racecheck general_strided general_3xtf32_wgmma float32
memcheck  general_split_channels_last general_3xtf32_wgmma float32 CONV_POOL_GENERAL_SPLIT_REGISTERS=0
memcheck  general_large_kernel_channels_last general_3xtf32_wgmma float32
memcheck  general_subsampled_channels_last general_3xtf32_wgmma float32
racecheck general_pointwise_phased general_3xtf32_wgmma float32
memcheck  general_subsampled_channels_last general_wgmma float16
memcheck  general_pointwise_wide_channels_last general_3xtf32_wgmma float32
racecheck general_large_kernel general_3xtf32_wgmma float32
memcheck  general_strided general_3xtf32_wgmma float32
memcheck  general_pointwise general_3xtf32_wgmma
racecheck general_large_kernel_channels_last general_3xtf32_wgmma
memcheck  general_split_channels_last general_3xtf32_wgmma
memcheck  general_paired general_wgmma float16
memcheck  general_split_channels_last general_wgmma
racecheck general_large_kernel_channels_last general_wgmma bfloat16
memcheck  general_paired general_wgmma float16 CONV_POOL_GENERAL_NARROW_TAIL=0
memcheck  general_paired general_wgmma float16 CONV_POOL_GENERAL_DIRECT_PAIRS=0
memcheck  general_paired_channels_last general_wgmma CONV_POOL_GENERAL_PERSISTENT=1
racecheck general_paired general_wgmma bfloat16 CONV_POOL_GENERAL_DIRECT_PAIRS=0 CONV_POOL_GENERAL_PERSISTENT=1
racecheck stem_rows stem_tf32
memcheck  stem_columns stem_16bit float16
racecheck stem_columns stem_16bit bfloat16
memcheck  general_strided_channels_last general_wgmma float16 CONV_POOL_GENERAL_TILE=square_n128
racecheck general_strided_channels_last general_wgmma float32 CONV_POOL_GENERAL_TILE=wide_n128
memcheck  stem_columns_channels_last stem_16bit float16
racecheck stem_columns_channels_last stem_tf32
memcheck  stem_vec4_channels_last stem_16bit bfloat16
racecheck stem_vec4_channels_last stem_tf32
memcheck  stem_odd_channels_last stem_tf32
racecheck stem_odd_channels_last stem_16bit bfloat16
memcheck  flat_k96_7x7 general_wgmma float16
memcheck  flat_k96_7x7 general_wgmma float32
racecheck flat_k96_7x7 general_wgmma bfloat16
memcheck  flat_k96_7x7 general_wgmma float16 CONV_POOL_GENERAL_FOLD=0
memcheck  general_pointwise general_wgmma float16 CONV_POOL_GENERAL_PDL=1
memcheck  general_split general_wgmma float32 CONV_POOL_GENERAL_PDL=1 CONV_POOL_GENERAL_CLUSTER=0
memcheck  general_pointwise_wide_channels_last general_wgmma float16 CONV_POOL_GENERAL_TILE=wide_n128 CONV_POOL_GENERAL_STEP_CHUNKS=4
racecheck general_pointwise_wide_channels_last general_wgmma bfloat16 CONV_POOL_GENERAL_TILE=wide_n128 CONV_POOL_GENERAL_STEP_CHUNKS=4
memcheck  general_pointwise_wide_channels_last general_wgmma float32 CONV_POOL_GENERAL_STEP_CHUNKS=2
memcheck  general_phased_copy_channels_last general_wgmma float16
memcheck  general_pointwise_phased general_wgmma bfloat16
memcheck  general_phased_copy_channels_last general_wgmma float32 CONV_POOL_GENERAL_SEPARATE_PREP=1
racecheck general_split general_wgmma float16
memcheck  general_split_channels_last general_wgmma float16
memcheck  general_paired_channels_last general_wgmma float16
racecheck general_split general_wgmma
racecheck general_paired_channels_last general_wgmma float16
memcheck  general_paired_channels_last general_wgmma
memcheck  general_paired general_wgmma float16 CONV_POOL_GENERAL_TILE=wide_n64
racecheck general_paired_channels_last general_wgmma float16 CONV_POOL_GENERAL_TILE=square_n64
memcheck  general_pointwise general_wgmma float16
racecheck general_large_kernel_channels_last general_wgmma float16
memcheck  general_pointwise general_wgmma bfloat16
memcheck  general_large_kernel general_wgmma
racecheck general_large_kernel general_wgmma
memcheck  general_large_kernel general_wgmma float16
memcheck  general_strided general_wgmma
racecheck general_strided general_wgmma
memcheck  general_strided_channels_last general_wgmma float16
memcheck  general_dilated general_wgmma bfloat16
racecheck general_dilated general_wgmma
memcheck  general_pointwise general_wgmma
memcheck  general_split general_wgmma
memcheck  general_split_channels_last general_wgmma bfloat16
racecheck general_split_channels_last general_wgmma float16
memcheck  strip_tiles_channels_last tiled_tf32_wgmma
racecheck strip_tiles_channels_last tiled_16bit_wgmma float16
memcheck  split_square_channels_last tiled_16bit_wgmma bfloat16
racecheck split_square_channels_last tiled_3xtf32_wgmma
memcheck  few_tiles_channels_last tiled_tf32_wgmma
memcheck  narrow_squares_channels_last tiled_tf32_wgmma
memcheck  unpooled_strips_channels_last tiled_16bit_wgmma float16
racecheck unpooled_strips_channels_last tiled_tf32_wgmma
memcheck  unpooled_strips tiled_tf32_wgmma
racecheck unpooled_strips tiled_16bit_wgmma float16
memcheck  unpooled_narrow_odd tiled_16bit_wgmma bfloat16
racecheck unpooled_narrow_odd tiled_tf32_wgmma
memcheck  unpooled_split tiled_tf32_wgmma
racecheck unpooled_split tiled_3xtf32_wgmma
memcheck  general_large_kernel general_3xtf32_wgmma
racecheck general_split general_3xtf32_wgmma
memcheck  general_strided_channels_last general_3xtf32_wgmma
racecheck general_pointwise general_3xtf32_wgmma
memcheck  alexnet_persistent tiled_16bit_flat_wgmma float16
racecheck alexnet_persistent tiled_16bit_flat_wgmma bfloat16
memcheck  few_channels_large_kernel tiled_16bit_flat_wgmma bfloat16
racecheck few_channels_large_kernel tiled_16bit_flat_wgmma float16
memcheck  flat_k96_7x7 tiled_16bit_flat_wgmma float16
racecheck flat_channel_blocks tiled_16bit_flat_wgmma bfloat16
memcheck  alexnet_persistent tiled_tf32_flat_wgmma
racecheck alexnet_persistent tiled_tf32_flat_wgmma
memcheck  few_channels_large_kernel tiled_tf32_flat_wgmma
racecheck few_channels_large_kernel tiled_tf32_flat_wgmma
memcheck  flat_channel_blocks tiled_tf32_flat_wgmma
racecheck flat_channel_blocks tiled_tf32_flat_wgmma
memcheck  flat_k96_7x7 tiled_tf32_flat_wgmma
memcheck  stem_rows stem_tf32
memcheck  stem_rows stem_16bit float16
racecheck stem_rows stem_16bit bfloat16
memcheck  stem_columns stem_tf32
racecheck stem_columns stem_16bit float16
memcheck  stem_columns stem_16bit bfloat16
memcheck  stem_columns_channels_last stem_tf32
memcheck  flush_runs tiled_3xtf32_wgmma
racecheck flush_runs tiled_3xtf32_wgmma
memcheck  flush_runs_strips tiled_3xtf32_wgmma
racecheck flush_runs_strips tiled_3xtf32_wgmma
memcheck  strip_tiles tiled_3xtf32_wgmma
racecheck strip_tiles_channels_last tiled_3xtf32_wgmma
memcheck  split_square tiled_3xtf32_wgmma
racecheck split_square tiled_3xtf32_wgmma
memcheck  small_images tiled_3xtf32_wgmma
racecheck small_images tiled_3xtf32_wgmma
memcheck  channels_last_tails tiled_3xtf32_wgmma
racecheck default_small_batch tiled_3xtf32_wgmma
memcheck  wide_3xtf32 tiled_3xtf32
racecheck wide_3xtf32 tiled_3xtf32
memcheck  wide_3xtf32_generic tiled_3xtf32
racecheck wide_3xtf32_generic tiled_3xtf32
memcheck  flat_channel_blocks tiled_3xtf32_flat
racecheck flat_channel_blocks tiled_3xtf32_flat
memcheck  few_channels_large_kernel tiled_3xtf32_flat
racecheck few_channels_large_kernel tiled_3xtf32_flat
memcheck  flat_channel_blocks tiled_tf32_flat
racecheck flat_channel_blocks tiled_tf32_flat
memcheck  flat_two_per_sm tiled_tf32_flat
racecheck flat_two_per_sm tiled_16bit_flat float16
memcheck  flat_k96_7x7 tiled_16bit_flat bfloat16
racecheck flat_k96_7x7 tiled_tf32_flat
memcheck  alexnet_persistent tiled_tf32_flat
racecheck alexnet_persistent tiled_tf32_flat
memcheck  default_small_batch tiled_16bit_flat float16
memcheck  rgb_runs tiled_tf32_wgmma
racecheck rgb_runs tiled_tf32_wgmma
memcheck  rgb_runs tiled_16bit_wgmma float16
racecheck rgb_runs tiled_16bit_wgmma bfloat16
memcheck  strip_tiles tiled_tf32_wgmma
racecheck strip_tiles tiled_16bit_wgmma bfloat16
memcheck  small_images tiled_tf32_wgmma
racecheck small_images tiled_16bit_wgmma float16
memcheck  default_small_batch tiled_tf32_wgmma
racecheck default_small_batch tiled_tf32_wgmma
memcheck  small_16bit_vectors small_16bit float16
racecheck small_16bit_vectors small_16bit bfloat16
memcheck  lenet_persistent small_16bit bfloat16
memcheck  split_square tiled_tf32_wgmma
racecheck split_square tiled_tf32_wgmma
memcheck  split_square tiled_16bit_wgmma float16
racecheck split_square tiled_16bit_wgmma bfloat16
memcheck  split_square_channels_last tiled_tf32_wgmma
memcheck  narrow_squares tiled_tf32_wgmma
racecheck narrow_squares tiled_16bit_wgmma float16
memcheck  narrow_squares tiled_16bit_wgmma bfloat16
racecheck narrow_squares_odd tiled_tf32_wgmma
memcheck  narrow_squares_odd tiled_16bit_wgmma float16
racecheck narrow_squares_channels_last tiled_16bit_wgmma bfloat16
memcheck  narrow_squares_channels_last tiled_16bit_wgmma float16
memcheck  rgb_like tiled_16bit_wgmma float16
racecheck rgb_like tiled_16bit_wgmma bfloat16
memcheck  rgb_like_odd tiled_16bit_wgmma bfloat16
racecheck rgb_like_odd tiled_16bit_wgmma float16
memcheck  narrow_channels_last tiled_16bit_wgmma float16
racecheck narrow_channels_last tiled_16bit_wgmma bfloat16
memcheck  small_aligned_rows small_tf32,small_fp32
racecheck small_aligned_rows small_tf32,small_fp32
memcheck  small_strided_dilated small_tf32,small_fp32
racecheck small_strided_dilated small_tf32
memcheck  lenet_persistent small_tf32
racecheck lenet_persistent small_tf32
memcheck  few_tiles_packed_apart tiled_tf32_wgmma
racecheck few_tiles_packed_apart tiled_tf32_wgmma
memcheck  few_tiles_packed_apart_channels_last tiled_tf32_wgmma
memcheck  few_tiles_packed_apart tiled_16bit_wgmma float16
racecheck few_tiles_packed_apart_channels_last tiled_16bit_wgmma bfloat16
memcheck  few_tiles tiled_tf32_wgmma
racecheck few_tiles tiled_tf32_wgmma
racecheck few_tiles tiled_16bit_wgmma float16
memcheck  few_tiles_channels_last tiled_16bit_wgmma bfloat16
memcheck  few_tiles tiled_tf32_wgmma float32 prepacked
memcheck  strip_tiles tiled_tf32_wgmma float32 prepacked
racecheck strip_tiles tiled_tf32_wgmma float32 prepacked
memcheck  small_images tiled_16bit_wgmma bfloat16 prepacked
racecheck wgmma_tails tiled_16bit_wgmma float16 prepacked
memcheck  channels_last_tails tiled_tf32_wgmma float32 prepacked
racecheck strip_tiles tiled_tf32_wgmma
memcheck  strip_tiles tiled_16bit_wgmma bfloat16
racecheck strip_tiles tiled_16bit_wgmma float16
memcheck  strip_tiles_channels_last tiled_16bit_wgmma float16
memcheck  lenet_persistent small_16bit float16
racecheck lenet_persistent small_16bit bfloat16
memcheck  alexnet_persistent tiled_16bit_flat bfloat16
racecheck alexnet_persistent tiled_16bit_flat float16
memcheck  few_channels_large_kernel small_16bit,tiled_16bit_flat float16
memcheck  channels_last_tails tiled_tf32_wgmma
racecheck channels_last_tails tiled_tf32_wgmma
memcheck  channels_last_tails tiled_16bit_wgmma float16
racecheck channels_last_tails tiled_16bit_wgmma bfloat16
racecheck small_images tiled_tf32_wgmma
memcheck  small_images tiled_16bit_wgmma bfloat16
memcheck  wgmma_tails tiled_16bit_wgmma float16
racecheck wgmma_tails tiled_16bit_wgmma float16
memcheck  rgb_like tiled_16bit_wgmma bfloat16
memcheck  default_small_batch tiled_16bit_wgmma float16
memcheck  tiny_layer
memcheck  lenet_persistent small_fp32
racecheck lenet_persistent small_fp32
memcheck  few_channels_large_kernel
memcheck  alexnet_persistent auto
racecheck alexnet_persistent auto
memcheck  padded_odd all float16
memcheck  default_small_batch tiled_16bit_mma bfloat16
racecheck padded_odd tiled_16bit_mma float16
memcheck  padded_odd
memcheck  rgb_like
memcheck  default_small_batch
racecheck default_small_batch
RUNS
}

notebook() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || return 2
  PYTHONPATH=/tmp/site QUICKSTART_SKIP_BUILD=1 python3 tools/run_notebook.py \
    --output "$OUT/quickstart.ipynb"
}

for entry in "${stages[@]}"; do
  stage=${entry%%:*}
  seconds=0
  [[ "$entry" == *:* ]] && seconds=${entry#*:}
  case $stage in
    env) run_stage env "$seconds" bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv; python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"; nvcc --version | tail -n 2' ;;
    # PREBUILT: tools/prebuilt.sh's archive of the module built elsewhere for this machine's
    # torch, unpacked where its sources are this tree's (else the build runs).
    build) if [ -n "${PREBUILT:-}" ] && run_stage prebuilt 60 bash tools/prebuilt.sh unpack "$PREBUILT"; then
             :
           else
             run_stage build "$seconds" bash utils/compile.sh || break
           fi ;;
    # TEST_ARGS: shell words, so a quoted -k expression stays one argument.
    test) eval "test_args=(${TEST_ARGS:-tests})"
          run_stage test "$seconds" python3 -m pytest -q -p no:cacheprovider "${test_args[@]}" ;;
    verify) run_stage verify "$seconds" python3 -m utils.verification ;;
    profile) run_stage profile "$seconds" python3 -m utils.profiling ;;
    suite) run_stage suite "$seconds" python3 -m utils.profiling --suite --json "$OUT/suite.json" --plot "$OUT/suite.png" ;;
    suite16) run_stage suite16 "$seconds" bash -c 'for d in float16 bfloat16; do python3 -m utils.profiling --suite --dtype $d --json "$0/suite_$d.json" || exit; done' "$OUT" ;;
    layouts) run_stage layouts "$seconds" bash -c 'python3 tools/bench_layouts.py default vgg_b2 vgg_b3 vgg_b5 && python3 tools/bench_layouts.py default vgg_b3 --dtype float16' ;;
    bench) run_stage bench "$seconds" python3 tools/bench_variants.py ;;
    host) run_stage host "$seconds" python3 tools/bench_host.py ;;
    vgg16) run_stage vgg16 "$seconds" python3 tools/bench_vgg16.py --json "$OUT/vgg16.json" ;;
    distributed) run_stage distributed "$seconds" python3 tools/check_distributed.py ;;
    # Shell functions run through bash -c: timeout executes programs, not functions.
    notebook) run_stage notebook "$seconds" bash -c "OUT='$OUT'; $(declare -f notebook); notebook" ;;
    sanitize) run_stage sanitize "$seconds" bash -c "$(declare -f sanitize); sanitize" ;;
    general) run_stage general "$seconds" python3 tools/check_general.py --cases 40 --perf --layouts dense,channels_last --json "$OUT/general.json" ;;
    # ncu: the Nsight Compute sections of one general-kernel launch of each NCU_CASES spec
    # (tools/run_case.py's N,C,K,H,W,k,s,p,pk,ps[:dtype[:cl]], or with NCU_JSON=FILE case names
    # of that profiling JSON, each in its own dtype and layout) into $OUT/ncu.log; with
    # NCU_SOURCE=1 the full set instead, its source page as $OUT/ncu_<i>.csv and
    # tools/ncu_hotspots.py's summary of it (stall samples and instructions per SASS line).
    ncu) run_stage ncu "$seconds" bash -c 'i=0; for spec in ${NCU_CASES:-32,64,256,56,56,1,1,0,2,2:float16:cl}; do IFS=: read -r shape dtype cl <<< "$spec"; run=(python3 tools/run_case.py "$shape" general_wgmma --calls 2 ${NCU_JSON:+--json "$NCU_JSON"} ${dtype:+--dtype "$dtype"} ${cl:+--channels-last}); if [ "${NCU_SOURCE:-0}" = 1 ]; then i=$((i + 1)); ncu --clock-control none -k regex:general --launch-skip 1 --launch-count 1 --set full --import-source no -f -o "$0/ncu_$i" "${run[@]}" && ncu -i "$0/ncu_$i.ncu-rep" --page source --csv --print-source sass > "$0/ncu_$i.csv" && ncu -i "$0/ncu_$i.ncu-rep" --page details && python3 tools/ncu_hotspots.py "$0/ncu_$i.csv" || exit; else ncu --clock-control none -k regex:general --launch-skip 1 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy "${run[@]}" || exit; fi; done' "$OUT" ;;
    # swizzle: tools/swizzle_probe.cu (no build of the extension needed): what TMA and wgmma do
    # with swizzled operands that start at any row of the pattern.
    swizzle) run_stage swizzle "$seconds" bash -c 'nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/swizzle_probe tools/swizzle_probe.cu && /tmp/swizzle_probe' ;;
    # trace: tools/trace_tiles.py's phase timestamps of one general-kernel launch of each
    # TRACE_CASES spec (ncu's N,C,K,H,W,k,s,p,pk,ps[:dtype[:cl[:settings]]], or with TRACE_JSON
    # a case name of that profiling JSON, in its own dtype and layout; settings: the general
    # kernel's hooks for that launch, comma-separated, e.g. fuzz_52:::CONV_POOL_GENERAL_SPLIT=3)
    # into $OUT/trace.log.
    trace) run_stage trace "$seconds" bash -c 'for spec in ${TRACE_CASES:-32,128,128,56,56,1,1,0,2,2:float16}; do IFS=: read -r shape dtype cl settings <<< "$spec"; env ${settings//,/ } python3 tools/trace_tiles.py "$shape" ${TRACE_JSON:+--json "$TRACE_JSON"} ${dtype:+--dtype "$dtype"} ${cl:+--channels-last} || exit; done' ;;
    zoo) run_stage zoo "$seconds" python3 -m utils.profiling --zoo --zoo-limit "${ZOO_LIMIT:-40}" --iters 50 --json "$OUT/zoo_float32.json" ;;
    zoo16) run_stage zoo16 "$seconds" python3 -m utils.profiling --zoo --zoo-limit "${ZOO_LIMIT:-40}" --iters 50 --dtype float16 --json "$OUT/zoo_float16.json" ;;
    zoo_fp32) run_stage zoo_fp32 "$seconds" python3 -m utils.profiling --zoo --zoo-limit "${ZOO_LIMIT:-40}" --iters 50 --no-tf32 --targets new,eager --json "$OUT/zoo_float32_no_tf32.json" ;;
    fuzz) run_stage fuzz "$seconds" python3 -m utils.profiling --fuzz 150 --start "${FUZZ_START:-0}" --iters 50 --json "$OUT/fuzz_${FUZZ_START:-0}.json" ;;
    breakdown) run_stage breakdown "$seconds" bash -c "$(declare -f breakdown); breakdown" ;;
    fewchannel) run_stage fewchannel "$seconds" bash -c "$(declare -f fewchannel); fewchannel" ;;
    # NETWORKS_ARGS: tools/bench_networks.py's slice of issue 32's matrix, e.g.
    # "--models vgg16,alexnet --batches 32 --layouts nchw" (default: the whole matrix).
    # shellcheck disable=SC2086  # NETWORKS_ARGS holds several words
    networks)
      # NETWORKS_RESUME=docs/networks_h200.json: start from that file's rows, run the rest; the
      # stage's own cap less a minute becomes the tool's --time-limit, so it stops cleanly.
      # NETWORKS_REDO (with NETWORKS_RESUME): rows of it to measure again, the tool's --redo
      # ("misses": every row that misses a bar; or model[:batch[:dtype[:layout]]], comma-separated).
      resume=()
      if [ -n "${NETWORKS_RESUME:-}" ]; then
        cp "$NETWORKS_RESUME" "$OUT/networks.json" && resume=(--resume)
        [ -n "${NETWORKS_REDO:-}" ] && resume+=(--redo "$NETWORKS_REDO")
      fi
      limit=()
      (( seconds > 120 )) && limit=(--time-limit "$((seconds - 60))")
      # shellcheck disable=SC2086  # NETWORKS_ARGS holds several words
      run_stage networks "$seconds" python3 tools/bench_networks.py ${NETWORKS_ARGS:-} \
        "${resume[@]}" "${limit[@]}" --json "$OUT/networks.json" ;;
    gtest) run_stage gtest "$seconds" python3 -m pytest -q -p no:cacheprovider tests/test_general_wgmma_gpu.py ;;
    # netbreak: tools/network_breakdown.py's kernels of eager and fused (with --cpu: the host's
    # busiest operators) for each NETBREAK_CASES model:dtype[:batch[:layout]]; NETBREAK_TARGETS
    # (default eager,fused) other targets of tools/bench_networks.py.
    netbreak) run_stage netbreak "$seconds" bash -c 'for spec in ${NETBREAK_CASES:-resnet50:float32 googlenet:float16}; do IFS=: read -r model dtype batch layout <<< "$spec"; python3 tools/network_breakdown.py "$model" --dtype "${dtype:-float32}" --batch "${batch:-32}" --layout "${layout:-nchw}" --targets "${NETBREAK_TARGETS:-eager,fused}" --cpu || exit; done' ;;
    # ab: a compile-time A/B in this call (tools/ab_build.sh): the built tree against it with
    # AB_PATCH applied, against the tree in AB_TREE (another commit's files, carried), or against
    # the module in AB_PREBUILT (another commit's `tools/prebuilt.sh pack`, carried), AB_CMD run
    # AB_ROUNDS times on each, alternating; run build first.
    ab) run_stage ab "$seconds" bash tools/ab_build.sh "$OUT" ;;
    # zooab: the zoo (ZOOAB_DTYPE, default float16) again with the environment settings of
    # ZOOAB_ENV (e.g. CONV_POOL_GENERAL_PAIRED=0) into $OUT/zoo_<dtype>_ab.json, then
    # tools/ratio_table.py of the zoo stage's JSON against it (run zoo16 / zoo first).
    zooab) run_stage zooab "$seconds" bash -c 'd=${ZOOAB_DTYPE:-float16}; env ${ZOOAB_ENV:?ZOOAB_ENV names the settings} python3 -m utils.profiling --zoo --zoo-limit "${ZOO_LIMIT:-40}" --iters 50 --dtype "$d" --json "$0/zoo_${d}_ab.json" || exit; if [ -f "$0/zoo_$d.json" ]; then python3 tools/ratio_table.py "$0/zoo_$d.json" --against "$0/zoo_${d}_ab.json"; fi' "$OUT" ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
archive || true
