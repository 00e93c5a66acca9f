"""Sampling throughput (sampled edges per second): salientpp's samplers vs PyG's NeighborLoader.

Samplers (``--samplers``, default ``nodewise``):

* ``nodewise``: the C++ thread-pool sampler, one row per ``--sampler-threads`` count (its worker threads).
* ``bulk``: the same node-wise distribution drawn by :class:`~salientpp.sampling.BulkSampler`,
  ``k`` minibatches per bulk step in the loader's thread, one row per ``k`` of ``--bulk-sizes``
  and per thread count (``torch.set_num_threads``: torch's intra-op threads do the work).
* ``ladies``: layer-wise LADIES sampling by the same bulk sampler, rows as for ``bulk``. Its
  ``--ladies-fanouts`` are *nodes drawn per layer* (e.g. 512,512,512), not neighbours per node
  (they serve every kind whose fanouts are layer sizes, ``SamplerKind.layer_sizes``).
* PyG's NeighborLoader (``torch.set_num_threads``), unless ``--no-pyg``; it needs
  ``torch_sparse`` (with ``torch_scatter``) or ``pyg-lib`` and is skipped without them.

All sample the same graph from the same seeds with the same batch size (and, but for LADIES, the
same fanouts); every configuration runs one warm-up epoch and then ``--repeats`` timed epochs,
interleaved (repeat ``r`` of every configuration before repeat ``r + 1`` of any), so that a
change of the machine's load hits all of them alike; the table shows the medians. Samplers
expand different node sets (salientpp's node-wise samplers re-expand every node of the previous
layer, PyG only the new frontier, LADIES a few hundred nodes per layer), so edges per batch
differ and throughput is compared in sampled edges per second: "vs nodewise" divides by the C++
node-wise sampler at the same thread count, "vs PyG" by PyG at the same thread count.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..sampling import parse_fanouts
from ..data.format import load_dataset
from ..errors import InputError
from ..io import check_output_dir, check_output_paths
from .results import write_outputs
from .pyg_baseline import sampling_backend
from ..options import Declared, Needs, Option, add_arguments as add_declared, check_applies
from ..parsing import flag_names, name_list, number_list
from ..plots import check_plot_path, require_pyplot
from ..sampling import NeighborLoader
from ..sampling import DEFAULT_SAMPLER, NODEWISE, SAMPLERS, SamplerKind, check_fanouts, check_sampler, make_sampler
from ..sampling.kinds import kinds_with

# The kind its --json file declares (salientpp.bench.results) and its line in `salientpp bench --help`.
KIND = "salientpp-bench-sampler"
SUMMARY = "sampled edges/s of the C++ node-wise, bulk and LADIES samplers vs PyG's NeighborLoader"

PYG_INSTALL_HINT = ("install torch_scatter and torch_sparse from source with "
                    "`pip install --no-build-isolation torch_scatter torch_sparse` (about 10 minutes each)")

DEFAULT_BULK_SIZES = (1, 4, 16, 64)
DEFAULT_LADIES_LAYER_SIZE = 512
NODEWISE_IMPL = "salientpp"  # the C++ node-wise sampler's ``impl`` in the rows and the JSON
TABLE_NAMES = {NODEWISE_IMPL: NODEWISE.value}
IMPLS = {name: impl for impl, name in TABLE_NAMES.items()}  # a kind's ``impl`` where it is not the kind's name


@dataclass
class BenchRow:
    """One measured configuration; rates are medians over the repeats.

    ``impl`` is ``"salientpp"`` (the C++ node-wise sampler), ``"bulk"``, ``"ladies"`` or
    ``"pyg"``; ``bulk_size`` is the minibatches per bulk step ``k`` of ``bulk`` and ``ladies``
    rows and ``None`` for the others. ``threads`` is the C++ sampler's worker threads, or
    ``torch.set_num_threads`` for the others.

    ``edges_per_cpu_s`` divides by the CPU time of the whole process (all threads): on a shared
    machine it shows the cost per edge even when other jobs keep the threads off the cores.
    """

    impl: str
    threads: int
    edges_per_s: float
    edges_per_cpu_s: float
    batches_per_s: float
    edges_per_batch: float
    repeat_edges_per_s: list[float]
    bulk_size: int | None = None


@dataclass
class SamplerBenchConfig:
    dataset: str
    num_nodes: int
    num_edges: int
    fanouts: list[int]
    batch_size: int
    num_batches: int
    repeats: int
    threads: list[int]
    samplers: list[str] = field(default_factory=lambda: [DEFAULT_SAMPLER])
    bulk_sizes: list[int] = field(default_factory=list)
    ladies_fanouts: list[int] | None = None
    device: str = "cpu"  # where the bulk samplers run (the C++ sampler and PyG run on the CPU)


@dataclass
class _Case:
    """One configuration to time: ``epoch(repeat)`` iterates over one epoch's batches."""

    impl: str
    threads: int
    epoch: Callable[[int], Iterable]
    count_edges: Callable[[object], int]
    torch_threads: int | None = None  # torch.set_num_threads during its epochs (restored after)
    bulk_size: int | None = None


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def _torch_threads(threads: int | None):
    """``torch.set_num_threads(threads)`` inside the block (nothing for ``None``), restored after."""
    if threads is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _time_epoch(case: _Case, repeat: int) -> tuple[int, int, float, float]:
    """``(edges, batches, seconds, cpu seconds)`` of one epoch of ``case``."""
    edges = batches = 0
    with _torch_threads(case.torch_threads):
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        for batch in case.epoch(repeat):
            edges += case.count_edges(batch)
            batches += 1
        elapsed, cpu = time.perf_counter() - start, _cpu_seconds() - cpu_start
    return edges, batches, elapsed, cpu


