#!/usr/bin/env bash
# The extension built here for the device machine's Python and torch, so that a device call
# can skip its build (a cold build there takes 2.5-4 minutes of device time; here it is free).
#
#   bash tools/prebuilt.sh pack PYTHON ARCHIVE   # here: build this tree for PYTHON, pack it
#   bash tools/prebuilt.sh unpack ARCHIVE        # there: the module, if the sources match
#   bash tools/prebuilt.sh hash                  # the hash of the build's inputs in this tree
#
# pack copies the files a device call sends (tracked, and untracked ones git does not ignore)
# into PREBUILT_TREE (default /tmp/prebuilt_tree, kept between packs, so the build there is
# incremental), runs utils/compile.sh there with PYTHON (an interpreter whose torch is the
# device's: 2.11.0+cu130 on CPython 3.12 for the H100 / H200 image), and packs the module,
# build/ptxas.log and build/build.log with the hash of the build's inputs into ARCHIVE (a
# .tar.gz, ~22 MB). Put ARCHIVE under a folder the device call carries (e.g. scratch_ab/, kept
# out of git by .git/info/exclude) and start gpu_check.sh with PREBUILT=<that path>: its build
# stage unpacks the module where the hash matches the tree there, and builds otherwise.
# unpack checks that the hash matches and that the module's Python tag is python3's; the
# stages after it import the module (a torch other than the one it was built for fails there).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fail() { echo "prebuilt.sh: error: $*" >&2; exit 1; }

# The build's inputs (setup.py's sources and headers, its flags, the build environment's
# checks), as a device call's copy of the tree holds them.
inputs_hash() {
  (cd "$1" && find binding.cpp setup.py utils/build_env.py utils/compile.sh ./*.h kernels \
      -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.h' -o -name '*.cpp' -o -name '*.py' \
      -o -name '*.sh' \) | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)
}

case "${1:-}" in
  hash) inputs_hash "$ROOT" ;;
  pack)
    [ $# -eq 3 ] || fail "usage: pack PYTHON ARCHIVE"
    python=$2 archive=$(realpath -m "$3")
    tree=${PREBUILT_TREE:-/tmp/prebuilt_tree}
    mkdir -p "$tree"
    # The device's file set: copied where its content changed (so ninja rebuilds just that),
    # removed where it left the tree; the build's outputs there stay.
    (cd "$ROOT" && git ls-files -z -co --exclude-standard) | python3 -c '
import filecmp, os, shutil, sys
root, tree = sys.argv[1:]
files = {name for name in sys.stdin.read().split("\0")
         if name and os.path.isfile(os.path.join(root, name))}
for name in files:
    src, dst = os.path.join(root, name), os.path.join(tree, name)
    if not (os.path.isfile(dst) and filecmp.cmp(src, dst, False)):
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)
        shutil.copymode(src, dst)
for top, dirs, names in os.walk(tree):
    rel = os.path.relpath(top, tree)
    if rel.split(os.sep)[0] == "build":
        continue
    for name in names:
        path = os.path.normpath(os.path.join(rel, name))
        if path not in files and not name.endswith(".so"):
            os.remove(os.path.join(top, name))
' "$ROOT" "$tree"
    PYTHON=$python bash "$tree/utils/compile.sh"
    tag=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    [ -f "$tree/cuda_extension$tag" ] || fail "no cuda_extension$tag in $tree"
    inputs_hash "$tree" > "$tree/build/inputs.sha256"
    tar -czf "$archive" -C "$tree" "cuda_extension$tag" build/ptxas.log build/build.log \
      build/inputs.sha256
    echo "prebuilt.sh: packed cuda_extension$tag for $("$python" -c 'import torch; print(torch.__version__)') into $archive ($(du -h "$archive" | cut -f1))"
    ;;
  unpack)
    [ $# -eq 2 ] || fail "usage: unpack ARCHIVE"
    archive=$(realpath "$2") || fail "no archive $2"
    want=$(tar -xzOf "$archive" build/inputs.sha256) || fail "$archive has no build/inputs.sha256"
    have=$(inputs_hash "$ROOT")
    [ "$want" = "$have" ] || fail "$archive was built from other sources ($want, this tree $have)"
    tag=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    # (the listing whole before grep: grep -q stops reading at its match, and tar, still
    # writing the names after the module's, would die of SIGPIPE and fail the pipe)
    names=$(tar -tzf "$archive")
    grep -qx "cuda_extension$tag" <<< "$names" ||
      fail "$archive holds no cuda_extension$tag for this python3"
    mkdir -p "$ROOT/build"
    tar -xzf "$archive" -C "$ROOT"
    echo "prebuilt.sh: unpacked cuda_extension$tag (sources $have)"
    ;;
  *) fail "usage: pack PYTHON ARCHIVE | unpack ARCHIVE | hash" ;;
esac
