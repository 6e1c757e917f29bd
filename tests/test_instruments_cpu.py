"""CPU-side tests of the measuring instruments: utils/suite.py, utils/verification.py and
utils/profiling.py. No GPU needed (CI runs them); the GPU side is tests/test_instruments_gpu.py.

    python -m pytest -q tests/test_instruments_cpu.py
"""
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from model import Model
from utils import profiling, verification
from utils.suite import DEFAULT, GRID, SUITE, ConvPoolCase, find_case, pooled_length, random_cases

REPO = Path(__file__).resolve().parents[1]

# GFLOP column of ../shared/PEERS-H200.md, as printed there.
PEERS_GFLOP = {"default": 299.6, "vgg_b2": 118.4, "vgg_b3": 118.4, "vgg_b5": 29.6,
               "rgb_stem": 11.1, "alexnet_c1": 4.5, "lenet_c1": 0.24, "batch1": 2.3}
# floor column (ms) of PEERS-H200.md: max(FLOPs at 356 TFLOP/s, bytes at 4.24 TB/s).
PEERS_FLOOR_MS = {"default": 0.841, "vgg_b2": 0.332, "vgg_b3": 0.332, "vgg_b5": 0.083,
                  "rgb_stem": 0.058, "alexnet_c1": 0.013, "lenet_c1": 0.002, "batch1": 0.007}
PEERS_CEILINGS = profiling.Ceilings(356.0, 4.24, "PEERS-H200.md")


# ---- the torch-op guard -------------------------------------------------------------------

class FakeModelNew(nn.Module):
    """ModelNew's parameter holder with a forward the test chooses."""

    def __init__(self, forward):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self._forward = forward

    def forward(self, x):
        return self._forward(self, x)


def run_guarded(forward, x=None):
    model = FakeModelNew(forward)
    x = torch.randn(2, 3, 8, 8) if x is None else x
    with torch.no_grad(), verification.TorchOpGuard():
        return model(x)


PLANTED_OPS = [
    (lambda self, x: torch.relu(x), "torch.relu"),
    (lambda self, x: x.clamp(min=0), "Tensor.clamp"),
    (lambda self, x: F.relu(x), "torch.nn.functional.relu"),
    (lambda self, x: F.max_pool2d(x, 2), "max_pool2d"),
    (lambda self, x: torch.nn.functional.conv2d(x, self.conv.weight), "conv2d"),
    (lambda self, x: self.conv(x), "conv2d"),
    (lambda self, x: x + 1, "Tensor.add"),
    (lambda self, x: torch.matmul(x, x), "torch.matmul"),
    (lambda self, x: x[:, :1], "Tensor.__getitem__"),
    (lambda self, x: x.contiguous(), "Tensor.contiguous"),
    (lambda self, x: torch.ops.aten.relu(x), "torch.ops.aten.relu"),
    (lambda self, x: torch.ops.aten.relu.default(x), "torch.ops.aten.relu"),
]


@pytest.mark.parametrize("forward,name", PLANTED_OPS, ids=[name for _, name in PLANTED_OPS])
def test_guard_rejects_planted_torch_op_and_names_it(forward, name):
    with pytest.raises(verification.ForbiddenTorchOp, match=name.replace(".", r"\.")):
        run_guarded(forward)


def test_guard_lets_creation_and_metadata_pass():
    def forward(self, x):
        weight = self.conv.weight
        assert x.shape == (2, 3, 8, 8) and x.dim() == 4 and x.ndim == 4
        assert x.device.type == "cpu" and x.dtype == torch.float32 and not x.is_cuda
        assert x.stride() == (192, 64, 8, 1) and x.is_contiguous() and x.size(1) == 3
        assert weight.shape == (4, 3, 3, 3) and x.numel() == 384 and x.data_ptr() != 0
        assert self.conv.bias.shape == (4,) and x.element_size() == 4
        torch.zeros(3)
        torch.ones(3, device=x.device)
        torch.full((2,), 1.5)
        torch.tensor([1.0, 2.0])
        torch.empty_like(x)
        torch.zeros_like(x)
        x.new_empty(5)
        x.new_zeros(5)
        return torch.empty(2, 4, 3, 3, dtype=x.dtype, device=x.device)

    assert run_guarded(forward).shape == (2, 4, 3, 3)


def test_guard_lets_pybind_extension_calls_pass():
    """A pybind function never reaches __torch_function__; a plain Python stand-in shows
    that calls outside torch are not intercepted either."""
    def extension_op(x, weight, bias):
        return "extension ran"

    assert run_guarded(lambda self, x: extension_op(x, self.conv.weight, self.conv.bias)) \
        == "extension ran"


def test_guard_lets_real_model_new_reach_the_extension():
    """On CPU tensors the real ModelNew gets as far as the binding's device check."""
    pytest.importorskip("cuda_extension", reason="extension not built")
    from model_new import ModelNew
    model = ModelNew(3, 4, 3, 2)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad(), verification.TorchOpGuard(), \
            pytest.raises(RuntimeError, match="CUDA tensor") as raised:
        model(x)
    assert not isinstance(raised.value, verification.ForbiddenTorchOp)


# Kept alive for the whole test session: deleting a Library deregisters its ops, and
# torch 2.11's inductor (imported later by other tests in the same process) then failed
# to build its decomposition table ("'CustomDecompTable' object is not a mapping").
_TEST_LIBRARIES: list = []


@pytest.fixture(scope="session")
def extension_namespace_op():
    """An op in the extension's torch.library namespace and one in a foreign namespace."""
    if not _TEST_LIBRARIES:
        fragment = torch.library.Library(verification.ALLOWED_OP_NAMESPACE, "FRAGMENT")
        fragment.define("guard_test_identity(Tensor x) -> Tensor")
        fragment.impl("guard_test_identity", lambda x: x.clone(), "CPU")
        foreign = torch.library.Library("guard_test_foreign", "DEF")
        foreign.define("identity(Tensor x) -> Tensor")
        foreign.impl("identity", lambda x: x.clone(), "CPU")
        _TEST_LIBRARIES.extend([fragment, foreign])
    yield


def test_guard_allows_ops_of_the_extension_namespace(extension_namespace_op):
    namespace = getattr(torch.ops, verification.ALLOWED_OP_NAMESPACE)
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(run_guarded(lambda self, x: namespace.guard_test_identity(x), x), x)
    assert torch.equal(run_guarded(lambda self, x: namespace.guard_test_identity.default(x), x),
                       x)


def test_guard_rejects_ops_of_other_namespaces(extension_namespace_op):
    with pytest.raises(verification.ForbiddenTorchOp, match="guard_test_foreign"):
        run_guarded(lambda self, x: torch.ops.guard_test_foreign.identity(x))


# ---- comparison helpers (CPU tensors) ------------------------------------------------------

def test_assert_matches_passes_within_tolerance_and_reports_unwritten_nan():
    ref = torch.linspace(-1, 5, 100)
    verification.assert_matches(ref + 5e-3, ref, "close")
    out = ref.clone()
    out[7] = float("nan")
    with pytest.raises(verification.CheckFailed, match="1 NaN where Model has a number"):
        verification.assert_matches(out, ref, "unwritten")
    with pytest.raises(verification.CheckFailed, match="output shape"):
        verification.assert_matches(ref[:-1], ref, "shape")


def test_assert_matches_compares_nan_inf_when_asked():
    ref = torch.tensor([0.0, float("nan"), float("inf"), 1.0])
    verification.assert_matches(ref.clone(), ref, "specials", equal_nan=True)
    with pytest.raises(verification.CheckFailed):
        verification.assert_matches(torch.tensor([0.0, 0.0, float("inf"), 1.0]), ref,
                                    "specials", equal_nan=True)
    with pytest.raises(verification.CheckFailed, match="NaN positions"):
        verification.assert_special_positions(torch.tensor([0.0, 0.0, float("inf"), 1.0]), ref,
                                              "specials")


def test_finite_errors_on_known_values():
    ref64 = torch.tensor([1.0, 2.0, 0.0, 4.0], dtype=torch.float64)
    ref = ref64.float()
    out = torch.tensor([1.0, 2.5, 0.001, 4.0])
    errors = verification.finite_errors(out, ref, ref64)
    assert errors.max_abs == pytest.approx(0.5)
    assert errors.max_rel == pytest.approx(0.25)           # 0.5 / 2
    assert errors.rel_l2_64 == pytest.approx((0.25 + 1e-6) ** 0.5 / 21 ** 0.5, rel=1e-5)
    assert errors.torch_rel_l2_64 == 0.0
    assert "rel_l2" in errors.describe()


# ---- suite definitions ---------------------------------------------------------------------

def test_suite_names_and_gflop_match_peers_table():
    assert [case.name for case in SUITE] == list(PEERS_GFLOP)
    for case in SUITE:
        printed = PEERS_GFLOP[case.name]
        decimals = len(str(printed).split(".")[1])
        assert round(case.flops() / 1e9, decimals) == printed, case.name
    assert DEFAULT is SUITE[0]
    assert DEFAULT.flops() == pytest.approx(299.6e9, rel=1e-3)