def _measure_cases(cases: Sequence[_Case], repeats: int) -> list[BenchRow]:
    """One warm-up epoch per case (pages in the graph), then ``repeats`` timed ones, interleaved:
    repeat ``r`` of every case runs before repeat ``r + 1`` of any. Repeat ``r`` is epoch ``r``."""
    timed: list[list[tuple[int, int, float, float]]] = [[] for _ in cases]
    for repeat in range(repeats + 1):
        for runs, case in zip(timed, cases):
            result = _time_epoch(case, repeat)
            if repeat > 0:
                runs.append(result)
    rows = []
    for case, runs in zip(cases, timed):
        edges_per_s = [e / s for e, _, s, _ in runs]
        edges, batches = runs[-1][0], runs[-1][1]
        rows.append(BenchRow(case.impl, case.threads, statistics.median(edges_per_s),
                             statistics.median(e / max(c, 1e-9) for e, _, _, c in runs),
                             statistics.median(b / s for _, b, s, _ in runs), edges / max(batches, 1), edges_per_s,
                             case.bulk_size))
    return rows


def _loader_epochs(loader: NeighborLoader) -> Callable[[int], NeighborLoader]:
    def epoch(repeat):
        loader.set_epoch(repeat)
        return loader
    return epoch


def _threads_case(impl: str, sampler, seeds: torch.Tensor, batch_size: int, threads: int) -> _Case:
    """``sampler`` (one batch at a time) in a loader of ``threads`` sampling threads."""
    loader = NeighborLoader(sampler, seeds, batch_size, shuffle=False, sampler_threads=threads,
                            read_ahead=max(4, 2 * threads))
    return _Case(impl, threads, _loader_epochs(loader), lambda b: b.num_sampled_edges)


def _bulk_case(kind: SamplerKind, rowptr, col, seeds: torch.Tensor, fanouts: Sequence[int], batch_size: int,
               threads: int, bulk_size: int) -> _Case:
    """The bulk sampler of ``kind`` with ``k = bulk_size`` over the CSR ``rowptr``, ``col`` (on
    the device it runs on), run under ``torch.set_num_threads(threads)``."""
    sampler = make_sampler(rowptr, col, fanouts, kind, minibatches_per_bulk=bulk_size, device=rowptr.device)
    loader = NeighborLoader(sampler, seeds, batch_size, shuffle=False)
    return _Case(kind.value, threads, _loader_epochs(loader), lambda b: b.num_sampled_edges, threads, bulk_size)


