"""What the GPU utilities need before they can run: a visible CUDA GPU and the built extension.

Shared by utils/verification.py and utils/profiling.py so both fail the same way, with one
line naming everything that is missing.
"""
import torch

COMPILE_HINT = "run `bash utils/compile.sh` first"


class SetupError(RuntimeError):
    """No GPU or no built extension: nothing can be run."""


def require_gpu_and_extension() -> None:
    """Raises SetupError naming everything missing (the GPU, the built extension)."""
    problems = []
    if not torch.cuda.is_available():
        problems.append("no CUDA GPU is visible (torch.cuda.is_available() is False); "
                        "this needs an NVIDIA GPU")
    try:
        import cuda_extension  # noqa: F401
    except ImportError as error:
        problems.append(f"cuda_extension is not built ({error}): {COMPILE_HINT}")
    if problems:
        raise SetupError("; ".join(problems))
