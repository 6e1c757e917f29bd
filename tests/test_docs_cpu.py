"""The README is short, its Quick start is the two commands, its table is the committed JSON's,
and every repository path it names exists; code comments carry no history (run or version
numbers, dates: those live in docs/PERF.md and git). No GPU needed."""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import readme_table  # noqa: E402

README = (ROOT / "README.md").read_text()


def test_the_readme_is_at_most_12_kb():
    assert len(README.encode()) <= 12 * 1024, len(README.encode())


def test_the_quick_start_is_install_build_verify_profile_then_the_tests():
    block = re.search(r"## Quick start.*?```bash\n(.*?)```", README, re.S).group(1)
    assert block.splitlines() == [
        "pip install -r requirements.txt && bash utils/compile.sh && "
        "python -m utils.verification && python -m utils.profiling",
        "python -m pytest -q tests"]


def test_the_results_table_is_the_one_written_from_the_committed_json():
    import json
    expected = readme_table.table(json.loads(readme_table.DEFAULT_JSON.read_text()),
                                  "docs/suite_h200.json")
    assert expected in README, "run: python tools/readme_table.py --write"
    assert expected.count("\n| ") == 1 + 8  # the header and the eight suite shapes


def test_every_path_the_readme_names_exists():
    named = set(re.findall(r"`((?:docs|tools|utils|kernels|tests|examples)/[\w./-]+)`", README))
    assert named
    examples = {"kernels/my_op.cu", "kernels/my_op_binding.cpp"}  # the registry recipe
    missing = sorted(path for path in named - examples if not (ROOT / path).exists())
    assert not missing, missing


HISTORY = re.compile(r"\bruns? \d+(?![-\w])|\bv\d{1,2}\b(?!\.)|\b20\d\d-[01]\d-[0-3]\d\b")


def test_code_comments_carry_no_run_numbers_versions_or_dates():
    sources = [ROOT / "model_new.py"] + sorted((ROOT / "utils").glob("*.py")) + sorted(
        path for path in (ROOT / "kernels").rglob("*") if path.suffix in (
            ".cu", ".cuh", ".h", ".cpp"))
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in sources
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if HISTORY.search(line)]
    assert not found, "\n".join(found)


def test_the_history_pattern_catches_what_it_is_for():
    for line in ("// 5% slower (run 52)", "# docs/PERF.md v31", "(H200, 2026-11-30)"):
        assert HISTORY.search(line), line
    assert not HISTORY.search('asm volatile("ld.shared::cluster.v4.f32 ...")')
    assert not HISTORY.search("// this runs 64-channel blocks")


def test_no_file_under_kernels_is_longer_than_900_lines():
    lengths = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
               for path in (ROOT / "kernels").rglob("*") if path.is_file()}
    assert lengths
    assert {path: n for path, n in lengths.items() if n > 900} == {}