def _pyg_loader(rowptr, col, seeds: torch.Tensor, fanouts: list[int], batch_size: int):
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader as PygNeighborLoader

    num_nodes = rowptr.shape[0] - 1
    row = torch.repeat_interleave(torch.arange(num_nodes), torch.from_numpy(np.diff(np.asarray(rowptr))))
    data = Data(edge_index=torch.stack([row, torch.from_numpy(np.asarray(col))]), num_nodes=num_nodes)
    return PygNeighborLoader(data, num_neighbors=fanouts, batch_size=batch_size, input_nodes=seeds, shuffle=False)


def _pyg_case(loader, threads: int) -> _Case:
    return _Case("pyg", threads, lambda repeat: loader, lambda b: b.edge_index.shape[1], threads)


def default_ladies_fanouts(fanouts: Sequence[int]) -> list[int]:
    """``DEFAULT_LADIES_LAYER_SIZE`` nodes per layer, as many layers as ``fanouts``."""
    return [DEFAULT_LADIES_LAYER_SIZE] * len(fanouts)


def check_options(samplers: Sequence[str], bulk_sizes: Sequence[int], fanouts: Sequence[int],
                  ladies_fanouts: Sequence[int] | None, batch_size: int, num_batches: int, repeats: int,
                  threads: Sequence[int]) -> list[SamplerKind]:
    """Raise :class:`InputError` (one sentence) for an option the benchmark cannot run; return
    the samplers as :class:`SamplerKind`. Cheap: the CLI calls it before it reads the dataset.
    ``ladies_fanouts`` are checked by the one fanout rule (:func:`check_fanouts`) of each kind
    whose fanouts are layer sizes, one per hop of ``fanouts``."""
    if batch_size < 1 or num_batches < 1 or repeats < 1 or not threads or min(threads) < 1:
        raise InputError("batch size, number of batches, repeats and thread counts must all be >= 1")
    if not samplers:
        raise InputError(f"--samplers is empty; name at least one of {', '.join(SAMPLERS)}")
    kinds = []
    for name in samplers:
        if name not in SAMPLERS:
            hint = " (PyG is measured unless --no-pyg is given)" if name == "pyg" else ""
            raise InputError(f"--samplers names the unknown sampler {name!r}; choose from {', '.join(SAMPLERS)}{hint}")
        kind = check_sampler(name)
        if kind in kinds:
            raise InputError(f"--samplers names {name} twice; name each sampler once")
        kinds.append(kind)
    if any(kind.draws_in_bulk for kind in kinds):
        if not bulk_sizes:
            raise InputError("--bulk-sizes is empty; give the minibatches per bulk step to measure, e.g. 1,4,16,64")
        bad = [k for k in bulk_sizes if k < 1]
        if bad:
            raise InputError(f"--bulk-sizes must be integers >= 1 (minibatches per bulk step), got {bad[0]}")
        if len(set(bulk_sizes)) != len(bulk_sizes):
            raise InputError(f"--bulk-sizes lists a size twice ({','.join(map(str, bulk_sizes))}); "
                             "give each size once")
    if ladies_fanouts is not None:
        for kind in kinds:
            if kind.layer_sizes:
                check_fanouts(ladies_fanouts, kind, len(fanouts), "--ladies-fanouts")
    return kinds


