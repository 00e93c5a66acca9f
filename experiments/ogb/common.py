"""The shared driver of the SALIENT++ reproduction scripts (``products.py``, ``papers100m.py``,
``mag240m.py``): each script only states the paper's configuration of its dataset as a
:class:`PaperSetup` and calls :func:`main`.

What one invocation does, each step through salientpp's own library (the same code as the CLI):

    prepare (ogb readers, data on disk) -> partition (METIS, K = machines x GPUs parts)
    -> analyze (one VIP cache plan per replication factor and GPU fraction, into
    WORK/plans/part-K/) -> simulate (communication volume per policy and alpha)
    -> train (every run of the selected experiments, each cached run given its plan's
    path, as `salientpp train --plan DIR`) -> results.md/json

Steps whose output already exists under ``--work`` are reused (a long run can be resumed;
a training run counts as done when its JSON-lines file holds all its epochs). With one
machine the training runs start their own local ranks; with several, the script writes the
``torchrun`` command of every run to ``WORK/runs/commands.sh``, to be run on every machine
over a shared file system, and the same script invoked again collects the results.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from salientpp.errors import InputError, check_int
from salientpp.io import atomic_output_dir, check_output_dir
from salientpp.train.state import TEST_METRIC, VALID_METRIC

EXPERIMENTS = ("variants", "alpha", "gpu-fraction", "accuracy", "communication")
RESULTS_KIND = "salientpp-experiment"


@dataclass(frozen=True)
class PaperSetup:
    """The SALIENT++ paper's configuration for one dataset.

    Attributes:
        name: dataset name used in titles (``ogbn-products``).
        source: ``salientpp prepare`` source (``ogb:ogbn-products``); ``--source`` overrides it.
        fanouts, hidden, batch_size, lr: the model and sampling setup (layers = len(fanouts); batch per GPU).
        model: the built-in model (``sage``; ``rgat`` for a typed graph such as IGBH).
        num_classes: the labels ``prepare`` reads where a source has several (IGBH: 19 or 2983).
        alpha_per_part: the VIP run caches alpha = alpha_per_part * K (the artifact's cache size of
            4 K percent; 2 K percent on MAG240M), capped at K - 1.
        device_fraction: share of each partition's own rows kept on the GPU in the VIP run.
        feature_dtype: stored feature type (MAG240M ships float16).
        epochs: epochs of each timing run (the artifact times 10); accuracy_epochs: of the accuracy run.
        alpha_sweep: alphas of "epoch time vs alpha" (the artifact's 0..64 percent).
        gpu_fraction_sweep, gpu_sweep_alpha: GPU fractions of "epoch time vs GPU fraction", at this alpha.
        sim_policies, sim_replication, sim_epochs: the communication-volume simulation.
        published: reference figures from the paper, printed beside each table, keyed by table.
    """

    name: str
    source: str
    fanouts: tuple[int, ...]
    hidden: int
    alpha_per_part: float
    device_fraction: float
    batch_size: int = 1024
    lr: float = 0.001
    model: str = "sage"
    num_classes: int | None = None
    feature_dtype: str = "float32"
    epochs: int = 10
    accuracy_epochs: int = 25
    alpha_sweep: tuple[float, ...] = (0.0, 0.01, 0.02, 0.04, 0.08, 0.32, 0.64)
    gpu_fraction_sweep: tuple[float, ...] = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)
    gpu_sweep_alpha: float = 0.15
    sim_policies: tuple[str, ...] = ("vip", "vip-simulation", "degree", "num-paths", "halo", "oracle")
    sim_replication: tuple[float, ...] = (0.0, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0)
    sim_epochs: int = 10
    published: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    """One training run; runs with equal settings are run once and shared by the experiments.

    Attributes:
        cache: ``vip`` or ``none``; alpha: replication factor; device_fraction: own rows on the GPU.
        depth: pipeline depth (1 = no pipeline); epochs: epochs run; evaluate: evaluate every epoch.
    """

    cache: str
    alpha: float
    device_fraction: float
    depth: int
    epochs: int
    evaluate: bool = False

    @property
    def name(self) -> str:
        return (f"{self.cache}-a{self.alpha:g}-g{self.device_fraction:g}-d{self.depth}-e{self.epochs}"
                + ("-eval" if self.evaluate else ""))


@dataclass
class Plan:
    """What one invocation will do, worked out (and checked) before any long step."""

    setup: PaperSetup
    args: argparse.Namespace
    source: str
    num_parts: int
    work: Path
    out: Path
    experiments: tuple[str, ...]
    labelled: list[tuple[str, str, Run]]  # (experiment, label, run)
    dropped: list[str]  # notes on sweep values left out (alpha > K - 1)

    @property
    def dataset_dir(self) -> Path:
        return self.work / "dataset"

    @property
    def part_dir(self) -> Path:
        return self.work / f"part-{self.num_parts}"

    @property
    def runs(self) -> list[Run]:
        return list(dict.fromkeys(run for _, _, run in self.labelled))

    def metrics_path(self, run: Run) -> Path:
        return self.work / "runs" / f"part-{self.num_parts}" / f"{run.name}.jsonl"

    def cache_plan(self, run: Run) -> Path | None:
        """The cache plan directory ``run`` trains with (``None``: no cache), written by :func:`analyze_step`."""
        if run.cache == "none":
            return None
        workload = f"f{'-'.join(map(str, self.args.fanouts))}-b{self.args.batch_size}"
        return (self.work / "plans" / f"part-{self.num_parts}"
                / f"{run.cache}-{workload}-a{run.alpha:g}-g{run.device_fraction:g}")


# -- arguments and checks ----------------------------------------------------------------------

def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def build_parser(setup: PaperSetup) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        allow_abbrev=False,  # `--epoch 3` must not silently mean --epochs (nor --accuracy-epochs)
        description=f"Reproduce the SALIENT++ experiments on {setup.name}: prepare -> partition -> analyze -> "
                    "simulate -> train, then write results.md and results.json.")
    p.add_argument("--root", help=f"directory that holds the downloaded dataset (for {setup.source})")
    p.add_argument("--work", required=True, help="working directory for the dataset, partitions, plans and runs "
                                                 "(created if absent; existing steps are reused)")
    p.add_argument("--out", required=True, help="results directory to create (results.md, results.json, plots)")
    p.add_argument("--machines", type=int, default=1, help="number of machines (default 1)")
    p.add_argument("--gpus-per-machine", type=int, default=1,
                   help="ranks per machine; partitions K = machines x this (default 1)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if _has_cuda() else "cpu",
                   help="training device (default: cuda when torch sees a GPU)")
    p.add_argument("--experiments", default=",".join(EXPERIMENTS),
                   help=f"which tables to produce, from {','.join(EXPERIMENTS)} (default all)")
    p.add_argument("--source", default=setup.source,
                   help=f"override the dataset, e.g. synthetic:tiny (default {setup.source})")
    p.add_argument("--epochs", type=int, default=setup.epochs, help=f"epochs per timing run (default {setup.epochs})")
    p.add_argument("--accuracy-epochs", type=int, default=setup.accuracy_epochs,
                   help=f"epochs of the accuracy run (default {setup.accuracy_epochs})")
    p.add_argument("--replication", type=_floats, default=setup.alpha_sweep, help="alphas of the epoch time vs alpha table")
    p.add_argument("--device-fractions", type=_floats, default=setup.gpu_fraction_sweep,
                   help="GPU fractions of the epoch time vs GPU fraction table")
    p.add_argument("--sim-epochs", type=int, default=setup.sim_epochs,
                   help=f"epochs the simulator evaluates (default {setup.sim_epochs}; the oracle needs >= 10)")
    p.add_argument("--fanouts", type=_ints, default=setup.fanouts, help="override the paper's fanouts")
    p.add_argument("--batch-size", type=int, default=setup.batch_size, help="override the batch size per rank")
    p.add_argument("--hidden", type=int, default=setup.hidden, help="override the hidden width")
    p.add_argument("--sampler-threads", type=int, default=1, help="sampler threads per rank (default 1)")
    p.add_argument("--master-addr", default="$MASTER_ADDR",
                   help="rendezvous host written into the multi-machine torchrun commands")
    return p


def _has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def num_nodes_on_disk(source: str, root: str | None) -> int | None:
    """The node count of ``source`` read from its smallest file, or None when it cannot be read
    cheaply (then ``prepare`` reports what is missing)."""
    scheme, _, arg = source.partition(":")
    try:
        if scheme == "synthetic":
            from salientpp.data.synthetic import parse_spec
            return parse_spec(arg).num_nodes
        if not root:
            return None
        if scheme == "ogb":
            raw = Path(root) / arg.replace("-", "_") / "raw"
            if (raw / "num-node-list.csv.gz").is_file():
                with gzip.open(raw / "num-node-list.csv.gz", "rt") as f:
                    return sum(int(line) for line in f if line.strip())
            if (raw / "data.npz").is_file():
                with np.load(raw / "data.npz", allow_pickle=False) as data:
                    return int(np.asarray(data["num_nodes_list"]).sum())
        if scheme == "ogb-lsc":
            meta = Path(root) / "mag240m_kddcup2021" / "meta.pt"
            if meta.is_file():
                import torch
                return int(torch.load(meta, weights_only=True)["paper"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None


def make_plan(setup: PaperSetup, args: argparse.Namespace) -> Plan:
    """Check every option and the data on disk, and list the runs; raises :class:`InputError`."""
    for name in ("machines", "gpus_per_machine", "epochs", "accuracy_epochs", "sim_epochs", "batch_size",
                 "hidden", "sampler_threads"):
        check_int(getattr(args, name), f"--{name.replace('_', '-')}")
    experiments = tuple(e.strip() for e in args.experiments.split(",") if e.strip())
    unknown = [e for e in experiments if e not in EXPERIMENTS]
    if not experiments or unknown:
        raise InputError(f"--experiments must list some of {','.join(EXPERIMENTS)}, got {args.experiments!r}")
    if any(f < 1 for f in args.fanouts) or not args.fanouts:
        raise InputError(f"--fanouts must be positive integers like 15,10,5, got {list(args.fanouts)}")
    num_parts = args.machines * args.gpus_per_machine
    if num_parts < 2:
        raise InputError("the experiments compare partitioned training, so they need at least 2 ranks; "
                         "raise --machines or --gpus-per-machine")
    scheme = args.source.partition(":")[0]
    if scheme in ("ogb", "ogb-lsc"):
        if not args.root:
            raise InputError(f"{args.source} is read from disk: pass --root DIR, the directory the dataset was "
                             "downloaded and unzipped into")
        if not Path(args.root).is_dir():
            raise InputError(f"--root {args.root} is not a directory; pass the directory that holds the dataset")
    out = check_output_dir(args.out)
    work = Path(args.work)
    if not work.parent.is_dir():
        raise InputError(f"the parent directory of --work {work} does not exist; create it first")
    nodes = num_nodes_on_disk(args.source, args.root)
    if nodes is not None and num_parts > nodes:
        raise InputError(f"{num_parts} partitions ({args.machines} machines x {args.gpus_per_machine} ranks) is "
                         f"more than the {nodes} nodes of {args.source}; use fewer ranks")
    max_alpha = num_parts - 1
    vip_alpha = min(setup.alpha_per_part * num_parts, max_alpha)
    base = dict(device_fraction=setup.device_fraction, epochs=args.epochs)
    labelled: list[tuple[str, str, Run]] = []
    dropped: list[str] = []
    if "variants" in experiments:
        labelled += [
            ("variants", f"full replication (α = K−1 = {max_alpha:g})", Run("vip", float(max_alpha), depth=4, **base)),
            ("variants", "partitioned, no pipeline, no cache", Run("none", 0.0, depth=1, **base)),
            ("variants", "pipelined, no cache", Run("none", 0.0, depth=4, **base)),
            ("variants", f"pipelined + VIP cache (α = {vip_alpha:g})", Run("vip", vip_alpha, depth=4, **base)),
        ]
    if "alpha" in experiments:
        for alpha in args.replication:
            if not 0 <= alpha <= max_alpha:
                dropped.append(f"α = {alpha:g} left out of the α sweep: outside [0, K−1 = {max_alpha}]")
                continue
            labelled.append(("alpha", f"α = {alpha:g}", Run("vip" if alpha > 0 else "none", alpha, depth=4, **base)))
    if "gpu-fraction" in experiments:
        alpha = min(setup.gpu_sweep_alpha, max_alpha)
        for fraction in args.device_fractions:
            if not 0 <= fraction <= 1:
                raise InputError(f"--device-fractions must lie in [0, 1], got {fraction:g}")
            labelled.append(("gpu-fraction", f"GPU fraction {fraction:g}",
                             Run("vip", alpha, fraction, depth=4, epochs=args.epochs)))
    if "accuracy" in experiments:
        labelled.append(("accuracy", f"pipelined + VIP cache (α = {vip_alpha:g})",
                         Run("vip", vip_alpha, setup.device_fraction, depth=4, epochs=args.accuracy_epochs, evaluate=True)))
    return Plan(setup, args, args.source, num_parts, work, out, experiments, labelled, dropped)


# -- steps -------------------------------------------------------------------------------------

def _step(title: str) -> float:
    print(f"\n== {title}", flush=True)
    return time.perf_counter()


def prepare_step(plan: Plan) -> float | None:
    """``salientpp prepare``; returns seconds, or None when the dataset was already there."""
    from salientpp.data.format import KIND as DATASET_KIND, save_dataset
    from salientpp.data.importers import ImportOptions, load_source
    from salientpp.io import read_meta

    marker = plan.work / "source.txt"
    if plan.dataset_dir.exists():
        if marker.is_file() and marker.read_text().strip() != plan.source:
            raise InputError(f"{plan.work} holds a dataset prepared from {marker.read_text().strip()}, not "
                             f"{plan.source}; use another --work directory")
        read_meta(plan.dataset_dir, DATASET_KIND)
        print(f"reusing {plan.dataset_dir}")
        return None
    start = _step(f"prepare {plan.source}")
    dataset = load_source(plan.source, ImportOptions(root=plan.args.root, feature_dtype=plan.setup.feature_dtype,
                                                     num_classes=plan.setup.num_classes))
    if plan.num_parts > dataset.num_nodes:
        raise InputError(f"{plan.num_parts} partitions is more than the {dataset.num_nodes} nodes of "
                         f"{plan.source}; use fewer ranks")
    plan.work.mkdir(exist_ok=True)
    save_dataset(dataset, plan.dataset_dir)
    marker.write_text(plan.source + "\n")
    print(f"{dataset.num_nodes:,} nodes, {dataset.num_edges:,} directed edges, {dataset.num_features} features")
    return time.perf_counter() - start


def partition_step(plan: Plan) -> float | None:
    from salientpp.data.format import load_dataset
    from salientpp.partition.partitioner import partition_dataset

    if plan.part_dir.exists():
        print(f"reusing {plan.part_dir}")
        return None
    start = _step(f"partition into {plan.num_parts} parts (METIS)")
    dataset = load_dataset(plan.dataset_dir)
    if plan.num_parts > dataset.num_nodes:
        raise InputError(f"{plan.num_parts} partitions is more than the {dataset.num_nodes} nodes of "
                         f"{plan.dataset_dir}; use fewer ranks")
    result = partition_dataset(dataset, plan.part_dir, plan.num_parts)
    print(result.quality.summary())
    return time.perf_counter() - start


def _train_config(plan: Plan, run: Run, json_path: Path | None = None):
    from salientpp.train import TrainConfig

    args = plan.args
    cache_plan = plan.cache_plan(run)
    # A cached run trains with its plan (which decides the tiers and the GPU fraction); an
    # uncached one keeps run.device_fraction of its own rows on the device.
    cache = (dict(plan=str(cache_plan)) if cache_plan is not None
             else dict(policy="none", device_fraction=run.device_fraction))
    return TrainConfig(str(plan.part_dir), model=plan.setup.model, epochs=run.epochs, hidden=args.hidden,
                       layers=len(args.fanouts),
                       fanouts=tuple(args.fanouts), batch_size=args.batch_size, lr=plan.setup.lr, device=args.device,
                       pipeline_depth=run.depth, eval_every=1 if run.evaluate else 0, sampler_threads=args.sampler_threads,
                       json_path=str(json_path) if json_path else None, progress=False, **cache)


def analyze_step(plan: Plan) -> dict[str, float]:
    """``salientpp analyze``: the cache plan of every cached run, written to :meth:`Plan.cache_plan`
    (what `salientpp analyze PART_DIR ... --out DIR` writes). The vertices are scored once per
    policy and alpha; runs that differ only in their GPU fraction get copies with another
    fraction. Returns seconds per newly scored policy and alpha."""
    from salientpp.cache import Budget, PlanOptions, PlanRequest, Workload, save_plans
    from salientpp.partition import load_partitioned

    todo: dict[tuple[str, float], dict[float, Path]] = {}
    for run in plan.runs:
        path = plan.cache_plan(run)
        if path is not None and not path.exists():
            todo.setdefault((run.cache, run.alpha), {})[run.device_fraction] = path
    seconds: dict[str, float] = {}
    if not todo:
        return seconds
    data = load_partitioned(plan.part_dir)
    workload = (Workload(tuple(plan.args.fanouts), plan.args.batch_size, schema=data.schema),)
    for (cache, alpha), paths in todo.items():
        start = _step(f"analyze: {cache} cache plan, α = {alpha:g}")
        (fraction, first), *others = paths.items()
        request = PlanRequest(workload, PlanOptions(cache, Budget(replication=alpha), fraction))
        first.parent.mkdir(parents=True, exist_ok=True)
        plans = request.build_and_save(request.context(data, sampler_threads=plan.args.sampler_threads), first)
        for fraction, path in others:
            save_plans([p.with_device_fraction(fraction) for p in plans], path)
        seconds[f"{cache} α={alpha:g}"] = time.perf_counter() - start
        print("\n".join(map(str, paths.values())) + f" ({seconds[f'{cache} α={alpha:g}']:.1f} s)")
    return seconds


def simulate_step(plan: Plan) -> dict[str, Any]:
    """``salientpp simulate``: remote rows per epoch per policy and alpha, in bench simulate's JSON form."""
    from salientpp.cache import PolicyContext, Workload, simulate
    from salientpp.partition import load_partitioned

    fanouts = tuple(plan.args.fanouts)
    replication = [a for a in plan.setup.sim_replication if a <= plan.num_parts - 1]
    saved = plan.work / "runs" / f"part-{plan.num_parts}" / (
        f"simulate-f{'-'.join(map(str, fanouts))}-b{plan.args.batch_size}-e{plan.args.sim_epochs}-"
        f"{'-'.join(plan.setup.sim_policies)}.json")
    if saved.is_file():
        print(f"reusing {saved}")
        return json.loads(saved.read_text())
    start = _step(f"simulate: communication volume of {', '.join(plan.setup.sim_policies)}")
    data = load_partitioned(plan.part_dir)
    ctx = PolicyContext(data, (Workload(fanouts, plan.args.batch_size, schema=data.schema),), seed=0,
                        epochs=plan.args.sim_epochs,
                        sampler_threads=plan.args.sampler_threads)
    result = simulate(ctx, list(plan.setup.sim_policies), replication)
    print(result.table())
    report = {"dataset": plan.setup.name, "num_parts": plan.num_parts, "fanouts": list(fanouts),
              "batch_size": plan.args.batch_size, "seconds": time.perf_counter() - start, **result.to_json()}
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(report) + "\n")
    return report


