"""SALIENT++'s end-to-end experiment on one machine: epoch time against the replication factor
per cache policy, on an emulated cluster network (``--network``, :mod:`salientpp.distributed.network`).

Rows, every one a `salientpp train` run of ``--epochs`` epochs without evaluation on the same
partitioned dataset, ranks, model and batches:

* ``full``: full replication, every rank holds every feature row (a cache of every remote row)
  and exchanges none, pipelined;
* ``partitioned``: partitioned features, no cache, the stages of each batch one after another;
* ``pipelined``: partitioned, no cache, ``--pipeline-depth`` batches in flight;
* ``cache``: each policy at each replication factor α > 0, pipelined (α = 0 is ``pipelined``).

Each row gives the median epoch over the epochs after the first (with ``--repeats``, the median
of the rounds' medians; every round runs every setting once, so that drift of a shared machine
hits all settings alike), the sampling, fetch and compute stages, the rows and bytes fetched per
epoch and the simulator's prediction of the rows for the same seeds, and the feature bytes a rank
holds (its own rows and its cached ones). A cache row also gives the oracle's rows: the fewest
rows any cache of its size fetches on these batches, a bound no policy can beat. The pipelined
uncached epoch is also given over the slowest stage of the unpipelined one. ``--plot`` draws the
epoch against α per policy, with full replication and no cache as horizontal lines, as SALIENT++'s
figure does.
"""
from __future__ import annotations

import argparse
import statistics
from typing import Any

from ..cache import PolicyContext, Workload, simulate
from ..cache.policies import get_policy
from ..cache.simulator import check_replication
from ..distributed.network import parse_network
from ..errors import InputError, check_int
from ..io import check_output_dir, check_output_paths
from .results import write_outputs
from ..parsing import flag_names, name_list, number_list
from ..partition import load_partitioned
from ..plots import check_plot_path, require_pyplot
from ..sampling import parse_fanouts
from ..train import TrainConfig, train
from .train import median_row

# The kind its --json file declares (salientpp.bench.results) and its line in `salientpp bench --help`.
KIND = "salientpp-bench-cluster"
SUMMARY = "SALIENT++'s experiment on an emulated cluster network: epoch time against alpha per policy"

FULL, PARTITIONED, PIPELINED, CACHE = "full", "partitioned", "pipelined", "cache"
DEFAULT_ALPHAS = "0,0.01,0.04,0.16,0.32"
DEFAULT_POLICIES = "vip,degree,halo,random"
# The policy that orders the owned rows of the full-replication plan (every remote row is
# cached whatever the policy; on a GPU it decides which owned rows live on the device).
FULL_POLICY = "degree"
# The simulator's policy that caches the rows the evaluated batches fetch most often.
ORACLE = "oracle"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("part_dir", metavar="PART_DIR", help="partitioned directory, e.g. the small preset in 4 parts")
    p.add_argument("--network", required=True, metavar="RATE[,LATENCY]",
                   help="the emulated link of every rank, in tc's units, e.g. 1gbit,50us (docs/cluster.md says how "
                        "to choose it for a GPU cluster's regime)")
    p.add_argument(*flag_names("--replication"), default=DEFAULT_ALPHAS,
                   help=f"replication factors (default {DEFAULT_ALPHAS}); 0 alone runs the three settings without a "
                        "cache, which is enough to choose the rate")
    p.add_argument("--policies", default=DEFAULT_POLICIES, help=f"cache policies (default {DEFAULT_POLICIES})")
    p.add_argument("--epochs", type=int, default=3, help="epochs per run; the first is warm-up (default 3)")
    p.add_argument("--repeats", type=int, default=1,
                   help="run every setting this many times, one round after another, and report the median of "
                        "their epochs (default 1)")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--pipeline-depth", type=int, default=4, help="batches in flight of the pipelined runs (default 4)")
    p.add_argument(*flag_names("--sampler-threads"), type=int, default=None,
                   help="sampler threads per rank (default: the thread budget's)")
    p.add_argument("--torch-threads", type=int, default=None,
                   help="torch intra-op threads per rank (default: the thread budget's)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--json", dest="json_path", default=None, help="write the results as JSON here (must not exist)")
    p.add_argument("--plot", default=None, metavar="OUT.png", help="draw epoch time against alpha here (matplotlib)")


