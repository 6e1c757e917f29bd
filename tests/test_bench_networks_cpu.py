"""CPU-side tests of tools/bench_networks.py (issue 32's network benchmark): the matrix and its
slices, the bars' verdicts on made-up rows, the table (also printed from a results file,
--table), the compile-pass target's restoring of Inductor's settings, and the clear exits
without a GPU. The timing itself needs a GPU.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import bench_networks  # noqa: E402


def row(model="vgg16", batch=32, eager=10.0, compile=8.0, fused=None, fused_compile=None,
        compile_pass=None, matches=True, compile_frozen=None):
    targets = {"eager": eager, "compile": compile, "compile-frozen": compile_frozen,
               "fused": fused, "fused-compile": fused_compile, "compile-pass": compile_pass}
    return dict(model=model, batch=batch, dtype="float32", layout="nchw",
                fusion=dict(convs=13, fused=5),
                targets={name: dict(median_ms=ms, matches_eager=matches or name == "eager")
                         for name, ms in targets.items() if ms is not None})


def test_the_matrix_is_model_outermost_and_slices_by_start_and_limit():
    args = bench_networks.build_parser().parse_args(
        ["--models", "vgg16,alexnet", "--batches", "32,1", "--dtypes", "float32,float16"])
    everything = bench_networks.configurations(args)
    assert len(everything) == 2 * 2 * 2 * 2
    assert [c["model"] for c in everything[:8]] == ["vgg16"] * 8
    assert everything[0] == dict(model="vgg16", batch=32, dtype="float32", layout="nchw")
    assert everything[1]["layout"] == "channels_last"
    args.start, args.limit = 5, 4
    assert bench_networks.configurations(args) == everything[5:9]
    args.start, args.limit = 14, 0
    assert bench_networks.configurations(args) == everything[14:]


def test_defaults_are_issue_32s_runs():
    args = bench_networks.build_parser().parse_args([])
    assert len(args.models) == 13 and "inception_v3" in args.models
    assert args.batches == [32, 1] and args.dtypes == ["float32", "float16"]
    assert args.layouts == ["nchw", "channels_last"] and "compile-pass" in args.targets
    assert bench_networks.input_size("inception_v3") == 299
    assert bench_networks.input_size("resnet50") == 224


@pytest.mark.parametrize("bad", [["--models", "vgg17"], ["--batches", "0"],
                                 ["--dtypes", "float64"], ["--targets", ""],
                                 ["--rounds", "0"], ["--rounds", "2,3"]])
def test_bad_arguments_are_refused(bad):
    with pytest.raises(SystemExit):
        bench_networks.build_parser().parse_args(bad)


def test_bars_pass_and_miss_on_made_up_rows():
    good = [row(fused=9.0, fused_compile=6.5), row("alexnet", fused=9.5, compile_pass=6.5),
            row("resnet18", batch=1, fused=9.9, fused_compile=7.9)]
    lines = bench_networks.bars(good)
    assert len(lines) == 3 and all(line.startswith("PASS") for line in lines), lines
    # vgg16: fused eager slower than eager; best fused 7.5 ms against compile's 8.0 = 1.07x,
    # under the 1.15x bar; resnet18: no fused target beats compile.
    bad = [row(fused=11.0, fused_compile=7.5), row("resnet18", fused=9.0, fused_compile=8.5)]
    lines = bench_networks.bars(bad)
    assert [line.split()[0] for line in lines] == ["MISS", "MISS", "MISS"], lines
    assert "vgg16 b32 float32 nchw 11.000 ms against 10.000" in lines[0]
    assert "resnet18 b32 float32 nchw 0.94x" in lines[1]
    assert "vgg16 b32 float32 nchw 1.07x" in lines[2]


def test_bars_name_every_row_that_misses():
    rows = [row("vgg16", batch=b, fused=11.0, fused_compile=8.5) for b in range(1, 9)]
    lines = bench_networks.bars(rows)
    assert [line.split()[0] for line in lines] == ["MISS", "MISS"], lines
    for line in lines:
        assert all(f"vgg16 b{b} float32 nchw" in line for b in range(1, 9)), line


def test_a_mismatched_target_is_not_the_best():
    mismatched = row(fused=5.0, fused_compile=7.0, matches=False)
    assert bench_networks.best_fused(mismatched) is None
    r = row(fused=9.0, fused_compile=7.0)
    r["targets"]["fused-compile"]["matches_eager"] = False
    assert bench_networks.best_fused(r) == ("fused", 9.0)


def test_table_lists_every_target_and_the_best_ratio():
    text = bench_networks.table([row(fused=9.0, fused_compile=7.0, compile_pass=6.4,
                                     compile_frozen=7.2)])
    assert ("| vgg16 b32 float32 nchw | 5/13 | 10.000 | 8.000 | 7.200 | 9.000 | 7.000 | 6.400 |"
            in text)
    assert "1.25x (compile-pass)" in text


def test_the_frozen_peer_is_reported_apart_from_the_bars():
    """compile-frozen (freezing, no pass) is not one of the issue's bars, but where it ran the
    bars say how the best fused target stands against it."""
    lines = bench_networks.bars([row(fused=9.0, compile_pass=6.4, compile_frozen=6.0),
                                 row("alexnet", fused=9.0, compile_pass=6.4, compile_frozen=7.0)])
    assert [line.split()[0] for line in lines] == ["PASS", "PASS", "(not", "PASS"], lines
    assert "1 of 2 rows; vgg16 b32 float32 nchw 0.94x" in lines[2]


def test_compile_pass_restores_inductor_settings(monkeypatch):
    import torch._inductor.config as inductor_config
    import model_new
    seen = {}

    def fake_time(module, x, flush, args):
        seen["freezing"] = inductor_config.freezing
        seen["pass"] = inductor_config.post_grad_custom_post_pass
        return dict(out=None, median_ms=1.0)

    monkeypatch.setattr(bench_networks, "time_target", fake_time)
    before = (inductor_config.freezing, inductor_config.post_grad_custom_post_pass)
    result = bench_networks.run_compile_pass(__import__("torch").nn.Identity(), None, None, None)
    assert seen["freezing"] is True and isinstance(seen["pass"], model_new.InductorFusionPass)
    assert result["rewritten"] == 0
    assert (inductor_config.freezing, inductor_config.post_grad_custom_post_pass) == before
    # compile-frozen: freezing without the pass, then both restored
    result = bench_networks.run_compile_pass(__import__("torch").nn.Identity(), None, None, None,
                                             fusion=False)
    assert seen["freezing"] is True and seen["pass"] is before[1]
    assert "rewritten" not in result
    assert (inductor_config.freezing, inductor_config.post_grad_custom_post_pass) == before


def test_resume_keeps_the_rows_of_the_slice_and_runs_the_rest(tmp_path):
    import json
    args = bench_networks.build_parser().parse_args(
        ["--models", "vgg16,alexnet", "--batches", "32", "--dtypes", "float32",
         "--layouts", "nchw", "--json", str(tmp_path / "n.json"), "--resume"])
    kept = row("alexnet")
    other = dict(row("resnet18"), batch=1)  # not in this slice: not run, kept in the file
    (tmp_path / "n.json").write_text(json.dumps(dict(rows=[kept, other])))
    rows = bench_networks.resumed_rows(args)
    assert [bench_networks.config_key(r) for r in rows] == [("alexnet", 32, "float32", "nchw")]
    measured, written = [], []

    def measure(config):
        measured.append(config["model"])
        return dict(row(config["model"]), **config)

    rows = bench_networks.run_matrix(bench_networks.configurations(args), rows, args, measure,
                                     written.append)
    assert measured == ["vgg16"]
    assert [r["model"] for r in rows] == ["vgg16", "alexnet"] and len(written) == 1
    # ... and the rows outside the slice go back into the file unchanged (other_rows).
    assert bench_networks.other_rows(args) == [other]


def test_redo_measures_the_named_rows_again_and_keeps_them_until_then(tmp_path):
    """--redo misses: of three rows in the slice, the one slower than eager and the one behind
    torch.compile run again; the passing one is kept. Stopped before the second (the measure
    below raises after one), the file still holds the other's old row."""
    args = bench_networks.build_parser().parse_args(
        ["--models", "vgg16,alexnet,resnet18", "--batches", "32", "--dtypes", "float32",
         "--layouts", "nchw", "--json", str(tmp_path / "n.json"), "--resume",
         "--redo", "misses"])
    passing = row("vgg16", fused=5.0)                   # 2.0x eager, 1.6x compile
    slower = row("alexnet", fused=11.0, compile_pass=7.0)  # fused eager slower than eager
    behind = row("resnet18", fused=9.0)                 # best fused 9.0 ms >= compile's 8.0
    assert [bench_networks.misses_a_bar(r) for r in (passing, slower, behind)] == [
        False, True, True]
    (tmp_path / "n.json").write_text(json.dumps(dict(rows=[passing, slower, behind])))
    kept = bench_networks.resumed_rows(args)
    assert [r["model"] for r in kept] == ["vgg16"]
    others = bench_networks.other_rows(args)
    assert [r["model"] for r in others] == ["alexnet", "resnet18"]
    measured, written = [], []

    def measure(config):
        if measured:
            raise KeyboardInterrupt  # stands for the time limit after one configuration
        measured.append(config["model"])
        return dict(row(config["model"], fused=4.0), **config)

    with pytest.raises(KeyboardInterrupt):
        bench_networks.run_matrix(bench_networks.configurations(args), kept, args, measure,
                                  lambda rows: written.append(
                                      bench_networks.with_others(rows, others)))
    assert measured == ["alexnet"]
    final = written[-1]
    assert [(r["model"], r["targets"]["fused"]["median_ms"]) for r in final] == [
        ("vgg16", 5.0), ("alexnet", 4.0), ("resnet18", 9.0)]


