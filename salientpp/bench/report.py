"""Report: Markdown tables and PNG plots from the ``--json`` outputs of ``salientpp bench
sampler|vip|simulate|train`` and ``salientpp simulate``, and from the ``results.json`` of the
OGB experiment scripts (``experiments/ogb``). Each file is read by the kind it declares
(:data:`READERS`); a file without one of those kinds is refused.

Tables: sampler throughput, VIP analysis time, remote rows per epoch per policy and alpha, epoch
time and its breakdown. Plots (``--out``, needs matplotlib): communication volume vs alpha per
policy (one plot per simulation), the epoch-time breakdown per variant (stacked bars), and epoch
time vs the number of ranks per variant (when the inputs cover at least two rank counts).
"""
from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..cache.simulator import RESULT_KIND as SIMULATE_KIND, efficiency_text
from ..errors import InputError, shown
from ..io import atomic_output_dir, check_input_file, check_output_dir, mark_complete
from ..plots import require_pyplot
from ..train.config import FP32
from .results import ROWS_KEY, declared_kind
from .sampler import KIND as SAMPLER_KIND
from .simulate import KIND as BENCH_SIMULATE_KIND
from .train import KIND as TRAIN_KIND
from .vip import KIND as VIP_KIND

# Its line in `salientpp bench --help`.
SUMMARY = "Markdown tables and PNG plots from the --json outputs of the other benchmarks"

# The kind of the experiment scripts' results.json (experiments/ogb/common.py, RESULTS_KIND).
EXPERIMENT_KIND = "salientpp-experiment"


def _cpu_part(row: dict[str, Any], wall: str, cpu: str) -> float:
    """The CPU seconds of a stage, at most its wall time; 0 where the row has none (``bench train``
    JSON from before 2026-11-26 has no fetch CPU)."""
    return min(row.get(cpu, 0.0), row[wall])


# The segments of an epoch's bar, in order: (label, seconds of a bench train row, colour, hatched).
# A stage's wall time minus its thread's CPU time is waiting (hatched, in the stage's colour): for
# a peer or the core, or (pipelined) for a batch.
SEGMENTS = (
    ("sampling", lambda r: r["sample_s"], "C0", False),
    ("fetch: CPU", lambda r: _cpu_part(r, "fetch_s", "fetch_cpu_s"), "C1", False),
    ("fetch: waiting", lambda r: r["fetch_s"] - _cpu_part(r, "fetch_s", "fetch_cpu_s"), "C1", True),
    ("compute: CPU", lambda r: _cpu_part(r, "compute_s", "compute_cpu_s"), "C2", False),
    ("compute: waiting", lambda r: r["compute_s"] - _cpu_part(r, "compute_s", "compute_cpu_s"), "C2", True),
)


@dataclass
class TrainRow:
    """One measured training setting. ``row`` is in the schema of ``bench train --json``;
    ``num_parts`` is None when the input did not record it."""

    source: str
    variant: str
    num_parts: int | None
    row: dict[str, Any]


@dataclass
class Results:
    """Everything read from the inputs, by kind; ``source`` labels are the input file names."""

    sampler: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    vip: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    simulate: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    train: list[TrainRow] = field(default_factory=list)


def variant_name(row: dict[str, Any], num_parts: int | None) -> str:
    """A rank-independent name of a training setting (full replication is alpha = K - 1 at any K)."""
    pipe = f"pipeline depth {row['depth']}" if row.get("depth", 1) > 1 else "no pipeline"
    if row.get("precision", FP32) != FP32:
        pipe += f", {row['precision']}"
    if row.get("outside_load"):  # the extra rows of bench train --outside-load and --compare-freed-memory
        pipe += f", under {row['outside_load']} busy processes"
    if row.get("reuse_freed_memory") is False:
        pipe += ", freed memory returned"
    if row.get("alpha") is None and row.get("cache", "none") != "none":  # a baseline named by its cache field
        name = str(row["cache"])
    elif row.get("cache", "none") == "none" or not row.get("alpha"):
        name = f"no cache, {pipe}"
    elif num_parts is not None and row["alpha"] >= num_parts - 1:
        name = f"full replication, {pipe}"
    else:
        name = f"{row['cache']} α={row['alpha']:g}, {pipe}"
    return name


