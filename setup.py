"""Build salientpp and its C++ extension ``salientpp._C``.

Install with ``pip install --no-build-isolation -e .`` so that the build uses the torch that is
already installed (an isolated build would download torch with several GB of CUDA packages).
CUDA sources (``csrc/*.cu``) are compiled only when the installed torch has CUDA.
"""
import glob
import os
import re

from setuptools import find_packages, setup

try:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
except ImportError as exc:  # pragma: no cover - install-time message
    raise SystemExit(
        "salientpp needs torch installed before it is built: run `pip install torch` first, then "
        "`pip install --no-build-isolation -e .`") from exc

here = os.path.dirname(os.path.abspath(__file__))
# The version is written once, in salientpp/__init__.py.
with open(os.path.join(here, "salientpp", "__init__.py")) as f:
    version = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)
sources = sorted(glob.glob(os.path.join("csrc", "*.cpp")))
cuda_sources = sorted(glob.glob(os.path.join("csrc", "*.cu")))
# Headers, so that an in-place rebuild (setup.py build_ext) recompiles after a header changes.
headers = sorted(glob.glob(os.path.join("csrc", "*.h")))
with_cuda = torch.cuda.is_available() or os.environ.get("SALIENTPP_FORCE_CUDA") == "1"
with_cuda = with_cuda and CUDA_HOME is not None and torch.version.cuda is not None

cxx_flags = ["-O3", "-std=c++17", "-fopenmp"]
if with_cuda:
    extension = CUDAExtension(
        "salientpp._C", sources + cuda_sources,
        define_macros=[("SALIENTPP_WITH_CUDA", None)], depends=headers,
        extra_compile_args={"cxx": cxx_flags, "nvcc": ["-O3"]},
        extra_link_args=["-fopenmp"])
else:
    extension = CppExtension(
        "salientpp._C", sources, depends=headers,
        extra_compile_args={"cxx": cxx_flags},
        extra_link_args=["-fopenmp"])

setup(
    name="salientpp",
    version=version,
    description="Distributed GNN training with VIP-driven caching of remote vertex features",
    long_description=open(os.path.join(here, "README.md")).read() if os.path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["salientpp", "salientpp.*"]),
    ext_modules=[extension],
    cmdclass={"build_ext": BuildExtension},  # ninja where installed (MAX_JOBS parallel), else one file at a time
    install_requires=["torch", "torch_geometric", "numpy", "numba", "pymetis", "tqdm"],
    extras_require={
        "ogb": ["ogb"],
        "plot": ["matplotlib"],
        "test": ["pytest", "pytest-xdist", "scipy", "ogb", "matplotlib"],
    },
    entry_points={"console_scripts": ["salientpp = salientpp.cli:main"]},
)
