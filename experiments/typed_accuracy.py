"""Test accuracy of R-SAGE and R-GAT on the IGBH-shaped preset: salientpp on 1, 2 and 4 ranks
against a single-process PyG model of the same size on PyG's own ``NeighborLoader`` (issue #52).

For each ``--models`` entry, each ``--parts`` count and each ``--seeds`` seed, ``salientpp.train``
trains the built-in typed model (``--hidden``, ``--layers``, ``--fanouts``, ``--epochs``, VIP
cache at the default replication) and reports the test accuracy at the best validation epoch.
``--global-batch-size`` (default 256) is the seeds of one step over all ranks: k ranks take
``--global-batch-size / k`` each, so that every rank count takes the same optimiser steps on
batches of the same size. ``--batch-size``, instead, gives each rank that many seeds, as
``salientpp train --batch-size`` does, and the global batch grows with the ranks. The PyG rows train PyG's own model in one process with the same sizes,
optimiser and epochs: :class:`~salientpp.bench.pyg_baseline.PyGHeteroModel`, what ``to_hetero``
makes of a homogeneous module (``Linear`` input projection, one ``SAGEConv`` or
``GATConv(add_self_loops=False)`` per layer, LeakyReLU and dropout between them, a ``Linear``
head; ``aggr="sum"`` over the relations), on the batches of PyG's ``NeighborLoader`` over a
``HeteroData`` of the whole graph (the bench's baseline graph) with the same fanouts for every
relation. They need pyg-lib or torch_sparse, and are skipped with a message without them.

    PYTHONPATH=. python experiments/typed_accuracy.py --out /tmp/typed-acc \\
        --json experiments/results/typed-accuracy/typed_accuracy.json

Prints a table (mean and standard deviation over the seeds) and the two differences the issue
bounds: each rank count against 1 rank, and PyG against 1 rank, in accuracy points.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from salientpp.bench.pyg_baseline import (PyGHeteroModel, num_neighbors, pyg_graph, pyg_seeds, seed_outputs,
                                          unavailable_reason)
from salientpp.data.format import save_dataset
from salientpp.data.synthetic import synthetic_dataset
from salientpp.errors import InputError
from salientpp.partition import load_partitioned
from salientpp.partition.partitioner import partition_dataset
from salientpp.sampling import fanout_table
from salientpp.train import TrainConfig, train


def partitioning_dir(out: Path, k: int, method: str) -> Path:
    """Where the partitioning into ``k`` parts by ``method`` is kept: ``out/p{k}`` (METIS's, and the
    one part that every method makes alike), else ``out/p{k}-{method}``."""
    return out / (f"p{k}" if method == "metis" or k == 1 else f"p{k}-{method}")


def prepare(out: Path, spec: str, parts: list[int], method: str) -> None:
    """The dataset of ``spec`` partitioned by ``method`` into each of ``parts`` under ``out``
    (kept if there)."""
    missing = [k for k in parts if not partitioning_dir(out, k, method).exists()]
    if not missing:
        return
    dataset = synthetic_dataset(spec)
    if not (out / "data").exists():
        save_dataset(dataset, out / "data")
    for k in missing:
        partition_dataset(dataset, partitioning_dir(out, k, method), k, method)


def rank_batch(args, ranks: int) -> int:
    """The seeds per batch of each of ``ranks`` ranks (PyG's process: ``ranks = 1``): ``--batch-size``,
    else its share of ``--global-batch-size`` (which the ranks must divide)."""
    if args.batch_size is not None:
        return args.batch_size
    if args.global_batch_size % ranks:
        raise InputError(f"--global-batch-size {args.global_batch_size} must be divisible by every --parts count, "
                         f"not by {ranks}; pass e.g. 256, or --batch-size for the seeds of each rank")
    return args.global_batch_size // ranks


def salientpp_run(part_dir: Path, model: str, seed: int, args, ranks: int) -> dict:
    fanouts = tuple(args.fanouts)
    result = train(TrainConfig(str(part_dir), model=model, hidden=args.hidden, layers=len(fanouts), fanouts=fanouts,
                               eval_fanouts=fanouts, batch_size=rank_batch(args, ranks), epochs=args.epochs, lr=args.lr,
                               dropout=args.dropout, seed=seed, eval_every=args.eval_every, progress=False))
    return {"test": result.test_at_best, "valid": result.best_valid, "best_epoch": result.best_epoch,
            "epoch_s": statistics.median(h["epoch_s"] for h in result.history)}


def pyg_run(part_dir: Path, model: str, seed: int, args) -> dict:
    """PyG's model trained in one process on PyG's ``NeighborLoader`` batches of the whole graph
    (see the module docstring); the test accuracy at the best validation epoch."""
    from torch_geometric.loader import NeighborLoader

    data = load_partitioned(part_dir)
    graph, target = pyg_graph(data), data.schema.target
    table = fanout_table(tuple(args.fanouts), data.schema, layers=len(args.fanouts))

    def loader(split: str, shuffle: bool) -> NeighborLoader:
        with warnings.catch_warnings():  # PyG's notice for sampling with torch_sparse
            warnings.simplefilter("ignore", UserWarning)
            return NeighborLoader(graph, num_neighbors=num_neighbors(table.tolist(), data),
                                  input_nodes=pyg_seeds(data, 0, split), batch_size=rank_batch(args, 1), shuffle=shuffle,
                                  is_sorted=True)

    torch.manual_seed(seed)
    net = PyGHeteroModel(model, graph, args.hidden, data.num_classes, len(args.fanouts), target, args.dropout)
    train_loader = loader("train", shuffle=True)
    evaluate = {split: loader(split, shuffle=False) for split in ("valid", "test")}
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
    best, test_at_best, best_epoch, seconds = -1.0, -1.0, -1, []
    for epoch in range(args.epochs):
        net.train()
        start = time.perf_counter()
        for batch in train_loader:
            out, y = seed_outputs(net, batch, len(args.fanouts), target)
            loss = F.cross_entropy(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        seconds.append(time.perf_counter() - start)
        if (epoch + 1) % args.eval_every and epoch != args.epochs - 1:  # as the trainer's --eval-every
            continue
        net.eval()
        scores = {}
        with torch.no_grad():
            for split, batches in evaluate.items():
                correct = count = 0
                for batch in batches:
                    out, y = seed_outputs(net, batch, len(args.fanouts), target)
                    correct += int((out.argmax(1) == y).sum())
                    count += y.shape[0]
                scores[split] = correct / max(count, 1)
        if scores["valid"] > best:
            best, test_at_best, best_epoch = scores["valid"], scores["test"], epoch
    return {"test": test_at_best, "valid": best, "best_epoch": best_epoch, "epoch_s": statistics.median(seconds)}


def summary(runs: list[dict]) -> dict:
    tests = [r["test"] for r in runs]
    return {"mean": statistics.mean(tests), "std": statistics.stdev(tests) if len(tests) > 1 else 0.0,
            "epoch_s": statistics.median(r["epoch_s"] for r in runs), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="working directory (the dataset and its partitionings are kept)")
    p.add_argument("--spec", default="igbh,num_nodes=6000,train_fraction=0.5,valid_fraction=0.1,test_fraction=0.4")
    p.add_argument("--models", default="rsage,rgat")
    p.add_argument("--parts", default="1,2,4")
    p.add_argument("--partition-method", default="metis", choices=("metis", "random"),
                   help="how the ranks' partitions are made (random: no partition follows a community)")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--fanouts", default="10,10")
    p.add_argument("--hidden", type=int, default=64)
    batch = p.add_mutually_exclusive_group()
    batch.add_argument("--global-batch-size", type=int, default=256,
                       help="seeds of one step over all ranks: k ranks take it / k each, PyG's one process all")
    batch.add_argument("--batch-size", type=int,
                       help="seeds per batch of each rank, as `salientpp train --batch-size` (and of PyG's process)")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--eval-every", type=int, default=1, help="evaluate every N epochs and after the last")
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--systems", default="salientpp,pyg", help="which rows to train: salientpp's, PyG's or both")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    args.fanouts = [int(f) for f in args.fanouts.split(",")]
    models, seeds = args.models.split(","), [int(s) for s in args.seeds.split(",")]
    systems = args.systems.split(",")
    if "pyg" in systems and unavailable_reason() is not None:
        print(f"typed_accuracy: PyG rows skipped: {unavailable_reason()}", file=sys.stderr)
        systems.remove("pyg")
    parts = [int(k) for k in args.parts.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        for k in parts:
            rank_batch(args, k)
        prepare(out, f"{args.spec}", sorted(set(parts) | {1}), args.partition_method)
        rows = []
        for model in models:
            for k in parts if "salientpp" in systems else ():
                where = partitioning_dir(out, k, args.partition_method)
                runs = [salientpp_run(where, model, seed, args, k) for seed in seeds]
                rows.append({"model": model, "system": f"salientpp, {k} rank{'s' * (k > 1)}", "ranks": k,
                             **summary(runs)})
                print(rows[-1]["system"], model, f"{rows[-1]['mean']:.4f}", flush=True)
            if "pyg" in systems:
                runs = [pyg_run(partitioning_dir(out, 1, args.partition_method), model, seed, args) for seed in seeds]
                rows.append({"model": model, "system": "PyG NeighborLoader + to_hetero, 1 process", "ranks": 0, **summary(runs)})
                print(rows[-1]["system"], model, f"{rows[-1]['mean']:.4f}", flush=True)
    except InputError as exc:
        print(f"typed_accuracy: {exc}", file=sys.stderr)
        return 2
    batch = (f"batch {args.batch_size} per rank" if args.batch_size is not None
             else f"global batch {args.global_batch_size} (split among the ranks)")
    print(f"\n{args.spec}: hidden {args.hidden}, fanouts {args.fanouts}, {batch}, "
          f"{args.epochs} epochs, lr {args.lr}, dropout {args.dropout}, seeds {seeds}")
    print("| model | system | test accuracy (mean ± std) | vs 1 rank (points) | median epoch s |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        one = next((r for r in rows if r["model"] == row["model"] and r["ranks"] == 1), None)
        against = "-" if one is None else f"{100 * (row['mean'] - one['mean']):+.2f}"
        print(f"| {row['model']} | {row['system']} | {row['mean']:.4f} ± {row['std']:.4f} | {against} | "
              f"{row['epoch_s']:.2f} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"spec": args.spec, "options": {k: v for k, v in vars(args).items()
                                                                              if k != "json"}, "rows": rows},
                                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
