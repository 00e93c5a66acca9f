"""Epoch time of distributed training and its breakdown, per cache setting, pipeline on and off.

For each setting (no cache, VIP at each alpha) and number format (``--precisions``) the trainer
runs ``--epochs`` epochs without evaluation, once pipelined (``--pipeline-depth``; by default the
thread budget's depth) and once with the stages of each batch one after another (depth 1). When
the depth is 1 (by default on the CPU, unless ``--torch-threads`` leaves cores free) the pipelined run would repeat
the serial one and is left out. Reported per run: median epoch time over the epochs after the first,
median seconds per epoch in sampling (waiting for the loader), fetch (counts, ids, rows, assemble;
with the pipeline this is time spent waiting) and its CPU seconds (those of the thread that ran
the fetch stages: serving rows, placing received ones; the rest of fetch is waiting, for the
peers' rows or for the core), compute (forward, backward, step), the CPU seconds of that
compute (the training thread's CPU time: unlike wall time it does not grow
when other jobs share the cores, so it tells work from contention), rows fetched per epoch
against the simulator's prediction for the same seeds, and
``epoch / slowest stage alone``: the largest of sampling, fetch and compute in the run without
pipeline, where the pipelined run's sampling is instead timed alone at the parallelism it has in
the pipeline (the run without pipeline samples one batch at a time, so with several sampler
threads, as on a GPU, its sampling time is that of one thread): the largest rank's training
batches sampled by the run's sampler (``--sampler``, on ``--sampling-device``) with the pipelined
run's sampler threads and read-ahead, in this process, median over the epochs after the first.

The last two rows are the baselines (``salientpp.bench.pyg_baseline``): PyG's NeighborLoader +
DDP with every rank holding all features, same fanouts, batch size, ranks and thread budget;
its sampling time includes PyG's ``x[n_id]`` gather. The first runs PyG's own SAGE (``SAGEConv``,
torch's dropout), the second salientpp's model on MFGs built from PyG's batches, so sampling and
fetching gains show apart from the model step's (``--baselines`` picks them). They are skipped,
with a message, when PyG has neither pyg-lib nor torch_sparse to sample with.

**Typed graphs** run the same rows with ``--model`` (default, as train's, ``rsage`` there:
:func:`~salientpp.train.setup.default_model`) and train's forms of
``--fanouts`` (one list for every relation, or one per relation); the rows fetched are all types'
together, against the simulator's for the same fanout table. The baseline there is PyG's
``NeighborLoader`` on a ``HeteroData`` of the whole graph with the same fanout table, training
PyG's ``to_hetero(SAGE)`` for ``--model rsage`` or ``to_hetero(GAT)`` for ``rgat``
(:class:`~salientpp.bench.pyg_baseline.PyGHeteroModel`, of the same size; none for ``rgcn``); the
baseline with salientpp's model is homogeneous only and skipped there. A typed graph whose types
lack features takes train's ``--embedding-dim`` (and ``--no-features``, ``--embedding-optimizer``,
``--embedding-lr``: :data:`EMBEDDING_OPTIONS`, declared once in
:class:`~salientpp.train.TrainConfig`): our runs learn those types' rows in the partitioned
embedding (its exchange is in each row's ``embedding_rows_per_epoch``), PyG's model in an
``nn.Embedding`` replicated in every rank. PyG's homogeneous baselines read features only, so
they are skipped, with a message, when a homogeneous graph is given ``--embedding-dim``.

``--compare-freed-memory`` adds the uncached run with each rank returning freed host memory to
the system (:mod:`salientpp.distributed.host_memory`), alternating with the default.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import torch

from ..cache import PolicyContext, Workload, simulate
from ..sampling import (DEFAULT_SAMPLER, SAMPLERS, SAMPLING_DEVICES, NeighborLoader, check_sampler,
                        check_sampling_device, make_sampler, parse_typed_fanouts)
from ..distributed.health import Stage
from ..distributed.group import WorkerError
from ..host import PIPELINE_DEPTH, sampler_read_ahead
from ..errors import InputError, check_int, counted
from ..io import check_output_dir
from .results import write_outputs
from ..parsing import flag_names, name_list, number_list
from ..partition import load_partitioned
from ..loader.pipeline import WAIT, StageTimes
from ..train import TrainConfig, resolve_run, train
from ..train.setup import plan_request
from ..options import add_arguments as add_declared, declared, values_from
from ..train.config import EMBEDDING_ONLY, FP32, PRECISIONS
from ..train.state import EMBEDDING_COMM, TRAIN_CPU
from .pyg_baseline import (OURS, PYG, TYPED_BASELINE_MODELS, BaselineConfig, run_baseline, sampling_backend,
                           sampling_workers, unavailable_reason)

# The kind its --json file declares (salientpp.bench.results) and its line in `salientpp bench --help`.
KIND = "salientpp-bench-train"
SUMMARY = "distributed epoch time and its breakdown per cache setting, pipeline on and off"

FETCH_STAGES = tuple(stage.value for stage in (Stage.COUNTS, Stage.IDS, Stage.ROWS, Stage.ASSEMBLE))
# The baselines' models (--baselines), and how their rows name them.
BASELINE_MODELS = {PYG: "PyG's SAGE", OURS: "salientpp's model"}
# train's options of the model's learned input rows: --embedding-dim and those it enables.
EMBEDDING_OPTIONS = tuple(d for d in declared(TrainConfig) if d.name == "embedding_dim" or d.option.needs is EMBEDDING_ONLY)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("part_dir", metavar="PART_DIR", help="partitioned directory, e.g. the small preset in 2 parts")
    p.add_argument("--epochs", type=int, default=3, help="epochs per run; the first is warm-up (default 3)")
    p.add_argument(*flag_names("--replication"), default="0.1,0.5", help="VIP replication factors (default 0.1,0.5)")
    p.add_argument("--fanouts", default="15,10,5",
                   help="as train's: on a typed graph one list for every relation, or REL=15,10,5;REL2=... per relation")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--model", default=None,
                   help="a built-in model, as train's --model (default the graph's: sage for one node type, rsage "
                        "for several)")
    add_declared(p, EMBEDDING_OPTIONS, defaults=True)  # as train's
    p.add_argument("--pipeline-depth", type=int, default=None,
                   help=f"batches in flight of the pipelined runs (default: the thread budget's: {PIPELINE_DEPTH} on "
                        "a GPU or when --torch-threads leaves cores free, else 1)")
    p.add_argument("--sampler", choices=SAMPLERS, default=DEFAULT_SAMPLER,
                   help=f"the sampler kind, as train's (default {DEFAULT_SAMPLER})")
    p.add_argument("--sampling-device", choices=SAMPLING_DEVICES, default="cpu",
                   help="where the batches are drawn, as `train --sampling-device` (cuda: a bulk kind on the GPU; "
                        "default cpu)")
    p.add_argument("--fetch-thread", choices=("on", "off"), default=None,
                   help="run the pipelined runs' fetch stages on a thread of their own, as `train --fetch-thread` "
                        "(default: train's: on with a GPU; without pipelined runs it does not apply)")
    p.add_argument(*flag_names("--sampler-threads"), type=int, default=None,
                   help="sampler threads per rank (default: the thread budget's, see docs/training.md)")
    p.add_argument("--torch-threads", type=int, default=None,
                   help="torch intra-op threads per rank (default: the thread budget's)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(*flag_names("--device-fraction"), type=float, default=None, metavar="F",
                   help="fraction of each rank's owned rows kept on the device, as `train --device-fraction` "
                        "(default: train's)")
    p.add_argument("--network", default=None, metavar="RATE[,LATENCY]",
                   help="emulate a cluster network for salientpp's row exchange, as `train --network` (default: "
                        "loopback as it is)")
    p.add_argument("--precisions", default=TrainConfig.__dataclass_fields__["precision"].default, metavar="LIST",
                   help=f"number formats of salientpp's training step to time, of {','.join(PRECISIONS)} (default: "
                        "train's; the baselines run float32)")
    p.add_argument("--outside-load", type=int, default=0, metavar="N",
                   help="also time the uncached run at the pipeline depth in use on an idle machine and under N "
                        "busy outside processes, alternating, twice each (default 0: skip)")
    p.add_argument("--compare-freed-memory", action="store_true",
                   help="also time the uncached run with the pipeline off with each rank keeping freed host memory "
                        "for reuse (train's default) and returning it to the system (glibc's default, "
                        "--no-reuse-freed-memory), alternating, twice each")
    p.add_argument("--no-baseline", action="store_true", help="skip the PyG NeighborLoader + DDP baselines")
    p.add_argument("--baselines", default=",".join(BASELINE_MODELS), metavar="LIST",
                   help=f"the models of the PyG NeighborLoader + DDP baselines, of {','.join(BASELINE_MODELS)}: "
                        "PyG's SAGE and salientpp's model (default: both)")
    p.add_argument("--pyg-workers", default=None, metavar="LIST",
                   help="PyG NeighborLoader's num_workers to try, e.g. 4,8,12: one baseline row each, and the "
                        "fastest is PyG's figure (default: the thread budget's sampler threads on a GPU, 0 on the CPU)")
    p.add_argument("--json", dest="json_path", default=None, help="write the rows as JSON here (must not exist)")


def _timed(history: list[dict]) -> list[dict]:
    """The epochs a median is taken over: those after the first (the warm-up), if any."""
    return history[1:] or history


def median_row(history: list[dict]) -> dict:
    """Medians of the epoch time and of the stage seconds over the epochs after the first (the warm-up)."""
    timed = _timed(history)
    stage = lambda names: statistics.median(sum(h["stage_s"].get(n, 0.0) for n in names) for h in timed)
    return {"epoch_s": statistics.median(h["epoch_s"] for h in timed), "sample_s": stage((Stage.SAMPLE.value,)),
            "fetch_s": stage(FETCH_STAGES), "fetch_cpu_s": stage(tuple(map(StageTimes.cpu_key, FETCH_STAGES))),
            "compute_s": stage((Stage.TRAIN.value,)), "compute_cpu_s": stage((TRAIN_CPU,)), "wait_s": stage((WAIT,)),
            "steps": history[0]["steps"]}


def _baselines(args, workload: Workload) -> Iterator[dict]:
    """The baseline rows, each as soon as it is measured, with the trainer's fanout table
    (``workload``). A baseline whose ranks fail (PyG holds the whole graph and every feature in
    each rank, so it is the first to run out of memory) is reported and skipped, so the rows
    measured before it are kept."""
    reason = unavailable_reason()
    if reason is not None:
        print(f"baseline skipped: {reason} (pip install pyg-lib or torch_sparse to include it)")
        return
    models = args.baselines
    if args.typed and OURS in models:
        print(f"baseline with {BASELINE_MODELS[OURS]} skipped: it runs on homogeneous graphs only")
        models = [m for m in models if m != OURS]
    if not args.typed and args.embedding_dim:
        print("baseline skipped: PyG's homogeneous baselines read features only, not --embedding-dim's learned rows")
        return
    if args.typed and args.model not in TYPED_BASELINE_MODELS:
        print(f"baseline skipped: PyG's model is built for --model {' or '.join(TYPED_BASELINE_MODELS)} on a typed "
              f"graph, not {args.model}")
        return
    fanouts = tuple(map(tuple, workload.fanout_table.tolist()))
    for model, workers in itertools.product(models, args.pyg_workers):
        label = f"PyG's to_hetero({TYPED_BASELINE_MODELS[args.model]})" if args.typed else BASELINE_MODELS[model]
        name = f"PyG NeighborLoader ({sampling_backend()}) + DDP, {label}, full replication"
        if workers is not None:
            name += f", {counted(workers, 'worker')}"
        try:
            history = run_baseline(BaselineConfig(args.part_dir, args.epochs, fanouts, args.batch_size, args.hidden,
                                                  device=args.device, model=model,
                                                  typed_model=args.model, embedding_dim=args.embedding_dim,
                                                  features=args.features,
                                                  torch_threads=args.torch_threads, workers=workers))
        except WorkerError as exc:
            print(f"| {name} | failed: {exc} (a SIGKILL is most often the kernel's out-of-memory killer: every "
                  "rank holds the whole graph and all features) |", flush=True)
            continue
        yield {"cache": name, "alpha": None, "depth": 1, "precision": FP32, "pyg_workers": workers,
               **median_row(history), "rows_per_epoch": 0.0}


def _choices(text: str, option: str, choices) -> list[str]:
    """The comma-separated ``text`` of ``option`` (``--baselines``, ``--precisions``): one or more
    of ``choices``, or InputError."""
    names = name_list(text, option, ",".join(choices))
    if not names or any(name not in choices for name in names):
        raise InputError(f"{option} must list some of {','.join(choices)}, got {text!r}")
    return names


def _config(args, precision: str, cache: str = "none", alpha: float = 0.0, depth: int | None = 1,
            reuse_freed_memory: bool = True) -> TrainConfig:
    fanouts = parse_typed_fanouts(args.fanouts)
    hops = len(next(iter(fanouts.values())) if isinstance(fanouts, dict) else fanouts)
    return TrainConfig(args.part_dir, model=args.model, epochs=args.epochs, hidden=args.hidden, layers=hops,
                       fanouts=fanouts,
                       batch_size=args.batch_size, policy=cache,
                       replication=None if cache == "none" else alpha, pipeline_depth=depth,
                       fetch_thread=None if depth in (None, 1) else args.fetch_thread,
                       sampler=args.sampler, sampling_device=args.sampling_device,
                       eval_every=0, sampler_threads=args.sampler_threads, torch_threads=args.torch_threads, device=args.device,
                       device_fraction=args.device_fraction,
                       precision=precision, reuse_freed_memory=reuse_freed_memory, network=args.network,
                       progress=False, **values_from(args, EMBEDDING_OPTIONS))


def _run(args, precision: str, cache: str, alpha: float, depth: int, reuse_freed_memory: bool = True) -> dict:
    result = train(_config(args, precision, cache, alpha, depth, reuse_freed_memory))
    return {"cache": cache, "alpha": alpha, "depth": depth, "precision": precision, **median_row(result.history),
            "rank_cpu_s": statistics.median(h["cpu_s"] for h in _timed(result.history)),
            "rows_per_epoch": statistics.mean(h["comm"]["received"] for h in result.history),
            "embedding_rows_per_epoch": statistics.mean(h.get(EMBEDDING_COMM, {}).get("received", 0)
                                                        for h in result.history)}


def _sampling_alone(args, data, workload: Workload, threads: int, depth: int) -> float:
    """Seconds per epoch of the largest rank's training batches sampled alone by the run's
    sampler kind on its sampling device (``--sampler``, ``--sampling-device``), with ``threads``
    sampler threads and the read-ahead of a pipeline of ``depth``
    (:func:`~salientpp.host.sampler_read_ahead`): the sampling stage at the parallelism it has in
    the pipelined runs; the median over ``--epochs`` epochs after the first."""
    rowptr, col = (torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)) for a in (data.rowptr, data.col))
    seeds = max((np.asarray(data.part(k).train_idx) for k in range(data.num_parts)), key=len)
    device = check_sampling_device(args.sampling_device, check_sampler(args.sampler), args.device)
    loader = NeighborLoader(make_sampler(rowptr, col, workload.fanout_table, args.sampler, device=device,
                                         **data.sampler_args),
                            torch.from_numpy(seeds), args.batch_size, sampler_threads=threads,
                            read_ahead=sampler_read_ahead(depth, threads))
    seconds = []
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        start = time.perf_counter()
        for _ in loader:
            pass
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds[1:] or seconds)


@contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """``count`` processes that spin on a core each until the block ends (an outside load)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _medians(rows: list[dict], key: str, values: tuple, field: str) -> list[float]:
    """The median of ``field`` over the rows with ``key: value``, for each of ``values``."""
    return [statistics.median(r[field] for r in rows if r[key] == value) for value in values]


