"""The machine code of the built extension: the tensor-core kernels really run on tensor cores.

Reads the SASS of cuda_extension*.so with the cuobjdump that ships inside triton (a torch
dependency), so it runs on a CPU-only machine too. Register spills are checked from the ptxas
report in tests/test_build.py; here we check what the disassembly shows:
  * every mma.sync tensor-core kernel (TF32, 3xTF32, 16-warp and flat-K mainloops, fast and
    generic geometry) contains HMMA instructions, the wgmma kernels contain Hopper's HGMMA (the
    asynchronous warpgroup instruction), and the FFMA and direct kernels contain neither;
  * the wgmma kernel's instances: TF32 (tiled_tf32_wgmma) issue HGMMA.64xNx8.F32.TF32, the
    16-bit ones (tiled_16bit_wgmma) HGMMA.64xNx16.F32 (float16) and HGMMA.64xNx16.F32.BF16
    (bfloat16), 18 per chunk (9 taps x 2 squares), with the same two waits (WARPGROUP.DEPBAR)
    and two WARPGROUP.ARRIVE (one per run of the chunk's wgmmas) in every instance, the
    channels-last ones included: no drain added inside the chunk loop; the instances for
    weights packed ahead of time have no grid barrier, the others do; the split-reduction
    instances (a tile's chunks over a cluster) have the cluster barriers and no grid barrier;
  * the 16-bit tensor-core kernels (tiled_16bit_mma) issue HMMA.16816.F32 (float16) and
    HMMA.16816.F32.BF16 (bfloat16): m16n8k16 with fp32 accumulators, nothing narrower;
  * small_tf32's kernels (the small kernel's tensor-core loop) issue HMMA.1688.F32.TF32 and
    no FFMA: the products run on tensor cores only; so do the stem kernels' float32 instances
    (stem_tf32), 4 k steps x their n-tiles of them, unrolled once, and the 16-bit ones
    (stem_16bit) issue 2 k steps x n-tiles of HMMA.16816.F32[.BF16];
  * no kernel touches local memory (LDL/STL): register arrays stayed in registers;
  * the fast-path instantiations (compile-time 3x3 / 2x2 geometry) exist;
  * the flat kernel's wgmma mainloop issues HGMMA.64x64x8.F32.TF32 (tiled_tf32_flat_wgmma) or
    HGMMA.64x64x16.F32[.BF16] (tiled_16bit_flat_wgmma) with its A operand in registers, and
    nothing else multiplies;
  * the code is built for Hopper (sm_90a), as compile.sh does on CI and on the H200.
"""
import re
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def cuobjdump() -> Path:
    import triton
    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    assert path.is_file(), f"triton ships no cuobjdump at {path}"
    return path


@pytest.fixture(scope="module")
def sass(extension) -> dict[str, str]:
    """{mangled kernel name: its SASS} for every kernel in the built module."""
    library = Path(extension.__file__)
    text = subprocess.run([str(cuobjdump()), "-sass", str(library)], check=True,
                          capture_output=True, text=True).stdout
    sections = re.split(r"^\s*Function : (\S+)\s*$", text, flags=re.MULTILINE)
    kernels = dict(zip(sections[1::2], sections[2::2]))
    assert kernels, f"cuobjdump found no kernel in {library}"
    return kernels


@pytest.fixture(scope="module")
def architectures(extension) -> set[str]:
    text = subprocess.run([str(cuobjdump()), "-sass", extension.__file__], check=True,
                          capture_output=True, text=True).stdout
    return set(re.findall(r"arch = (sm_\w+)", text))


def is_tensor_core_kernel(name: str) -> bool:
    return "TensorCoreMainloop" in name  # also matches FlatTensorCoreMainloop


def is_wgmma_kernel(name: str) -> bool:
    return "wgmma_kernel" in name


