"""Builds the cuda_extension module: binding.cpp + kernels/**/*.cu + kernels/**/*.cpp.

Three ways in, one build (same sources, flags, toolkit and architecture):

    bash utils/compile.sh                    # in place, incremental; also saves build/ptxas.log
    pip install --no-build-isolation -e .    # editable install (import from any directory)
    pip install --no-build-isolation .       # regular install

Use --no-build-isolation: the extension has to be compiled against the very torch it will be
imported with (C++ ABI). Without it pip first installs the torch pinned in pyproject.toml into a
throw-away environment, a multi-GB install that is at best the same torch again.

The toolkit and target architecture are chosen in utils/build_env.py (CUDA_HOME, nvcc on PATH or
/usr/local/cuda; TORCH_CUDA_ARCH_LIST, the visible GPU, or 9.0a). Ninja compiles each source to its
own object with header dependency tracking, so a rebuild recompiles only what a change touches
(compile.sh passes --force so that setuptools always hands the decision to ninja).
"""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from utils.build_env import BuildEnvError, configure_build_env  # noqa: E402

try:
    # Before torch.utils.cpp_extension is imported: it reads CUDA_HOME at import time.
    BUILD_ENV = configure_build_env()
except BuildEnvError as error:
    sys.exit(f"error: {error}")

import torch  # noqa: E402
from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CUDAExtension  # noqa: E402

# No --use_fast_math: it flushes denormals and changes NaN/inf behaviour, and the op must match
# PyTorch's NaN propagation. -Xptxas -v reports registers and spills per kernel
# (compile.sh keeps that report in build/ptxas.log; tests/test_build.py checks it).
# No flag may contain "arch": torch would then drop its -gencode flags for TORCH_CUDA_ARCH_LIST.
NVCC_FLAGS = ["-O3", "-lineinfo", "-Xptxas", "-v"]
# The wgmma kernel exists only in sm_90a code; the host side offers it only when that is built.
if "9.0a" in BUILD_ENV.arch_list.replace(" ", ";").split(";"):
    NVCC_FLAGS.append("-DCONV_POOL_WITH_WGMMA=1")
CXX_FLAGS = ["-O3"]


def relative_paths(pattern: str) -> list[str]:
    # setuptools wants source paths relative to setup.py.
    return sorted(str(path.relative_to(ROOT)) for path in ROOT.glob(pattern))


# kernels/ and its folders (kernels/hopper/, kernels/sm80/: the kernels by role).
SOURCES = ["binding.cpp"] + relative_paths("kernels/**/*.cu") + relative_paths("kernels/**/*.cpp")
HEADERS = (relative_paths("*.h") + relative_paths("kernels/**/*.h")
           + relative_paths("kernels/**/*.cuh"))

# Objects are named after their source without its suffix: kernels/x.cu and kernels/x.cpp would
# silently overwrite each other's x.o.
_stems = [os.path.splitext(source)[0] for source in SOURCES]
if len(set(_stems)) != len(_stems):
    sys.exit(f"error: two sources share an object name: {sorted(SOURCES)}")

# Lets `import cuda_extension` find libc10/libtorch even before `import torch`.
TORCH_LIB_DIR = str(Path(torch.__file__).resolve().parent / "lib")

setup(
    name="cuda_extension",
    version="0.1.0",
    description="Fused Conv2d -> ReLU -> MaxPool2d CUDA kernel for PyTorch (Hopper)",
    python_requires=">=3.9",
    # Built against this torch's C++ ABI: running it with another torch is undefined.
    install_requires=[f"torch=={torch.__version__.split('+')[0]}"],
    py_modules=["model", "model_new"],
    packages=[],
    ext_modules=[
        CUDAExtension(
            name="cuda_extension",
            sources=SOURCES,
            depends=HEADERS,
            extra_compile_args={"cxx": CXX_FLAGS, "nvcc": NVCC_FLAGS},
            extra_link_args=[f"-Wl,-rpath,{TORCH_LIB_DIR}"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    zip_safe=False,
)
