"""The communication simulator: rows each partition fetches per epoch under each policy and α.

Every evaluated epoch is sampled once per partition with the trainer's sampler and loader
(:data:`~salientpp.streams.RUN_STREAM` of :func:`salientpp.streams.loader_seed`; every partition cuts its seeds into
the same number of balanced batches, :meth:`~salientpp.cache.workload.Workload.lockstep_steps`).
A minibatch fetches the unique remote ids of its
``n_id`` that are not cached, so the rows fetched over the run are
``sum_v count(v) * [v remote and not cached]``, where ``count(v)`` is the number of minibatches
containing v. The simulator therefore keeps one count vector per partition and evaluates every
policy and every α against the same sampled batches. The oracle caches the largest counts, so no
static cache of the same size fetches fewer rows.

The same counts are split by node type (``book.type_of``; a homogeneous graph is the case of
one type): rows fetched and cache hits per type, with the bytes of each type's rows. A type
without features fetches no feature rows (its rows are learnable embeddings), so it is left out;
α is a byte budget (:meth:`~salientpp.cache.plan.Budget.rows`), so on a graph of several types
the rows each policy caches depend on the types it ranks first, and the saving efficiency
compares bytes.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .. import streams
from ..errors import InputError
from ..plots import require_pyplot
from .plan import Budget, budget_rows, cacheable_remote, node_types, row_bytes_of, type_row_bytes
from .policies import PolicyContext, get_policy, policy_scores, rank_vertices

# The relative rounding error of a saving (:meth:`SimulationResult.efficiency`): rows fetched are
# sums of float counts, exact to ~1e-13 of their total.
_SAVING_NOISE = 1e-9
# The kind `salientpp simulate --json` declares for its file, one :meth:`SimulationResult.to_json`
# (salientpp.bench.results; `bench simulate` writes a list of them, one per setting, as its own kind).
RESULT_KIND = "salientpp-simulate"


@dataclass
class SimulationResult:
    """Remote rows fetched per epoch (mean over the evaluated epochs).

    Attributes:
        policies: P policy names.
        replication: A replication factors α.
        rows: float64 ``[P, A, K]`` rows fetched per epoch by partition k.
        accessed: float64 ``[K]`` remote rows touched per epoch (the rows fetched with no cache).
        cached: int64 ``[P, A, K]`` rows each partition caches at each α: within the byte budget of
            α, so on a graph of several row widths they depend on the policy.
        steps: float64 ``[K]`` minibatches per epoch of each partition, weighted over the workloads:
            ``sum_w weight_w * S_w`` with ``S_w`` = :meth:`Workload.lockstep_steps`, the same for every
            partition (the ranks run in lockstep; a partition with fewer seeds than ``S_w`` runs
            batches without seeds, which fetch nothing).
        row_bytes: bytes per feature row (the widest, on a graph of several node types).
        epochs: evaluated epochs.
        meta: run description (dataset, workloads, seed, timings).
        node_types: the graph's node types (the schema's order; ``("node",)`` when homogeneous).
        type_bytes: int64 ``[T]`` bytes of a feature row of each type (0: no features).
        type_accessed: float64 ``[T]`` remote rows of each type touched per epoch, all partitions.
        type_rows: float64 ``[P, A, T]`` rows of each type fetched per epoch, all partitions
            (cache hits: ``type_accessed - type_rows``).
    """

    policies: tuple[str, ...]
    replication: tuple[float, ...]
    rows: np.ndarray
    accessed: np.ndarray
    cached: np.ndarray
    steps: np.ndarray
    row_bytes: int
    epochs: int
    node_types: tuple[str, ...]
    type_bytes: np.ndarray
    type_accessed: np.ndarray
    type_rows: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    def total_rows(self) -> np.ndarray:
        """float64 ``[P, A]`` rows fetched per epoch, all partitions together."""
        return self.rows.sum(axis=2)

    def total_bytes(self) -> np.ndarray:
        """float64 ``[P, A]`` bytes fetched per epoch, all partitions together."""
        return self.type_rows @ self.type_bytes.astype(np.float64)

    def no_cache_bytes(self) -> float:
        """Bytes fetched per epoch without a cache, all partitions together."""
        return float(self.type_accessed @ self.type_bytes.astype(np.float64))

    def efficiency(self) -> np.ndarray | None:
        """float64 ``[P, A]`` ``(no cache - policy) / (no cache - oracle)`` in bytes (rows may differ
        in width); NaN where the oracle saves nothing (α = 0);
        None when the oracle was not simulated. A saving within :data:`_SAVING_NOISE` of the
        no-cache volume is none: rows weighted over several workloads are floats, summed in
        another order with a cache than without, so at α = 0 the difference is a rounding error
        (1e-13 of it), whose ratios read as efficiencies."""
        if "oracle" not in self.policies:
            return None
        no_cache = self.no_cache_bytes()
        saving = no_cache - self.total_bytes()
        saving = np.where(saving > _SAVING_NOISE * no_cache, saving, 0.0)
        best = saving[self.policies.index("oracle")]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(best > 0, saving / np.where(best > 0, best, 1.0), np.nan)

    def to_json(self) -> dict[str, Any]:
        total = self.total_rows()
        eff = self.efficiency()
        out = {
            "policies": list(self.policies), "replication": list(self.replication), "epochs": self.epochs,
            "row_bytes": self.row_bytes, "no_cache_rows_per_epoch": float(self.accessed.sum()),
            "no_cache_bytes_per_epoch": self.no_cache_bytes(),
            "rows_per_epoch": {p: total[i].tolist() for i, p in enumerate(self.policies)},
            "bytes_per_epoch": {p: row.tolist() for p, row in zip(self.policies, self.total_bytes())},
            "per_partition": {
                "no_cache_rows_per_epoch": self.accessed.tolist(),
                "steps_per_epoch": self.steps.tolist(),
                "cached_rows": {p: self.cached[i].tolist() for i, p in enumerate(self.policies)},
                "rows_per_epoch": {p: self.rows[i].tolist() for i, p in enumerate(self.policies)},
            },
            "meta": self.meta,
        }
        if eff is not None:
            out["efficiency"] = {p: [None if math.isnan(e) else float(e) for e in eff[i]]
                                 for i, p in enumerate(self.policies)}
        if self.by_type:
            hits = self.type_accessed - self.type_rows
            out["per_type"] = {
                "node_types": list(self.node_types), "row_bytes": self.type_bytes.tolist(),
                "no_cache_rows_per_epoch": self.type_accessed.tolist(),
                "rows_per_epoch": {p: self.type_rows[i].tolist() for i, p in enumerate(self.policies)},
                "hits_per_epoch": {p: hits[i].tolist() for i, p in enumerate(self.policies)},
            }
        return out

    @property
    def by_type(self) -> bool:
        """Whether the results show a breakdown by node type: with several types (that of a
        homogeneous graph's one type is the whole)."""
        return len(self.node_types) > 1

    def table(self) -> str:
        """Markdown tables: rows fetched per epoch, and the saving efficiency when the oracle ran."""
        head = "| policy | " + " | ".join(f"α={a:g}" for a in self.replication) + " |"
        rule = "|---|" + "---:|" * len(self.replication)
        total = self.total_rows()
        lines = [f"Remote rows fetched per epoch (all {self.rows.shape[2]} partitions, mean of {self.epochs} "
                 f"epochs; no cache: {self.accessed.sum():.4g} rows = "
                 f"{self.no_cache_bytes() / 2**20:.1f} MiB)", "", head, rule]
        lines += [f"| {p} | " + " | ".join(f"{v:.4g}" for v in total[i]) + " |" for i, p in enumerate(self.policies)]
        for t, name in enumerate(self.node_types if self.by_type else ()):
            if self.type_bytes[t] == 0:
                continue
            lines += ["", f"Rows of node type {name} fetched per epoch ({self.type_bytes[t]} bytes each; no cache: "
                          f"{self.type_accessed[t]:.4g} rows)", "", head, rule]
            lines += [f"| {p} | " + " | ".join(f"{v:.4g}" for v in self.type_rows[i, :, t]) + " |"
                      for i, p in enumerate(self.policies)]
        eff = self.efficiency()
        if eff is not None:
            lines += ["", "Saving efficiency (no cache - policy) / (no cache - oracle) in bytes", "", head, rule]
            lines += [f"| {p} | " + " | ".join(efficiency_text(e) for e in eff[i]) + " |"
                      for i, p in enumerate(self.policies)]
        return "\n".join(lines)


def efficiency_text(efficiency: float | None) -> str:
    """A saving efficiency as every table and summary shows it: ``"0.924"``, or ``"-"`` where it is
    undefined (NaN of :meth:`SimulationResult.efficiency`, ``None`` in its JSON, the mean of none):
    no cache saves anything there, so there is nothing to compare a policy with (0/0)."""
    return "-" if efficiency is None or math.isnan(efficiency) else f"{efficiency:.3f}"


def mean_efficiency(efficiency: np.ndarray) -> float:
    """The mean of a policy's efficiencies over α (a row of :meth:`SimulationResult.efficiency`)
    where they are defined; NaN where none is (:func:`efficiency_text` shows it as ``"-"``)."""
    defined = efficiency[~np.isnan(efficiency)]
    return float(defined.mean()) if defined.size else math.nan


def check_replication(replication: Sequence[float], num_parts: int) -> tuple[float, ...]:
    values = tuple(float(a) for a in replication)
    if not values:
        raise InputError("the list of replication factors is empty; pass e.g. --replication 0,0.1,0.5")
    for a in values:
        Budget(replication=a).check(num_parts, 1)
    return values


def simulate(ctx: PolicyContext, policies: Sequence[str], replication: Sequence[float]) -> SimulationResult:
    """Rows fetched per epoch for every policy and α, on ``ctx.epochs`` sampled epochs (seed ``ctx.seed``)."""
    policies = tuple(policies)
    if not policies:
        raise InputError("no policies to simulate; pass e.g. --policies vip,degree,oracle")
    for name in policies:
        get_policy(name)
    dataset = ctx.dataset
    num_parts, num_nodes = dataset.num_parts, dataset.num_nodes
    replication = check_replication(replication, num_parts)
    node_type = node_types(dataset)
    type_bytes = type_row_bytes(dataset)
    node_bytes = type_bytes[node_type]
    num_types = type_bytes.shape[0]
    rows = np.zeros((len(policies), len(replication), num_parts))
    accessed = np.zeros(num_parts)
    cached = np.zeros((len(policies), len(replication), num_parts), dtype=np.int64)
    # per type and partition, summed over the partitions at the end as rows and accessed are
    type_accessed = np.zeros((num_types, num_parts))
    type_rows = np.zeros((len(policies), len(replication), num_types, num_parts))
    steps = np.zeros(num_parts)
    seconds = {"sampling": 0.0, **{name: 0.0 for name in policies}}
    lockstep = [w.lockstep_steps(dataset) for w in ctx.workloads]  # S_w: every partition's batches per epoch
    budgets = [Budget(replication=a) for a in replication]
    for k in range(num_parts):
        start = time.perf_counter()
        counts = ctx.access_counts(k, ctx.epochs, streams.RUN_STREAM)
        seconds["sampling"] += time.perf_counter() - start
        remote = cacheable_remote(ctx, k, node_bytes)
        accessed[k] = counts[remote].sum() / ctx.epochs
        type_accessed[:, k] = np.bincount(node_type[remote], weights=counts[remote], minlength=num_types) / ctx.epochs
        steps[k] = sum(w.weight * lockstep[i] for i, w in enumerate(ctx.workloads))
        for i, name in enumerate(policies):
            start = time.perf_counter()
            scores = policy_scores(ctx, name, k)
            seconds[name] += time.perf_counter() - start
            order = rank_vertices(scores, remote, ctx.rng(k, streams.TIEBREAK_STREAM))
            cached[i, :, k] = [budget_rows(b, dataset, order, node_bytes)[0] for b in budgets]
            ranked, ranked_type = counts[order], node_type[order]
            for t in range(num_types):  # each type's rows fetched: its counts beyond each cut
                hits = np.concatenate([[0.0], np.cumsum(np.where(ranked_type == t, ranked, 0.0))])
                type_rows[i, :, t, k] = (hits[-1] - hits[cached[i, :, k]]) / ctx.epochs
            rows[i, :, k] = type_rows[i, :, :, k].sum(axis=1)
        ctx.forget(k)
    meta = {"part_dir": str(dataset.path), "workloads": [w.to_json() for w in ctx.workloads], "seed": ctx.seed,
            "simulation_epochs": ctx.simulation_epochs, "vip_method": ctx.vip_method,
            "num_parts": num_parts, "num_nodes": num_nodes, "seconds": seconds}
    return SimulationResult(policies=policies, replication=replication, rows=rows, accessed=accessed,
                            cached=cached, steps=steps, row_bytes=row_bytes_of(dataset), epochs=ctx.epochs,
                            node_types=tuple(dataset.schema.node_types), type_bytes=type_bytes,
                            type_accessed=type_accessed.sum(axis=1), type_rows=type_rows.sum(axis=3), meta=meta)


def plot_volume(result: SimulationResult, path: str) -> None:
    """Write a log-scale plot of rows fetched per epoch vs α, one line per policy (needs matplotlib)."""
    plt = require_pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    total = result.total_rows()
    for i, name in enumerate(result.policies):
        ax.plot(result.replication, total[i], marker="o", label=name)
    ax.set_yscale("log")
    ax.set_xlabel("replication factor α (cached rows per partition / (N/K))")
    ax.set_ylabel("remote rows fetched per epoch")
    ax.set_title(f"{result.rows.shape[2]} partitions, {result.epochs} epochs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