def wgmma_kernels(sass: dict, pool: int) -> dict:
    """The 3 x 3 wgmma kernel's instances of one pooling (WgmmaTile's last argument: 2, the
    2 x 2 / 2 pool, or 1, none), named without that argument, so that one set of name patterns
    reads both."""
    marker = f"ELi{pool}EEELb"
    return {name.replace(marker, "EEELb", 1): code for name, code in sass.items()
            if is_wgmma_kernel(name) and marker in name}


def is_flat_wgmma_kernel(name: str) -> bool:
    return "FlatWgmmaMainloop" in name


def is_16bit_mma_kernel(name: str) -> bool:
    return "conv_pool_mma16_kernel" in name


def is_small_mma_kernel(name: str) -> bool:
    return "conv_pool_small_mma_kernel" in name


def is_stem_kernel(name: str) -> bool:
    return "conv_pool_stem_kernel" in name


def is_packing_kernel(name: str) -> bool:
    return ("pack_input_kernel" in name or "pack_weights_kernel" in name
            or "to_channels_last_kernel" in name or "to_slices_kernel" in name
            or "prepare_kernel" in name or "fold_kernel" in name
            or "gather_slices_kernel" in name
            or "gather_planes_kernel" in name)  # copies only


def is_general_kernel(name: str) -> bool:
    return "general_conv_pool_kernel" in name


def is_general_ws_kernel(name: str) -> bool:
    return "general_ws_kernel" in name


def is_probe_kernel(name: str) -> bool:
    return "one_block_per_sm_probe" in name  # empty: cudaOccupancyMaxActiveClusters asks


def test_tensor_core_kernels_issue_hmma(sass):
    tensor_core = {name: code for name, code in sass.items() if is_tensor_core_kernel(name)}
    assert len(tensor_core) >= 10, sorted(sass)
    missing = [name for name, code in tensor_core.items() if "HMMA" not in code]
    assert not missing, f"tensor-core kernels without HMMA: {missing}"


# The HGMMA each operand type's wgmma kernels issue (m64nNk8 TF32, m64nNk16 f16 / bf16, all
# with fp32 accumulators), as cuobjdump spells it.
HGMMA_BY_OPERANDS = {"Tf32Operands": r"HGMMA\.64x{n}x8\.F32\.TF32",
                     "HalfOperandsI7Float16": r"HGMMA\.64x{n}x16\.F32(?![.\w])",
                     "HalfOperandsI8BFloat16": r"HGMMA\.64x{n}x16\.F32\.BF16\b"}


