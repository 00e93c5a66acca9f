"""Partitioning methods side by side: wall time, peak memory, edge cut and balance.

For every DATASET_DIR and every method of ``--methods``, ``--repeats`` times (the methods
interleaved), it runs ``salientpp partition`` in a fresh Python process and measures its wall
time and its peak resident memory (the process's own ``VmHWM``, read by the process itself as it
ends: the whole command, Python and the imports included). The quality comes from the written
``meta.json``; the outputs are deleted. Reported per row: the medians, the edge cut, the worst
imbalance of every constraint, and the ratios to the first method (the baseline).

With datasets of two or more sizes it also fits each method's time and peak memory linearly in
the number of edges (least squares) and prints what the fit and the memory estimate
(:func:`salientpp.resources.estimate_partition`) give for ogbn-papers100M (111,059,956 nodes,
3,231,371,744 directed edges).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..data.format import KIND as DATASET
from ..errors import InputError, check_int
from ..io import check_writable_file, read_meta
from .results import write_outputs
from ..parsing import name_list, parse_memory_limit, parse_seed
from ..plots import require_pyplot
from ..partition.format import KIND as PARTITIONED
from ..partition.partitioner import METHODS, check_options
from ..host import GiB, format_bytes
from ..resources import estimate_partition, multilevel_budget

# The kind its --json file declares (salientpp.bench.results) and its line in `salientpp bench --help`.
KIND = "salientpp-bench-partition"
SUMMARY = "partitioning methods side by side: wall time, peak memory, edge cut, balance; scaling"

# ogbn-papers100M: nodes and directed edges of its symmetric CSR (OGB's 1.6B undirected edges).
PAPERS100M = (111_059_956, 3_231_371_744)

# Runs one `salientpp partition` in this fresh process and prints {"code", "peak_bytes"} last.
_CHILD = """
import json, sys
from salientpp.cli import main
code = main(sys.argv[1:])
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
print(json.dumps({"code": code, "peak_bytes": peak}))
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("datasets", nargs="+", metavar="DATASET_DIR", help="dataset directories (salientpp prepare)")
    p.add_argument("--parts", "-k", type=int, required=True, metavar="K", help="number of partitions")
    p.add_argument("--methods", default="metis,multilevel",
                   help=f"methods, the first is the baseline of the ratios (default metis,multilevel; of "
                        f"{','.join(METHODS)})")
    p.add_argument("--repeats", type=int, default=1, help="runs per method and dataset (default 1)")
    p.add_argument("--memory-limit", metavar="SIZE", help="passed to every `salientpp partition`")
    p.add_argument("--seed", type=parse_seed, default=0, help="partitioning seed (default 0)")
    p.add_argument("--json", dest="json_path", metavar="FILE", help="write the results as JSON")
    p.add_argument("--plot", metavar="PNG", help="draw time and peak memory against the edges per method")


