"""Shared test setup.

* The repository root is importable (cuda_extension*.so, model.py, model_new.py, utils/), from
  wherever pytest is started.
* `@pytest.mark.requires_cuda` skips a test when no CUDA GPU is visible (CI has none).
* The `extension` fixture imports cuda_extension and fails, never skips, when it is not built:
  CI builds it first, so a missing module is a broken build, not an optional feature.
* The `seed` fixture gives a test a fresh random seed and prints it (pytest shows it with a
  failure, and `-s` always); `SEED=n python -m pytest ...` fixes it to re-run a failure.
"""
import os
import random
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requires_cuda: needs a CUDA GPU; skipped without one")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("requires_cuda") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")


@pytest.fixture(scope="session")
def extension():
    """The built cuda_extension module."""
    try:
        import cuda_extension
    except ImportError as error:
        pytest.fail(f"cuda_extension is not built or does not load ({error}): run "
                    "`bash utils/compile.sh` in the repository root first", pytrace=False)
    return cuda_extension


@pytest.fixture(autouse=True)
def seed(request) -> int:
    """A fresh random seed for every test (or $SEED), printed (pytest shows it with a failure)
    and kept in the test's report. Python's `random` and torch's default generators start from
    it, so a test's draws (random.randrange, torch.randn without a generator) repeat with
    SEED=<value>; tests that want the value itself take this fixture."""
    value = (int(os.environ["SEED"]) if "SEED" in os.environ
             else int.from_bytes(os.urandom(4), "little") >> 1)
    print(f"seed {value} ({request.node.nodeid})")
    request.node.user_properties.append(("seed", value))
    random.seed(value)
    torch.manual_seed(value)
    return value


def reference_conv_relu_maxpool(x, weight, bias, stride, padding, dilation, pool_kernel,
                                pool_stride, pool_padding, ceil_mode, config=-1,
                                packed_weight=None):
    """What the op computes, in PyTorch, with the binding's contiguous output."""
    conv = F.conv2d(x, weight, bias, stride, padding, dilation)
    return F.max_pool2d(F.relu(conv), pool_kernel, pool_stride or pool_kernel, pool_padding, 1,
                        ceil_mode).contiguous()


@pytest.fixture
def reference_cpu_kernel(extension):
    """For one test, the op's CPU kernel (normally the binding's "must be a CUDA tensor"
    error) computes the reference instead: everything around the kernel - ModelNew's
    arguments, autograd, fuse_conv_relu_maxpool's settings - then runs on the CPU."""
    import model_new
    scope = torch.library.Library(model_new.OP_NAMESPACE, "FRAGMENT")
    torch.library.register_kernel(model_new.OP_QUALNAME, "cpu", reference_conv_relu_maxpool,
                                  lib=scope)
    yield
    scope._destroy()  # the op's own CPU kernel again