@pytest.mark.parametrize("pool", [2, 1], ids=["pool_2x2", "no_pool"])
def test_wgmma_kernels_issue_hgmma(sass, pool):
    wgmma = wgmma_kernels(sass, pool)
    # TF32, float16 and bfloat16 operands; 8 x 32 and 16 x 16 pixel tiles (TileShape 0), each
    # with 128 and 64 output channels per block, and strips of four squares (TileShape 1) with
    # 128; each for NCHW-like inputs and for channels-last ones (the kernel's first bool
    # template argument, kPixelVectors); each of those in a twin for weights packed ahead of
    # time (the second, kPrepacked), but for the two-blocks-per-SM tiles (N = 64: 8 x 32, and
    # 16 x 16 in TF32 only), which always pack in the kernel; and the one-block-per-SM twins of
    # those tiles (their last WgmmaTile argument true: layers of few tiles, 16-bit inputs that
    # need scalar halo loads), with their prepacked twins (which run on weights packed apart,
    # never on the caller's): per operand type 3 x 4 + 2 x 2 + 2 x 4 in TF32, 4 x 4 + 2 + 4
    # in 16 bits; and the split-reduction instances (the third bool, kSplitK) of the N = 64
    # tiles that run one block per SM (TF32's twins; in 16 bits the wide twin and the square
    # tile), from weights packed apart: 2 x 2 per operand type. Plus 3xTF32's 10
    # (test_3xtf32_wgmma_kernels_issue_two_hgmma_per_tap). The same set with and without the
    # pool (`pool`).
    assert len(wgmma) == 28 + 2 * 26 + 10, sorted(wgmma)
    for operands, pattern in HGMMA_BY_OPERANDS.items():
        instances = {name: code for name, code in wgmma.items() if operands in name}
        flags = {name: re.search(r"ELb([01])ELb([01])ELb([01])EEEv", name).groups()
                 for name in instances}
        packing = [name for name in instances if flags[name][1] == "0"]
        prepacked = [name for name in instances if flags[name][1:] == ("1", "0")]
        split = [name for name in instances if flags[name][2] == "1"]
        tf32 = operands == "Tf32Operands"
        assert len(packing) == (14 if tf32 else 12), (operands, sorted(instances))
        assert sum(flags[name][0] == "1" for name in packing) == (7 if tf32 else 6), \
            (operands, sorted(packing))
        assert sum(bool(re.search(r"TileShapeE0ELb1EE", name)) for name in instances) == \
            (12 if tf32 else 6), operands
        one_block_n64 = (r"Li(8ELi32|16ELi16)ELi64ELN\w*TileShapeE0ELb1EE" if tf32
                         else r"Li(8ELi32ELi64ELN\w*TileShapeE0ELb1|16ELi16ELi64ELN\w*"
                              r"TileShapeE0ELb0)EE")
        assert sorted(split) == sorted(
            name.replace("ELb1ELb0EEEv", "ELb1ELb1EEEv")
            for name in prepacked if re.search(one_block_n64, name)), operands
        # The two-blocks-per-SM tiles (the last WgmmaTile argument false) have no twin.
        no_twin = (r"Li(8ELi32|16ELi16)ELi64ELN\w*TileShapeE0ELb0EE" if tf32
                   else r"Li8ELi32ELi64ELN\w*TileShapeE0ELb0EE")
        assert sorted(prepacked) == sorted(
            name.replace(f"ELb{flags[name][0]}ELb0ELb0EEEv", f"ELb{flags[name][0]}ELb1ELb0EEEv")
            for name in packing if not re.search(no_twin, name)), operands
        strips = [name for name in instances
                  if re.search(r"Li8ELi32ELi128ELN\w*TileShapeE1E", name)]
        assert len(strips) == 4, (operands, sorted(instances))
        for name, code in instances.items():
            tile = re.search(r"Li(\d+)ELi(\d+)ELi(\d+)ELN\w*?TileShapeE(\d)E", name)
            assert tile, name
            n = int(tile.group(3))
            assert n in (64, 128), name
            # 9 taps x 2 pixel squares per warpgroup, unrolled: 18 per chunk, and no other
            # kind of HGMMA.
            assert len(re.findall(pattern.format(n=n), code)) == 18, name
            assert len(re.findall(r"\bHGMMA\.", code)) == 18, name
            assert "HMMA" not in code, name
            # One warpgroup arrive before each of the chunk's two runs of wgmmas (the halo
            # loads sit between them), one wait inside the chunk loop (wait_group 1) and one
            # after it (wait_group 0): the same in every instance, so the 16-bit loader added
            # no drain (ptxas notes C7512 / C7517 / C7519).
            assert len(re.findall(r"WARPGROUP\.ARRIVE", code)) == 2, name
            assert re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x\d)", code) == ["0x1", "0x0"], name
            # The weights move with the bulk copy engine (two prologue copies, one per step),
            # completing mbarriers; no per-thread cp.async is left.
            assert len(re.findall(r"\bUBLKCP\.S\.G\b", code)) == 3, name
            assert "SYNCS.PHASECHK" in code and "LDGSTS" not in code, name
            # The grid barrier after the packing (cooperative groups: a GPU-scope atomic add
            # on the barrier word) is in the packing instances only.
            grid_barrier = re.search(r"\bATOM\.E\.ADD\.STRONG\.GPU\b", code) is not None
            assert grid_barrier == (name in packing), name
            # A split instance's blocks meet at the cluster barrier twice (the partials
            # written; the partials read, waited for before the block exits).
            cluster_barriers = (len(re.findall(r"\bUCGABAR_ARV\b", code)),
                                len(re.findall(r"\bUCGABAR_WAIT\b", code)))
            assert cluster_barriers == ((2, 2) if name in split else (0, 0)), name


