"""Full-graph training per dependency mode: epoch time, bytes exchanged, redundant work, prediction.

Every rank builds one full-graph trainer per mode of ``--dependencies`` (and with
``--candidates`` one per further schedule ``hybrid`` chooses from; one process group, one rank per
partition, one calibration of the cost model) and runs ``--epochs`` epochs of each without
evaluation, interleaved: epoch e of every one, the order rotating, so all share the machine's
conditions side by side. Reported per row: the median epoch time over the epochs after the
first, the schedule trained (``hybrid``'s choice, after its probe), the cost model's predicted epoch
time, the bytes all ranks received per epoch (rows forward, gradients back), and the remote
vertex-layers recomputed (work their owners also do). The last column is each time over the
faster pure mode. The JSON adds each trainer's start-up seconds (the first one's include the
calibration; ``hybrid``'s its probe), the probe's seconds per schedule, and the calibration.

``--compare-minibatch N`` also trains N full-graph epochs (the last mode given) and
``--minibatch-epochs`` minibatch ones (``--fanouts``, ``--batch-size``), evaluating after every
epoch, and reports the epochs and training seconds each needs to reach the validation
accuracy both reach (the smaller of their best, less 0.01).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from typing import Any

from ..sampling import parse_fanouts
from ..errors import InputError
from ..fullgraph import Dependencies, check_dependencies
from ..fullgraph.schedule import candidate_schedules
from ..io import check_writable_file
from .results import write_outputs
from ..distributed import init_distributed, launch, shutdown_distributed
from ..plots import require_pyplot
from ..train import TrainConfig, train
from ..train.fullgraph import (CACHED_FRACTION, EXCHANGED_BYTES, FULL_GRAPH_KEY, PLAN, PREDICTED_S, PROBED_S,
                               PROBE_BAND, PROBE_PASSES, REDUNDANT, FullGraphTrainer,
                               probe_times)
from ..host import local_world_size
from ..train.setup import RankSetup, resolve_run
from ..train.state import VALID_METRIC

# The kind its --json file declares (salientpp.bench.results) and its line in `salientpp bench --help`.
KIND = "salientpp-bench-fullgraph"
SUMMARY = "full-graph training per dependency mode (cache, communicate, hybrid): time, bytes, prediction"

# Validation accuracy below the smaller best of the two runs that counts as reached.
TARGET_SLACK = 0.01


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("part_dir", metavar="PART_DIR", help="partitioned directory")
    p.add_argument("--dependencies", default=",".join(d.value for d in Dependencies),
                   help="modes to run, comma-separated (default cache,communicate,hybrid)")
    p.add_argument("--candidates", action="store_true",
                   help="also time every schedule hybrid chooses from (cache-l: hidden level l cached whole)")
    p.add_argument("--epochs", type=int, default=5, help="epochs per mode; the first is warm-up (default 5)")
    p.add_argument("--model", default="sage")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--compare-minibatch", type=int, default=0, metavar="N",
                   help="also train N full-graph epochs and --minibatch-epochs minibatch ones, evaluating after "
                        "each (default 0: skip)")
    p.add_argument("--minibatch-epochs", type=int, default=None, metavar="M",
                   help="minibatch epochs of --compare-minibatch (default N)")
    p.add_argument("--fanouts", default="15,10,5", help="minibatch fanouts of --compare-minibatch")
    p.add_argument("--batch-size", type=int, default=1024, help="minibatch size of --compare-minibatch")
    p.add_argument("--json", dest="json_path", metavar="FILE", help="write the results as JSON")
    p.add_argument("--plot", metavar="PNG", help="draw measured and predicted epoch time per mode")


def _config(args: argparse.Namespace, **options) -> TrainConfig:
    return TrainConfig(args.part_dir, model=args.model, hidden=args.hidden, layers=args.layers, lr=args.lr,
                       weight_decay=args.weight_decay, progress=False, **options)


def _side_by_side(args: argparse.Namespace, modes: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One rank of the comparison: a trainer per mode (and with ``--candidates`` per further
    candidate schedule) in one process group, their epochs interleaved (the order rotates every
    epoch), so every one runs under the same conditions. Returns the rows and the calibrated
    :class:`~salientpp.fullgraph.CostModel` as a dict."""
    ctx = init_distributed("cpu", timeout_s=600.0)
    try:
        trainers: dict[str, FullGraphTrainer] = {}
        startup: dict[str, float] = {}

        def build(name: str, config: TrainConfig, **kwargs) -> None:
            start = time.perf_counter()
            trainers[name] = FullGraphTrainer(RankSetup.open(resolve_run(config, local_world_size()), ctx), **kwargs)
            startup[name] = time.perf_counter() - start

        for mode in modes:  # one calibration for all, so that the predictions compare
            cost = next(iter(trainers.values())).cost if trainers else None
            config = _config(args, mode="full-graph", dependencies=mode, epochs=args.epochs, eval_every=0)
            build(mode, config, cost=cost)
        if args.candidates:
            first = next(iter(trainers.values()))
            for name in candidate_schedules(args.layers):
                if name not in trainers:
                    build(name, first.config, cost=first.cost, schedule=name)
        modes = list(trainers)
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        last: dict[str, dict[str, Any]] = {}
        for epoch in range(args.epochs):
            for mode in modes[epoch % len(modes):] + modes[:epoch % len(modes)]:
                record = trainers[mode].train_epoch(epoch)
                times[mode].append(record["epoch_s"])
                last[mode] = record[FULL_GRAPH_KEY]
    finally:
        shutdown_distributed(ctx)
    rows = [{"dependencies": mode, "schedule": last[mode][PLAN],
             "epoch_s": statistics.median(times[mode][1:] or times[mode]), "epoch_times": times[mode],
             "predicted_s": last[mode][PREDICTED_S], "probed_s": last[mode][PROBED_S], "startup_s": startup[mode],
             "exchanged_bytes": last[mode][EXCHANGED_BYTES], "redundant_vertex_layers": last[mode][REDUNDANT],
             "cached_fraction": last[mode][CACHED_FRACTION]}
            for mode in modes]
    return rows, dataclasses.asdict(trainers[modes[0]].cost)