@pytest.mark.parametrize("spec, redone", [
    ("alexnet", ["alexnet"]), ("*:32:float32:nchw", ["vgg16", "alexnet"]),
    ("vgg16:1", []), ("alexnet:32:float16", []), ("vgg16,alexnet:*:*:nchw", ["vgg16", "alexnet"]),
])
def test_redo_specs_match_by_model_batch_dtype_and_layout(spec, redone):
    specs = bench_networks.redo_specs(spec)
    rows = [row("vgg16", fused=5.0), row("alexnet", fused=5.0)]
    assert [r["model"] for r in rows if bench_networks.to_redo(r, specs)] == redone


@pytest.mark.parametrize("bad", ["vgg17", "vgg16:one", "vgg16:32:float64", "vgg16:32:float32:nhwc",
                                 "vgg16:32:float32:nchw:extra"])
def test_bad_redo_specs_are_refused(bad):
    with pytest.raises(SystemExit):
        bench_networks.build_parser().parse_args(["--resume", "--redo", bad])


def test_redo_without_resume_is_refused(capsys):
    assert bench_networks.main(["--redo", "misses"]) == 2
    assert "--redo" in capsys.readouterr().err


def test_time_limit_starts_no_configuration_that_would_overrun():
    """With a 100 s limit and configurations of 40 s each, the third would end at 120 s: two
    run, the table is made of those."""
    args = bench_networks.build_parser().parse_args(
        ["--models", "vgg16,alexnet,resnet18", "--batches", "32", "--dtypes", "float32",
         "--layouts", "nchw", "--time-limit", "100"])
    now = [0.0]

    def measure(config):
        now[0] += 40.0
        return dict(row(config["model"]), **config)

    rows = bench_networks.run_matrix(bench_networks.configurations(args), [], args, measure,
                                     lambda rows: None, clock=lambda: now[0])
    assert [r["model"] for r in rows] == ["vgg16", "alexnet"]


