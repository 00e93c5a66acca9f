"""Test accuracy of R-SAGE and R-GAT on the IGBH-shaped preset: salientpp on 1, 2 and 4 ranks
against a single-process PyG ``to_hetero`` model of the same size (issue #52).

For each ``--models`` entry, each ``--parts`` count and each ``--seeds`` seed, ``salientpp.train``
trains the built-in typed model (``--hidden``, ``--layers``, ``--fanouts``, ``--batch-size`` per
rank, ``--epochs``, VIP cache at the default replication) and reports the test accuracy at the best
validation epoch. The PyG rows train PyG's own model in one process with the same sizes,
optimiser and epochs: ``to_hetero`` of a homogeneous module (``Linear`` input projection, one
``SAGEConv`` or ``GATConv(add_self_loops=False)`` per layer, LeakyReLU and dropout between them,
a ``Linear`` head; ``aggr="sum"`` over the relations), called as ``model(x_dict,
edge_index_dict)`` on ``HeteroData`` batches. PyG's ``NeighborLoader`` cannot sample here (it
needs pyg-lib or torch_sparse, neither of which installs on this machine), so the PyG model gets
its ``HeteroData`` batches from salientpp's sampler in one process (``Batch.to_pyg()``: PyG's
per-relation fanout semantics, every sampled edge of every hop in ``edge_index_dict``).

    PYTHONPATH=. python experiments/typed_accuracy.py --out /tmp/typed-acc \\
        --json experiments/results/typed-accuracy/typed_accuracy.json

Prints a table (mean and standard deviation over the seeds) and the two differences the issue
bounds: each rank count against 1 rank, and 1 rank against PyG, in accuracy points.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import salientpp
from salientpp.data.format import save_dataset
from salientpp.data.synthetic import synthetic_dataset
from salientpp.errors import InputError
from salientpp.partition.partitioner import partition_dataset
from salientpp.train import TrainConfig, train


def prepare(out: Path, spec: str, parts: list[int]) -> None:
    """The dataset of ``spec`` partitioned into each of ``parts`` under ``out`` (kept if there)."""
    missing = [k for k in parts if not (out / f"p{k}").exists()]
    if not missing:
        return
    dataset = synthetic_dataset(spec)
    if not (out / "data").exists():
        save_dataset(dataset, out / "data")
    for k in missing:
        partition_dataset(dataset, out / f"p{k}", k)


def salientpp_run(part_dir: Path, model: str, seed: int, args) -> dict:
    fanouts = tuple(args.fanouts)
    result = train(TrainConfig(str(part_dir), model=model, hidden=args.hidden, layers=len(fanouts), fanouts=fanouts,
                               eval_fanouts=fanouts, batch_size=args.batch_size, epochs=args.epochs, lr=args.lr,
                               dropout=args.dropout, seed=seed, eval_every=args.eval_every, progress=False))
    return {"test": result.test_at_best, "valid": result.best_valid, "best_epoch": result.best_epoch,
            "epoch_s": statistics.median(h["epoch_s"] for h in result.history)}


class _Homogeneous(nn.Module):
    """The homogeneous module ``to_hetero`` makes the PyG model of: a projection, ``layers``
    convolutions hidden -> hidden with LeakyReLU and dropout between them, a linear head."""

    def __init__(self, model: str, hidden: int, out_dim: int, layers: int, dropout: float, heads: int = 4):
        from torch_geometric.nn import GATConv, Linear, SAGEConv

        super().__init__()
        self.project = Linear(-1, hidden)
        make = ((lambda: SAGEConv((-1, -1), hidden)) if model == "rsage" else
                (lambda: GATConv((-1, -1), hidden // heads, heads, add_self_loops=False)))
        self.convs = nn.ModuleList(make() for _ in range(layers))
        self.head = nn.Linear(hidden, out_dim)
        self.dropout = dropout

    def forward(self, x, edge_index):
        h = self.project(x)
        for i, conv in enumerate(self.convs):
            h = conv(h, edge_index)
            if i < len(self.convs) - 1:
                h = F.dropout(F.leaky_relu(h), self.dropout, self.training)
        return self.head(h)


def pyg_run(part_dir: Path, model: str, seed: int, args) -> dict:
    """PyG's ``to_hetero`` model trained in one process on the batches of the one-partition
    directory (see the module docstring); the test accuracy at the best validation epoch."""
    from torch_geometric.nn import to_hetero

    ctx = salientpp.init_distributed()
    try:
        graph = salientpp.DistGraph(str(part_dir), ctx)
        fanouts = list(args.fanouts)
        train_loader = salientpp.DistNeighborLoader(graph, "train", fanouts, args.batch_size, seed=seed)
        evaluate = {split: salientpp.DistNeighborLoader(graph, split, fanouts, args.batch_size, shuffle=False,
                                                        seed=seed) for split in ("valid", "test")}
        first = next(iter(train_loader)).to_pyg()
        torch.manual_seed(seed)
        net = to_hetero(_Homogeneous(model, args.hidden, graph.num_outputs, len(fanouts), args.dropout),
                        first.metadata(), aggr="sum")
        with torch.no_grad():  # the lazy input sizes
            net(first.x_dict, first.edge_index_dict)
        optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
        target = graph.schema.target
        best, test_at_best, best_epoch, seconds = -1.0, -1.0, -1, []
        for epoch in range(args.epochs):
            net.train()
            train_loader.set_epoch(epoch)
            start = time.perf_counter()
            for batch in train_loader:
                data = batch.to_pyg()
                out = net(data.x_dict, data.edge_index_dict)[target][:batch.batch_size]
                loss = F.cross_entropy(out, batch.y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            seconds.append(time.perf_counter() - start)
            if (epoch + 1) % args.eval_every and epoch != args.epochs - 1:  # as the trainer's --eval-every
                continue
            net.eval()
            scores = {}
            with torch.no_grad():
                for split, loader in evaluate.items():
                    correct = count = 0
                    for batch in loader:
                        data = batch.to_pyg()
                        out = net(data.x_dict, data.edge_index_dict)[target][:batch.batch_size]
                        correct += int((out.argmax(1) == batch.y).sum())
                        count += batch.batch_size
                    scores[split] = correct / max(count, 1)
            if scores["valid"] > best:
                best, test_at_best, best_epoch = scores["valid"], scores["test"], epoch
        return {"test": test_at_best, "valid": best, "best_epoch": best_epoch, "epoch_s": statistics.median(seconds)}
    finally:
        salientpp.shutdown_distributed(ctx)


def summary(runs: list[dict]) -> dict:
    tests = [r["test"] for r in runs]
    return {"mean": statistics.mean(tests), "std": statistics.stdev(tests) if len(tests) > 1 else 0.0,
            "epoch_s": statistics.median(r["epoch_s"] for r in runs), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="working directory (the dataset and its partitionings are kept)")
    p.add_argument("--spec", default="igbh,num_nodes=10000,train_fraction=0.1,valid_fraction=0.05,test_fraction=0.5")
    p.add_argument("--models", default="rsage,rgat")
    p.add_argument("--parts", default="1,2,4")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--fanouts", default="10,10")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--eval-every", type=int, default=5, help="evaluate every N epochs and after the last")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--no-pyg", action="store_true", help="skip the PyG rows")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    args.fanouts = [int(f) for f in args.fanouts.split(",")]
    models, seeds = args.models.split(","), [int(s) for s in args.seeds.split(",")]
    parts = [int(k) for k in args.parts.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        prepare(out, f"{args.spec}", sorted(set(parts) | {1}))
        rows = []
        for model in models:
            for k in parts:
                runs = [salientpp_run(out / f"p{k}", model, seed, args) for seed in seeds]
                rows.append({"model": model, "system": f"salientpp, {k} rank{'s' * (k > 1)}", "ranks": k,
                             **summary(runs)})
                print(rows[-1]["system"], model, f"{rows[-1]['mean']:.4f}", flush=True)
            if not args.no_pyg:
                runs = [pyg_run(out / "p1", model, seed, args) for seed in seeds]
                rows.append({"model": model, "system": "PyG to_hetero, 1 process", "ranks": 0, **summary(runs)})
                print(rows[-1]["system"], model, f"{rows[-1]['mean']:.4f}", flush=True)
    except InputError as exc:
        print(f"typed_accuracy: {exc}", file=sys.stderr)
        return 2
    print(f"\n{args.spec}: hidden {args.hidden}, fanouts {args.fanouts}, batch {args.batch_size} per rank, "
          f"{args.epochs} epochs, lr {args.lr}, dropout {args.dropout}, seeds {seeds}")
    print("| model | system | test accuracy (mean ± std) | vs 1 rank (points) | median epoch s |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        one = next(r for r in rows if r["model"] == row["model"] and r["ranks"] == 1)
        print(f"| {row['model']} | {row['system']} | {row['mean']:.4f} ± {row['std']:.4f} | "
              f"{100 * (row['mean'] - one['mean']):+.2f} | {row['epoch_s']:.2f} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"spec": args.spec, "options": {k: v for k, v in vars(args).items()
                                                                              if k != "json"}, "rows": rows},
                                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
