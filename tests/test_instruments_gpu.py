"""GPU-side tests of the measuring instruments (utils/verification.py, utils/profiling.py):
the NaN poisoning and the torch-op guard catch planted faults on the GPU, verification passes
on the real op, and profiling runs and writes its JSON. Skipped without a GPU.

    python -m pytest -q tests/test_instruments_gpu.py
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from utils import profiling, verification
from utils.suite import ConvPoolCase, find_case

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DEVICE = torch.device("cuda")
SMALL = find_case("default_small")
# Outputs on both sides of the caching allocator's 1 MB small/large pool boundary.
POISON_CASES = [
    SMALL,                                                   # 256 KB output: small pool
    find_case("large_spatial_200x300"),                      # 960 KB output: small pool
    ConvPoolCase("large_pool_output", 4, 8, 64, 130, 130, (3, 3)),  # 4 MB output: large pool
]


@pytest.fixture(scope="module")
def model_new_class():
    """The real ModelNew; on a GPU machine a missing build is an error, not a skip."""
    from model_new import ModelNew  # raises ImportError naming `bash utils/compile.sh`
    return ModelNew


def unwritten_output_class(base: type, case: ConvPoolCase) -> type:
    """A ModelNew whose kernel path writes nothing: it returns torch.empty of the right shape."""
    class UnwrittenOutput(base):
        def forward(self, x):
            return torch.empty(case.output_shape(), device=x.device, dtype=x.dtype)
    return UnwrittenOutput


@pytest.mark.parametrize("size_bytes", [4 << 10, 900 << 10, 4 << 20, 300 << 20])
def test_poisoning_turns_freed_memory_into_nan(size_bytes):
    stale = torch.full((size_bytes // 4,), 1.0, device=DEVICE)
    del stale  # its block is now free in the cache, still holding 1.0
    verification.poison_free_memory(size_bytes, DEVICE)
    reused = torch.empty(size_bytes // 4, device=DEVICE)
    assert torch.isnan(reused).all()


@pytest.mark.parametrize("case", POISON_CASES, ids=[c.name for c in POISON_CASES])
def test_nan_poisoning_catches_output_the_kernel_never_writes(model_new_class, case):
    # A correct result of the same size was just freed: without poisoning, torch.empty
    # could hand it back and the check would pass.
    verification.check_against_model(case, seed=3, device=DEVICE)
    with pytest.raises(verification.CheckFailed, match="NaN where Model has a number"):
        verification.check_against_model(case, seed=3, device=DEVICE,
                                         new_class=unwritten_output_class(model_new_class, case))


def test_guard_catches_torch_op_after_the_real_op(model_new_class):
    class ClampsAfterwards(model_new_class):
        def forward(self, x):
            return super().forward(x).clamp(min=0)

    with pytest.raises(verification.ForbiddenTorchOp, match="Tensor.clamp"):
        verification.check_against_model(SMALL, seed=0, device=DEVICE,
                                         new_class=ClampsAfterwards)


def test_real_op_passes_the_check_on_default_small(model_new_class):
    line = verification.check_against_model(SMALL, seed=0, device=DEVICE)
    assert "vs Model" in line and "rel_l2" in line


def test_real_op_passes_with_tf32_off(model_new_class):
    verification.check_against_model(SMALL, seed=1, device=DEVICE, tf32=False)


@pytest.mark.parametrize("check", [verification.check_side_stream,
                                   verification.check_cuda_graph])
def test_real_op_runs_on_side_stream_and_in_cuda_graph(model_new_class, check):
    check(find_case("ceil_mode_pool3_s2_pad1"), 0, DEVICE)


def test_real_op_is_deterministic(model_new_class):
    verification.check_deterministic(SMALL, 0, DEVICE, allow_nondeterministic=False)


@pytest.mark.parametrize("check", [verification.check_nan_inf, verification.check_all_negative,
                                   verification.check_large_magnitude])
def test_real_op_handles_special_values(model_new_class, check):
    check(find_case("pool3_stride2_pad1"), 0, DEVICE)


REPO_ROOT = Path(__file__).resolve().parents[1]


def run_profiling(*args: str) -> subprocess.CompletedProcess:
    """`python -m utils.profiling ARGS` in a fresh interpreter, as a user runs it (and away from
    whatever earlier tests imported into this process)."""
    return subprocess.run([sys.executable, "-m", "utils.profiling", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)


def test_quick_verification_passes_on_the_real_op(model_new_class, capsys):
    assert verification.main(["--quick", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "verdict: PASS" in out and "seed 1" in out


def test_profiling_times_a_small_case_and_writes_json_and_plot(model_new_class, tmp_path):
    json_path, plot_path = tmp_path / "profile.json", tmp_path / "speedup.png"
    run = run_profiling("--case", SMALL.name, "--targets", "new,eager", "--iters", "5",
                        "--warmup", "1", "--json", str(json_path), "--plot", str(plot_path))
    assert run.returncode == 0, run.stdout + run.stderr
    record = json.loads(json_path.read_text())
    for key in profiling.REQUIRED_TOP_KEYS:
        assert key in record
    assert record["environment"]["gpu"] == torch.cuda.get_device_name()
    case = record["cases"][0]
    assert case["name"] == SMALL.name and case["matches_model"] is True
    assert case["targets"]["new"]["samples"] == 5 and case["targets"]["new"]["median_us"] > 0
    assert case["speedup_over"]["eager"] > 0
    if plot_path.exists():  # matplotlib may be missing
        assert plot_path.read_bytes()[:4] == b"\x89PNG"


def test_profiling_single_run(model_new_class):
    run = run_profiling("--case", SMALL.name, "--single-run", "new,eager")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ran new once" in run.stdout


def test_measured_times_never_beat_the_floor(model_new_class, tmp_path):
    """A time below the floor means the timing is broken (e.g. work not inside the events)."""
    json_path = tmp_path / "profile.json"
    run = run_profiling("--case", "vgg_b5", "--targets", "new,eager", "--iters", "10",
                        "--warmup", "2", "--no-profiler", "--json", str(json_path))
    assert run.returncode == 0, run.stdout + run.stderr
    case = json.loads(json_path.read_text())["cases"][0]
    for name, target in case["targets"].items():
        assert target["median_us"] > case["floor_us"], name
        assert target["percent_of_floor"] < 100, name


def test_profiling_no_tf32_runs_every_target_fp32_accurate(model_new_class, tmp_path):
    """--no-tf32: allow_tf32 = False for the whole run, recorded in the JSON; ModelNew takes
    its fp32-accurate kernel (AlexNet's first layer: the flat 3xTF32 one) and matches Model."""
    json_path = tmp_path / "profile.json"
    run = run_profiling("--case", "alexnet_c1", "--no-tf32", "--targets", "new,eager",
                        "--iters", "5", "--warmup", "1", "--no-profiler", "--json",
                        str(json_path))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "fp32-accurate (allow_tf32 = False)" in run.stdout
    record = json.loads(json_path.read_text())
    assert record["settings"]["cudnn_allow_tf32"] is False
    case = record["cases"][0]
    assert case["variant"] == "tiled_3xtf32_flat" and case["matches_model"] is True
    for name, target in case["targets"].items():
        assert target["median_us"] > case["floor_us"], name


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_profiling_runs_every_target_in_the_requested_dtype(model_new_class, tmp_path, dtype):
    """--dtype converts Model, ModelNew and the inputs; the op still matches Model there, and
    the floor is the 16-bit one (below float32's: twice the tensor-core rate, half the bytes)."""
    json_path = tmp_path / "profile.json"
    run = run_profiling("--case", "vgg_b5", "--dtype", dtype, "--targets", "new,eager",
                        "--iters", "5", "--warmup", "1", "--no-profiler", "--json",
                        str(json_path))
    assert run.returncode == 0, run.stdout + run.stderr
    record = json.loads(json_path.read_text())
    assert record["settings"]["dtype"] == dtype
    case = record["cases"][0]
    assert case["matches_model"] is True
    assert "16bit" in case["variant"], case["variant"]
    float32_floor = profiling.floor_us(find_case("vgg_b5"), profiling.Ceilings(
        profiling.DEFAULT_TF32_TFLOPS, profiling.DEFAULT_HBM_TBPS, "PEERS-H200.md"))
    assert case["floor_us"] < float32_floor
    for name, target in case["targets"].items():
        assert target["median_us"] > case["floor_us"], name
