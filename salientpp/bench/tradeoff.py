"""Test accuracy against sampled edges per batch: LADIES against node-wise sampling on one graph.

Every configuration trains the same model (``salientpp train`` defaults unless given) on the same
partitioned graph with exact layer-wise evaluation, so only the training sampler differs. Edges
and nodes per batch are the means over the first epoch's batches of partition 0 (the loader the
trainer runs, ``num_batches`` as in lockstep). Accuracy is the test accuracy at the best
validation epoch, per training seed.
"""
from __future__ import annotations

import argparse
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..cache.workload import Workload
from ..sampling import parse_fanouts
from ..errors import InputError, check_int
from ..io import check_output_dir, check_output_paths
from .results import write_outputs
from ..parsing import number_list
from ..plots import check_plot_path, require_pyplot
from ..partition import load_partitioned
from ..sampling import LADIES, NODEWISE, NeighborLoader, SamplerKind, make_sampler
from ..train import TrainConfig, train

# The kind its --json file declares (salientpp.bench.results) and its line in `salientpp bench --help`.
KIND = "salientpp-bench-tradeoff"
SUMMARY = "test accuracy against sampled edges per batch, LADIES against node-wise sampling"

_DEFAULTS = TrainConfig.__dataclass_fields__


@dataclass
class TradeoffRow:
    """One sampler configuration: its cost per batch and the accuracy it trains to."""

    sampler: str
    fanouts: list[int]
    edges_per_batch: float
    nodes_per_batch: float
    test_accuracy: list[float]
    epoch_s: float

    @property
    def mean_accuracy(self) -> float:
        return statistics.fmean(self.test_accuracy)


def parse_configurations(text: str, kind: SamplerKind, option: str) -> list[tuple[int, ...]]:
    """``"5,5,5:10,10,5"`` -> ``[(5, 5, 5), (10, 10, 5)]``, each checked for ``kind``."""
    items = [item for item in text.split(":")] if text.strip() else []
    if any(not item.strip() for item in items):
        raise InputError(f"{option} has an empty configuration; separate fanout lists with ':' as in 5,5,5:10,10,5")
    return [parse_fanouts(item, kind, option) for item in items]


def sampled_per_batch(data, kind: SamplerKind, fanouts: tuple[int, ...], batch_size: int, seed: int
                      ) -> tuple[float, float]:
    """Mean sampled edges and nodes per batch over one epoch of partition 0's training batches."""
    workload = Workload(fanouts, batch_size, sampler=kind)
    seeds = torch.from_numpy(np.array(data.part(0).train_idx, dtype=np.int64))  # a copy: memory maps are read-only
    loader = NeighborLoader(make_sampler(data.rowptr, data.col, fanouts, kind), seeds, batch_size, seed=seed,
                            num_batches=workload.lockstep_steps(data))
    edges, nodes = zip(*[(b.num_sampled_edges, b.num_nodes) for b in loader if b.batch_size])
    return statistics.fmean(edges), statistics.fmean(nodes)


def run_tradeoff(part_dir: str, configurations: list[tuple[SamplerKind, tuple[int, ...]]], epochs: int,
                 seeds: list[int], options: dict) -> list[TradeoffRow]:
    data = load_partitioned(part_dir)
    data.schema.require_homogeneous("bench tradeoff", part_dir)
    rows = []
    bar = tqdm(total=len(configurations) * len(seeds), desc="training", unit="run")
    for kind, fanouts in configurations:
        edges, nodes = sampled_per_batch(data, kind, fanouts, options["batch_size"], seeds[0])
        accuracy, seconds = [], []
        for seed in seeds:
            result = train(TrainConfig(part_dir, epochs=epochs, sampler=kind.value, fanouts=fanouts,
                                       layers=len(fanouts), inference="layerwise", eval_every=1, seed=seed,
                                       progress=False, **options))
            accuracy.append(result.test_at_best)
            seconds += [line["epoch_s"] for line in result.history[1:]] or [result.history[0]["epoch_s"]]
            bar.update(1)
        rows.append(TradeoffRow(kind.value, list(fanouts), edges, nodes, accuracy, statistics.median(seconds)))
        tqdm.write(format_row(rows[-1]))
    bar.close()
    return rows