def test_default_matches_model_py():
    import model
    assert DEFAULT.init_args()[:4] == [model.in_channels, model.out_channels,
                                      (model.kernel_size,) * 2, (model.pool_kernel_size,) * 2]
    assert DEFAULT.input_shape() == (model.batch_size, model.in_channels, model.height,
                                     model.width)
    assert DEFAULT.conv_out() == (126, 126) and DEFAULT.output_shape() == (128, 128, 63, 63)


def test_case_names_are_unique():
    names = [case.name for case in SUITE] + [case.name for case in GRID]
    assert len({c.name for c in GRID}) == len(GRID)
    assert find_case("k136_channel_tail").out_channels == 136
    with pytest.raises(KeyError) as missing:
        find_case("no_such_case")
    listed = str(missing.value).split("known: ")[1].rstrip("'\"").split(", ")
    assert len(listed) == len(set(listed)) and set(listed) == set(names)
    assert names


def check_shapes_against_torch(case: ConvPoolCase) -> None:
    assert case.is_valid(), case
    torch.manual_seed(0)
    by_keyword = Model(**case.model_kwargs())
    by_position = Model(*case.init_args())
    x = torch.randn(case.input_shape())
    with torch.no_grad():
        out = by_keyword(x)
        conv = by_keyword.conv(x)
        assert by_position(x).shape == out.shape
    assert tuple(conv.shape[2:]) == case.conv_out(), case.name
    assert tuple(out.shape) == case.output_shape(), case.name
    assert case.output_elements() == out.numel()


@pytest.mark.parametrize("case", GRID, ids=[case.name for case in GRID])
def test_grid_case_geometry_matches_pytorch(case):
    check_shapes_against_torch(case)


def test_grid_covers_the_required_geometry():
    def has(predicate):
        return any(predicate(case) for case in GRID)

    assert has(lambda c: c.padding != (0, 0))
    assert has(lambda c: c.stride == (2, 2))
    assert has(lambda c: c.dilation == (2, 2))
    assert has(lambda c: c.kernel_size == (3, 5) and c.height != c.width)
    assert has(lambda c: c.pool_kernel == (3, 3) and c.effective_pool_stride == (2, 2))
    assert has(lambda c: c.pool_padding == (1, 1))
    assert has(lambda c: c.ceil_mode)
    assert has(lambda c: c.in_channels == 3 and c.out_channels == 7)
    assert has(lambda c: c.in_channels == 1)
    assert has(lambda c: c.out_channels > 128 and c.out_channels % 128 != 0)
    assert has(lambda c: c.batch == 1)
    assert has(lambda c: not c.bias)
    assert has(lambda c: c.kernel_size == (11, 11) and c.stride == (4, 4))
    assert has(lambda c: c.kernel_size == (5, 5))
    assert has(lambda c: c.kernel_size == (1, 1))
    assert has(lambda c: c.stride == (1, 2) and c.padding == (2, 0))
    assert has(lambda c: c.pool_kernel[0] > 8)
    assert has(lambda c: c.pool_kernel == (1, 1))
    assert has(lambda c: c.height * c.width >= 200 * 300)
    # Floor-mode pooling that drops a conv border row and column.
    assert has(lambda c: not c.ceil_mode and all(
        (size - k) % s != 0 for size, k, s in zip(c.conv_out(), c.pool_kernel,
                                                 c.effective_pool_stride)))


def test_grid_cases_are_small():
    for case in GRID:
        assert case.batch <= 4 and case.input_elements() <= 8 * 200 * 300, case.name


def test_random_cases_are_valid_and_reproducible():
    cases = random_cases(random.Random(1234), 40)
    assert cases == random_cases(random.Random(1234), 40)
    assert len({case.name for case in cases}) == 40
    for case in cases:
        assert all(pad <= k // 2 for pad, k in zip(case.pool_padding, case.pool_kernel))
        check_shapes_against_torch(case)


def test_pooled_length_follows_pytorch_ceil_mode_rule():
    # Without the rule ceil mode would give 5 windows; the last would start in the padding.
    assert pooled_length(10, 2, 1, 3, ceil_mode=True) == 4
    assert pooled_length(23, 2, 0, 2, ceil_mode=True) == 12
    assert pooled_length(23, 2, 0, 2, ceil_mode=False) == 11


def test_case_to_dict_is_json():
    record = json.loads(json.dumps(DEFAULT.to_dict()))
    assert record["pooled_out"] == [63, 63] and record["pool_stride"] == [2, 2]
    assert record["flops"] == DEFAULT.flops()


def test_case_from_dict_inverts_to_dict(seed):
    """A JSON record's case read back is the case (pool_stride None reads back as the window
    it stands for, the same layer)."""
    for case in random_cases(random.Random(seed), 40) + list(SUITE):
        back = ConvPoolCase.from_dict(json.loads(json.dumps(case.to_dict())))
        assert back.to_dict() == case.to_dict()
        assert back.op_args() == case.op_args() and back.init_args()[:6] == case.init_args()[:6]


# ---- statistics and the floor ------------------------------------------------------------

def test_percentiles_on_known_lists():
    values = [float(v) for v in range(1, 11)]
    assert profiling.percentile(values, 50) == pytest.approx(5.5)
    assert profiling.percentile(values, 10) == pytest.approx(1.9)
    assert profiling.percentile(values, 90) == pytest.approx(9.1)
    assert profiling.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert profiling.percentile([7.0], 90) == 7.0
    stats = profiling.summarize([4.0, 1.0, 3.0, 2.0, 100.0])
    assert (stats.median_us, stats.min_us, stats.max_us, stats.samples) == (3.0, 1.0, 100.0, 5)
    assert stats.mean_us == pytest.approx(22.0)
    assert stats.p10_us == pytest.approx(1.4) and stats.p90_us == pytest.approx(61.6)


def test_percentiles_agree_with_numpy():
    numpy = pytest.importorskip("numpy")
    values = [random.Random(5).random() for _ in range(101)]
    for q in (10, 50, 90):
        assert profiling.percentile(values, q) == pytest.approx(numpy.percentile(values, q))


def test_floor_of_the_default_problem():
    assert DEFAULT.min_bytes() == 4 * (128 * 64 * 128 * 128 + 128 * 64 * 9 + 128
                                       + 128 * 128 * 63 * 63)
    floor = profiling.floor_us(DEFAULT, PEERS_CEILINGS)
    assert floor == pytest.approx(299.649466368e9 / 356e12 * 1e6)  # compute bound
    assert floor / 1e3 == pytest.approx(0.841, abs=1e-3)
    assert profiling.tflops(DEFAULT, floor) == pytest.approx(356.0)
    assert profiling.percent_of_floor(floor, 2 * floor) == pytest.approx(50.0)


@pytest.mark.parametrize("case", SUITE, ids=[case.name for case in SUITE])
def test_floor_matches_peers_table(case):
    assert profiling.floor_us(case, PEERS_CEILINGS) / 1e3 == pytest.approx(
        PEERS_FLOOR_MS[case.name], abs=1e-3)


def test_memory_bound_floor_uses_bandwidth():
    case = find_case("lenet_c1")  # 0.24 GFLOP but 31 MB: bound by bytes
    assert profiling.floor_us(case, PEERS_CEILINGS) == pytest.approx(
        case.min_bytes() / 4.24e12 * 1e6)


def test_16bit_floor_takes_the_16bit_ceiling_and_two_bytes_per_element():
    for dtype in (torch.float16, torch.bfloat16):
        assert profiling.floor_us(DEFAULT, PEERS_CEILINGS, dtype) == pytest.approx(
            DEFAULT.flops() / 708e12 * 1e6)  # compute bound at the bf16 matmul rate
        lenet = find_case("lenet_c1")  # bound by bytes: half of float32's
        assert profiling.floor_us(lenet, PEERS_CEILINGS, dtype) == pytest.approx(
            profiling.floor_us(lenet, PEERS_CEILINGS) / 2)
    assert DEFAULT.min_bytes(2) == DEFAULT.min_bytes() / 2


def test_input_buffer_count_exceeds_twice_l2():
    l2 = 60 << 20
    assert profiling.input_buffer_count(DEFAULT.input_elements() * 4, l2) == 2
    small = find_case("lenet_c1").input_elements() * 4
    count = profiling.input_buffer_count(small, l2)
    assert count * small > 2 * l2 and count <= profiling.MAX_INPUT_BUFFERS
    assert profiling.input_buffer_count(1024, l2) == profiling.MAX_INPUT_BUFFERS
    assert profiling.input_buffer_count(6 << 30, l2) == 1  # over the memory budget


# ---- results: table, JSON, plot ------------------------------------------------------------

def fake_results() -> list:
    results = []
    for case, new_us, eager_us, compile_us in ((DEFAULT, 1500.0, 3900.0, 1940.0),
                                               (find_case("batch1"), 30.0, 52.0, 105.0)):
        result = profiling.CaseResult(case, "tiled_tf32", profiling.floor_us(case, PEERS_CEILINGS),
                                      input_buffers=2, matches_model=True)
        for name, median in ((profiling.NEW, new_us), (profiling.EAGER, eager_us),
                             (profiling.COMPILE, compile_us)):
            times = [median * (0.98 + 0.0004 * i) for i in range(101)]
            result.targets[name] = profiling.TargetResult(
                name, profiling.summarize(times), profiler_kernel_us=median * 0.97,
                compile_s=12.0 if name == profiling.COMPILE else None)
        results.append(result)
    return results


def test_speedup_over_each_peer():
    result = fake_results()[0]
    speedups = result.speedup_over()
    assert speedups[profiling.EAGER] == pytest.approx(3900 / 1500, rel=1e-3)
    assert speedups[profiling.COMPILE] == pytest.approx(1940 / 1500, rel=1e-3)


def test_environment_names_the_hooks_set_for_the_run(monkeypatch):
    """A profiling JSON says which of the kernels' tuning hooks were set (their runs time
    another form than the commit's default), and only those."""
    for key in [key for key in os.environ if key.startswith("CONV_POOL_")]:
        monkeypatch.delenv(key)
    assert profiling.environment_info()["hooks"] == {}
    monkeypatch.setenv("CONV_POOL_GENERAL_DIRECT_PAIRS", "0")
    monkeypatch.setenv("NOT_A_HOOK", "1")
    assert profiling.environment_info()["hooks"] == {"CONV_POOL_GENERAL_DIRECT_PAIRS": "0"}


def test_json_record_has_the_schema_keys(tmp_path):
    environment = profiling.environment_info()  # works without a GPU: GPU fields are None
    for key in profiling.REQUIRED_ENVIRONMENT_KEYS:
        assert key in environment
    assert environment["torch"] == torch.__version__
    settings = dict(iters=101, warmup=10)
    record = profiling.build_record(environment, settings, PEERS_CEILINGS, fake_results())
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(record))
    loaded = json.loads(path.read_text())
    assert loaded["schema"] == profiling.JSON_SCHEMA
    for key in profiling.REQUIRED_TOP_KEYS:
        assert key in loaded
    assert loaded["ceilings"] == {"tf32_tflops": 356.0, "hbm_tbps": 4.24,
                                  "source": "PEERS-H200.md", "half_tflops": 708.0}
    assert [case["name"] for case in loaded["cases"]] == ["default", "batch1"]
    for case in loaded["cases"]:
        for key in profiling.REQUIRED_CASE_KEYS:
            assert key in case
        for target in case["targets"].values():
            for key in profiling.REQUIRED_TARGET_KEYS:
                assert key in target
    default = loaded["cases"][0]
    assert default["case"]["flops"] == DEFAULT.flops()
    assert default["targets"]["new"]["median_us"] == pytest.approx(1500.0 * 1.0, rel=1e-3)
    assert default["targets"]["compile"]["compile_s"] == 12.0
    assert default["speedup_over"]["eager"] == pytest.approx(2.6, rel=1e-3)