def _read_experiment(results: Results, label: str, data: dict[str, Any]) -> None:
    # The system variants only (the sweeps have their own tables in results.md), named without
    # their alpha so that the same variant lines up across rank counts.
    name = data["setup"]["name"] if data["source"] == data["setup"]["source"] else data["source"]
    label = f"{name}, {data['num_parts']} ranks ({label})"
    for row in data["train"]:
        if row["experiment"] == "variants" and row.get("epochs"):
            results.train.append(TrainRow(label, row["label"].split(" (")[0], row["num_parts"], row))
    if data.get("simulate"):
        results.simulate.append((label, data["simulate"]))


def _read_sampler(results: Results, label: str, data: dict[str, Any]) -> None:
    results.sampler.append((label, data))


def _read_vip(results: Results, label: str, data: dict[str, Any]) -> None:
    results.vip.append((label, data))


def _read_simulation(results: Results, label: str, data: dict[str, Any]) -> None:
    results.simulate.append((label, data))


def _read_simulations(results: Results, label: str, data: dict[str, Any]) -> None:
    results.simulate += [(label, setting) for setting in data[ROWS_KEY]]


def _read_train(results: Results, label: str, data: dict[str, Any]) -> None:
    for row in data[ROWS_KEY]:
        results.train.append(TrainRow(label, variant_name(row, row.get("num_parts")), row.get("num_parts"), row))


# What each declared kind adds to the report; the module that writes a kind names it.
READERS: dict[str, Callable[[Results, str, dict[str, Any]], None]] = {
    SAMPLER_KIND: _read_sampler,
    VIP_KIND: _read_vip,
    BENCH_SIMULATE_KIND: _read_simulations,
    SIMULATE_KIND: _read_simulation,
    TRAIN_KIND: _read_train,
    EXPERIMENT_KIND: _read_experiment,
}


def _add(results: Results, label: str, data: Any, path: Path) -> None:
    kind = declared_kind(data)
    reader = READERS.get(kind or "")
    if reader is None:
        found = ("declares no kind (a file from before the benchmarks declared theirs, or none of theirs)"
                 if kind is None else f"declares the kind {shown(kind)}")
        raise InputError(f"{path} {found}; bench report reads only the kinds {', '.join(READERS)}, which "
                         "salientpp bench sampler|vip|simulate|train --json, salientpp simulate --json and the "
                         "experiment scripts write: re-run the one that wrote these results")
    reader(results, label, data)


def load_results(paths: list[str | Path]) -> Results:
    """Read and classify the input files (raises :class:`InputError` on a missing or foreign file)."""
    if not paths:
        raise InputError("give at least one results file (the --json output of a salientpp benchmark)")
    results = Results()
    labels = [Path(p).name for p in paths]
    for path, label in zip(map(Path, paths), labels):
        if labels.count(label) > 1:
            label = str(path)
        check_input_file(path, "results file", "give the --json output of a salientpp benchmark")
        try:
            data = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{path} is not valid JSON ({exc}); pass the file a benchmark wrote with --json") from None
        try:
            _add(results, label, data, path)
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"{path} lacks the field {exc} that a {declared_kind(data)} file has; "
                             "re-run the benchmark that wrote it") from None
    return results


# -- Markdown ----------------------------------------------------------------------------------

def _table(header: list[str], rows: list[list[str]], numeric_from: int = 1) -> list[str]:
    rule = ["---" if i < numeric_from else "---:" for i in range(len(header))]
    return ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"] + ["| " + " | ".join(r) + " |" for r in rows]


def _simulation_title(label: str, sim: dict[str, Any]) -> str:
    parts = len(sim["per_partition"]["no_cache_rows_per_epoch"]) if "per_partition" in sim else sim.get("num_parts")
    fanouts = sim.get("fanouts") or (sim.get("meta", {}).get("workloads") or [{}])[0].get("fanouts")
    batch = sim.get("batch_size") or (sim.get("meta", {}).get("workloads") or [{}])[0].get("batch_size")
    text = f"{label}: {parts} partitions"
    if fanouts:
        text += f", fanouts {','.join(map(str, fanouts))}"
    if batch:
        text += f", batch {batch}"
    return text + f", {sim['epochs']} epochs"