@pytest.mark.parametrize("pool", [2, 1], ids=["pool_2x2", "no_pool"])
def test_3xtf32_wgmma_kernels_issue_two_hgmma_per_tap(sass, pool):
    """tiled_3xtf32_wgmma (Tf32SplitOperands): the N = 64 wide, square and strip tiles, each for
    NCHW-like and channels-last inputs, each packing its own weights (a grid barrier) or, for
    the wide and square tiles, as a split reduction over a cluster, reading weights packed
    apart (the cluster barriers; no prepacked twin otherwise). Per tap and pixel square one
    HGMMA.64x128x8 (the big halo times the small and the big weights side by side) and one
    HGMMA.64x64x8 (the small halo times the big weights, into the first half, which starts at
    the same register): 36 per chunk, TF32 with fp32 accumulators, in the same two runs with
    the same waits as the other instances; those that pack their own weights also wait for
    every wgmma at the end of a run of 8 chunks, then store its sums to global memory (16
    16-byte stores or reductions a thread) and read them back at the tile's end (flush_run)."""
    kernels = {name: code for name, code in wgmma_kernels(sass, pool).items()
               if "Tf32SplitOperands" in name}
    assert len(kernels) == 10, sorted(kernels)
    tiles = set()
    for name, code in kernels.items():
        tile = re.search(r"Li(\d+)ELi(\d+)ELi(\d+)ELN\w*?TileShapeE(\d)ELb0EEELb([01])"
                         r"ELb([01])ELb([01])EEEv", name)
        assert tile, name
        tiles.add(tile.groups())
        split_k = tile.group(7) == "1"
        assert tile.group(6) == tile.group(7), name  # prepacked only for the split reduction
        assert len(re.findall(r"HGMMA\.64x128x8\.F32\.TF32", code)) == 18, name
        assert len(re.findall(r"HGMMA\.64x64x8\.F32\.TF32", code)) == 18, name
        assert len(re.findall(r"\bHGMMA\.", code)) == 36, name
        assert "HMMA" not in code, name
        assert len(re.findall(r"WARPGROUP\.ARRIVE", code)) == 2, name
        waits = ["0x1", "0x0"] if split_k else ["0x1", "0x0", "0x0"]
        assert re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x\d)", code) == waits, name
        runs = (len(re.findall(r"\bSTG\.E\.128\.STRONG\.GPU\b", code)),
                len(re.findall(r"\bREDG\.E\.ADD\.F32x4\.FTZ\.RN\.STRONG\.GPU\b", code)),
                len(re.findall(r"\bLDG\.E\.128\.STRONG\.GPU\b", code)))
        assert runs == ((0, 0, 0) if split_k else (16, 16, 16)), name
        assert len(re.findall(r"\bUBLKCP\.S\.G\b", code)) == 3, name
        grid_barrier = re.search(r"\bATOM\.E\.ADD\.STRONG\.GPU\b", code) is not None
        assert grid_barrier == (not split_k), name
        cluster_barriers = (len(re.findall(r"\bUCGABAR_ARV\b", code)),
                            len(re.findall(r"\bUCGABAR_WAIT\b", code)))
        assert cluster_barriers == ((2, 2) if split_k else (0, 0)), name
    assert tiles == {(rows, cols, "64", "0", pixel_vectors, split_k, split_k)
                     for rows, cols in (("8", "32"), ("16", "16"))
                     for pixel_vectors in "01" for split_k in "01"} | {
                         ("8", "32", "64", "1", pixel_vectors, "0", "0")
                         for pixel_vectors in "01"}, tiles


