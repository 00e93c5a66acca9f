"""``salientpp selfcheck``: prove the device path on this machine and print a table (see :mod:`salientpp.selfcheck`)."""
from __future__ import annotations

import argparse

from ..parsing import name_list


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("selfcheck", help="check the CUDA (or CPU) path on this machine: kernels, training, bench",
                       description="Build-and-run checks of the device path: the extension and the GPUs, the row "
                                   "gather against torch indexing, a 1-rank training per preset (assembled "
                                   "features, accuracy against the CPU, host waits on CUDA), 2 ranks with a "
                                   "cache in both tiers (assembled features), and bench train against PyG on the "
                                   "same device. Exit code 1 when a check fails.")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="device to check (default: cuda when torch sees a GPU, else cpu)")
    p.add_argument("--presets", default="tiny,small", help="synthetic presets to train on (default tiny,small)")
    p.add_argument("--epochs", type=int, default=5, help="training epochs per preset (default 5)")
    p.add_argument("--no-bench", action="store_true", help="skip bench train against PyG")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from ..selfcheck import run as run_checks

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows = run_checks(device, name_list(args.presets, "--presets", "tiny,small"), args.epochs, not args.no_bench)
    failed = [r.name for r in rows if r.ok is False]
    print(f"\n{len(rows) - len(failed)} of {len(rows)} rows passed or informed"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