def _config(args: argparse.Namespace, cache: str, alpha: float, depth: int) -> TrainConfig:
    fanouts = parse_fanouts(args.fanouts)
    return TrainConfig(args.part_dir, epochs=args.epochs, hidden=args.hidden, layers=len(fanouts), fanouts=fanouts,
                       batch_size=args.batch_size, policy=cache,
                       replication=None if cache == "none" else alpha, pipeline_depth=depth,
                       eval_every=0, sampler_threads=args.sampler_threads, torch_threads=args.torch_threads, device=args.device,
                       network=args.network, progress=False)


def _run(args: argparse.Namespace, setting: str, policy: str | None, alpha: float | None, depth: int,
         owned_bytes: int, row_bytes: int) -> dict[str, Any]:
    """One training run and its row."""
    result = train(_config(args, policy or "none", alpha or 0.0, depth))
    history = result.history
    cached = history[-1]["cache"]["cached_rows"]
    return {"setting": setting, "policy": policy, "alpha": alpha, "pipeline": depth > 1, "pipeline_depth": depth,
            **median_row(history),
            "rows_per_epoch": sum(h["comm"]["received"] for h in history) / len(history),
            "bytes_per_epoch": sum(h["comm"]["bytes_received"] for h in history) / len(history),
            "feature_bytes_per_rank": owned_bytes + cached * row_bytes}