def test_16bit_tensor_core_kernels_issue_m16n8k16_with_fp32_accumulators(sass):
    kernels = {name: code for name, code in sass.items() if is_16bit_mma_kernel(name)}
    # float16 and bfloat16, each with 32, 64 and 128 output channels per block.
    assert len(kernels) == 6, sorted(sass)
    for name, code in kernels.items():
        bf16 = "BFloat16" in name
        block = int(re.search(r"Li(\d+)EE", name).group(1))
        # One K step: 4 m-tiles x (block / 16) n-tiles per warp, unrolled.
        expected = 4 * block // 16
        float16 = re.findall(r"HMMA\.16816\.F32(?![.\w])", code)
        bfloat16 = re.findall(r"HMMA\.16816\.F32\.BF16\b", code)
        assert len(bfloat16 if bf16 else float16) == expected, name
        assert not (float16 if bf16 else bfloat16), name
        # Every HMMA is an m16n8k16 with fp32 accumulators (no fp16 accumulation).
        assert len(re.findall(r"\bHMMA\.", code)) == expected, name
        assert "HGMMA" not in code, name


def test_cuda_core_kernels_have_no_hmma(sass):
    others = {name: code for name, code in sass.items()
              if not is_tensor_core_kernel(name) and not is_wgmma_kernel(name)
              and not is_16bit_mma_kernel(name) and not is_small_mma_kernel(name)
              and not is_stem_kernel(name) and not is_flat_wgmma_kernel(name)
              and not is_general_kernel(name) and not is_general_ws_kernel(name)}
    assert any("CudaCoreMainloop" in name for name in others)
    assert any("direct_kernel" in name for name in others)
    assert sum("direct16_kernel" in name for name in others) == 2  # float16, bfloat16
    for name, code in others.items():
        assert "HMMA" not in code and "HGMMA" not in code, name
        if not is_packing_kernel(name) and not is_probe_kernel(name):
            assert "FFMA" in code, f"{name} does no fp32 FMA at all?"


# The flat kernel's wgmma mainloop per element type: TF32 m64n64k8 for float32
# (tiled_tf32_flat_wgmma), m64n64k16 with 16-bit operands for float16 and bfloat16
# (tiled_16bit_flat_wgmma).
FLAT_HGMMA_BY_ELEMENT = {"7Float32": r"HGMMA\.64x64x8\.F32\.TF32\b",
                         "7Float16": r"HGMMA\.64x64x16\.F32(?![.\w])",
                         "8BFloat16": r"HGMMA\.64x64x16\.F32\.BF16\b"}


def test_flat_wgmma_kernel_multiplies_register_pixels_by_shared_weights(sass):
    """tiled_tf32_flat_wgmma / tiled_16bit_flat_wgmma: one instance per element type whose
    products are all its type's HGMMA with A from registers (R, not a descriptor) and B from a
    shared memory descriptor, no HMMA or FFMA; the 16-bit ones pack the gathered fp32 values
    into 16-bit pairs (F2FP); the main loop keeps one group in flight (a wait for at most one
    pending group after each commit) and the rest drain it (waits for none)."""
    kernels = {name: code for name, code in sass.items() if is_flat_wgmma_kernel(name)}
    found = {element for element in FLAT_HGMMA_BY_ELEMENT for name in kernels
             if f"FlatWgmmaMainloopI{element}" in name}
    assert len(kernels) == 3 and found == set(FLAT_HGMMA_BY_ELEMENT), sorted(kernels)
    for name, code in kernels.items():
        element = next(e for e in FLAT_HGMMA_BY_ELEMENT if f"FlatWgmmaMainloopI{e}" in name)
        hgmma = re.findall(r"\bHGMMA\.\S+ R\d+, (\S+), gdesc\[UR\d+\]", code)
        assert hgmma and all(a.startswith("R") for a in hgmma), (name, hgmma)
        assert len(re.findall(r"\bHGMMA\.", code)) == len(hgmma), name
        assert len(re.findall(FLAT_HGMMA_BY_ELEMENT[element], code)) == len(hgmma), name
        assert "HMMA" not in code.replace("HGMMA", "") and "FFMA" not in code, name
        if element != "7Float32":
            pack = "F2FP.BF16.F32.PACK_AB" if element == "8BFloat16" else "F2FP.F16.F32.PACK_AB"
            assert pack in code, name
        waits = re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x\d)", code)
        assert "0x1" in waits and "0x0" in waits, (name, waits)