def format_row(row: TradeoffRow) -> str:
    spread = max(row.test_accuracy) - min(row.test_accuracy)
    return (f"| {row.sampler} | {','.join(map(str, row.fanouts))} | {row.edges_per_batch:,.0f} | "
            f"{row.nodes_per_batch:,.0f} | {row.mean_accuracy:.4f} ± {spread / 2:.4f} | {row.epoch_s:.2f} |")


def format_table(rows: list[TradeoffRow]) -> str:
    header = ("| sampler | fanouts | edges/batch | nodes/batch | test accuracy (mean ± half range) | epoch s |\n"
              "|---|---|---:|---:|---:|---:|")
    return "\n".join([header, *map(format_row, rows)])


def plot_tradeoff(rows: list[TradeoffRow], path: str) -> None:
    plt = require_pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for sampler in dict.fromkeys(row.sampler for row in rows):
        mine = sorted((r for r in rows if r.sampler == sampler), key=lambda r: r.edges_per_batch)
        ax.plot([r.edges_per_batch for r in mine], [r.mean_accuracy for r in mine], marker="o", label=sampler)
        for r in mine:
            ax.annotate(",".join(map(str, r.fanouts)), (r.edges_per_batch, r.mean_accuracy), fontsize=7,
                        textcoords="offset points", xytext=(3, 3))
    ax.set_xscale("log")
    ax.set_xlabel("sampled edges per batch")
    ax.set_ylabel("test accuracy")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format=Path(path).suffix.lstrip("."))
    plt.close(fig)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("part_dir", metavar="PART_DIR", help="a partitioned directory")
    p.add_argument("--nodewise", default="5,5,5:10,10,5:15,10,5", metavar="F:F:...",
                   help="node-wise fanout lists, separated by ':' (default 5,5,5:10,10,5:15,10,5)")
    p.add_argument("--ladies", default="256,256,256:1024,1024,1024:4096,4096,4096", metavar="S:S:...",
                   help="LADIES nodes per layer, lists separated by ':' (default 256,...:1024,...:4096,...)")
    p.add_argument("--epochs", type=int, default=10, help="epochs per training (default 10)")
    p.add_argument("--seeds", default="0", help="training seeds, comma-separated (default 0)")
    p.add_argument("--batch-size", type=int, default=_DEFAULTS["batch_size"].default)
    p.add_argument("--hidden", type=int, default=_DEFAULTS["hidden"].default)
    p.add_argument("--lr", type=float, default=_DEFAULTS["lr"].default)
    p.add_argument("--json", help="also write the results to this JSON file (must not exist)")
    p.add_argument("--plot", metavar="OUT.png", help="plot test accuracy against edges per batch (must not exist)")


def main(args: argparse.Namespace) -> int:

    configurations = [(NODEWISE, f) for f in parse_configurations(args.nodewise, NODEWISE,
                                                                                "--nodewise")]
    configurations += [(LADIES, f) for f in parse_configurations(args.ladies, LADIES,
                                                                               "--ladies")]
    if not configurations:
        raise InputError("no configuration to run; give --nodewise or --ladies fanout lists")
    seeds = list(number_list(args.seeds, int, "--seeds", "0,1"))
    if not seeds:
        raise InputError("--seeds is empty; pass at least one training seed, e.g. --seeds 0")
    check_int(args.epochs, "--epochs")
    check_output_paths({"--json": args.json, "--plot": args.plot})
    if args.json is not None:
        check_output_dir(args.json, "output file")
    if args.plot is not None:
        check_plot_path(args.plot)
    # No cache: it changes what is fetched, not what is trained on.
    options = {"batch_size": args.batch_size, "hidden": args.hidden, "lr": args.lr, "policy": "none"}
    for kind, fanouts in configurations:  # every option checked before the first training
        TrainConfig(args.part_dir, epochs=args.epochs, sampler=kind.value, fanouts=fanouts, layers=len(fanouts),
                    inference="layerwise", **options).validate()
    rows = run_tradeoff(args.part_dir, configurations, args.epochs, seeds, options)
    print(format_table(rows))
    write_outputs(args, KIND, {"part_dir": args.part_dir, "epochs": args.epochs, "seeds": seeds, **options,
                               "rows": [asdict(r) for r in rows]}, args.json, args.plot,
                  lambda path: plot_tradeoff(rows, path))
    return 0