def test_exits_2_with_a_clear_message_without_gpu():
    environment = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    result = subprocess.run([sys.executable, "tools/bench_networks.py", "--models", "alexnet"],
                            cwd=REPO, env=environment, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and "no CUDA GPU is visible" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name", bench_networks.MODELS)
def test_every_model_builds_and_fuses_on_the_cpu(name):
    """Each model of the matrix is built as the GPU run builds it (before .cuda()), and
    fuse_conv_relu_maxpool finds at least one run in it (the report counts its Conv2d)."""
    pytest.importorskip("torchvision")
    import model_new
    model = bench_networks.build_model(name)
    assert not model.training
    _, report = model_new.fuse_conv_relu_maxpool(model, report=True)
    fused = sum(1 for entry in report if entry.fused)
    print(f"{name}: {fused} of {len(report)} Conv2d fused")
    assert len(report) > 0 and fused >= 1, [(e.conv, e.why) for e in report][:5]


def test_conv_relu_rows_are_apart_from_the_others():
    """--conv-relu configurations carry conv_relu=True, which their key and label show, so
    that one file holds both kinds and --resume tells them apart."""
    args = bench_networks.build_parser().parse_args(
        ["--models", "vgg16", "--batches", "32", "--dtypes", "float16", "--layouts", "nchw",
         "--conv-relu"])
    (config,) = bench_networks.configurations(args)
    assert config["conv_relu"] is True
    plain = dict(config)
    del plain["conv_relu"]
    assert bench_networks.config_key(config) != bench_networks.config_key(plain)
    assert bench_networks.label(config).endswith(" conv_relu")
    assert not bench_networks.label(plain).endswith("conv_relu")


def test_table_prints_a_results_file_without_a_gpu(tmp_path, capsys):
    """--table prints the table and the bars of --json's rows as stored (docs/RESULTS.md's),
    and refuses a missing file with exit status 2."""
    results = tmp_path / "networks.json"
    results.write_text(json.dumps(dict(rows=[row(fused=9.0, fused_compile=6.5),
                                             row("alexnet", fused=11.0, compile_pass=7.5)])))
    assert bench_networks.main(["--table", "--json", str(results)]) == 0
    out = capsys.readouterr().out
    assert "| vgg16 b32 float32 nchw | 5/13 | 10.000 | 8.000 |" in out
    assert "| alexnet b32 float32 nchw |" in out and "1.23x (fused-compile)" in out
    assert "MISS fused eager never slower than eager: 1 of 2 rows" in out
    assert bench_networks.main(["--table", "--json", str(tmp_path / "missing.json")]) == 2
    assert "needs --json" in capsys.readouterr().err


def test_eager_and_fused_take_turns_in_rounds(monkeypatch):
    """time_interleaved: each module's first call apart, then --rounds rounds in which every
    module takes its share of --iters timed calls in turn (warm-up calls before the first
    round's, one before each later one); each module's samples are its own."""
    import utils.profiling
    calls = []

    def fake_time_calls(fn, inputs, iters, warmup, flush):
        name = fn(inputs[0])
        calls.append((name, iters, warmup))
        return [{"eager": 1000.0, "fused": 500.0}[name]] * iters

    monkeypatch.setattr(utils.profiling, "time_calls", fake_time_calls)
    monkeypatch.setattr(bench_networks.torch.cuda, "synchronize", lambda: None)
    args = bench_networks.build_parser().parse_args(["--iters", "22", "--rounds", "4"])
    results = bench_networks.time_interleaved(
        {"eager": lambda x: "eager", "fused": lambda x: "fused"}, "x", None, args)
    assert calls == [("eager", 6, 3), ("fused", 6, 3), ("eager", 6, 1), ("fused", 6, 1),
                     ("eager", 5, 1), ("fused", 5, 1), ("eager", 5, 1), ("fused", 5, 1)]
    assert results["eager"]["median_ms"] == 1.0 and results["fused"]["median_ms"] == 0.5
    assert results["eager"]["samples"] == results["fused"]["samples"] == 22
    assert results["fused"]["out"] == "fused" and results["fused"]["rounds"] == 4