def test_small_tf32_kernels_issue_tf32_hmma_only(sass):
    kernels = {name: code for name, code in sass.items() if is_small_mma_kernel(name)}
    # float32 only, one instance per output-channel count it rounds up to: 2, 4, 6, 8.
    assert sorted(re.search(r"Float32Li(\d+)E", name).group(1) for name in kernels) == \
        ["2", "4", "6", "8"], sorted(kernels)
    for name, code in kernels.items():
        assert re.search(r"HMMA\.1688\.F32\.TF32\b", code), name
        assert len(re.findall(r"\bHMMA\.", code)) == \
            len(re.findall(r"HMMA\.1688\.F32\.TF32\b", code)), name
        assert "HGMMA" not in code and "FFMA" not in code, name


def test_stem_kernels_issue_one_hmma_per_k_step_and_n_tile(sass):
    kernels = {name: code for name, code in sass.items() if is_stem_kernel(name)}
    # Three element types x 1, 2, 4 or 8 n-tiles of 8 output channels.
    found = sorted((re.search(r"kernelI(\d+\w+?)Li(\d)E", name).groups()) for name in kernels)
    assert found == sorted((element, n) for element in ("7Float32", "7Float16", "8BFloat16")
                           for n in "1248"), found
    for name, code in kernels.items():
        n_tiles = int(re.search(r"Li(\d)E", name).group(1))
        # Unrolled once (the weights stay in registers): float32 on TF32 m16n8k8, 4 k steps;
        # 16 bits on m16n8k16 with fp32 accumulators, 2 k steps.
        if "Float32" in name:
            expected = re.findall(r"HMMA\.1688\.F32\.TF32\b", code)
            assert len(expected) == 4 * n_tiles, name
        else:
            pattern = (r"HMMA\.16816\.F32\.BF16\b" if "BFloat16" in name
                       else r"HMMA\.16816\.F32(?![.\w])")
            expected = re.findall(pattern, code)
            assert len(expected) == 2 * n_tiles, name
        assert len(re.findall(r"\bHMMA\.", code)) == len(expected), name
        assert "HGMMA" not in code and "FFMA" not in code, name


def test_no_kernel_uses_local_memory(sass):
    local = [name for name, code in sass.items() if re.search(r"\b(LDL|STL)\b", code)]
    assert not local, f"kernels with local-memory traffic (spilled or indexed arrays): {local}"


def test_fast_path_instantiations_exist(sass):
    # conv_pool_tiled_kernel<TensorCoreMainloop<128, false, 2>, true>: the default problem's
    # kernel. Itanium mangling: ...Li128ELb0ELi2EEELb1EE... (kSplit false, 2 warps, kFast true).
    assert any(re.search(r"TensorCoreMainloopILi128ELb0ELi2EEELb1E", name) for name in sass)
    assert any(re.search(r"TensorCoreMainloopILi64ELb1ELi2EEELb1E", name) for name in sass)


def test_built_for_hopper(architectures):
    # compile.sh targets the visible GPU, else 9.0a: on CI and on the H200 that is sm_90a.
    assert "sm_90a" in architectures, architectures