def render_markdown(results: Results, plots: list[Path] | None = None) -> str:
    lines = ["# salientpp benchmark report"]
    if results.sampler:
        rows = [[label, r["impl"], str(r.get("bulk_size") or "-"), str(r["threads"]), f"{r['edges_per_batch']:,.0f}",
                 f"{r['edges_per_s'] / 1e6:.2f}", f"{r['edges_per_cpu_s'] / 1e6:.2f}"]
                for label, data in results.sampler for r in data["rows"]]
        lines += ["", "## Sampler throughput", "",
                  *_table(["file", "sampler", "k", "threads", "edges/batch", "M edges/s", "M edges/CPU-s"], rows, 3)]
    if results.vip:
        rows = [[label, f"{d['num_nodes']:,}", str(d["num_parts"]), ",".join(map(str, d["fanouts"])), str(d["batch_size"]),
                 t["method"], f"{t['seconds']:.2f}", f"{t['peak_alloc_bytes'] / 2**20:.0f}"]
                for label, d in results.vip for t in d["timings"]]
        lines += ["", "## VIP analysis", "",
                  *_table(["file", "nodes", "partitions", "fanouts", "batch", "method", "seconds", "peak MiB"], rows, 1)]
    if results.simulate:
        lines += ["", "## Communication volume (remote rows fetched per epoch)"]
        for label, sim in results.simulate:
            header = ["policy"] + [f"α={a:g}" for a in sim["replication"]]
            rows = [[p] + [f"{v:.4g}" for v in sim["rows_per_epoch"][p]] for p in sim["policies"]]
            rows += [[f"{p} (efficiency)"] + [efficiency_text(e) for e in eff]
                     for p, eff in sim.get("efficiency", {}).items() if p != "oracle"]
            lines += ["", f"### {_simulation_title(label, sim)}", "",
                      f"No cache: {sim['no_cache_rows_per_epoch']:.4g} rows per epoch.", "", *_table(header, rows)]
    if results.train:
        rows = []
        for t in sorted(results.train, key=lambda t: (t.num_parts or 0, t.source)):
            r = t.row
            acc = r.get("test_at_best")
            rows.append([t.source, "?" if t.num_parts is None else str(t.num_parts), t.variant, f"{r['epoch_s']:.3f}",
                         f"{r['sample_s']:.3f}", f"{r['fetch_s']:.3f}",
                         f"{r['fetch_cpu_s']:.3f}" if "fetch_cpu_s" in r else "-", f"{r['compute_s']:.3f}",
                         f"{r['rows_per_epoch']:,.0f}", "" if acc is None else f"{acc:.4f}"])
        lines += ["", "## Epoch time and its breakdown (seconds per epoch)", "",
                  *_table(["file", "ranks", "variant", "epoch s", "sampling s", "fetch s", "fetch CPU s", "compute s",
                           "rows/epoch", "test acc"], rows, 3)]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(lines) + "\n"


# -- plots -------------------------------------------------------------------------------------