def run_sampler_bench(dataset_dir: str | Path, fanouts: list[int], batch_size: int, threads: list[int],
                      num_batches: int, repeats: int, with_pyg: bool = True,
                      samplers: Sequence[str] = (DEFAULT_SAMPLER,),
                      bulk_sizes: Sequence[int] = DEFAULT_BULK_SIZES, ladies_fanouts: Sequence[int] | None = None,
                      device: str = "cpu") -> tuple[SamplerBenchConfig, list[BenchRow]]:
    """Measures the samplers on ``num_batches`` batches of training seeds (fixed random subset).

    Rows: the samplers that draw one batch at a time (the C++ node-wise sampler) per thread count,
    then those that draw in bulk (``bulk``, ``ladies``) per bulk size and thread count, then PyG
    per thread count; all measured side by side (:func:`_measure_cases`). ``ladies_fanouts``
    (nodes per layer, for the kinds whose fanouts are layer sizes) defaults to 512 per hop of
    ``fanouts``. ``device``: where the bulk samplers run (``cuda``: the CSR is copied to the GPU once).
    """
    kinds = check_options(samplers, bulk_sizes, fanouts, ladies_fanouts, batch_size, num_batches, repeats, threads)
    bulk_kinds = [kind for kind in kinds if kind.draws_in_bulk]
    bulk_sizes = list(bulk_sizes) if bulk_kinds else []
    if any(kind.layer_sizes for kind in kinds):
        ladies_fanouts = list(ladies_fanouts) if ladies_fanouts is not None else default_ladies_fanouts(fanouts)
    else:
        ladies_fanouts = None
    dataset = load_dataset(dataset_dir)
    dataset.schema.require_homogeneous("bench sampler", dataset_dir)
    rowptr, col = dataset.rowptr, dataset.col
    train = np.asarray(dataset.train_idx)
    take = min(train.shape[0], num_batches * batch_size)
    seeds = torch.from_numpy(np.random.default_rng(0).permutation(train)[:take].astype(np.int64))
    config = SamplerBenchConfig(str(dataset_dir), dataset.num_nodes, dataset.num_edges, list(fanouts), batch_size,
                                -(-take // batch_size), repeats, list(threads), [k.value for k in kinds],
                                bulk_sizes, ladies_fanouts, device)
    cases = []
    for kind in kinds:
        if not kind.draws_in_bulk:
            sampler = make_sampler(rowptr, col, ladies_fanouts if kind.layer_sizes else fanouts, kind)
            cases += [_threads_case(IMPLS.get(kind.value, kind.value), sampler, seeds, batch_size, t) for t in threads]
    if bulk_kinds:
        # One pair of tensors over the CSR, shared by every bulk sampler (not copied on the CPU).
        rowptr_t, col_t = (torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device) for a in (rowptr, col))
        for kind in bulk_kinds:
            layers = ladies_fanouts if kind.layer_sizes else fanouts
            cases += [_bulk_case(kind, rowptr_t, col_t, seeds, layers, batch_size, t, k)
                      for k in bulk_sizes for t in threads]
    if with_pyg:
        loader = _pyg_loader(rowptr, col, seeds, fanouts, batch_size)
        cases += [_pyg_case(loader, t) for t in threads]
    return config, _measure_cases(cases, repeats)


def _ratio(value: float, base: BenchRow | None, digits: int) -> str:
    """``value`` over ``base``'s edges/s as ``"1.23x"``; one more digit below 0.1 (``"0.028x"``)."""
    if base is None or base.edges_per_s <= 0:
        return "-"
    ratio = value / base.edges_per_s
    return f"{ratio:.{digits + (ratio < 0.1)}f}x"