def _median_of_rounds(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The row of a setting run in several rounds: the median of each timed quantity, the rest
    (which is the same in every round: the batches and the cache are) from the first, and every
    round's epoch."""
    timed = ("epoch_s", "sample_s", "fetch_s", "fetch_cpu_s", "compute_s", "compute_cpu_s")
    return {**runs[0], **{key: statistics.median(r[key] for r in runs) for key in timed},
            "epoch_s_rounds": [r["epoch_s"] for r in runs]}


def _table(rows: list[dict[str, Any]], full_s: float) -> str:
    lines = ["| setting | policy | alpha | pipeline | epoch s | / full | sampling s | fetch s | compute s | rows/epoch "
             "| predicted | oracle | MB/epoch | feature MB/rank |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        alpha = "-" if r["alpha"] is None else f"{r['alpha']:g}"
        predicted, oracle = ("-" if r[key] is None else f"{r[key]:,.0f}" for key in ("predicted_rows", "oracle_rows"))
        lines.append(f"| {r['setting']} | {r['policy'] or '-'} | {alpha} | {'depth ' + str(r['pipeline_depth']) if r['pipeline'] else 'off'} "
                     f"| {r['epoch_s']:.3f} | {r['epoch_s'] / full_s:.2f} | {r['sample_s']:.3f} | {r['fetch_s']:.3f} "
                     f"| {r['compute_s']:.3f} | {r['rows_per_epoch']:,.0f} | {predicted} | {oracle} | {r['bytes_per_epoch'] / 1e6:.1f} "
                     f"| {r['feature_bytes_per_rank'] / 1e6:.1f} |")
    return "\n".join(lines)


def plot_cluster(result: dict[str, Any], path: str) -> None:
    """Epoch time against alpha per policy (alpha 0: the pipelined uncached run), with full
    replication and the uncached runs as horizontal lines."""
    plt = require_pyplot()
    rows = result["rows"]
    one = {r["setting"]: r for r in rows if r["setting"] != CACHE}
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for policy in dict.fromkeys(r["policy"] for r in rows if r["setting"] == CACHE):
        mine = sorted((r for r in rows if r["setting"] == CACHE and r["policy"] == policy), key=lambda r: r["alpha"])
        xs = [0.0] + [r["alpha"] for r in mine]
        ax.plot(xs, [one[PIPELINED]["epoch_s"]] + [r["epoch_s"] for r in mine], marker="o", label=policy)
    for setting, style, label in ((FULL, "-", "full replication"), (PIPELINED, "--", "pipelined, no cache"),
                                  (PARTITIONED, ":", "no pipeline, no cache")):
        ax.axhline(one[setting]["epoch_s"], color="grey", linestyle=style, label=label)
    ax.set_xscale("symlog", linthresh=0.01)
    alphas = [r["alpha"] for r in rows if r["setting"] == CACHE]
    ax.set_xlim(0, 1.5 * max(alphas, default=1.0))
    ax.set_xlabel("replication factor α")
    ax.set_ylabel("seconds per epoch")
    ax.set_title(f"{result['part_dir']}: {result['num_parts']} ranks, network {result['network']}")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(args: argparse.Namespace) -> int:
    network = parse_network(args.network)
    check_int(args.epochs, "--epochs")
    check_int(args.repeats, "--repeats")
    check_int(args.pipeline_depth, "--pipeline-depth")
    # α = 0 is run anyway (the rows without a cache); any other α is checked below
    alphas = [a for a in number_list(args.replication, float, "--replication", DEFAULT_ALPHAS) if a != 0]
    policies = name_list(args.policies, "--policies", DEFAULT_POLICIES)
    for policy in policies:
        get_policy(policy)
    check_output_paths({"--json": args.json_path, "--plot": args.plot})
    if args.json_path is not None:
        check_output_dir(args.json_path, "output file")
    if args.plot is not None:
        check_plot_path(args.plot)
    _config(args, "none", 0.0, args.pipeline_depth).validate()
    data = load_partitioned(args.part_dir)
    data.schema.require_homogeneous("bench cluster", args.part_dir)
    if data.num_parts < 2:
        raise InputError(f"{args.part_dir} has one partition, so there is no network to emulate; partition it "
                         "into several parts")
    replication = check_replication([0.0, *alphas], data.num_parts)  # α = 0: the runs without a cache
    alphas = list(replication[1:])
    row_bytes = data.num_features * data.feature_dtype.itemsize
    owned_bytes = max(data.book.part_size(k) for k in range(data.num_parts)) * row_bytes
    workload = (Workload(parse_fanouts(args.fanouts), args.batch_size),)
    # Without a cache row (--replication 0) no policy is scored: the oracle alone gives the rows touched.
    simulated = tuple(dict.fromkeys([*policies, ORACLE])) if alphas else (ORACLE,)
    sim = simulate(PolicyContext(data, workload, seed=0, epochs=args.epochs), simulated, replication)
    total = sim.total_rows()  # [policy, alpha]; alpha 0 first
    oracle = total[simulated.index(ORACLE)]
    touched = float(sim.accessed.sum())  # rows fetched without a cache
    depth = args.pipeline_depth
    # (setting, policy, alpha, pipeline depth, predicted rows per epoch, the oracle's rows), in the
    # order of the table.
    settings = [(FULL, FULL_POLICY, float(data.num_parts - 1), depth, 0.0, None),  # every remote row cached
                (PARTITIONED, None, None, 1, touched, None),
                (PIPELINED, None, None, depth, touched, None)]
    settings += [(CACHE, policy, alpha, depth, float(total[simulated.index(policy), j + 1]), float(oracle[j + 1]))
                 for policy in policies for j, alpha in enumerate(alphas)]
    print(f"{args.part_dir}: {data.num_nodes:,} nodes, {data.num_parts} ranks, network {network}; "
          f"{args.repeats} round(s) of {len(settings)} runs of {args.epochs} epochs", flush=True)
    rounds = []
    for round_ in range(args.repeats):
        runs = []
        for setting, policy, alpha, run_depth, *_ in settings:
            runs.append(_run(args, setting, policy, alpha, run_depth, owned_bytes, row_bytes))
            label = setting if setting != CACHE else f"{policy} alpha {alpha:g}"
            print(f"round {round_ + 1}: {label}: {runs[-1]['epoch_s']:.3f} s per epoch", flush=True)
        rounds.append(runs)
    rows = [_median_of_rounds(list(runs)) for runs in zip(*rounds)]
    for row, (*_, predicted, oracle_rows) in zip(rows, settings):
        row["predicted_rows"], row["oracle_rows"] = predicted, oracle_rows
    rows[0]["feature_bytes_per_rank"] = data.num_nodes * row_bytes
    full_s = rows[0]["epoch_s"]
    serial = rows[1]
    slowest = max(serial["sample_s"], serial["fetch_s"], serial["compute_s"])
    for row in rows:
        row["vs_full"] = row["epoch_s"] / full_s
    rows[2]["vs_slowest_stage"] = rows[2]["epoch_s"] / slowest
    print(_table(rows, full_s))
    print(f"\npipelined uncached epoch over the slowest stage of the unpipelined one: {rows[2]['vs_slowest_stage']:.2f}; "
          f"uncached pipelined over full replication: {rows[2]['vs_full']:.2f}")
    result = {"network": args.network, "rate_bytes_per_s": network.rate, "latency_s": network.latency,
              "part_dir": args.part_dir, "num_parts": data.num_parts, "epochs": args.epochs, "repeats": args.repeats,
              "fanouts": list(parse_fanouts(args.fanouts)), "batch_size": args.batch_size, "hidden": args.hidden,
              "device": args.device, "rows": rows}
    write_outputs(args, KIND, result, args.json_path, args.plot, lambda path: plot_cluster(result, path))
    return 0