# The general kernel (kernels/hopper/): one instance per element type, tile of
# general_plan.h's table (N of each: 128, 128, 64, 64, 64) and input path (float32 only has the
# element-wise planar one beside the pixel-slice one).
GENERAL_TILE_N = (128, 128, 64, 64, 64)
GENERAL_HGMMA = {"7Float32": r"HGMMA\.64x{n}x8\.F32\.TF32\b",
                 "7Float16": r"HGMMA\.64x{n}x16\.F32(?![.\w])",
                 "8BFloat16": r"HGMMA\.64x{n}x16\.F32\.BF16\b"}
# ptxas closes a wgmma group with an empty HGMMA of its own where a wait follows a loop of
# wgmmas (general_kernel.cuh says why); it multiplies nothing.
EMPTY_HGMMA = r"HGMMA\.64x8x16\.F16 RZ, gdesc\[URZ\], RZ, !UPT"


def test_general_kernel_instances_issue_wgmma_of_their_type_from_shared_memory(sass):
    kernels = {name: code for name, code in sass.items() if is_general_kernel(name)}
    instances = set()
    for name, code in kernels.items():
        element, tile, path, split = re.search(r"kernelI(\d\w+?)Li(\d)ELi(\d)ELi(\d)E",
                                               name).groups()
        instances.add((element, int(tile), int(path), int(split)))
        n = GENERAL_TILE_N[int(tile)]
        ours = re.findall(GENERAL_HGMMA[element].format(n=n) + r".*", code)
        assert ours, name
        squares_per_group = (4, 4, 4, 4, 8)[int(tile)] // 2
        # Both operands through descriptors: A from shared memory, not registers (the
        # accumulator input RZ where a wgmma starts a sum: the 3xTF32 form's every step); the
        # 3xTF32 registers form (split 2): A from registers, three wgmmas a square and K step.
        a_operand = r"R\d+, " if split == "2" else ""
        assert len(ours) % (squares_per_group * (3 if split == "2" else 1)) == 0, (name, len(ours))
        assert all(re.search(rf"\.F32\S* R\d+, {a_operand}gdesc\[UR\d+\], (R\d+|RZ, !UPT)", line)
                   for line in ours), name
        others = [line for line in re.findall(r"HGMMA\.\S+.*", code)
                  if not re.match(GENERAL_HGMMA[element].format(n=n), line)]
        assert all(re.match(EMPTY_HGMMA, line) for line in others), (name, others)
    # (element, tile, input path, SplitForm): the 3xTF32 forms on the N = 64 wide and square
    # tiles, the staged one reading its copy as pixel slices, the registers one either path.
    expected = ({("7Float32", t, p, 0) for t in range(5) for p in (0, 1)}
                | {(e, t, 1, 0) for e in ("7Float16", "8BFloat16") for t in range(5)}
                | {("7Float32", t, 1, 1) for t in (2, 3)}
                | {("7Float32", t, p, 2) for t in (2, 3) for p in (0, 1)})
    assert instances == expected, sorted(instances ^ expected)