def format_table(config: SamplerBenchConfig, rows: list[BenchRow]) -> str:
    """The rows as a text table: per row the sampler (``nodewise`` is the C++ sampler), ``k``
    (minibatches per bulk step), threads, edges per batch, batches/s, M edges/s, M edges per
    CPU-second and the edges/s ratios to the same sampler with 1 thread, to the C++ node-wise
    sampler at the same thread count (bulk and LADIES rows) and to PyG at the same thread count."""
    by_key = {(r.impl, r.bulk_size, r.threads): r for r in rows}
    nodewise = {r.threads: r for r in rows if r.impl == NODEWISE_IMPL}
    pyg = {r.threads: r for r in rows if r.impl == "pyg"}
    header = (f"graph {config.dataset}: {config.num_nodes:,} nodes, {config.num_edges:,} directed edges; "
              f"fanouts {','.join(map(str, config.fanouts))}, batch size {config.batch_size}, "
              f"{config.num_batches} batches per repeat, median of {config.repeats} repeats")
    if config.ladies_fanouts:
        header += f"; LADIES nodes per layer {','.join(map(str, config.ladies_fanouts))}"
    if config.device != "cpu":
        header += f"; bulk samplers on {config.device}"
    lines = [header,
             f"{'sampler':<9} {'k':>3} {'threads':>7} {'edges/batch':>12} {'batches/s':>10} {'M edges/s':>10} "
             f"{'M edges/cpu-s':>13} {'vs 1 thread':>11} {'vs nodewise':>11} {'vs PyG':>7}"]
    for row in rows:
        name = TABLE_NAMES.get(row.impl, row.impl)
        k = "-" if row.bulk_size is None else str(row.bulk_size)
        scaling = _ratio(row.edges_per_s, by_key.get((row.impl, row.bulk_size, 1)), 2)
        versus_nodewise = "-" if row.bulk_size is None else _ratio(row.edges_per_s, nodewise.get(row.threads), 2)
        versus_pyg = "-" if row.impl == "pyg" else _ratio(row.edges_per_s, pyg.get(row.threads), 1)
        lines.append(f"{name:<9} {k:>3} {row.threads:>7} {row.edges_per_batch:>12,.0f} {row.batches_per_s:>10.2f} "
                     f"{row.edges_per_s / 1e6:>10.2f} {row.edges_per_cpu_s / 1e6:>13.2f} {scaling:>11} "
                     f"{versus_nodewise:>11} {versus_pyg:>7}")
    too_big = sorted({r.bulk_size for r in rows if r.bulk_size is not None and r.bulk_size > config.num_batches})
    if too_big:
        lines.append(f"note: k = {','.join(map(str, too_big))} exceeds the {config.num_batches} batches per repeat, "
                     f"so those bulk steps hold only {config.num_batches} minibatches; raise --batches "
                     "(or lower --batch-size) to measure them")
    return "\n".join(lines)


