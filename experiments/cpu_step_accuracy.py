"""Cora test accuracy of the built-in SAGE before and after the CPU model step was rewritten, and in bfloat16.

    python experiments/cpu_step_accuracy.py ../shared/datasets/cora.npz [--seeds 5] [--epochs 30]

Three variants train the same 2-layer SAGE (hidden 64, fanouts 10,10, batch 140, lr 0.01, one
rank, full-neighbour evaluation) from the same seeds:

* ``PyG + torch dropout``: PyG's ``SAGEConv`` (scatter over a gathered message tensor) with
  torch's ReLU and dropout, as the model ran before (``salientpp.bench.pyg_baseline.PyGReferenceModel``);
* ``salientpp float32``: the CSR aggregation kernel and the fused counter-based dropout;
* ``salientpp bfloat16``: the same under ``--precision bf16`` (skipped without bfloat16 instructions).

It prints, per variant, the mean and standard deviation of the test accuracy at the best
validation epoch over the seeds, and the two-sided Welch t-test p-value against the first
variant. The masks differ (another generator), so single runs differ; the distributions should not.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from salientpp.bench.pyg_baseline import PyGReferenceModel
from salientpp.data.importers import load_source
from salientpp.partition.partitioner import partition_dataset
from salientpp.train import TrainConfig, train
from salientpp.train.config import cpu_has_bf16


def pyg_reference(in_dim: int, hidden: int, out_dim: int, num_layers: int):
    """The model factory (``--model experiments.cpu_step_accuracy:pyg_reference``) of the first variant."""
    return PyGReferenceModel("sage", in_dim, hidden, out_dim, num_layers, 0.5)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cora", help="cora.npz (../shared/datasets/cora.npz)")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=30)
    args = p.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # so the factory imports as cpu_step_accuracy
    ds = load_source(f"npz:{args.cora}")
    ds.x = (ds.x / ds.x.sum(1, keepdims=True).clip(min=1)).astype(np.float32)
    variants = [("PyG + torch dropout", dict(model="cpu_step_accuracy:pyg_reference")),
                ("salientpp float32", {})]
    if cpu_has_bf16():
        variants.append(("salientpp bfloat16", dict(precision="bf16")))
    results: dict[str, list[float]] = {name: [] for name, _ in variants}
    with tempfile.TemporaryDirectory() as tmp:
        part = Path(tmp) / "cora-1"
        partition_dataset(ds, part, 1)
        for seed in range(args.seeds):
            for name, extra in variants:
                config = TrainConfig(str(part), epochs=args.epochs, hidden=64, layers=2, fanouts=(10, 10),
                                     batch_size=140, lr=0.01, eval_every=3, eval_fanouts=(-1, -1), seed=seed,
                                     progress=False, policy="none", **extra)
                results[name].append(train(config).test_at_best)
                print(f"seed {seed}: {name} {results[name][-1]:.4f}", flush=True)
    from scipy.stats import ttest_ind

    base = results[variants[0][0]]
    print(f"\nCora, 2-layer SAGE, {args.epochs} epochs, {args.seeds} seeds: test accuracy at the best validation epoch")
    print("| variant | mean | sd | p (Welch t-test vs first) |")
    print("|---|---:|---:|---:|")
    for name, accs in results.items():
        pvalue = "-" if accs is base else f"{ttest_ind(accs, base, equal_var=False).pvalue:.2f}"
        print(f"| {name} | {statistics.mean(accs):.4f} | {statistics.stdev(accs):.4f} | {pvalue} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