def read_history(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _cache_options(plan: Plan, run: Run) -> list[str]:
    """The `salientpp train` options of ``run``'s cache: its plan, or none."""
    cache_plan = plan.cache_plan(run)
    if cache_plan is None:
        return ["--policy", "none", "--device-fraction", f"{run.device_fraction:g}"]
    return ["--plan", str(cache_plan.resolve())]


def torchrun_command(plan: Plan, run: Run) -> str:
    """The command that runs ``run`` on every machine of a multi-machine job."""
    args = plan.args
    train = ["-m", "salientpp", "train", str(plan.part_dir.resolve()), "--model", plan.setup.model,
             "--epochs", str(run.epochs),
             "--hidden", str(args.hidden), "--layers", str(len(args.fanouts)),
             "--fanouts", ",".join(map(str, args.fanouts)), "--batch-size", str(args.batch_size),
             "--lr", str(plan.setup.lr), *_cache_options(plan, run), "--device", args.device,
             "--eval-every", "1" if run.evaluate else "0", "--sampler-threads", str(args.sampler_threads),
             "--json", str(plan.metrics_path(run).resolve()), "--quiet"]
    train += ["--no-pipeline"] if run.depth == 1 else ["--pipeline-depth", str(run.depth)]
    head = (f"torchrun --nnodes {args.machines} --nproc-per-node {args.gpus_per_machine} --node-rank $NODE_RANK "
            f"--master-addr {args.master_addr} --master-port 29500")
    return head + " " + shlex.join(train)


def train_step(plan: Plan) -> list[Run]:
    """Run every training run not yet complete; returns the runs still missing (multi-machine)."""
    from salientpp.train import train

    (plan.work / "runs" / f"part-{plan.num_parts}").mkdir(parents=True, exist_ok=True)
    missing = []
    for run in plan.runs:
        path = plan.metrics_path(run)
        if len(read_history(path)) >= run.epochs:
            print(f"reusing {path}")
            continue
        path.unlink(missing_ok=True)  # a partial run restarts from scratch
        if plan.args.machines > 1:
            missing.append(run)
            continue
        start = _step(f"train {run.name}")
        train(_train_config(plan, run, path))
        print(f"done in {time.perf_counter() - start:.1f} s")
    if missing:
        script = plan.work / "runs" / "commands.sh"
        script.write_text("#!/bin/sh\n# Run on every machine with NODE_RANK=0..M-1 and MASTER_ADDR set; then re-run "
                          "the experiment script with the same options to collect the results.\nset -e\n"
                          + "".join(torchrun_command(plan, run) + "\n" for run in missing))
        print(f"\n{len(missing)} training runs need all {plan.args.machines} machines: run {script} on each "
              "(same shared --work path), then this script again with the same options to collect the results")
    return missing


# -- results -----------------------------------------------------------------------------------

def summarize(run: Run, history: list[dict[str, Any]], num_parts: int) -> dict[str, Any]:
    """One row in the schema of ``salientpp bench train --json`` (plus accuracy and settings).

    Epoch and stage times are those of bench train: over the epochs after the first (the first
    pays for warm-up), or the only epoch when there is one.
    """
    from salientpp.bench.train import median_row

    row = {"cache": run.cache, "alpha": run.alpha, "depth": run.depth, "device_fraction": run.device_fraction,
           "num_parts": num_parts, "epochs": len(history), **median_row(history),
           "rows_per_epoch": statistics.mean(h["comm"]["received"] for h in history)}
    evaluated = [h for h in history if VALID_METRIC in h]
    if evaluated:
        best = max(evaluated, key=lambda h: h[VALID_METRIC])
        row.update(best_valid=best[VALID_METRIC], test_at_best=best[TEST_METRIC], best_epoch=best["epoch"],
                   final_test=evaluated[-1][TEST_METRIC])
    return row


def hardware_line(device: str) -> str:
    import torch

    line = (f"{platform.node()}: {os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), "
            f"{_memory_gib():.0f} GiB RAM, torch {torch.__version__}, device {device}")
    if device == "cuda" and torch.cuda.is_available():
        line += f" ({torch.cuda.get_device_name(0)} x {torch.cuda.device_count()})"
    return line + f"; load average {os.getloadavg()[0]:.2f}"


def _memory_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return float("nan")


def _fmt(value: Any, spec: str = ".3f") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    return format(value, spec)


def render_markdown(results: dict[str, Any]) -> str:
    """The results tables, with the published figures beside them."""
    setup, published = results["setup"], results["published"]
    lines = [f"# {setup['name']}: SALIENT++ experiments on {results['num_parts']} ranks "
             f"({results['machines']} machine(s) x {results['gpus_per_machine']})", "",
             f"- source: `{results['source']}`; fanouts {','.join(map(str, results['fanouts']))}, batch "
             f"{results['batch_size']} per rank, hidden {results['hidden']}, {len(results['fanouts'])}-layer "
             f"{setup.get('model', 'sage').upper()}",
             f"- machine: {results['hardware']}",
             f"- command: `{results['command']}`",
             "- epoch times: median over the epochs after the first; stage columns are per-epoch sums on rank 0 "
             "(with the pipeline, fetch is time spent waiting for rows)"]
    lines += [f"- note: {d}" for d in results["dropped"]]
    rows = results["train"]
    by_label = {(r["experiment"], r["label"]): r for r in rows}

    def time_table(experiment: str, first: str) -> list[str]:
        out = [f"| {first} | cache | α | pipeline | GPU fraction | epoch s | sampling s | fetch s | fetch CPU s "
               "| compute s | remote rows/epoch |", "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for (exp, label), r in by_label.items():
            if exp == experiment:
                pipe = f"depth {r['depth']}" if r["depth"] > 1 else "off"
                # results.json files written before the fetch stage's CPU time was recorded lack it
                out.append(f"| {label} | {r['cache']} | {r['alpha']:g} | {pipe} | {r['device_fraction']:g} | "
                           f"{r['epoch_s']:.3f} | {r['sample_s']:.3f} | {r['fetch_s']:.3f} | "
                           f"{_fmt(r.get('fetch_cpu_s'))} | {r['compute_s']:.3f} | {r['rows_per_epoch']:,.0f} |")
        return out

    sections = [("variants", "Per-epoch time by system variant", "variant"),
                ("alpha", "Epoch time vs replication factor α (pipelined, VIP cache)", "setting"),
                ("gpu-fraction", "Epoch time vs GPU fraction (pipelined, VIP cache)", "setting")]
    for experiment, title, first in sections:
        if experiment in results["experiments"]:
            lines += ["", f"## {title}", "", *time_table(experiment, first)]
            if experiment == "gpu-fraction" and results["device"] == "cpu":
                lines += ["", "On `--device cpu` the device tier is host memory, so the GPU fraction cannot change "
                              "the epoch time here; run with `--device cuda` to measure it."]
            if published.get(experiment):
                lines += ["", f"Published: {published[experiment]}"]
    if "accuracy" in results["experiments"]:
        lines += ["", "## Accuracy (sampled inference, eval fanouts 20 per layer)", "",
                  "| run | epochs | best valid | epoch | test at best valid | final test |", "|---|---:|---:|---:|---:|---:|"]
        for (exp, label), r in by_label.items():
            if exp == "accuracy":
                lines.append(f"| {label} | {r['epochs']} | {_fmt(r.get('best_valid'), '.4f')} | {r.get('best_epoch', '')} "
                             f"| {_fmt(r.get('test_at_best'), '.4f')} | {_fmt(r.get('final_test'), '.4f')} |")
        if published.get("accuracy"):
            lines += ["", f"Published: {published['accuracy']}"]
    if results.get("simulate"):
        sim = results["simulate"]
        lines += ["", f"## Communication volume vs α per policy ({sim['epochs']} simulated epochs)", "",
                  f"Remote rows fetched per epoch, all {results['num_parts']} partitions; no cache: "
                  f"{sim['no_cache_rows_per_epoch']:.4g}.", "",
                  "| policy | " + " | ".join(f"α={a:g}" for a in sim["replication"]) + " |",
                  "|---|" + "---:|" * len(sim["replication"])]
        for policy in sim["policies"]:
            lines.append(f"| {policy} | " + " | ".join(f"{v:.4g}" for v in sim["rows_per_epoch"][policy]) + " |")
        if published.get("communication"):
            lines += ["", f"Published: {published['communication']}"]
    lines += ["", "## Preprocessing", "", "| step | seconds |", "|---|---:|"]
    lines += [f"| {step} | {_fmt(s, '.1f')} |" for step, s in results["step_seconds"].items()]
    return "\n".join(lines) + "\n"


def collect(plan: Plan, step_seconds: dict[str, float | None], simulation: dict[str, Any] | None,
            command: str) -> dict[str, Any]:
    args = plan.args
    train_rows = []
    for experiment, label, run in plan.labelled:
        history = read_history(plan.metrics_path(run))
        train_rows.append({"experiment": experiment, "label": label, "run": run.name,
                           **summarize(run, history, plan.num_parts)})
    setup = plan.setup
    return {"kind": RESULTS_KIND, "setup": {"name": setup.name, "source": setup.source,
                                            "fanouts": list(setup.fanouts), "hidden": setup.hidden,
                                            "model": setup.model},
            "published": setup.published, "source": plan.source, "num_parts": plan.num_parts,
            "machines": args.machines, "gpus_per_machine": args.gpus_per_machine, "device": args.device,
            "fanouts": list(args.fanouts), "batch_size": args.batch_size, "hidden": args.hidden,
            "experiments": list(plan.experiments), "dropped": plan.dropped, "hardware": hardware_line(args.device),
            "command": command, "step_seconds": step_seconds, "train": train_rows, "simulate": simulation}


def write_results(plan: Plan, results: dict[str, Any]) -> None:
    """results.json, results.md and (with matplotlib) the report's plots, atomically into ``--out``."""
    from salientpp.bench import report
    from salientpp.plots import require_pyplot

    markdown = render_markdown(results)
    with atomic_output_dir(plan.out) as tmp:
        (tmp / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        (tmp / "results.md").write_text(markdown)
        try:
            require_pyplot()
        except InputError:  # no matplotlib: the results without their plots
            pass
        else:
            report.write_plots(report.load_results([tmp / "results.json"]), tmp)
    print("\n" + markdown)
    print(f"results written to {plan.out}")


def run(setup: PaperSetup, argv: list[str] | None = None) -> int:
    args = build_parser(setup).parse_args(argv)
    command = shlex.join([Path(sys.argv[0]).name if argv is None else "script", *(sys.argv[1:] if argv is None else argv)])
    plan = make_plan(setup, args)
    print(f"{setup.name}: {plan.num_parts} partitions, {len(plan.runs)} training runs "
          f"({', '.join(plan.experiments)}), work {plan.work}, results {plan.out}")
    steps: dict[str, float | None] = {"prepare": prepare_step(plan), "partition": partition_step(plan)}
    steps.update({f"VIP analysis {k}": v for k, v in analyze_step(plan).items()})
    simulation = simulate_step(plan) if "communication" in plan.experiments else None
    if simulation is not None:
        steps["simulate"] = simulation["seconds"]
    if train_step(plan):
        return 0
    write_results(plan, collect(plan, steps, simulation, command))
    return 0


def main(setup: PaperSetup, argv: list[str] | None = None) -> int:
    """Entry point of a dataset script: one sentence and exit code 2 on bad input."""
    try:
        return run(setup, argv)
    except InputError as exc:
        print(f"{Path(sys.argv[0]).name}: error: {exc}", file=sys.stderr)
        return 2


__all__ = ["EXPERIMENTS", "PaperSetup", "Plan", "Run", "build_parser", "main", "make_plan", "render_markdown",
           "summarize"]