def plot_bulk(config: SamplerBenchConfig, rows: list[BenchRow], path: str) -> None:
    """M edges/s against ``k`` (log x) for the bulk and LADIES rows, one line per sampler and
    thread count; horizontal lines for the C++ node-wise sampler (and PyG) per thread count.
    The y axis is logarithmic when the rates span more than a factor of 10."""

    plt = require_pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    threads = sorted({r.threads for r in rows})
    color = {t: colors[i % len(colors)] for i, t in enumerate(threads)}
    bulk_impls = dict.fromkeys(r.impl for r in rows if r.bulk_size is not None)  # in the rows' order
    for i, impl in enumerate(bulk_impls):
        for t in threads:
            points = sorted((r.bulk_size, r.edges_per_s / 1e6) for r in rows if r.impl == impl and r.threads == t)
            if points:
                ax.plot(*zip(*points), marker="osD^v"[i % 5], color=color[t], linestyle=("-", "-.", ":")[i % 3],
                        label=f"{check_sampler(impl).title}, {t} thread(s)")
    for impl, style, label in ((NODEWISE_IMPL, "--", "C++ node-wise"), ("pyg", ":", "PyG")):
        for r in rows:
            if r.impl == impl:
                ax.axhline(r.edges_per_s / 1e6, color=color[r.threads], linestyle=style,
                           label=f"{label}, {r.threads} thread(s)")
    sizes = sorted({r.bulk_size for r in rows if r.bulk_size is not None})
    ax.set_xscale("log", base=2)
    rates = [r.edges_per_s for r in rows if r.edges_per_s > 0]
    if rates and max(rates) > 10 * min(rates):  # the C++ sampler can be far above the bulk lines
        ax.set_yscale("log")
    if sizes:
        ax.set_xticks(sizes, [str(k) for k in sizes])
    ax.set_xlabel("k, minibatches per bulk step")
    ax.set_ylabel("M sampled edges / s")
    ax.set_title(f"{Path(config.dataset).name}: fanouts {','.join(map(str, config.fanouts))}, "
                 f"batch size {config.batch_size}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset_dir", help="dataset directory (salientpp prepare)")
    p.add_argument("--fanouts", default="15,10,5", help="per-hop fanouts, seeds first (15,10,5)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument(*flag_names("--sampler-threads"), default="1,2", help="sampler thread counts to measure (1,2)")
    p.add_argument("--batches", type=int, default=30, help="batches per repeat (default 30)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats after one warm-up (median reported)")
    p.add_argument("--samplers", default=DEFAULT_SAMPLER, metavar="S1,S2,...",
                   help=f"samplers to measure, from {', '.join(SAMPLERS)} (default nodewise; PyG is added "
                        "unless --no-pyg)")
    p.add_argument("--bulk-sizes", default=",".join(map(str, DEFAULT_BULK_SIZES)), metavar="K1,K2,...",
                   help=f"minibatches per bulk step k for {kinds_with('draws_in_bulk')}, one row each "
                        f"(default {','.join(map(str, DEFAULT_BULK_SIZES))})")
    p.add_argument("--no-pyg", action="store_true", help="skip the PyG NeighborLoader column")
    add_declared(p, KIND_OPTIONS, defaults=True)
    p.add_argument("--json", help="also write the results to this JSON file (must not exist)")
    p.add_argument("--plot", metavar="OUT.png",
                   help="write a plot of M edges/s vs k (bulk, ladies; lines for nodewise) here (matplotlib; "
                        "must not exist)")


def _measuring(rule: str) -> Needs:
    """Where an option applies only when ``--samplers`` names a kind whose field ``rule`` is true
    (of the kinds measured, a list of :class:`SamplerKind`)."""
    return Needs(f"--samplers naming {kinds_with(rule)}", lambda kinds: any(getattr(kind, rule) for kind in kinds))


# The options that apply only to some of the kinds measured (main refuses them otherwise).
KIND_OPTIONS = (
    Declared("ladies_fanouts", None, Option(
        "layer sizes of the kinds whose fanouts are nodes drawn per layer (not neighbours per node), seeds first, "
        "one per hop of --fanouts", metavar="L1,L2,...", default_text=f"{DEFAULT_LADIES_LAYER_SIZE} per layer",
        needs=_measuring("layer_sizes"))),
    Declared("device", "cpu", Option("where the kinds that can draw on a GPU run (the C++ node-wise sampler is always "
                                     "on the CPU)", choices=("cpu", "cuda"), needs=_measuring("gpu"))))


def main(args: argparse.Namespace) -> int:

    fanouts = list(parse_fanouts(args.fanouts))
    threads = list(number_list(args.sampler_threads, int, "--sampler-threads", "1,2"))
    samplers = name_list(args.samplers, "--samplers", "nodewise,bulk,ladies")
    bulk_sizes = list(number_list(args.bulk_sizes, int, "--bulk-sizes", "1,4,16,64"))
    ladies_fanouts = (None if args.ladies_fanouts is None
                      else list(number_list(args.ladies_fanouts, int, "--ladies-fanouts", "512,512")))
    kinds = check_options(samplers, bulk_sizes, fanouts, ladies_fanouts, args.batch_size, args.batches, args.repeats,
                          threads)
    check_applies(args, KIND_OPTIONS, kinds)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda needs a GPU that torch can use, and there is none here; run on a GPU machine "
                         "or leave --device at cpu")
    with_pyg = not args.no_pyg and sampling_backend() is not None
    check_output_paths({"--json": args.json, "--plot": args.plot})
    if args.json is not None:
        check_output_dir(args.json, "output file")
    if args.plot is not None:
        check_plot_path(args.plot)
    config, rows = run_sampler_bench(args.dataset_dir, fanouts, args.batch_size, threads, args.batches,
                                     args.repeats, with_pyg, samplers, bulk_sizes, ladies_fanouts, args.device)
    print(format_table(config, rows))
    if not with_pyg and not args.no_pyg:
        print(f"PyG column skipped: neither torch_sparse nor pyg-lib is importable; {PYG_INSTALL_HINT}")
    write_outputs(args, KIND, {"config": asdict(config), "rows": [asdict(r) for r in rows]}, args.json, args.plot,
                  lambda path: plot_bulk(config, rows, path))
    return 0