def plot_communication(label: str, sim: dict[str, Any]):
    """Remote rows per epoch vs alpha, one line per policy (log scale); returns the figure."""
    plt = require_pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for policy in sim["policies"]:
        ax.plot(sim["replication"], sim["rows_per_epoch"][policy], marker="o", label=policy)
    ax.set_yscale("log")
    ax.set_xlabel("replication factor α")
    ax.set_ylabel("remote rows fetched per epoch")
    ax.set_title(_simulation_title(label, sim), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_breakdown(rows: list[TrainRow]):
    """Stacked bars per variant: sampling, fetch and compute (each of the last two split into its
    thread's CPU time and waiting) and the rest of the epoch; returns the figure."""
    plt = require_pyplot()
    names = [f"{t.variant} ({t.source})" if t.num_parts is None or str(t.num_parts) in t.source
             else f"{t.variant} ({t.num_parts} ranks, {t.source})" for t in rows]
    fig, ax = plt.subplots(figsize=(8.5, 1.6 + 0.45 * len(rows)))
    left = [0.0] * len(rows)
    rest = [max(0.0, t.row["epoch_s"] - sum(seconds(t.row) for _, seconds, _, _ in SEGMENTS)) for t in rows]
    for label, seconds, colour, hatched in SEGMENTS + (("other / overlap", None, "C7", False),):
        values = rest if seconds is None else [seconds(t.row) for t in rows]
        ax.barh(range(len(rows)), values, left=left, label=label, color=colour, hatch="//" if hatched else None,
                alpha=0.45 if hatched else 1.0, edgecolor="white" if hatched else None)
        left = [a + b for a, b in zip(left, values)]
    ax.set_yticks(range(len(rows)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per epoch")
    ax.set_title("epoch time breakdown per variant", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never over them
    fig.tight_layout()
    return fig


def scaling_series(rows: list[TrainRow]) -> dict[str, list[tuple[int, float]]]:
    """Per variant, (ranks, median epoch seconds) for every rank count; only variants measured at
    two or more rank counts."""
    points: dict[str, dict[int, list[float]]] = {}
    for t in rows:
        if t.num_parts is not None:
            points.setdefault(t.variant, {}).setdefault(t.num_parts, []).append(t.row["epoch_s"])
    return {v: sorted((k, statistics.median(s)) for k, s in by_k.items())
            for v, by_k in points.items() if len(by_k) >= 2}


def plot_scaling(series: dict[str, list[tuple[int, float]]]):
    """Epoch time vs the number of ranks, one line per variant; returns the figure."""
    plt = require_pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for variant, pts in series.items():
        ax.plot([k for k, _ in pts], [s for _, s in pts], marker="o", label=variant)
    ax.set_xticks(sorted({k for pts in series.values() for k, _ in pts}))
    ax.set_xlabel("ranks (partitions)")
    ax.set_ylabel("seconds per epoch")
    ax.set_title("scaling with the number of ranks", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text).strip("-")[:60]


def figures(results: Results) -> list[tuple[str, Any]]:
    """(file name, figure) of every plot the results allow."""
    out = [(f"comm-volume-{i + 1}-{_safe(label)}.png", plot_communication(label, sim))
           for i, (label, sim) in enumerate(results.simulate)]
    if results.train:
        out.append(("epoch-breakdown.png", plot_breakdown(results.train)))
    series = scaling_series(results.train)
    if series:
        out.append(("scaling.png", plot_scaling(series)))
    return out


def write_plots(results: Results, out_dir: Path) -> list[Path]:
    plt = require_pyplot()
    paths = []
    for name, fig in figures(results):
        fig.savefig(out_dir / name, dpi=100)
        plt.close(fig)
        paths.append(out_dir / name)
    return paths


# -- command -----------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", nargs="+", metavar="RESULTS",
                   help="JSON files written by bench sampler|vip|simulate|train --json, simulate --json, or an "
                        f"experiment's results.json, each read by the kind it declares ({', '.join(READERS)})")
    p.add_argument("--out", metavar="DIR", help="write report.md and the PNG plots into this new directory "
                                                "(plots need matplotlib)")
    p.add_argument("--no-plots", action="store_true", help="with --out, write only report.md")


def main(args: argparse.Namespace) -> int:
    if args.out is not None:
        check_output_dir(args.out)
        if not args.no_plots:
            require_pyplot()
    results = load_results(args.results)
    if args.out is None:
        print(render_markdown(results))
        return 0
    with atomic_output_dir(args.out) as tmp:
        plots = [] if args.no_plots else write_plots(results, tmp)
        markdown = render_markdown(results, plots)
        (tmp / "report.md").write_text(markdown)
    mark_complete(args, args.out)
    print(markdown)
    print(f"report written to {args.out}" + (f" with {len(plots)} plots" if plots else ""))
    return 0
