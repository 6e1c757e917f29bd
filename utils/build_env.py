"""Finds and checks the toolchain that the cuda_extension build needs.

One place for the checks that both `utils/compile.sh` and `setup.py` (hence `pip install`)
rely on, so that the two always build against the same toolkit and architecture:

* the CUDA toolkit: CUDA_HOME or CUDA_PATH when set (and then nothing else), else the toolkit
  of the `nvcc` on PATH (a symlink is followed; a wrapper script is asked where it execs to),
  else /usr/local/cuda;
* torch is installed, is a CUDA build, and its CUDA major version is the toolkit's;
* the target architecture: TORCH_CUDA_ARCH_LIST when set, else the visible GPUs' compute
  capabilities (9.0 becomes "9.0a" so that Hopper-only instructions such as wgmma are
  allowed), else "9.0a" (no GPU visible, e.g. a CPU-only CI machine).

Every failure is a BuildEnvError whose message is one line saying what to do.

    python -m utils.build_env          # `export NAME=value` lines, for compile.sh to eval
    python -m utils.build_env --human  # the same, readable
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

DEFAULT_ARCH_LIST = "9.0a"  # the project targets Hopper (H100/H200)


class BuildEnvError(RuntimeError):
    """A missing or mismatched build tool; the message is one line."""


@dataclass(frozen=True)
class BuildEnv:
    cuda_home: Path
    cuda_version: str      # toolkit's "major.minor", from its nvcc --version
    torch_version: str
    torch_cuda_version: str
    arch_list: str         # TORCH_CUDA_ARCH_LIST value, e.g. "9.0a"
    arch_source: str       # where arch_list came from, for the build summary


def _is_toolkit(home: Path) -> bool:
    return (home / "bin" / "nvcc").is_file() and (home / "include" / "cuda_runtime.h").is_file()


def _toolkit_reported_by(nvcc: str) -> Path | None:
    """The toolkit a (possibly wrapped) nvcc really runs from: nvcc's dry run prints TOP=..."""
    try:
        dry_run = subprocess.run(
            [nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
            capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"^#\$ TOP=(.+)$", dry_run.stdout + dry_run.stderr, re.MULTILINE)
    return Path(match.group(1).strip()).resolve() if match else None


def find_cuda_home() -> Path:
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        value = os.environ.get(variable)
        if value:
            # An explicit choice is honoured or refused, never silently replaced.
            if not (Path(value) / "bin" / "nvcc").is_file():
                raise BuildEnvError(
                    f"{variable}={value} has no bin/nvcc: point {variable} at a CUDA toolkit, "
                    "or unset it to use the nvcc on PATH")
            if not _is_toolkit(Path(value)):
                raise BuildEnvError(
                    f"{variable}={value} has bin/nvcc but no include/cuda_runtime.h: "
                    "not a complete CUDA toolkit")
            return Path(value).resolve()

    nvcc = shutil.which("nvcc")
    candidates = []
    if nvcc is not None:
        candidates.append(Path(nvcc).resolve().parent.parent)  # nvcc itself or a symlink to it
        reported = _toolkit_reported_by(nvcc)                   # a wrapper script
        if reported is not None:
            candidates.append(reported)
    candidates.append(Path("/usr/local/cuda"))
    for home in candidates:
        if _is_toolkit(home):
            return home.resolve()
    if nvcc is None:
        raise BuildEnvError("nvcc not found (not on PATH, no /usr/local/cuda): install the CUDA "
                            "toolkit and put its bin/ on PATH, or set CUDA_HOME")
    raise BuildEnvError(f"nvcc on PATH ({nvcc}) belongs to no CUDA toolkit found in "
                        f"{', '.join(map(str, candidates))}: set CUDA_HOME to the toolkit")


def toolkit_version(cuda_home: Path) -> str:
    nvcc = cuda_home / "bin" / "nvcc"
    try:
        output = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True,
                                timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as error:
        raise BuildEnvError(f"{nvcc} --version failed: {error}") from None
    match = re.search(r"release (\d+)\.(\d+)", output)
    if match is None:
        raise BuildEnvError(f"{nvcc} --version does not say its release (got {output.strip()!r})")
    return f"{match.group(1)}.{match.group(2)}"


def _require_torch_installed() -> None:
    # find_spec, not import: answers in milliseconds, so this check stays fast.
    if importlib.util.find_spec("torch") is None:
        raise BuildEnvError(f"torch is not installed for {sys.executable}: "
                            "pip install -r requirements.txt")


def choose_arch_list(torch: ModuleType) -> tuple[str, str]:
    """(TORCH_CUDA_ARCH_LIST value, where it came from); `torch` is the module (or a stand-in)."""
    from_env = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if from_env:
        return from_env, "TORCH_CUDA_ARCH_LIST"
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        arches = []
        for device in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(device)
            # sm_90a: the arch-specific Hopper target (wgmma, setmaxnreg, TMA multicast).
            arch = "9.0a" if (major, minor) == (9, 0) else f"{major}.{minor}"
            if arch not in arches:
                arches.append(arch)
        return ";".join(arches), "visible GPU"
    return DEFAULT_ARCH_LIST, "default, no GPU visible"


def check_build_env(require_ninja: bool = True) -> BuildEnv:
    """Checks everything the build needs, cheapest and most basic first."""
    _require_torch_installed()
    cuda_home = find_cuda_home()
    cuda_version = toolkit_version(cuda_home)
    if require_ninja and shutil.which("ninja") is None:
        raise BuildEnvError("ninja not found on PATH: pip install ninja "
                            "(incremental builds depend on it)")
    import torch

    if torch.version.cuda is None:
        raise BuildEnvError(f"torch {torch.__version__} is a CPU-only build "
                            "(torch.version.cuda is None): install a CUDA build of torch")
    if cuda_version.split(".")[0] != torch.version.cuda.split(".")[0]:
        raise BuildEnvError(
            f"CUDA toolkit {cuda_home} is CUDA {cuda_version} but torch {torch.__version__} was "
            f"built with CUDA {torch.version.cuda}: the major versions must match (set CUDA_HOME "
            f"to a CUDA {torch.version.cuda.split('.')[0]}.x toolkit)")
    arch_list, arch_source = choose_arch_list(torch)
    return BuildEnv(cuda_home, cuda_version, torch.__version__, torch.version.cuda, arch_list,
                    arch_source)


def configure_build_env(require_ninja: bool = False) -> BuildEnv:
    """Checks, then exports CUDA_HOME and TORCH_CUDA_ARCH_LIST for torch.utils.cpp_extension.

    Must run before torch.utils.cpp_extension is imported: it reads CUDA_HOME at import time
    (and would otherwise take the parent of a wrapper script's directory, e.g. /usr/local).
    """
    env = check_build_env(require_ninja)
    os.environ["CUDA_HOME"] = str(env.cuda_home)
    os.environ["TORCH_CUDA_ARCH_LIST"] = env.arch_list
    return env


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Find and check the CUDA toolkit, torch and target architecture for the "
                    "cuda_extension build. On success prints shell `export` lines (eval them); "
                    "on failure prints one line saying what is wrong and exits 1.")
    parser.add_argument("--human", action="store_true",
                        help="print a readable summary instead of shell assignments")
    parser.add_argument("--no-ninja", action="store_true",
                        help="do not require ninja (setup.py then falls back to slow builds)")
    args = parser.parse_args()
    try:
        env = check_build_env(require_ninja=not args.no_ninja)
    except BuildEnvError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    summary = (f"CUDA {env.cuda_version} at {env.cuda_home}, torch {env.torch_version} "
               f"(CUDA {env.torch_cuda_version}), arch {env.arch_list} ({env.arch_source})")
    if args.human:
        print(summary)
        return 0
    print(f"export CUDA_HOME={shlex.quote(str(env.cuda_home))}")
    print(f"export TORCH_CUDA_ARCH_LIST={shlex.quote(env.arch_list)}")
    print(f"BUILD_SUMMARY={shlex.quote(summary)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