def _alternating(key: str, values: tuple, run: Callable[[Any], dict]) -> tuple[list[dict], list[float]]:
    """``run(value)`` (a row) for each of ``values``, twice each and alternating (a, b, a, b) so
    that drift of the machine hits them alike; returns the rows, each with ``key: value``, and
    the median epoch time of each value."""
    rows = [{**run(value), key: value} for value in values * 2]
    return rows, _medians(rows, key, values, "epoch_s")


def _uncached_run(args, depth: int, load: int = 0, reuse_freed_memory: bool = True) -> dict:
    """The uncached run in the first precision at pipeline ``depth``, under ``load`` busy outside
    processes (the rows of ``--outside-load`` and ``--compare-freed-memory``)."""
    with busy_processes(load):
        return _run(args, args.precisions[0], "none", 0.0, depth, reuse_freed_memory)


def main(args: argparse.Namespace) -> int:
    check_int(args.epochs, "--epochs")
    check_int(args.outside_load, "--outside-load", minimum=0)
    alphas = list(number_list(args.replication, float, "--replication", "0.1,0.5"))
    args.baselines = _choices(args.baselines, "--baselines", BASELINE_MODELS)
    args.fetch_thread = None if args.fetch_thread is None else args.fetch_thread == "on"  # train's config value
    if args.pyg_workers is None:
        args.pyg_workers = [None]  # the thread budget's (sampling_workers)
    else:
        given = list(number_list(args.pyg_workers, int, "--pyg-workers", "4,8,12"))
        if not given or min(given) < 0:
            raise InputError(f"--pyg-workers must list numbers of worker processes >= 0, e.g. 4,8,12, got "
                             f"{args.pyg_workers!r}")
        args.pyg_workers = given
    args.precisions = _choices(args.precisions, "--precisions", PRECISIONS)
    args.typed = load_partitioned(args.part_dir, verify=False, check=False).is_typed
    for precision in args.precisions:  # refuses bf16 on a CPU without it
        _config(args, precision).validate()
    # The pipelined runs' depth and the thread budget, as `salientpp train` resolves them.
    run = resolve_run(_config(args, args.precisions[0], depth=args.pipeline_depth))
    args.model = run.config.model  # without --model, the graph's (default_model)
    budget, depth = run.threads, run.config.pipeline_depth
    # the pipelined runs' fetch thread (--fetch-thread applies to them only; none at depth 1)
    fetch_thread = depth > 1 and budget.fetch_thread(depth, args.fetch_thread)
    if args.pipeline_depth is not None:
        check_int(args.pipeline_depth, "--pipeline-depth")
    if args.json_path is not None:
        check_output_dir(args.json_path, "output file")
    data = load_partitioned(args.part_dir)
    if data.num_parts == 1 and alphas:
        print(f"{args.part_dir} has one partition, so no remote rows to cache: only the uncached runs")
        alphas = []
    workload = plan_request(run.config, data.schema).workload  # the trainer's fanout table
    sim = simulate(PolicyContext(data, (workload,), seed=0, epochs=args.epochs), ["vip"], [0.0] + alphas)
    predicted = {0.0: float(sim.accessed.sum())}
    predicted.update({a: float(sim.rows[0, i + 1].sum()) for i, a in enumerate(alphas)})
    rows = []
    settings = [("none", 0.0)] + [("vip", a) for a in alphas]
    sampling_alone = None if depth == 1 else _sampling_alone(args, data, workload, budget.sampler_threads, depth)
    for precision, (cache, alpha) in itertools.product(args.precisions, settings):
        off = _run(args, precision, cache, alpha, 1)
        runs = [off] if depth == 1 else [off, _run(args, precision, cache, alpha, depth)]
        for row in runs:
            row["fetch_thread"] = row is not off and fetch_thread
            row["predicted_rows"] = predicted[alpha]
            row["rows_vs_sim"] = (row["rows_per_epoch"] - predicted[alpha]) / max(predicted[alpha], 1.0)
            sampling = off["sample_s"] if row is off else sampling_alone
            row["sampling_alone_s"] = sampling
            row["vs_slowest_stage"] = row["epoch_s"] / max(sampling, off["fetch_s"], off["compute_s"])
            rows.append(row)
    print(f"{args.part_dir}: {data.num_nodes:,} nodes, {data.feature_dtype} features, {data.num_parts} ranks, "
          f"{args.model}, fanouts {args.fanouts}, batch {args.batch_size}, hidden {args.hidden}, device {args.device}")
    print(budget.describe(pipeline_depth=args.pipeline_depth, fetch_thread=fetch_thread)
          + " (the baselines: the same torch threads, PyG sampling in "
          + (counted(workers, "worker process", "worker processes") if (workers := sampling_workers(budget)) else "the training thread") + ")")
    if depth == 1:
        print("the pipelined runs would be the runs with the pipeline off, so they are left out "
              f"(--pipeline-depth {PIPELINE_DEPTH} times them)")
    else:
        print(f"sampling alone with the pipeline's {counted(budget.sampler_threads, 'sampler thread')} and read-ahead "
              f"{sampler_read_ahead(depth, budget.sampler_threads)}: {sampling_alone:.3f} s per epoch (the pipelined "
              "runs' slowest stage counts it instead of the sampling of the runs without pipeline)")
    print("| cache | alpha | precision | pipeline | epoch s | sampling s | fetch s | fetch CPU s | compute s "
          "| compute CPU s | rows/epoch | vs simulator | epoch / slowest stage |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        pipe = f"depth {r['depth']}" + (", fetch thread" if r["fetch_thread"] else "") if r["depth"] > 1 else "off"
        print(f"| {r['cache']} | {r['alpha']:g} | {r['precision']} | {pipe} | {r['epoch_s']:.3f} | "
              f"{r['sample_s']:.3f} | {r['fetch_s']:.3f} | {r['fetch_cpu_s']:.3f} | {r['compute_s']:.3f} | "
              f"{r['compute_cpu_s']:.3f} | "
              f"{r['rows_per_epoch']:,.0f} | {r['rows_vs_sim']:+.2%} | {r['vs_slowest_stage']:.2f} |", flush=True)
    for b in [] if args.no_baseline else _baselines(args, workload):
        print(f"| {b['cache']} | all rows | {b['precision']} | off | {b['epoch_s']:.3f} | {b['sample_s']:.3f} | - | - "
              f"| {b['compute_s']:.3f} | {b['compute_cpu_s']:.3f} | 0 | - | - |", flush=True)
        rows.append(b)
    pyg = [r for r in rows if r["alpha"] is None and BASELINE_MODELS[PYG] in r["cache"]]
    if pyg:  # PyG's fastest setting against our fastest uncached run, as the GPU goal states them
        best = min(pyg, key=lambda r: r["epoch_s"])
        ours = min(r["epoch_s"] for r in rows if r["cache"] == "none")
        workers = "" if best["pyg_workers"] is None else f", {counted(best['pyg_workers'], 'worker')}"
        print(f"epoch against PyG's NeighborLoader + {BASELINE_MODELS[PYG]}: {ours:.3f} s against {best['epoch_s']:.3f} "
              f"s (its fastest{workers}): {best['epoch_s'] / ours:.2f}x")
    if args.outside_load:
        loaded, (idle, busy) = _alternating("outside_load", (0, args.outside_load),
                                            lambda load: _uncached_run(args, depth, load))
        idle_cpu, busy_cpu = _medians(loaded, "outside_load", (0, args.outside_load), "rank_cpu_s")
        print(f"\noutside load: pipeline depth {depth}, no cache, median epoch {idle:.3f} s idle and {busy:.3f} s "
              f"under {args.outside_load} busy processes: {busy / idle:.2f}x; rank 0 used {idle_cpu:.3f} CPU s per "
              f"epoch idle ({idle_cpu / idle:.2f} cores) and {busy_cpu:.3f} under load ({busy_cpu / busy:.2f} cores)")
        rows.extend(loaded)
    if args.compare_freed_memory:
        allocs, (kept, returned) = _alternating("reuse_freed_memory", (True, False),
                                                lambda reuse: _uncached_run(args, 1, reuse_freed_memory=reuse))
        print(f"\nfreed host memory: pipeline off, no cache, median epoch {kept:.3f} s kept for reuse and "
              f"{returned:.3f} s returned to the system: {returned / kept:.2f}x")
        rows.extend(allocs)
    for r in rows:
        r["num_parts"] = data.num_parts  # ranks, so `bench report` can plot scaling across runs
    write_outputs(args, KIND, rows, args.json_path)
    return 0
