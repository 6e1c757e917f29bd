"""The build: utils/compile.sh's pre-checks fail fast with one line, utils/build_env.py finds the
toolkit and architecture, and the last build's ptxas report shows no register spills.

The compile.sh runs here use a scratch copy of the scripts, so a failing pre-check provably
writes no build output; none of them compiles anything.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from utils import build_env

REPO_ROOT = Path(__file__).resolve().parent.parent
COMPILE_SH = REPO_ROOT / "utils" / "compile.sh"
PTXAS_LOG = REPO_ROOT / "build" / "ptxas.log"
# What compile.sh runs before its pre-checks can fail.
TOOLS = ["bash", "cat", "date", "dirname", "mktemp", "rm", "tail"]


@pytest.fixture
def scratch_repo(tmp_path: Path) -> Path:
    """compile.sh and build_env.py alone in an empty repository: build outputs would show."""
    (tmp_path / "utils").mkdir()
    for name in ("compile.sh", "build_env.py", "__init__.py"):
        shutil.copy2(REPO_ROOT / "utils" / name, tmp_path / "utils" / name)
    return tmp_path


@pytest.fixture
def bare_path(tmp_path: Path) -> str:
    """A PATH with the few tools compile.sh needs and certainly no nvcc."""
    bin_dir = tmp_path / "bare_bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"{tool} not installed")
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def run_compile_sh(repo: Path, env_overrides: dict, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST")}
    env["PYTHON"] = sys.executable  # the interpreter itself, not a shim that needs PATH
    env.update(env_overrides)
    return subprocess.run(["bash", str(repo / "utils" / "compile.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=120)


def assert_fails_with_one_line(result: subprocess.CompletedProcess, repo: Path, pattern: str):
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{result.stderr}"
    assert lines[0].startswith("compile.sh: error: ")
    assert re.search(pattern, lines[0]), lines[0]
    assert result.stdout == ""
    assert not (repo / "build").exists(), "a failed pre-check must not write build outputs"
    assert not list(repo.glob("*.so"))


def fake_toolkit(root: Path, release: str) -> Path:
    """A directory that looks like a CUDA toolkit whose nvcc reports `release`."""
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "include" / "cuda_runtime.h").touch()
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --dryrun) echo "#\\$ TOP={root}/bin/.." >&2 ;;\n'
        f'  *) echo "Cuda compilation tools, release {release}, V{release}.1" ;; esac\n')
    nvcc.chmod(0o755)
    return root


# --- compile.sh ---------------------------------------------------------------------------------

def test_compile_sh_is_valid_bash():
    assert COMPILE_SH.is_file()
    result = subprocess.run(["bash", "-n", str(COMPILE_SH)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_compile_sh_help_describes_usage_and_builds_nothing(scratch_repo):
    result = run_compile_sh(scratch_repo, {}, "--help")
    assert result.returncode == 0
    assert "usage: bash utils/compile.sh" in result.stdout
    assert not (scratch_repo / "build").exists()


def test_compile_sh_refuses_unknown_arguments(scratch_repo):
    result = run_compile_sh(scratch_repo, {}, "--fast")
    assert result.returncode == 2
    assert "unknown argument '--fast'" in result.stderr


def test_compile_sh_without_nvcc_and_with_bogus_cuda_home_fails_in_one_line(
        scratch_repo, bare_path, tmp_path):
    bogus = tmp_path / "no-such-toolkit"
    result = run_compile_sh(scratch_repo, {"PATH": bare_path, "CUDA_HOME": str(bogus)})
    assert_fails_with_one_line(result, scratch_repo, r"CUDA_HOME=.*no-such-toolkit.*nvcc")


def test_compile_sh_with_cuda_path_but_no_toolkit_fails_in_one_line(scratch_repo, bare_path,
                                                                     tmp_path):
    result = run_compile_sh(scratch_repo, {"PATH": bare_path, "CUDA_PATH": str(tmp_path)})
    assert_fails_with_one_line(result, scratch_repo, r"CUDA_PATH=.* has no bin/nvcc")


def test_compile_sh_without_torch_fails_in_one_line(scratch_repo, tmp_path):
    python_without_site = tmp_path / "python-without-site-packages"
    python_without_site.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python_without_site.chmod(0o755)
    result = run_compile_sh(scratch_repo, {"PYTHON": str(python_without_site)})
    assert_fails_with_one_line(result, scratch_repo, r"torch is not installed")


@pytest.mark.skipif(torch.version.cuda is None, reason="CPU-only torch: no CUDA version to match")
def test_compile_sh_with_other_cuda_major_than_torch_fails_in_one_line(scratch_repo, tmp_path):
    torch_major = int(torch.version.cuda.split(".")[0])
    toolkit = fake_toolkit(tmp_path / "cuda-other", f"{torch_major - 1}.4")
    result = run_compile_sh(scratch_repo, {"CUDA_HOME": str(toolkit)})
    assert_fails_with_one_line(
        result, scratch_repo,
        rf"is CUDA {torch_major - 1}\.4 but torch .* CUDA {re.escape(torch.version.cuda)}: "
        "the major versions must match")


# --- build_env.py -------------------------------------------------------------------------------

@pytest.fixture
def clean_cuda_env(monkeypatch):
    for name in ("CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_cuda_home_is_honoured(clean_cuda_env, tmp_path):
    toolkit = fake_toolkit(tmp_path / "cuda", "13.0")
    clean_cuda_env.setenv("CUDA_HOME", str(toolkit))
    assert build_env.find_cuda_home() == toolkit.resolve()
    assert build_env.toolkit_version(toolkit) == "13.0"


def test_bogus_cuda_home_is_an_error_even_with_a_toolkit_elsewhere(clean_cuda_env, tmp_path):
    clean_cuda_env.setenv("CUDA_HOME", str(tmp_path / "nothing"))
    with pytest.raises(build_env.BuildEnvError, match="CUDA_HOME=.* has no bin/nvcc"):
        build_env.find_cuda_home()


def test_toolkit_is_found_through_an_nvcc_wrapper_script(clean_cuda_env, tmp_path):
    toolkit = fake_toolkit(tmp_path / "opt" / "cuda-x", "13.0")
    wrapper_dir = tmp_path / "wrappers"
    wrapper_dir.mkdir()
    wrapper = wrapper_dir / "nvcc"
    wrapper.write_text(f'#!/bin/sh\nexec "{toolkit}/bin/nvcc" "$@"\n')
    wrapper.chmod(0o755)
    clean_cuda_env.setenv("PATH", str(wrapper_dir))
    assert build_env.find_cuda_home() == toolkit.resolve()


def test_toolkit_is_found_through_an_nvcc_symlink(clean_cuda_env, tmp_path):
    toolkit = fake_toolkit(tmp_path / "cuda-y", "13.0")
    link_dir = tmp_path / "links"
    link_dir.mkdir()
    (link_dir / "nvcc").symlink_to(toolkit / "bin" / "nvcc")
    clean_cuda_env.setenv("PATH", str(link_dir))
    assert build_env.find_cuda_home() == toolkit.resolve()


def fake_torch(*capabilities):
    cuda = SimpleNamespace(is_available=lambda: bool(capabilities),
                           device_count=lambda: len(capabilities),
                           get_device_capability=lambda index: capabilities[index])
    return SimpleNamespace(cuda=cuda)


def test_arch_defaults_to_hopper_arch_specific_without_a_gpu(clean_cuda_env):
    assert build_env.choose_arch_list(fake_torch())[0] == "9.0a"


@pytest.mark.parametrize("capabilities,expected", [([(9, 0)], "9.0a"), ([(8, 0)], "8.0"),
                                                   ([(9, 0), (9, 0), (8, 9)], "9.0a;8.9")])
def test_arch_follows_the_visible_gpus_with_hopper_as_9_0a(clean_cuda_env, capabilities,
                                                           expected):
    assert build_env.choose_arch_list(fake_torch(*capabilities))[0] == expected


def test_arch_list_from_the_environment_wins(clean_cuda_env):
    clean_cuda_env.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0a")
    assert build_env.choose_arch_list(fake_torch((9, 0)))[0] == "8.0;9.0a"


# --- the last build -----------------------------------------------------------------------------

def last_build_file(pattern: str) -> Path:
    found = sorted((REPO_ROOT / "build").glob(pattern))
    if not found:
        pytest.skip(f"no build/{pattern}: the extension was not built with utils/compile.sh")
    return found[0]


def test_cuda_sources_are_compiled_with_the_agreed_nvcc_flags():
    ninja_file = last_build_file("temp.*/build.ninja").read_text()
    nvcc_flags = re.search(r"^cuda_post_cflags = (.*)$", ninja_file, re.MULTILINE).group(1)
    assert "fast_math" not in nvcc_flags, "--use_fast_math breaks NaN/inf semantics"
    assert "-lineinfo" in nvcc_flags and "-Xptxas -v" in nvcc_flags and "-O3" in nvcc_flags
    if os.environ.get("TORCH_CUDA_ARCH_LIST") is None and not torch.cuda.is_available():
        assert "-gencode=arch=compute_90a,code=sm_90a" in nvcc_flags


def parse_ptxas_report(text: str) -> dict:
    """{function: (stack bytes, spill store bytes, spill load bytes)} from `ptxas -v` output."""
    functions, current = {}, None
    for line in text.splitlines():
        properties = re.search(r"Function properties for (\S+)", line)
        if properties:
            current = properties.group(1)
            continue
        usage = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                          r"(\d+) bytes spill loads", line)
        if usage and current is not None:
            functions[current] = tuple(int(n) for n in usage.groups())
            current = None
    return functions


def demangle(name: str) -> str:
    try:
        return subprocess.run(["c++filt", name], capture_output=True, text=True,
                              timeout=10).stdout.strip() or name
    except (OSError, subprocess.SubprocessError):
        return name


def test_no_kernel_spills_registers():
    assert PTXAS_LOG.is_file(), (f"{PTXAS_LOG.relative_to(REPO_ROOT)} absent: build with "
                                 "utils/compile.sh (it saves the ptxas -v report there)")
    sources = [path for pattern in ("kernels/**/*.cu", "kernels/**/*.h", "kernels/**/*.cuh")
               for path in sorted(REPO_ROOT.glob(pattern))]
    newer = [s.name for s in sources if s.stat().st_mtime > PTXAS_LOG.stat().st_mtime]
    if newer:
        pytest.skip(f"ptxas report is older than {', '.join(newer)}: rebuild with utils/compile.sh")
    report = PTXAS_LOG.read_text()
    for source in REPO_ROOT.glob("kernels/**/*.cu"):
        name = source.relative_to(REPO_ROOT).as_posix()
        assert f"== {name}" in report, f"no ptxas report for {name}"
    functions = parse_ptxas_report(report)
    assert functions, "the ptxas report lists no function: is -Xptxas -v still in setup.py?"
    spilling = {name: usage for name, usage in functions.items() if usage[1] or usage[2]}
    assert not spilling, "register spills:\n" + "\n".join(
        f"  {demangle(name)}: {stack} bytes stack frame, {stores} bytes spill stores, "
        f"{loads} bytes spill loads" for name, (stack, stores, loads) in spilling.items())


def test_ptxas_report_parser_reads_spills():
    sample = ("ptxas info    : Function properties for _Z6kernelv\n"
              "    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n")
    assert parse_ptxas_report(sample) == {"_Z6kernelv": (16, 8, 4)}


def test_ptxas_reports_keep_what_a_stopped_build_finished(tmp_path):
    """compile.sh's ptxas_reports: each nvcc command's ptxas lines from ninja's "[k/n]" log go
    to a report named after its .cu. From a build stopped part way (finished = 0) every block
    but the last (which may be cut short) is kept, so that the next build compiles only the
    objects without a report; from a finished build every block."""
    script = COMPILE_SH.read_text()
    function = script[script.index("ptxas_reports() {"):]
    function = function[:function.index("\n}\n") + 3]
    root = "/repo"
    nvcc = "[{k}/9] /usr/local/cuda/bin/nvcc -O3 -c {root}/kernels/{name}.cu -o x.o"
    log = "\n".join([
        nvcc.format(k=1, root=root, name="a"),
        "ptxas info    : Used 40 registers", "a warning that is not ptxas's",
        "[2/9] c++ -c /repo/binding.cpp -o binding.o", "ptxas info    : not an nvcc block",
        nvcc.format(k=3, root=root, name="hopper/b"),
        "ptxas info    : Used 90 registers", "    0 bytes stack frame, 0 bytes spill stores",
        nvcc.format(k=4, root=root, name="c"), "ptxas info    : Used 12 regis"]) + "\n"
    (tmp_path / "build.log").write_text(log)
    for finished in (0, 1):
        reports = tmp_path / f"reports_{finished}"
        reports.mkdir()
        out = subprocess.run(
            ["bash", "-c", f'{function}ptxas_reports "$0" {finished}', tmp_path / "build.log"],
            env=dict(os.environ, reports=str(reports), ROOT=root), capture_output=True,
            text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        written = {path.name: path.read_text() for path in reports.iterdir()}
        expected = {"kernels__a.cu.log": "ptxas info    : Used 40 registers\n",
                    "kernels__hopper__b.cu.log": "ptxas info    : Used 90 registers\n"
                                                 "    0 bytes stack frame, 0 bytes spill stores\n"}
        if finished:
            expected["kernels__c.cu.log"] = "ptxas info    : Used 12 regis\n"
        assert written == expected, (finished, written)


def test_no_kernel_has_its_wgmmas_serialized():
    """ptxas says so ("wgmma.mma_async instructions are serialized", with a code per reason:
    C7520 e.g. for a __syncwarp in a branch between them, C7511 short of registers for the
    pipeline, as unrolled sequences of register-A wgmmas were) where it cannot keep a kernel's
    wgmmas in flight together."""
    if not PTXAS_LOG.is_file():
        pytest.skip(f"{PTXAS_LOG.relative_to(REPO_ROOT)} absent: build with utils/compile.sh")
    serialized = [line for line in PTXAS_LOG.read_text().splitlines()
                  if "wgmma.mma_async instructions are serialized" in line]
    assert not serialized, "\n".join(serialized)


def test_the_wgmma_probe_generator_still_finds_every_knock_out(tmp_path):
    """tools/wgmma_probe/gen.py patches the kernel's text; each patch asserts that its anchor
    occurs once, so a kernel change that moves one fails here rather than on the GPU."""
    out = tmp_path / "wgmma_probe.cu"
    subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "wgmma_probe" / "gen.py"),
                    str(out)], check=True)
    text = out.read_text()
    for mask in (1, 2, 4, 8, 32, 64, 128):
        assert f"PROBE & {mask}" in text, mask
    assert '#include "hopper/' not in text  # the kernel's headers are inlined