def test_warp_specialized_general_kernel_roles(sass):
    """general_ws_kernel (general_ws_kernel.cuh), two instances per element type and tile (split
    reductions in a cluster or not): the consumers issue wgmmas of their type with both operands
    from shared memory, at the tile's N and, as many, at half of it (a narrow last channel
    block, Plan::tail_n), keep a step in flight (one wait with two groups pending, one full wait
    after the loop) and take 232 registers (104 in the N = 64 tiles that run two blocks per SM,
    but in their cluster instances, one block an SM); the producer gives its warpgroup's back
    down to 40 (24) and issues the halo as 5-D tensor copies and the weights as a bulk copy;
    the consumers' own barrier is hardware barrier 1 over their 256 threads; the cluster
    instances meet at the cluster's barrier twice and read each other's shared memory."""
    instances = set()
    for name, code in sass.items():
        if not is_general_ws_kernel(name):
            continue
        element, tile, cluster = re.search(r"kernelI(\d\w+?)Li(\d)ELb([01])EE", name).groups()
        instances.add((element, int(tile), int(cluster)))
        n = GENERAL_TILE_N[int(tile)]
        ours = re.findall(GENERAL_HGMMA[element].format(n=n) + r".*", code)
        narrow = re.findall(GENERAL_HGMMA[element].format(n=n // 2) + r".*", code)
        assert ours and len(narrow) == len(ours), (name, len(ours), len(narrow))
        assert all(re.search(r" R\d+, gdesc\[UR\d+\], (R\d+|RZ, !UPT)", line)
                   for line in ours + narrow), name
        others = [line for line in re.findall(r"HGMMA\.\S+.*", code)
                  if not re.match(GENERAL_HGMMA[element].format(n=n), line)
                  and not re.match(GENERAL_HGMMA[element].format(n=n // 2), line)]
        assert all(re.match(EMPTY_HGMMA, line) for line in others), (name, others)
        waits = re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x[0-9a-f]+)", code)
        assert waits.count("0x2") == 1 and waits.count("0x0") == 1, (name, waits)
        two_blocks = int(tile) in (2, 3) and cluster == "0"
        producer, consumer = ("0x18", "0x68") if two_blocks else ("0x28", "0xe8")
        if cluster == "1":
            assert code.count("UCGABAR_ARV") == 2 and code.count("UCGABAR_WAIT") == 2, name
            assert re.search(r"\bLD\.E\.128\b|\bLDS\.128\b|\bLD\.\S*128", code), name
        else:
            assert "UCGABAR_ARV" not in code, name
        assert re.search(rf"USETMAXREG\.DEALLOC\.CTAPOOL {producer}\b", code), name
        assert re.search(rf"USETMAXREG\.TRY_ALLOC\.CTAPOOL \w+, {consumer}\b", code), name
        assert "UTMALDG.5D" in code and "UBLKCP.S.G" in code, name
        assert re.search(r"BAR\.SYNC\S* 0x1, 0x100\b", code), name
        # No copy from the consumers' side: cp.async (LDGSTS) is the other kernel's loader.
        assert "LDGSTS" not in code, name
    expected = {(e, t, c) for e in ("7Float32", "7Float16", "8BFloat16") for t in range(5)
                for c in (0, 1)}
    assert instances == expected, sorted(instances ^ expected)


def test_general_kernel_keeps_a_step_of_wgmmas_in_flight(sass):
    """The mainloop's wait leaves two wgmma groups pending (the step's own and the empty one
    after its paths meet, general_kernel.cuh); the only full wait is the one after the loop.
    The 3xTF32 forms add each step's sum, so they wait for all of a step's groups once more;
    the registers form keeps one K step's group in flight while it loads the next one's
    fragments (two waits with one group pending, general_mainloop.cuh)."""
    for name, code in sass.items():
        if not is_general_kernel(name):
            continue
        waits = re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x[0-9a-f]+)", code)
        split = re.search(r"kernelI\d\w+?Li\dELi\dELi(\d)E", name).group(1)
        assert waits.count("0x2") == 1 and waits.count("0x0") == (1 if split == "0" else 2), \
            (name, waits)
        assert waits.count("0x1") == (2 if split == "2" else 0), (name, waits)


def test_swizzle_probe_builds_for_hopper(tmp_path):
    """tools/swizzle_probe.cu (gpu_check.sh's `swizzle` stage runs it on the H200) compiles for
    sm_90a, and its kernel issues the copy engine's box load and a float16 wgmma from shared
    memory, the two instructions whose swizzles it probes."""
    binary = tmp_path / "swizzle_probe"
    subprocess.run(["nvcc", "-O2", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a",
                    "-o", str(binary), str(REPO_ROOT / "tools" / "swizzle_probe.cu")],
                   check=True, capture_output=True, text=True)
    code = subprocess.run([str(cuobjdump()), "-sass", str(binary)], check=True,
                          capture_output=True, text=True).stdout
    assert "UTMALDG.5D" in code
    assert re.search(r"HGMMA\.64x64x16\.F32 R\d+, gdesc\[UR\d+\]", code)