def test_table_lists_microseconds_and_speedups():
    table = profiling.format_table(fake_results())
    lines = table.splitlines()
    assert len(lines) == 3
    assert "new us" in lines[0] and "x eager" in lines[0] and "x compile" in lines[0]
    assert lines[1].startswith("default") and "2.60" in lines[1] and "1.29" in lines[1]
    assert "tiled_tf32" in lines[2]


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "speedup.png"
    profiling.plot_speedups(fake_results(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_heartbeat_shows_progress(capsys):
    with profiling.heartbeat("compiling something", every_s=0.02):
        time.sleep(0.1)
    out = capsys.readouterr().out
    assert "compiling something ..." in out and "s" in out.splitlines()[1]
    assert "done in" in out.splitlines()[-1]


# ---- argument parsing ----------------------------------------------------------------------

def test_verification_arguments():
    parser = verification.build_parser()
    args = parser.parse_args([])
    assert (args.quick, args.seed, args.fp32) == (False, None, False)
    args = parser.parse_args(["--quick", "--seed", "42", "--fp32", "--random-cases", "2"])
    assert (args.quick, args.seed, args.fp32, args.random_cases) == (True, 42, True, 2)
    with pytest.raises(SystemExit):
        parser.parse_args(["--seed", "abc"])


def test_profiling_arguments(tmp_path):
    parser = profiling.build_parser()
    args = parser.parse_args([])
    assert (args.suite, args.iters, args.json, args.plot, args.single_run) == (
        False, 100, None, None, None)
    assert profiling.requested_targets(args) == ["new", "eager", "compile"]
    # (case, dtype: None for --dtype's, channels-last input)
    assert profiling.requested_cases(args) == [(DEFAULT, None, False)]
    assert args.dtype == "float32"
    assert profiling.DTYPES[parser.parse_args(["--dtype", "bfloat16"]).dtype] == torch.bfloat16
    args = parser.parse_args(["--suite", "--json", str(tmp_path / "a.json"), "--plot",
                              str(tmp_path / "a.png"), "--iters", "7", "--measure-ceilings",
                              "--max-autotune", "--channels-last"])
    assert args.suite and args.iters == 7 and args.measure_ceilings
    assert args.json == tmp_path / "a.json" and args.plot == tmp_path / "a.png"
    assert profiling.requested_cases(args) == [(case, None, False) for case in SUITE]
    assert profiling.requested_targets(args) == ["new", "eager", "compile", "max-autotune",
                                                 "channels-last"]
    args = parser.parse_args(["--single-run", "new,compile", "--case", "batch1"])
    assert args.single_run == ["new", "compile"]
    assert profiling.requested_cases(args) == [(find_case("batch1"), None, False)]
    for bad in (["--single-run", "new,bogus"], ["--suite", "--case", "batch1"],
                ["--iters", "many"], ["--dtype", "float64"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
    assert not args.no_tf32 and parser.parse_args(["--no-tf32"]).no_tf32


def test_profiling_refuses_no_tf32_for_16_bit_runs(capsys):
    """allow_tf32 does not apply to 16-bit operands: the flag is an error there, before any GPU
    work (this runs on a CPU-only machine too)."""
    with pytest.raises(SystemExit) as exit_info:
        profiling.main(["--no-tf32", "--dtype", "float16"])
    assert exit_info.value.code == 2
    assert "--no-tf32 applies to --dtype float32 only" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["utils.verification", "utils.profiling"])
def test_help_describes_every_flag(module):
    """--help runs without a GPU and lists every option the parser has, each with a help text
    of its own."""
    result = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert "usage: python -m " + module in result.stdout
    parser = {"utils.verification": verification, "utils.profiling": profiling}[
        module].build_parser()
    options = [action for action in parser._actions if action.option_strings]
    assert len(options) > 3
    for action in options:
        longest = max(action.option_strings, key=len)
        assert re.search(rf"(^|[\s,]){re.escape(longest)}\b", result.stdout), longest
        assert action.help and action.help.strip(), f"{longest} has no help text"


# ---- failing clearly without a GPU or without the extension --------------------------------

@pytest.mark.parametrize("command", [["utils.verification", "--quick"], ["utils.profiling"]])
def test_exits_nonzero_with_a_clear_message_without_gpu(command):
    environment = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    result = subprocess.run([sys.executable, "-m", *command], cwd=REPO, env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "no CUDA GPU is visible" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("module", [verification, profiling])
def test_missing_extension_tells_how_to_build(module, monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda_extension", None)  # makes the import fail
    with pytest.raises(module.SetupError, match=r"bash utils/compile\.sh"):
        module.require_gpu_and_extension()


def test_long_runs_write_their_json_after_every_case_and_can_start_later(tmp_path, monkeypatch):
    """--zoo / --fuzz runs rewrite --json after each case (a run cut short keeps what it
    measured, marked incomplete), and --start skips the first cases of the same list."""
    done = []

    def fake_profile(case, names, args, ceilings, flush, dtype_name=None, channels_last=False):
        done.append(case.name)
        result = fake_results()[0]
        result.case = case
        return result

    monkeypatch.setattr(profiling, "require_gpu_and_extension", lambda: None)
    monkeypatch.setattr(profiling, "l2_flush_buffer", lambda: None)
    monkeypatch.setattr(profiling, "l2_bytes", lambda: profiling.FALLBACK_L2_BYTES)
    monkeypatch.setattr(profiling, "profile_case", fake_profile)
    records = []
    real_write = profiling.write_json

    def spy(path, *args, **kwargs):
        real_write(path, *args, **kwargs)
        records.append(json.loads(path.read_text()))
    monkeypatch.setattr(profiling, "write_json", spy)
    path = tmp_path / "fuzz.json"
    everything = [case.name for case, _, _ in profiling.fuzz_cases(6, seed=3)]
    assert profiling.main(["--fuzz", "6", "--fuzz-seed", "3", "--start", "4",
                           "--json", str(path)]) == 0
    assert done == everything[4:]
    assert [len(record["cases"]) for record in records] == [1, 2]
    assert [record["settings"]["complete"] for record in records] == [False, True]
    assert [case["name"] for case in records[-1]["cases"]] == everything[4:]
    assert records[-1]["settings"]["start"] == 4
    assert not path.with_name(path.name + ".partial").exists()
    with pytest.raises(SystemExit):
        profiling.main(["--fuzz", "6", "--start", "6"])
    with pytest.raises(SystemExit):
        profiling.main(["--suite", "--start", "1"])


# ---- tools/ncu_hotspots.py ------------------------------------------------------------------

def test_ncu_hotspots_sums_samples_and_instructions_per_run_of_lines(tmp_path, seed):
    """On a synthetic `ncu --page source --csv` export (a kernel-name line, the header, one row
    per SASS line with blank or dash cells where ncu leaves them): the totals, each run's sums
    and the hottest lines come out of the columns by name, whatever their order."""
    from tools import ncu_hotspots
    rng = random.Random(seed)
    samples = [rng.randrange(0, 50) for _ in range(25)]
    executed = [rng.randrange(0, 1000) for _ in range(25)]
    samples[13] = 500  # the hottest line
    header = ["Address", "Instructions Executed", "Source", "Warp Stall Sampling (All Samples)",
              "Warp Stall Sampling (Not-issued Samples)"]
    lines = ['"Kernel Name","void k(int)",', ",".join(f'"{h}"' for h in header)]
    for i, (s, e) in enumerate(zip(samples, executed)):
        cell = str(e) if e else "-"
        lines.append(f'"0x{i:04x}","{cell}","  OP{i} R1, R2","{s}","0"')
    path = tmp_path / "source.csv"
    path.write_text("\n".join(lines) + "\n")
    parsed = ncu_hotspots.read_source_page(path)
    assert [line["samples"] for line in parsed] == samples
    assert [line["executed"] for line in parsed] == executed
    assert parsed[13]["source"] == "OP13 R1, R2"
    text = ncu_hotspots.summarize(parsed, bucket=10, top=3, share=0.0)
    assert f"{sum(samples)} stall samples, {sum(executed)} warp instructions" in text
    for first in (0, 10, 20):
        run_samples = sum(samples[first:first + 10])
        assert re.search(rf"^\s+{first}\s+{min(first + 9, 24)}\s+{run_samples}\s", text, re.M), text
    hottest = text.split("lines with the most samples:")[1].splitlines()[1].split()
    assert hottest[:3] == ["13", "500", str(executed[13])], text


# ---- tools/trace_tiles.py -------------------------------------------------------------------

def test_trace_tiles_reads_records_and_sums_phases_per_block_and_sm(tmp_path, seed):
    """On a synthetic trace file in general_trace.cuh's layout (two launches; the last is read):
    each phase's median is the difference of its marks over the blocks that ran, cycles turned
    into microseconds at the clock the blocks' cycle and timer spans give, and per SM the blocks
    resident at once and the gap from one block's exit to the next one's entry."""
    import numpy as np

    from tools import trace_tiles
    rng = random.Random(seed)
    ghz, sms, rounds = 2.0, 4, 3
    setup, wait, steps, pool = (rng.randrange(500, 8000) for _ in range(4))
    staged, joined, summed = sorted(rng.sample(range(1, pool), 3))  # cluster marks within pool
    life = setup + wait + steps + pool
    gap = rng.randrange(100, 1000)
    words = []
    for block in range(sms * rounds):
        sm, r = block % sms, block // sms
        start = 10_000 + r * (life + gap)  # one block an SM at a time
        timer = int(start / ghz)
        done = start + setup + wait + steps
        words.append([sm, timer, start, start + setup, start + setup + wait, done,
                      start + life, start + life, int((start + life) / ghz), start + 300,
                      start + 400, 1, done + staged, done + joined, done + summed, 0])
    header = [0x54524143, sms * rounds, sms * rounds, sms * rounds, 1, 3, 3, 2, 2, 0, 1, 16,
              0, 0, 0, 0]
    stale = header[:2] + [1] + header[3:] + [0] * 16  # an earlier launch of one block
    path = tmp_path / "trace.bin"
    np.array(stale + header + sum(words, []), dtype=np.int64).tofile(path)
    records = trace_tiles.read_records(path)
    assert len(records) == 2 and records[1][1].shape == (sms * rounds, 16)
    summary = trace_tiles.summarize(*records[-1])
    assert summary["blocks"] == sms * rounds and summary["sms"] == sms
    assert abs(summary["sm_clock_ghz"] - ghz) < 0.01
    phases = summary["phases"]
    for name, cycles in (("setup (barriers, K-step table)", setup),
                         ("wait for the first copies", wait),
                         ("steps (wgmmas and later copies)", steps),
                         ("bias, pooling and stores", pool),
                         ("cluster: stage the partial tile", staged),
                         ("cluster: wait for every block's tile", joined - staged),
                         ("cluster: sum this block's channels", summed - joined),
                         ("cluster: pool and store them", pool - summed)):
        assert phases[name]["median_us"] == pytest.approx(cycles / ghz / 1000, abs=0.01), name
    assert summary["block_lifetime_us"]["median"] == pytest.approx(life / ghz / 1000, abs=0.01)
    # (over each SM's span from its first entry to its last exit: `rounds` lives, gaps between)
    resident = rounds * life / (rounds * life + (rounds - 1) * gap)
    assert summary["mean_resident_blocks"] == pytest.approx(resident, abs=0.006)
    assert summary["entry_after_exit_us"]["median"] == pytest.approx(gap / ghz / 1000, abs=0.01)
    # Without a cluster (those words zero) the cluster's phases are left out.
    plain = records[-1][1].copy()
    plain[:, 12:15] = 0
    assert not any(name.startswith("cluster") for name in
                   trace_tiles.summarize(records[-1][0], plain)["phases"])


# ---- tools/ratio_table.py -------------------------------------------------------------------

def _profiling_record(cases, dtype="float32"):
    """A utils.profiling JSON record holding `cases`: (name, label, kernel, stride, conv_out,
    channels_last, variant, {target: kernel µs})."""
    out = []
    for name, label, kernel, stride, conv_out, channels_last, variant, times in cases:
        out.append({
            "name": name, "variant": variant, "channels_last": channels_last, "dtype": dtype,
            "case": {"label": label, "kernel_size": kernel, "stride": stride,
                     "conv_out": conv_out, "flops": 1e9},
            "targets": {t: {"profiler_kernel_us": us, "median_us": 2 * us}
                        for t, us in times.items()}})
    return {"settings": {"dtype": dtype}, "cases": out}


def test_ratio_table_classes_and_the_comparison_with_older_records(tmp_path, seed):
    """--classes puts each case in one class of each rule (kernel and kind, conv output size,
    dtype and layout) and gives the geometric mean over torch.compile there; --against matches
    the cases of two runs by geometry, dtype and layout (not by name), and gives the op's and
    each peer's time then / now, and the rows that moved."""
    from tools import ratio_table
    rng = random.Random(seed)
    compile_us = [rng.uniform(10, 100) for _ in range(4)]
    new_us = [rng.uniform(10, 100) for _ in range(4)]
    specs = [("a", "1x1", [1, 1], [1, 1], [8, 8], False, "general_wgmma"),
             ("b", "3x3s2", [3, 3], [2, 2], [40, 40], True, "general_wgmma"),
             ("c", "3x3s4", [3, 3], [4, 3], [20, 20], False, "general_wgmma"),
             ("d", "stem", [7, 7], [2, 2], [112, 112], False, "stem_tf32")]
    now = _profiling_record([s + ({"new": n, "eager": 50.0, "compile": c},)
                             for s, n, c in zip(specs, new_us, compile_us)])
    cases = now["cases"]
    for case in cases:
        case.setdefault("dtype", "float32")
    text = ratio_table.classes(cases, "kernel")
    ratio = [c / n for c, n in zip(compile_us, new_us)]
    expected = {"general, 1 x 1": [ratio[0]], "general, stride 2": [ratio[1]],
                "general, strides 3 and more": [ratio[2]],
                "other kernels than general_wgmma": [ratio[3]],
                "conv output at most 16 x 16": [ratio[0]],
                "conv output larger": ratio[1:],
                "float32 NCHW": [ratio[0], ratio[2], ratio[3]],
                "float32 channels-last": [ratio[1]]}
    for name, values in expected.items():
        mean = math.exp(sum(math.log(v) for v in values) / len(values))
        assert f"| {name} | {len(values)} | {mean:.2f}x |" in text, (name, text)
    # Older records: case b's op 1.5x slower then, the peers unchanged; case c absent; case d
    # under another geometry (not matched).
    then = _profiling_record(
        [("a_renamed",) + specs[0][1:] + ({"new": new_us[0], "eager": 50.0,
                                          "compile": compile_us[0]},),
         specs[1] + ({"new": 1.5 * new_us[1], "eager": 50.0, "compile": compile_us[1]},),
         specs[3][:1] + ("other",) + specs[3][2:]
         + ({"new": 1.0, "eager": 50.0, "compile": compile_us[3]},)])
    for path, record in (("now.json", now), ("then.json", then)):
        (tmp_path / path).write_text(json.dumps(record))
    old = ratio_table.load([tmp_path / "then.json"])
    text = ratio_table.against(ratio_table.load([tmp_path / "now.json"]), old, "kernel")
    assert text.startswith("2 cases in both"), text
    assert f"| op | {math.sqrt(1.5):.3f}x | 1.00x | 1.50x |" in text, text
    assert "| compile | 1.000x |" in text and "| eager | 1.000x |" in text, text
    moved = text.split("moved by more than 3%")[1]
    assert "  b (float32, general_wgmma):" in moved and "(1.50x; eager 1.00x, compile 1.00x)" \
        in moved and "  a (" not in moved, text


def test_ratio_table_slower_lists_each_slower_case_with_its_plan_and_reason(extension, seed):
    """--slower (host plans, no GPU): only the cases slower than torch.compile, slowest first;
    each with its share of the floor for both targets and the first reason that holds: a
    batch-1 7 x 7 layer's one round, a batch-128 layer of 3 output channels' under-filled
    tiles (several rounds), a large dense layer over a compute floor the mainloop's rate, a
    memory floor where the bytes set it, another variant before any of them."""
    from tools import ratio_table
    from utils import kernel_choice
    from utils.profiling import DEFAULT_HALF_TFLOPS
    from utils.suite import ConvPoolCase
    lib = kernel_choice.load(extension)
    rng = random.Random(seed)
    layers = {"few": ConvPoolCase("few", 1, 256, 100, 7, 7, (1, 1)),
              "narrow": ConvPoolCase("narrow", 128, 256, 3, 64, 64, (1, 1)),
              "dense": ConvPoolCase("dense", 128, 512, 512, 56, 56, (3, 3), padding=(1, 1)),
              "bytes": ConvPoolCase("bytes", 128, 512, 512, 56, 56, (3, 3), padding=(1, 1)),
              "other": ConvPoolCase("other", 8, 3, 64, 64, 64, (3, 3), padding=(1, 1)),
              "faster": ConvPoolCase("faster", 1, 256, 100, 7, 7, (1, 1))}
    ratio = {name: rng.uniform(0.3, 0.95) for name in layers}
    ratio["faster"] = 1.5
    record = _profiling_record(
        [(c.name, c.label(), [1, 1], [1, 1], list(c.conv_out()), False,
          "tiled_16bit_flat" if c.name == "other" else "general_wgmma",
          {"new": 100.0, "eager": 50.0, "compile": 100.0 * ratio[c.name]})
         for c in layers.values()], dtype="float16")
    for entry, layer in zip(record["cases"], layers.values()):
        entry["case"] = dict(layer.to_dict(), flops=layer.flops())
        compute_us = layer.flops() / (DEFAULT_HALF_TFLOPS * 1e12) * 1e6
        entry["floor_us"] = compute_us * (3.0 if layer.name == "bytes" else 1.0)
    cases = {c["name"]: c for c in record["cases"]}
    assert ratio_table.rounds(cases["few"], lib) == 1
    assert ratio_table.rounds(cases["narrow"], lib) > 1
    assert ratio_table.tile_use(cases["narrow"], lib) < 0.5
    assert ratio_table.rounds(cases["dense"], lib) > 1
    assert ratio_table.tile_use(cases["dense"], lib) >= 0.5
    expected = {"few": "one round", "narrow": "tiles under half full",
                "dense": "mainloop rate", "bytes": "memory floor", "other": "another kernel"}
    for name, why in expected.items():
        assert ratio_table.reason(cases[name], lib) == why, name
    text = ratio_table.slower_table(record["cases"], "kernel", lib)
    listed = [line.split(" | ")[0][2:] for line in text.splitlines()
              if line.startswith("| ") and line.split(" | ")[0][2:] in layers]
    assert listed == sorted(expected, key=ratio.get), (listed, text)
    for name, why in expected.items():
        floor = cases[name]["floor_us"]
        assert f" | {floor / 100:.0%} / {floor / (100 * ratio[name]):.0%} | " in text, name
        assert [line for line in text.splitlines() if line.startswith(f"| {name} |")][0] \
            .endswith(f" | {why} |"), (name, text)
    for why in expected.values():
        assert f"| {why} | 1 | " in text, text


def test_ratio_table_rounds_sorts_the_general_cases_by_rounds_and_pool(extension, seed):
    """--rounds (host plans, no GPU): a batch-1 7 x 7 layer's few tiles fit one round of the
    H200's resident blocks, a batch-128 64 x 64 one takes several; a 3 x 3 / 2 pool is another
    class than 2 x 2 / 2; each class line has its count, geometric mean, op time share and the
    geometric mean of all with that class at 1.0x."""
    from tools import ratio_table
    from utils import kernel_choice
    from utils.suite import ConvPoolCase
    lib = kernel_choice.load(extension)
    rng = random.Random(seed)
    layers = [ConvPoolCase("few", 1, 256, 100, 7, 7, (1, 1)),
              ConvPoolCase("many", 128, 256, 64, 64, 64, (1, 1)),
              ConvPoolCase("many_3x3", 128, 256, 64, 64, 64, (1, 1), pool_kernel=(3, 3),
                           pool_stride=(2, 2))]
    record = _profiling_record(
        [(c.name, c.label(), [1, 1], [1, 1], list(c.conv_out()), False, "general_wgmma",
          {"new": rng.uniform(10, 100), "eager": 50.0, "compile": rng.uniform(10, 100)})
         for c in layers], dtype="float16")
    for entry, layer in zip(record["cases"], layers):
        entry["case"] = dict(layer.to_dict(), flops=1e9)
    few, many, many_3x3 = record["cases"]
    for case in record["cases"]:
        plan = kernel_choice.general_plan(lib, ConvPoolCase.from_dict(case["case"]),
                                          kernel_choice.FLOAT16)
        resident = kernel_choice.H200.sm_count * plan["blocks_per_sm"]
        assert ratio_table.rounds(case, lib) == -(-plan["tiles"] * plan["split"] // resident)
    assert ratio_table.rounds(few, lib) == 1
    assert ratio_table.rounds(many, lib) > 1 and ratio_table.rounds(many_3x3, lib) > 1
    text = ratio_table.rounds_table(record["cases"], "kernel", lib)
    times = {c["name"]: c["targets"] for c in record["cases"]}
    ratio = {n: t["compile"]["profiler_kernel_us"] / t["new"]["profiler_kernel_us"]
             for n, t in times.items()}
    total = sum(t["new"]["profiler_kernel_us"] for t in times.values())
    for name, label in (("few", "one round, 2 x 2 / 2 pool"),
                        ("many", "several rounds, 2 x 2 / 2 pool"),
                        ("many_3x3", "several rounds, other pools")):
        others = [r for n, r in ratio.items() if n != name]
        rest = math.exp(sum(math.log(r) for r in others) / 3)
        share = times[name]["new"]["profiler_kernel_us"] / total
        assert (f"| {label} | 1 | {ratio[name]:.2f}x | {share:.0%} | {rest:.2f}x |"
                in text), text


def test_ratio_table_tile_use_counts_the_pooled_outputs_and_channels_a_plan_fills(
        extension, monkeypatch, seed):
    """--tile-use on the general kernel's plans (the host's, no GPU): with the 8 x 32 tile of N
    = 64 forced, a 7 x 7 image under a 2 x 2 / 2 pool fills 3 x 3 of the tile's 4 x 16 pooled
    outputs, and 100 output channels 100 of two blocks' 128; a 64 x 64 image into 64 channels
    fills all of its 8 x 2 tiles (32 x 32 pooled outputs). The table splits them at half."""
    from tools import ratio_table
    from utils import kernel_choice
    from utils.suite import ConvPoolCase
    monkeypatch.setenv("CONV_POOL_GENERAL_TILE", "wide_n64")
    lib = kernel_choice.load(extension)
    rng = random.Random(seed)
    small = ConvPoolCase("small", 1, 256, 100, 7, 7, (1, 1))
    full = ConvPoolCase("full", 1, 256, 64, 64, 64, (1, 1))
    record = _profiling_record(
        [(c.name, c.label(), [1, 1], [1, 1], list(c.conv_out()), False, "general_wgmma",
          {"new": rng.uniform(10, 100), "eager": 50.0, "compile": rng.uniform(10, 100)})
         for c in (small, full)], dtype="float16")
    for entry, layer in zip(record["cases"], (small, full)):
        entry["case"] = dict(layer.to_dict(), flops=1e9)
    small_case, full_case = record["cases"]
    assert ratio_table.tile_use(small_case, lib) == pytest.approx(9 / 64 * 100 / 128)
    assert ratio_table.tile_use(full_case, lib) == pytest.approx(1.0)
    text = ratio_table.tile_use_table(record["cases"], "kernel", lib)
    times = {c["name"]: c["targets"] for c in record["cases"]}
    ratio = {n: t["compile"]["profiler_kernel_us"] / t["new"]["profiler_kernel_us"]
             for n, t in times.items()}
    share = (times["small"]["new"]["profiler_kernel_us"]
             / sum(t["new"]["profiler_kernel_us"] for t in times.values()))
    assert f"| under half full | 1 | {ratio['small']:.2f}x | {share:.0%} |" in text, text
    assert f"| at least half full | 1 | {ratio['full']:.2f}x |" in text, text


def sanitizer_runs():
    """The lines of gpu_check.sh's sanitizer list (its RUNS here-document), in order."""
    script = (REPO / "tools" / "gpu_check.sh").read_text()
    return script.split("<<'RUNS'\n")[1].split("\nRUNS\n")[0].splitlines()


def test_sanitize_cases_takes_hook_settings_anywhere_among_its_arguments():
    """tools/sanitize_cases.py: NAME=VALUE arguments are environment settings (the general
    kernel's hooks), the rest main's positional arguments, and a wrong count is refused."""
    from tools import sanitize_cases
    positional, settings = sanitize_cases.split_arguments(
        ["general_paired", "CONV_POOL_GENERAL_TILE=wide_n64", "general_wgmma", "float16",
         "CONV_POOL_GENERAL_PAIRED=0"])
    assert positional == ["general_paired", "general_wgmma", "float16"]
    assert settings == {"CONV_POOL_GENERAL_TILE": "wide_n64", "CONV_POOL_GENERAL_PAIRED": "0"}
    assert sanitize_cases.split_arguments(["padded_odd"]) == (["padded_odd"], {})
    for wrong in ([], ["CONV_POOL_GENERAL_TILE=wide_n64"], ["a", "b", "c", "d", "e"]):
        with pytest.raises(SystemExit, match="expected: case"):
            sanitize_cases.split_arguments(wrong)
    # Every line of gpu_check.sh's sanitizer list parses, and its settings name hooks that
    # the kernels' sources read (general_hooks.h's, the stem launch's).
    runs = sanitizer_runs()
    hooks = "".join(path.read_text() for path in sorted((REPO / "kernels").rglob("*"))
                    if path.suffix in (".h", ".cu", ".cuh"))
    assert len(runs) > 100
    for line in runs:
        tool, *arguments = line.split()
        assert tool in ("memcheck", "racecheck"), line
        positional, settings = sanitize_cases.split_arguments(arguments)
        assert positional[0] in sanitize_cases.CASES, line
        for name in settings:
            assert f'"{name}"' in hooks, line


def test_gpu_check_sanitize_numbers_its_runs_and_starts_at_sanitize_from(tmp_path):
    """gpu_check.sh's sanitize stage (with a stand-in compute-sanitizer that only records its
    arguments): each run's line number heads it, in the list's order, and SANITIZE_FROM=n
    skips the first n - 1 lines, so that a call can go on where a capped one stopped."""
    script = (REPO / "tools" / "gpu_check.sh").read_text()
    runs = sanitizer_runs()
    function = script[script.index("sanitize() {"):]
    function = function[:function.index("\n}\n") + 3]
    stub = tmp_path / "compute-sanitizer"
    stub.write_text('#!/bin/sh\necho "ran $2 $*" >> "$STUB_LOG"\n')
    stub.chmod(0o755)
    for start in (None, len(runs) - 2):
        log = tmp_path / f"runs_{start}.log"
        env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}", STUB_LOG=str(log))
        if start is not None:
            env["SANITIZE_FROM"] = str(start)
        out = subprocess.run(["bash", "-c", function + "sanitize"], env=env, cwd=REPO,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        first = start or 1
        heads = [f"[{n}] {' '.join(runs[n - 1].split())}" for n in range(first, len(runs) + 1)]
        assert out.stdout.splitlines() == heads, out.stdout[-500:]
        ran = log.read_text().splitlines()
        assert len(ran) == len(runs) - first + 1
        assert ran[0].split()[1] == runs[first - 1].split()[0]  # the tool of its first line


def test_sanitize_cases_lists_its_cases_on_help_or_an_unknown_name():
    """tools/sanitize_cases.py --help prints its usage and every case name (exit 0); an
    unknown case does the same on exit 2, where it raised a KeyError."""
    for argv, code in ((["--help"], 0), (["no_such_case"], 2), ([], 2)):
        run = subprocess.run([sys.executable, str(REPO / "tools" / "sanitize_cases.py"), *argv],
                             capture_output=True, text=True, cwd=REPO, timeout=120)
        assert run.returncode == code, (argv, run.stderr)
        assert "usage: python tools/sanitize_cases.py CASE" in run.stderr, run.stderr
        assert "general_split_channels_last" in run.stderr and "Traceback" not in run.stderr


def git_commit_all(repo: Path) -> list[str]:
    """A git repository at `repo` with every file in it committed; returns the git command
    prefix for it (`-C repo` and an author)."""
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "c"], check=True)
    return git


def test_gpu_check_warns_when_source_commit_is_the_checkouts_own_stale_head(tmp_path):
    """gpu_check.sh names SOURCE_COMMIT in the JSONs; on the device machine `git rev-parse
    HEAD` reads the copy's stale .git, so a SOURCE_COMMIT equal to HEAD while tracked files
    differ from it draws a warning at the top (not when the tree is that commit)."""
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    (repo / "tools" / "gpu_check.sh").write_text((REPO / "tools" / "gpu_check.sh").read_text())
    git = git_commit_all(repo)
    head = subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()

    def run():
        return subprocess.run(["bash", "tools/gpu_check.sh", "no_such_stage"], cwd=repo,
                              capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, SOURCE_COMMIT=head,
                                       OUT=str(tmp_path / "out"))).stdout

    assert "warning: SOURCE_COMMIT" not in run()
    with open(repo / "tools" / "gpu_check.sh", "a") as script:
        script.write("\n# changed\n")
    assert f"warning: SOURCE_COMMIT={head} is this checkout's HEAD" in run()



def test_gpu_check_passes_test_args_as_shell_words(tmp_path):
    """gpu_check.sh's test stage hands TEST_ARGS to pytest as shell words: a quoted -k
    expression with spaces stays one argument (split on spaces, its `or` became a path and
    pytest ran nothing), and without TEST_ARGS it runs tests/. A stand-in python3 first on
    PATH records its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "python3"
    stub.write_text('#!/usr/bin/env bash\nfor a in "$@"; do printf "[%s]" "$a"; done; echo\n')
    stub.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", OUT=str(tmp_path / "out"))
    for test_args, expected in (
            ('tests/test_gpu_correctness.py -k "disallowed or fp32"',
             "[tests/test_gpu_correctness.py][-k][disallowed or fp32]"),
            (None, "[no:cacheprovider][tests]")):
        run_env = dict(env)
        if test_args is not None:
            run_env["TEST_ARGS"] = test_args
        subprocess.run(["bash", str(REPO / "tools" / "gpu_check.sh"), "test"], cwd=REPO,
                       capture_output=True, text=True, timeout=60, env=run_env, check=True)
        log = (tmp_path / "out" / "test.log").read_text()
        assert log.startswith("[-m][pytest][-q][-p][no:cacheprovider]"), log
        assert log.rstrip().endswith(expected), log


def test_ab_build_times_both_builds_alternately_and_restores_the_tree(tmp_path):
    """tools/ab_build.sh (gpu_check.sh's `ab` stage): with a stand-in compile.sh that "builds"
    the module from one source file, AB_CMD sees A's module, then the patched build's, in
    alternating rounds with a log each; afterwards the source is unpatched and A's module is
    back. A patch that does not apply, or one that leaves the module unchanged, is an error.
    With AB_TREE, B is another tree's build, AB_CMD run inside it; with AB_PREBUILT, the module
    in an archive of tools/prebuilt.sh pack, nothing built. One of the three, no more."""
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    (repo / "utils").mkdir()
    (repo / "tools" / "ab_build.sh").write_text((REPO / "tools" / "ab_build.sh").read_text())
    (repo / "utils" / "compile.sh").write_text("cp kernel.txt cuda_extension.test.so\n")
    (repo / "kernel.txt").write_text("variant A\n")
    git = git_commit_all(repo)
    subprocess.run(["bash", "utils/compile.sh"], cwd=repo, check=True)
    (repo / "kernel.txt").write_text("variant B\n")
    patch = subprocess.run(git[:3] + ["diff"], capture_output=True, text=True,
                           check=True).stdout
    subprocess.run(git[:3] + ["checkout", "-q", "kernel.txt"], check=True)
    (tmp_path / "b.diff").write_text(patch)
    (tmp_path / "same.diff").write_text(patch.replace("variant B", "variant A"))
    out = tmp_path / "out"

    def ab(patch_file, rounds="2"):
        return subprocess.run(
            ["bash", "tools/ab_build.sh", str(out)], cwd=repo, capture_output=True, text=True,
            timeout=60, env=dict(os.environ, AB_PATCH=str(patch_file), AB_ROUNDS=rounds,
                                 AB_CMD="cat cuda_extension.test.so"))

    def assert_alternated(run, b_log):
        """A, B, A, B with a log each; A's module in place afterwards."""
        assert run.returncode == 0, run.stderr
        sides = re.findall(r"=== ab: ([AB]), round (\d)", run.stdout)
        assert sides == [("A", "1"), ("B", "1"), ("A", "2"), ("B", "2")], run.stdout
        for round_ in "12":
            assert (out / f"ab_A_{round_}.log").read_text() == "variant A\n"
            assert (out / f"ab_B_{round_}.log").read_text() == b_log
        assert (repo / "cuda_extension.test.so").read_text() == "variant A\n"

    assert_alternated(ab(tmp_path / "b.diff"), "variant B\n")
    assert (repo / "kernel.txt").read_text() == "variant A\n"

    run = ab(tmp_path / "same.diff")
    assert run.returncode != 0 and "left the module unchanged" in run.stderr, run.stderr
    assert (repo / "kernel.txt").read_text() == "variant A\n"
    (tmp_path / "bad.diff").write_text(patch.replace("variant A", "variant C"))
    run = ab(tmp_path / "bad.diff")
    assert run.returncode != 0 and "patch does not apply" in run.stderr, run.stderr
    assert (repo / "cuda_extension.test.so").read_text() == "variant A\n"

    # AB_TREE: B is another whole tree, built with its own compile.sh and AB_CMD run inside it.
    other = tmp_path / "other"
    (other / "utils").mkdir(parents=True)
    (other / "utils" / "compile.sh").write_text("echo 'tree B' > cuda_extension.test.so\n")

    def ab_tree(**settings):
        env = {k: v for k, v in os.environ.items()
               if k not in ("AB_PATCH", "AB_TREE", "AB_PREBUILT")}
        return subprocess.run(
            ["bash", "tools/ab_build.sh", str(out)], cwd=repo, capture_output=True, text=True,
            timeout=60, env=dict(env, AB_ROUNDS="2", AB_CMD="cat cuda_extension.test.so",
                                 **settings))

    assert_alternated(ab_tree(AB_TREE=str(other)), "tree B\n")

    # AB_PREBUILT: B is the module of another machine's archive; nothing is built.
    def archive(name, module_text, module_name="cuda_extension.test.so"):
        staging = tmp_path / f"staging_{name}"
        (staging / "build").mkdir(parents=True)
        (staging / module_name).write_text(module_text)
        (staging / "build" / "inputs.sha256").write_text("feed\n")
        path = tmp_path / f"{name}.tar.gz"
        subprocess.run(["tar", "-czf", str(path), "-C", str(staging), module_name,
                        "build/inputs.sha256"], check=True)
        return str(path)

    run = ab_tree(AB_PREBUILT=archive("b", "prebuilt B\n"))
    assert_alternated(run, "prebuilt B\n")
    assert "sources feed" in run.stdout and "building" not in run.stdout, run.stdout
    run = ab_tree(AB_PREBUILT=archive("same", "variant A\n"))
    assert run.returncode == 3 and "the same module as A" in run.stderr, run.stderr
    run = ab_tree(AB_PREBUILT=archive("other_python", "B\n", "cuda_extension.other.so"))
    assert run.returncode == 2 and "holds no cuda_extension.test.so" in run.stderr, run.stderr
    assert (repo / "cuda_extension.test.so").read_text() == "variant A\n"

    for settings in ({}, {"AB_TREE": str(other), "AB_PATCH": str(tmp_path / "b.diff")},
                     {"AB_TREE": str(other), "AB_PREBUILT": str(tmp_path / "b.tar.gz")}):
        run = ab_tree(**settings)
        assert run.returncode == 2 and "set one of AB_PATCH" in run.stderr, run.stderr

# ---- tools/kernel_breakdown.py --------------------------------------------------------------

def test_prebuilt_packs_the_module_for_the_sources_it_was_built_from(tmp_path):
    """tools/prebuilt.sh: `pack` copies the files a device call sends (tracked and untracked,
    not ignored) into its build tree, builds there (a stand-in compile.sh) and packs the
    module with the hash of the build's inputs; `unpack` in a tree of the same sources brings
    the module and the ptxas report back, and refuses, writing nothing, where a kernel source
    differs. A second pack copies a changed file, drops a deleted one and keeps the tree's
    build outputs (the build there is incremental). The stand-in module is megabytes of random
    bytes after its sources, as a real one is: unpack's check of the archive's names once
    failed there on a pipe (tar killed by SIGPIPE after grep -q's match)."""
    repo, tree = tmp_path / "repo", tmp_path / "tree"
    for folder in ("tools", "utils", "kernels"):
        (repo / folder).mkdir(parents=True)
    (repo / "tools" / "prebuilt.sh").write_text((REPO / "tools" / "prebuilt.sh").read_text())
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    (repo / "utils" / "compile.sh").write_text(
        'cd "$(dirname "$0")/.." && mkdir -p build && echo built >> build/count && '
        f'cat kernels/*.cu > cuda_extension{suffix} && '
        f'head -c 4000000 /dev/urandom >> cuda_extension{suffix} && '
        'echo report > build/ptxas.log && '
        "echo log > build/build.log\n")
    (repo / "utils" / "build_env.py").write_text("")
    for name in ("binding.cpp", "setup.py", "binding_registry.h"):
        (repo / name).write_text(name)
    (repo / "kernels" / "a.cu").write_text("kernel a\n")
    (repo / "kernels" / "b.cu").write_text("kernel b\n")
    (repo / ".gitignore").write_text("build/\n*.so\n")
    git = git_commit_all(repo)
    (repo / "kernels" / "c.cu").write_text("kernel c, untracked\n")

    def prebuilt(*args, cwd=repo):
        return subprocess.run(["bash", "tools/prebuilt.sh", *args], cwd=cwd, capture_output=True,
                              text=True, timeout=60, env=dict(os.environ, PREBUILT_TREE=str(tree)))

    archive = tmp_path / "module.tar.gz"
    run = prebuilt("pack", sys.executable, str(archive))
    assert run.returncode == 0, run.stderr
    assert (tree / f"cuda_extension{suffix}").read_bytes().startswith(
        b"kernel a\nkernel b\nkernel c, untracked\n")
    device = tmp_path / "device"
    shutil.copytree(repo, device, ignore=shutil.ignore_patterns(".git"))
    run = prebuilt("unpack", str(archive), cwd=device)
    assert run.returncode == 0, run.stderr
    assert (device / f"cuda_extension{suffix}").read_bytes() == (
        tree / f"cuda_extension{suffix}").read_bytes()
    assert (device / "build" / "ptxas.log").read_text() == "report\n"

    other = tmp_path / "other"
    shutil.copytree(repo, other, ignore=shutil.ignore_patterns(".git"))
    (other / "kernels" / "a.cu").write_text("kernel a, changed\n")
    run = prebuilt("unpack", str(archive), cwd=other)
    assert run.returncode != 0 and "other sources" in run.stderr, run.stderr
    assert not (other / f"cuda_extension{suffix}").exists()

    (repo / "kernels" / "a.cu").write_text("kernel a, changed\n")
    (repo / "kernels" / "b.cu").unlink()
    run = prebuilt("pack", sys.executable, str(archive))
    assert run.returncode == 0, run.stderr
    assert not (tree / "kernels" / "b.cu").exists()
    assert (tree / "build" / "count").read_text() == "built\nbuilt\n"
    (other / "kernels" / "b.cu").unlink()
    assert prebuilt("unpack", str(archive), cwd=other).returncode == 0


def test_kernel_breakdown_configs_carry_hook_settings_and_restore_them(monkeypatch, capsys):
    """tools/kernel_breakdown.py: `auto@NAME=VALUE@...` is a config with environment settings,
    applied while it is planned and timed and restored after (a variable unset before is unset
    again); a setting without `=` is refused; the summary prints each config's kernel time and
    its ratio to the first config's, under a title where one is given (the back-to-back
    table); a --spec of 9 numbers is refused; one of 11 takes a pool padding; a config named
    twice is timed twice, the repeat under CONFIG#2."""
    from tools import kernel_breakdown as kb
    assert kb.parse_config("auto") == ("auto", {})
    assert kb.parse_config("general_wgmma@CONV_POOL_GENERAL_TILE=wide_n64@X=1") == (
        "general_wgmma", {"CONV_POOL_GENERAL_TILE": "wide_n64", "X": "1"})
    for wrong in ("auto@CONV_POOL_GENERAL_TMA_COPY", "auto@=1"):
        with pytest.raises(ValueError, match="NAME=VALUE"):
            kb.parse_config(wrong)
    # A repeated config is timed again under its own key (not folded into the first).
    assert kb.config_keys(["auto", "auto@X=1", "auto", "auto@X=1", "auto"]) == [
        "auto", "auto@X=1", "auto#2", "auto@X=1#2", "auto#3"]
    assert kb.parse_config("auto@X=1#2") == ("auto", {"X": "1"})
    monkeypatch.setenv("KB_TEST_SET", "before")
    monkeypatch.delenv("KB_TEST_UNSET", raising=False)
    with kb.environment({"KB_TEST_SET": "during", "KB_TEST_UNSET": "during"}):
        assert os.environ["KB_TEST_SET"] == "during" and os.environ["KB_TEST_UNSET"] == "during"
    assert os.environ["KB_TEST_SET"] == "before" and "KB_TEST_UNSET" not in os.environ
    with pytest.raises(RuntimeError):
        with kb.environment({"KB_TEST_SET": "during"}):
            raise RuntimeError("a refusal inside")
    assert os.environ["KB_TEST_SET"] == "before"
    configs = ["auto", "auto@H=1", "general_wgmma"]
    kb.print_summary([("a", {"eager": 9.0, "auto": 10.0, "auto@H=1": 8.0, "general_wgmma": None})],
                     configs)
    row = capsys.readouterr().out.strip().splitlines()[-1]
    assert row == "| a | 9.0 | 10.0 | 8.0 | refused | 0.800 | - |", row
    kb.print_summary([("a", {"eager": 4.0, "auto": 5.0, "auto@H=1": 6.0})], configs[:2],
                     "back to back, 50 calls: µs a call")
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "back to back, 50 calls: µs a call", lines
    assert lines[-1] == "| a | 4.0 | 5.0 | 6.0 | 1.200 |", lines
    with pytest.raises(SystemExit):
        kb.main(["--spec", "1,3,8,16,16,3,1,1,2", "--stream", "10"])
    with pytest.raises(SystemExit):
        kb.main(["--json", "x.json", "--all", "--configs", "auto@BROKEN"])
    stem = kb.case_from_spec("32,3,64,224,224,7,2,3,3,2,1")
    assert (stem.pool_padding, stem.pooled_out()) == ((1, 1), (56, 56)), stem
    assert kb.case_from_spec("1,3,8,16,16,3,1,1,2,2").pool_padding == (0, 0)


def test_kernel_breakdown_sums_each_kernel_over_the_cases(capsys):
    """tools/kernel_breakdown.py --summary's last table: each kernel by its bare name (no
    namespaces, template arguments or parameters, so a kernel's instances group), its µs summed
    over the cases under eager and each config, largest first, "-" where a config ran none."""
    from tools import kernel_breakdown as kb
    assert kb.kernel_name("general_wgmma::(anonymous namespace)::split_to_channels_last_kernel"
                          "(float const*, long, long)") == "split_to_channels_last_kernel"
    assert kb.kernel_name("void general_wgmma::general_conv_pool_kernel<Float32, 2, 1, true>"
                          "(ConvPoolOperands, ConvPoolShape, general_wgmma::Plan)") == \
        "general_conv_pool_kernel"
    assert kb.kernel_name("sm80_xmma_fprop_implicit_gemm_f32f32") == \
        "sm80_xmma_fprop_implicit_gemm_f32f32"
    sums = {"eager": {"conv": 10.0, "pool": 2.0},
            "auto": {"copy": 30.0, "conv": 5.0},
            "auto@HOOK=1": {"tiled_copy": 12.0, "conv": 5.5}}
    kb.print_kernel_sums(sums, ["eager", "auto", "auto@HOOK=1"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "| kernel, summed over the cases | eager µs | auto µs | auto@HOOK=1 µs |"
    assert lines[2:] == ["| copy | - | 30.0 | - |", "| tiled_copy | - | - | 12.0 |",
                         "| conv | 10.0 | 5.0 | 5.5 |", "| pool | 2.0 | - | - |"]


def test_json_cases_are_named_with_their_dtype_and_layout(monkeypatch, capsys):
    """tools/kernel_breakdown.json_cases: a profiling JSON's named cases with the dtype and
    layout each ran in (the fuzz's fuzz_10: float16 channels-last; a zoo's dtype from its
    settings), all of them without names, an error naming a missing name; tools/run_case.py
    --json runs the named case in its own dtype and layout unless told otherwise."""
    from tools import kernel_breakdown as kb
    from tools import run_case
    fuzz = REPO / "docs" / "fuzz_h200.json"
    entries = {e["name"]: e for e in json.loads(fuzz.read_text())["cases"]}
    (name, case, dtype, channels_last), = kb.json_cases(fuzz, ["fuzz_10"])
    assert (name, dtype, channels_last) == ("fuzz_10", "float16", True)
    assert case == ConvPoolCase.from_dict(entries["fuzz_10"]["case"])
    assert [c[0] for c in kb.json_cases(fuzz)] == list(entries)
    zoo = REPO / "docs" / "zoo_h200_float16.json"
    assert {(c[2], c[3]) for c in kb.json_cases(zoo)} == {("float16", False)}
    with pytest.raises(ValueError, match="fuzz_999 is not in"):
        kb.json_cases(fuzz, ["fuzz_10", "fuzz_999"])
    ran = []
    monkeypatch.setattr(run_case, "run_calls", lambda *args: ran.append(args))
    for argv, expected in ((["fuzz_10", "auto"], ("float16", True)),
                           (["fuzz_10", "auto", "--dtype", "bfloat16"], ("bfloat16", True)),
                           (["fuzz_0", "general_wgmma"],
                            (entries["fuzz_0"]["dtype"], entries["fuzz_0"]["channels_last"]))):
        monkeypatch.setattr(sys, "argv", ["run_case.py", *argv, "--json", str(fuzz)])
        assert run_case.main() == 0
        assert ran[-1][0] == ConvPoolCase.from_dict(entries[argv[0]]["case"])
        assert (ran[-1][1], ran[-1][3], ran[-1][4]) == (argv[1], *expected), ran[-1]
    monkeypatch.setattr(sys, "argv", ["run_case.py", "fuzz_999", "auto", "--json", str(fuzz)])
    with pytest.raises(SystemExit):
        run_case.main()
    assert "fuzz_999 is not in" in capsys.readouterr().err


def test_kernel_breakdown_draws_random_layers_and_keeps_those_of_a_chosen_variant(capsys, seed):
    """tools/kernel_breakdown.py --random SEED:COUNT: COUNT layers of utils.suite.fuzz_case from
    SEED (named r<SEED>_<i>, in --dtype and layout); --chosen keeps those the automatic choice
    (--no-tf32 as given) gives one of the named variants; --plan under --no-tf32 filters the
    3xTF32 form's plans. A malformed --random and a --chosen that keeps nothing are refused."""
    from tools import kernel_breakdown as kb
    from utils import kernel_choice
    from utils.suite import fuzz_case
    import cuda_extension
    lib = kernel_choice.load(cuda_extension)
    count = 60
    rng = random.Random(seed)
    cases = [fuzz_case(rng, f"r{seed}_{i}") for i in range(count)]
    for no_tf32, variant in ((False, "general_wgmma"), (True, "general_3xtf32_wgmma")):
        expected = [case.name for case in cases
                    if kernel_choice.chosen_variant(lib, case, allow_tf32=not no_tf32) == variant]
        argv = ["--random", f"{seed}:{count}", "--chosen", variant, "--list"]
        assert kb.main(argv + ["--no-tf32"] * no_tf32) == 0
        listed = [line.split() for line in capsys.readouterr().out.strip().splitlines()]
        assert [name for name, _, _ in listed] == expected and expected, (seed, variant)
        assert all(dtype == "float32" and layout == "nchw" for _, dtype, layout in listed)
    split = [case.name for case in cases
             if kernel_choice.chosen_variant(lib, case, allow_tf32=False) == "general_3xtf32_wgmma"
             and kernel_choice.general_plan(lib, case, split=True)["split"] > 1]
    assert split, seed  # (28-42 of 60 on seeds 0-29)
    assert kb.main(["--random", f"{seed}:{count}", "--no-tf32", "--plan", "split=2,3,4,5,6,"
                    "7,8,9,10,11,12,13,14,15,16", "--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.strip().splitlines()]
    assert listed == split
    with pytest.raises(SystemExit):
        kb.main(["--random", "one:2", "--list"])
    with pytest.raises(SystemExit):
        kb.main(["--random", f"{seed}:{count}", "--chosen", "no_such_variant", "--list"])
    capsys.readouterr()


def test_kernel_breakdown_picks_cases_by_their_general_plan(capsys):
    """tools/kernel_breakdown.py --plan KEY=VALUE keeps the JSON's cases that the automatic
    choice gives the general kernel and whose host plan there has that value (here every
    float16 zoo row on the general kernel whose plan is paired without a split, and none other:
    not MobileNet's 3-channel first layer, which the general kernel would pair but the stem
    kernel runs), --list prints them and stops without a GPU; a --plan without `=` and one that
    matches nothing are refused."""
    from tools import kernel_breakdown as kb
    from utils import kernel_choice
    import cuda_extension
    zoo = REPO / "docs" / "zoo_h200_float16.json"
    assert kb.main(["--json", str(zoo), "--all", "--plan", "paired=1", "--plan", "split=1",
                    "--list"]) == 0
    listed = [line.split() for line in capsys.readouterr().out.strip().splitlines()]
    assert listed and all(dtype == "float16" and layout == "nchw"
                          for _, dtype, layout in listed), listed
    lib = kernel_choice.load(cuda_extension)
    expected = []
    skipped = []
    for entry in json.loads(zoo.read_text())["cases"]:
        case = ConvPoolCase.from_dict(entry["case"])
        plan = kernel_choice.general_plan(lib, case, kernel_choice.FLOAT16)
        if plan is None or plan["paired"] != 1 or plan["split"] != 1:
            continue
        if kernel_choice.chosen_variant(lib, case, kernel_choice.FLOAT16) == "general_wgmma":
            expected.append(entry["name"])
        else:
            skipped.append(entry["name"])
    assert [name for name, _, _ in listed] == expected
    assert skipped == ["mobilenet_v2_c0_p2s2_b1"], skipped
    # `rounds` (not a key of the plan): the rows whose blocks fit one round, as ratio_table's.
    from tools import ratio_table
    assert kb.main(["--json", str(zoo), "--all", "--plan", "rounds=1", "--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.strip().splitlines()]
    one_round = [entry["name"] for entry in json.loads(zoo.read_text())["cases"]
                 if entry["variant"] == "general_wgmma" and ratio_table.rounds(entry, lib) == 1]
    assert listed == one_round and len(one_round) >= 10, (listed, one_round)
    assert all("_p2s2_" in name for name in expected), expected
    # Alternatives: the rows of either tile, each listed once.
    assert kb.main(["--json", str(zoo), "--all", "--plan", "tile=wide_n64,square_n128",
                    "--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.strip().splitlines()]
    either = [entry["name"] for entry in json.loads(zoo.read_text())["cases"]
              if entry["variant"] == "general_wgmma" and ratio_table._general_plan(entry, lib)[
                  "tile"] in ("wide_n64", "square_n128")]
    assert listed == either and len(set(listed)) == len(listed) and len(either) >= 10, either
    for wrong in (["--plan", "paired"], ["--plan", "tile=no_such_tile"]):
        with pytest.raises(SystemExit):
            kb.main(["--json", str(zoo), "--all", *wrong, "--list"])
