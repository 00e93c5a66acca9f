"""Build a torch extension package's C++ extensions in place, all of them at once:

    python3 experiments/gpu/build_inplace.py SOURCE_DIR JOBS

runs ``SOURCE_DIR/setup.py build_ext --inplace -j JOBS`` with torch's ninja backend turned off.
With ninja, every extension of a package writes the same ``build.ninja`` in one build folder, so
extensions built side by side overwrite each other's (torch_sparse 0.6.18 has 12 extensions of
two files each: one after another they take minutes on any number of cores). Without ninja,
setuptools compiles each extension on a thread of its own. Part of the GPU session's script
(``run.sh``, step ``pyg``), for PyG's torch_scatter and torch_sparse.
"""
from __future__ import annotations

import os
import runpy
import sys

from torch.utils import cpp_extension


def main(source_dir: str, jobs: str) -> None:
    with_options = cpp_extension.BuildExtension.with_options.__func__

    def without_ninja(cls, **options):
        return with_options(cls, **{**options, "use_ninja": False})

    cpp_extension.BuildExtension.with_options = classmethod(without_ninja)
    os.chdir(source_dir)
    sys.path.insert(0, os.getcwd())
    sys.argv = ["setup.py", "build_ext", "--inplace", "-j", jobs]
    runpy.run_path("setup.py", run_name="__main__")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