def _run_one(dataset: str, method: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One `salientpp partition` in a fresh process: wall seconds, peak bytes, quality."""
    out = work / f"{Path(dataset).name}-{method}"
    command = ["partition", dataset, str(out), "--parts", str(args.parts), "--method", method,
               "--seed", str(args.seed)] + (["--memory-limit", args.memory_limit] if args.memory_limit else [])
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CHILD, *command], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        result = {"code": done.returncode}
    if result["code"] != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise InputError(f"`salientpp {' '.join(command)}` failed ({said}); run it alone to see why")
    quality = read_meta(out, PARTITIONED)["quality"]
    shutil.rmtree(out)
    return {"seconds": seconds, "peak_bytes": result["peak_bytes"], "edge_cut": quality["edge_cut"],
            "cut_fraction": quality["cut_fraction"], "imbalance": quality["imbalance"]}


def _row(dataset: str, method: str, runs: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    return {"dataset": dataset, "method": method, "num_nodes": meta["num_nodes"], "num_edges": meta["num_edges"],
            "seconds": statistics.median(r["seconds"] for r in runs),
            "peak_bytes": statistics.median(r["peak_bytes"] for r in runs),
            "edge_cut": runs[0]["edge_cut"], "cut_fraction": runs[0]["cut_fraction"],
            "imbalance": runs[0]["imbalance"], "runs": runs}


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one row per dataset and method, ratios to the dataset's first method."""
    lines = ["| dataset | method | wall s | peak RSS | edge cut | worst imbalance | cut × | RSS × | time × |",
             "|---|---|---:|---:|---:|---|---:|---:|---:|"]
    baseline: dict[str, dict[str, Any]] = {}
    for r in rows:
        base = baseline.setdefault(r["dataset"], r)
        worst = max(r["imbalance"], key=r["imbalance"].get)
        lines.append(f"| {Path(r['dataset']).name} | {r['method']} | {r['seconds']:.1f} | "
                     f"{r['peak_bytes'] / GiB:.2f} GiB | {100 * r['cut_fraction']:.2f}% | "
                     f"{worst} {100 * r['imbalance'][worst]:.2f}% | {r['edge_cut'] / max(base['edge_cut'], 1):.3f} | "
                     f"{r['peak_bytes'] / base['peak_bytes']:.3f} | {r['seconds'] / base['seconds']:.2f} |")
    return "\n".join(lines)


def extrapolate(rows: list[dict[str, Any]], method: str, num_nodes: int, num_edges: int,
                budget: int) -> str | None:
    """A line on ``method`` at ``num_edges``: seconds and peak bytes fitted linearly in the edges
    over ``rows`` (at least two sizes), and the memory estimate; ``None`` with fewer sizes."""
    points = sorted({r["num_edges"]: r for r in rows if r["method"] == method}.values(), key=lambda r: r["num_edges"])
    if len(points) < 2:
        return None
    edges = np.array([r["num_edges"] for r in points], dtype=float)
    seconds = np.polyval(np.polyfit(edges, [r["seconds"] for r in points], 1), num_edges)
    peak = np.polyval(np.polyfit(edges, [r["peak_bytes"] for r in points], 1), num_edges)
    estimate = estimate_partition({"num_nodes": num_nodes, "num_edges": num_edges, "num_features": 1,
                                   "feature_dtype": "float32"}, 8, method, budget)
    return (f"{method} at {num_nodes:,} nodes and {num_edges:,} edges: about {seconds / 60:.0f} min and "
            f"{format_bytes(int(peak))} fitted linearly in the edges over {len(points)} sizes; the memory "
            f"estimate says {format_bytes(estimate.total)}")


def _plot(rows: list[dict[str, Any]], path: str, parts: int) -> None:
    plt = require_pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for method in dict.fromkeys(r["method"] for r in rows):
        points = sorted((r for r in rows if r["method"] == method), key=lambda r: r["num_edges"])
        edges = [r["num_edges"] for r in points]
        axes[0].plot(edges, [r["seconds"] for r in points], marker="o", label=method)
        axes[1].plot(edges, [r["peak_bytes"] / GiB for r in points], marker="o", label=method)
    for ax, label in zip(axes, ("wall seconds", "peak RSS (GiB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("directed edges")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"salientpp partition --parts {parts}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


def main(args: argparse.Namespace) -> int:
    methods = name_list(args.methods, "--methods", "metis,multilevel")
    check_int(args.repeats, "--repeats")
    limit = parse_memory_limit(args.memory_limit)
    for path, option in ((args.json_path, "--json"), (args.plot, "--plot")):
        if path is not None:
            check_writable_file(path, option)
    metas = {dataset: read_meta(dataset, DATASET) for dataset in args.datasets}
    for dataset, meta in metas.items():
        for method in methods:
            check_options(meta["num_nodes"], args.parts, method, args.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-partition-", dir=Path(args.datasets[0]).resolve().parent) as work:
        for dataset, meta in metas.items():
            runs: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
            for repeat in range(args.repeats):
                for method in methods:
                    runs[method].append(_run_one(dataset, method, args, Path(work)))
                    print(f"{Path(dataset).name} {method} run {repeat + 1}/{args.repeats}: "
                          f"{runs[method][-1]['seconds']:.1f} s, {format_bytes(runs[method][-1]['peak_bytes'])}",
                          flush=True)
            rows += [_row(dataset, method, runs[method], meta) for method in methods]
    print()
    print(table(rows))
    budget = multilevel_budget({"num_nodes": PAPERS100M[0], "num_edges": PAPERS100M[1], "num_features": 1,
                                "feature_dtype": "float32"}, limit)
    for method in methods:
        line = extrapolate(rows, method, *PAPERS100M, budget=budget)
        if line:
            print(line)
    write_outputs(args, KIND, rows, args.json_path, args.plot, lambda path: _plot(rows, path, args.parts))
    return 0