def _to_target(history: list[dict[str, Any]], target: float) -> tuple[int, float]:
    """(epochs, training seconds) until the validation metric first reaches ``target``."""
    seconds = 0.0
    for i, record in enumerate(history):
        seconds += record["epoch_s"]
        if record.get(VALID_METRIC, float("-inf")) >= target:
            return i + 1, seconds
    return -1, seconds


def compare_minibatch(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    runs = {"full-graph": _config(args, mode="full-graph", dependencies=mode, epochs=args.compare_minibatch),
            "minibatch": _config(args, fanouts=parse_fanouts(args.fanouts), batch_size=args.batch_size,
                                 epochs=args.minibatch_epochs or args.compare_minibatch)}
    histories = {name: train(config).history for name, config in runs.items()}
    best = {name: max(h.get(VALID_METRIC, float("-inf")) for h in history) for name, history in histories.items()}
    target = min(best.values()) - TARGET_SLACK
    out = {"target_valid": target, "runs": {}}
    for name, history in histories.items():
        epochs, seconds = _to_target(history, target)
        out["runs"][name] = {"best_valid": best[name], "epochs_to_target": epochs, "seconds_to_target": seconds,
                             "epoch_s": statistics.median(h["epoch_s"] for h in history)}
    return out


def _table(rows: list[dict[str, Any]]) -> str:
    pure = [r["epoch_s"] for r in rows if r["dependencies"] in (Dependencies.CACHE.value, Dependencies.COMMUNICATE.value)]
    best_pure = min(pure) if pure else None
    lines = ["| dependencies | schedule | remote rows recomputed | epoch s | predicted s | MB exchanged / epoch "
             "| redundant vertex-layers | / faster pure |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ratio = f"{r['epoch_s'] / best_pure:.2f}" if best_pure else "-"
        lines.append(f"| {r['dependencies']} | {r['schedule']} | {r['cached_fraction']:.0%} | {r['epoch_s']:.3f} | {r['predicted_s']:.3f} | "
                     f"{r['exchanged_bytes'] / 1e6:.2f} | {r['redundant_vertex_layers']:,.0f} | {ratio} |")
    return "\n".join(lines)


def _plot(rows: list[dict[str, Any]], path: str, title: str) -> None:
    plt = require_pyplot()
    names = [r["dependencies"] + ("" if r["schedule"] == r["dependencies"] else f"\n({r['schedule']})") for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(5.0, 0.8 * len(rows)), 3.4))
    ax.bar([i - 0.2 for i in x], [r["epoch_s"] for r in rows], 0.4, label="measured")
    ax.bar([i + 0.2 for i in x], [r["predicted_s"] for r in rows], 0.4, label="predicted")
    ax.set_xticks(list(x), names, rotation=30 if len(rows) > 4 else 0, fontsize=8)
    ax.set_ylabel("seconds per epoch")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


def main(args: argparse.Namespace) -> int:
    modes = [check_dependencies(m.strip()).value for m in str(args.dependencies).split(",") if m.strip()]
    if not modes:
        raise InputError("--dependencies names no mode; give some of cache,communicate,hybrid")
    if args.compare_minibatch < 0 or (args.minibatch_epochs is not None and args.minibatch_epochs < 1):
        raise InputError("--compare-minibatch must be at least 0 and --minibatch-epochs at least 1, got "
                         f"{args.compare_minibatch} and {args.minibatch_epochs}")
    for path, option in ((args.json_path, "--json"), (args.plot, "--plot")):
        if path is not None:
            check_writable_file(path, option)
    # Every option checked, and the largest schedule's memory, before any rank starts.
    run = resolve_run(_config(args, mode="full-graph", dependencies=Dependencies.CACHE.value, epochs=args.epochs),
                      memory_check=True)
    rows, cost = launch(_side_by_side, (args, modes), run.local_ranks)[0]
    print(f"full-graph epochs of {args.part_dir}, {args.model} {args.layers} layers hidden {args.hidden}, "
          f"median of epochs 2..{args.epochs}, modes interleaved:\n")
    print(_table(rows))
    for r in rows:
        if r["probed_s"]:
            print(f"\n{r['dependencies']} probed each schedule predicted within {PROBE_BAND:.0%} of the fastest (the "
                  f"fastest of {PROBE_PASSES} passes): {probe_times(r['probed_s'])}; it trains {r['schedule']} "
                  f"(start-up {r['startup_s']:.1f} s with the probe)")
    results: dict[str, Any] = {"part_dir": args.part_dir, "modes": rows, "calibration": cost}
    if args.compare_minibatch:
        comparison = compare_minibatch(args, modes[-1])
        results["minibatch_comparison"] = comparison
        print(f"\nto validation accuracy {comparison['target_valid']:.4f}:\n\n| training | epochs | seconds | "
              "epoch s | best valid |\n|---|---:|---:|---:|---:|")
        for name, r in comparison["runs"].items():
            epochs = r["epochs_to_target"] if r["epochs_to_target"] > 0 else "not reached"
            print(f"| {name} | {epochs} | {r['seconds_to_target']:.2f} | {r['epoch_s']:.3f} | {r['best_valid']:.4f} |")
    write_outputs(args, KIND, results, args.json_path, args.plot,
                  lambda path: _plot(rows, path, f"{args.part_dir}: {args.model}, {args.layers} layers, hidden "
                                                 f"{args.hidden}"))
    return 0
