"""Sampling throughput (sampled edges per second): salientpp's C++ loader vs PyG's NeighborLoader.

PyG's column needs ``torch_sparse`` (with ``torch_scatter``) or ``pyg-lib``; without them it is
skipped. Both sample the same graph from the same seeds with the same fanouts and batch size.
The two samplers expand different node sets (salientpp re-expands every node of the previous
layer, PyG only the new frontier), so edges per batch differ and throughput is compared in
edges per second.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ..cache.workload import parse_fanouts
from ..data.format import load_dataset
from ..errors import InputError
from ..io import check_output_dir, write_text_atomic
from ..parsing import number_list
from ..sampling import NeighborLoader, NeighborSampler

PYG_INSTALL_HINT = ("install torch_scatter and torch_sparse from source with "
                    "`pip install --no-build-isolation torch_scatter torch_sparse` (about 10 minutes each)")


@dataclass
class BenchRow:
    """One measured configuration; rates are medians over the repeats.

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


def pyg_available() -> bool:
    """Whether PyG's NeighborLoader has a sampling backend (pyg-lib or torch_sparse)."""
    try:
        import torch_geometric.typing as pyg_typing
    except ImportError:
        return False
    return bool(pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _measure(impl: str, threads: int, make_batches, count_edges, repeats: int) -> BenchRow:
    """Runs one warm-up epoch (pages in the graph), then ``repeats`` timed ones."""
    edges_per_s, edges_per_cpu_s, batches_per_s = [], [], []
    edges_per_batch = 0.0
    for repeat in range(repeats + 1):
        edges = batches = 0
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        for batch in make_batches(repeat):
            edges += count_edges(batch)
            batches += 1
        elapsed, cpu = time.perf_counter() - start, _cpu_seconds() - cpu_start
        if repeat > 0:
            edges_per_s.append(edges / elapsed)
            edges_per_cpu_s.append(edges / max(cpu, 1e-9))
            batches_per_s.append(batches / elapsed)
            edges_per_batch = edges / batches
    return BenchRow(impl, threads, statistics.median(edges_per_s), statistics.median(edges_per_cpu_s),
                    statistics.median(batches_per_s), edges_per_batch, edges_per_s)


def bench_salientpp(rowptr, col, seeds: torch.Tensor, fanouts: list[int], batch_size: int, threads: int,
                    repeats: int) -> BenchRow:
    loader = NeighborLoader(NeighborSampler(rowptr, col, fanouts), seeds, batch_size, shuffle=False,
                            num_threads=threads, queue_depth=max(4, 2 * threads))

    def epoch(repeat):
        loader.set_epoch(repeat)
        return loader

    return _measure("salientpp", threads, epoch, lambda b: b.num_sampled_edges, repeats)


def bench_pyg(rowptr, col, seeds: torch.Tensor, fanouts: list[int], batch_size: int, threads: int,
              repeats: int) -> BenchRow:
    """PyG's NeighborLoader in the main process with ``torch.set_num_threads(threads)``."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader as PygNeighborLoader

    num_nodes = rowptr.shape[0] - 1
    row = torch.repeat_interleave(torch.arange(num_nodes), torch.from_numpy(np.diff(rowptr)))
    data = Data(edge_index=torch.stack([row, torch.from_numpy(np.asarray(col))]), num_nodes=num_nodes)
    loader = PygNeighborLoader(data, num_neighbors=fanouts, batch_size=batch_size, input_nodes=seeds,
                               shuffle=False)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _measure("pyg", threads, lambda repeat: loader, lambda b: b.edge_index.shape[1], repeats)
    finally:
        torch.set_num_threads(previous)


def run_sampler_bench(dataset_dir: str | Path, fanouts: list[int], batch_size: int, threads: list[int],
                      num_batches: int, repeats: int, with_pyg: bool = True
                      ) -> tuple[SamplerBenchConfig, list[BenchRow]]:
    """Measures both samplers on ``num_batches`` batches of training seeds (fixed random subset)."""
    if batch_size < 1 or num_batches < 1 or repeats < 1 or not threads or min(threads) < 1:
        raise InputError("batch size, number of batches, repeats and thread counts must all be >= 1")
    dataset = load_dataset(dataset_dir)
    rowptr, col = dataset.rowptr, dataset.col
    train = np.asarray(dataset.train_idx)
    take = min(train.shape[0], num_batches * batch_size)
    seeds = torch.from_numpy(np.random.default_rng(0).permutation(train)[:take].astype(np.int64))
    config = SamplerBenchConfig(str(dataset_dir), dataset.num_nodes, dataset.num_edges, list(fanouts), batch_size,
                                -(-take // batch_size), repeats, list(threads))
    rows = [bench_salientpp(rowptr, col, seeds, fanouts, batch_size, t, repeats) for t in threads]
    if with_pyg:
        rows += [bench_pyg(rowptr, col, seeds, fanouts, batch_size, t, repeats) for t in threads]
    return config, rows


def format_table(config: SamplerBenchConfig, rows: list[BenchRow]) -> str:
    ours = {r.threads: r for r in rows if r.impl == "salientpp"}
    pyg = {r.threads: r for r in rows if r.impl == "pyg"}
    lines = [f"graph {config.dataset}: {config.num_nodes:,} nodes, {config.num_edges:,} directed edges; "
             f"fanouts {','.join(map(str, config.fanouts))}, batch size {config.batch_size}, "
             f"{config.num_batches} batches per repeat, median of {config.repeats} repeats",
             f"{'sampler':<10} {'threads':>7} {'edges/batch':>12} {'batches/s':>10} {'M edges/s':>10} "
             f"{'M edges/cpu-s':>13} {'vs 1 thread':>11} {'vs PyG':>7}"]
    for row in rows:
        base = (ours if row.impl == "salientpp" else pyg).get(1)
        scaling = f"{row.edges_per_s / base.edges_per_s:.2f}x" if base else "-"
        versus = (f"{row.edges_per_s / pyg[row.threads].edges_per_s:.1f}x"
                  if row.impl == "salientpp" and row.threads in pyg else "-")
        lines.append(f"{row.impl:<10} {row.threads:>7} {row.edges_per_batch:>12,.0f} {row.batches_per_s:>10.2f} "
                     f"{row.edges_per_s / 1e6:>10.2f} {row.edges_per_cpu_s / 1e6:>13.2f} {scaling:>11} {versus:>7}")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset_dir", help="dataset directory (salientpp prepare)")
    p.add_argument("--fanouts", default="15,10,5", help="per-hop fanouts, seeds first (15,10,5)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--threads", default="1,2", help="thread counts to measure (1,2)")
    p.add_argument("--batches", type=int, default=30, help="batches per repeat (default 30)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats after one warm-up (median reported)")
    p.add_argument("--no-pyg", action="store_true", help="skip the PyG NeighborLoader column")
    p.add_argument("--json", help="also write the results to this JSON file (must not exist)")


def main(args: argparse.Namespace) -> int:
    fanouts = list(parse_fanouts(args.fanouts))
    threads = list(number_list(args.threads, int, "--threads", "1,2"))
    with_pyg = not args.no_pyg and pyg_available()
    if args.json:
        check_output_dir(args.json, "output file")
    config, rows = run_sampler_bench(args.dataset_dir, fanouts, args.batch_size, threads, args.batches,
                                     args.repeats, with_pyg)
    print(format_table(config, rows))
    if not with_pyg and not args.no_pyg:
        print(f"PyG column skipped: neither torch_sparse nor pyg-lib is importable; {PYG_INSTALL_HINT}")
    if args.json:
        write_text_atomic(args.json, json.dumps({"config": asdict(config), "rows": [asdict(r) for r in rows]},
                                                indent=2) + "\n")
    return 0
