"""VIP analysis: wall time and peak memory for every partition at once, and (with
``--mc-batches``) accuracy against the inclusion frequencies of the real sampler.

Time excludes numba's one-off compilation (a warm-up on a 3-vertex graph runs first). Peak
memory is the largest total of the numpy arrays allocated during the analysis (tracemalloc),
plus the process's peak resident size, which also counts the memory-mapped graph pages read.
The Monte-Carlo check draws independent uniform b-subsets of each partition's training set and
reports, per hop, the relative error of the predicted vertices per minibatch and the per-vertex
mean absolute error (with the part of it expected from Monte-Carlo noise alone). It also
measures, per node type and hop, the relative error of the predicted vertices of that type per
minibatch (:func:`~salientpp.cache.vip.expected_nodes_per_type`, types from the partition book)
against the sampled ones, with the Monte-Carlo standard error of that measurement, and shows it
for a graph of several node types (a homogeneous graph's one type is the whole).
"""
from __future__ import annotations

import argparse
import resource
import time
import tracemalloc

import numba
import numpy as np
import torch

from ..cache.plan import node_types
from ..cache.vip import METHODS, expected_nodes_per_type, inclusion_probabilities, workload_probabilities
from ..cache.workload import Workload, check_batch_size, fanouts_text
from ..data.schema import GraphSchema
from ..cache.options import add_task_options, edge_seeds_from, fanouts_from, graph_schema
from ..errors import InputError
from ..io import check_output_dir
from .results import write_outputs
from ..parsing import name_list, parse_seed
from ..partition.format import load_partitioned
from ..sampling import DEFAULT_SAMPLER, SAMPLERS, check_sampler, make_sampler
from ..sampling.link import LinkEnds
from ..sampling.link_loader import LinkNeighborLoader

# The kind its --json file declares (salientpp.bench.results) and its line in `salientpp bench --help`.
KIND = "salientpp-bench-vip"
SUMMARY = "VIP analysis time, peak memory and accuracy against the sampler"


def _warm_up(methods, several: bool) -> None:
    """Compile the VIP kernels for a graph of one relation, on a 3-vertex path, and (``several``
    relations) also for several, on the star of two ``a`` nodes joined to one ``b`` node by a
    relation and its reverse."""
    rowptr, col = np.array([0, 1, 3, 4]), np.array([1, 0, 2, 1])
    for method in methods:
        inclusion_probabilities(rowptr, col, [np.array([0])], [1, 1], 1, method=method)
        if not several:
            continue
        schema = GraphSchema.with_reverses(("a", "b"), (2, 1), [("a", "r", "b")], "a")
        inclusion_probabilities(np.array([0, 1, 2, 4]), np.array([2, 2, 0, 1]), [np.array([0])],
                                np.ones((2, 2), dtype=np.int64), 1, method=method,
                                edge_rel=np.array([1, 1, 0, 0], dtype=np.int8), schema=schema)


def time_analysis(dataset, workload: Workload, method: str) -> dict:
    """Seconds and peak allocated bytes of the VIP of all partitions at once."""
    tracemalloc.start()
    start = time.perf_counter()
    workload_probabilities(dataset, workload, method=method)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"method": method, "seconds": seconds, "peak_alloc_bytes": int(peak)}


def _link_batches(sampler, edges: np.ndarray, workload: Workload, steps: int, batches: int, seed: int,
                  ends: LinkEnds):
    """``batches`` batches of the trainer's link loader over ``edges`` (negatives' ends from
    ``ends``), epoch after epoch."""
    loader = LinkNeighborLoader(sampler, torch.from_numpy(edges), workload.batch_size, workload.edges.num_negatives,
                                workload.edges.negative_sampling, seed=seed, num_batches=steps, ends=ends)
    drawn, epoch = 0, 0
    while drawn < batches:
        loader.set_epoch(epoch)
        for batch in loader:
            if drawn == batches:
                loader.close()
                break
            drawn += 1
            yield batch
        epoch += 1


def monte_carlo(dataset, workload: Workload, batches: int, seed: int):
    """Per partition: float64 ``[L+1, N]`` inclusion frequencies, ``[batches, L+1]`` set sizes and
    ``[batches, L+1, T]`` set sizes per node type.

    Node seeds: draw i is batch ``i % S`` of an independent lockstep epoch (S balanced batches per
    rank, as the trainer's loader cuts them), a uniform subset of the partition's training nodes
    of that batch's size. Edge seeds: the batches of the trainer's link loader, epoch after epoch."""
    fanouts = workload.fanouts
    sampler = make_sampler(dataset.rowptr, dataset.col, workload.fanout_table, workload.sampler, workload.replace,
                           **dataset.sampler_args)
    num_types = dataset.schema.num_types
    rng = np.random.default_rng(seed)
    steps = workload.lockstep_steps(dataset)
    results = []
    for k in range(dataset.num_parts):
        seeds_k = workload.seeds(dataset, k)
        bounds = np.arange(steps + 1) * seeds_k.shape[-1] // steps
        freq = np.zeros((len(fanouts) + 1, dataset.num_nodes))
        sizes = np.zeros((batches, len(fanouts) + 1))
        type_sizes = np.zeros((batches, len(fanouts) + 1, num_types))
        if workload.edges is not None:
            drawn = _link_batches(sampler, seeds_k, workload, steps, batches, seed * 1000 + k,
                                  LinkEnds.of_partitions(dataset))
        else:
            drawn = (sampler.sample(torch.from_numpy(rng.choice(seeds_k, int(bounds[i % steps + 1] - bounds[i % steps]),
                                                                replace=False)), seed=seed, batch_index=k * batches + i)
                     for i in range(batches))
        for i, batch in enumerate(drawn):
            counts = [batch.batch_size] + [m.num_src for m in reversed(batch.mfgs)]
            n_id = batch.n_id.numpy()
            for h, count in enumerate(counts):
                freq[h, n_id[:count]] += 1
                type_sizes[i, h] = np.bincount(dataset.book.type_of(n_id[:count]), minlength=num_types)
            sizes[i] = counts
        results.append((freq / batches, sizes, type_sizes))
    return results


def accuracy(dataset, workload: Workload, methods, mc) -> tuple[dict, dict]:
    """Relative error of vertices per minibatch and per-vertex MAE, per method and hop (all
    partitions); and per method, node type and hop, the relative error of that type's vertices
    per minibatch and its Monte-Carlo standard error (relative)."""
    fanouts = workload.fanouts
    batches = mc[0][1].shape[0]
    node_type = node_types(dataset)
    # Summed over partitions, the per-batch mean of each type's count and its standard error, [L+1, T].
    measured_types = sum(t.mean(axis=0) for _, _, t in mc)
    se_types = np.sqrt(sum(t.var(axis=0) / batches for _, _, t in mc))
    out, per_type = {}, {}
    for method in methods:
        hops = workload_probabilities(dataset, workload, method=method, return_hops=True)
        rows = []
        for h in range(len(fanouts) + 1):
            predicted = sum(hops[h][:, k].sum() for k in range(dataset.num_parts))
            measured = sum(sizes[:, h].mean() for _, sizes, _ in mc)
            mae = np.mean([np.abs(freq[h] - hops[h][:, k]).mean() for k, (freq, _, _) in enumerate(mc)])
            # Mean absolute deviation of a binomial proportion, sqrt(2 p (1-p) / (pi B)), averaged.
            noise = np.mean([np.sqrt(2 * f * (1 - f) / (np.pi * batches)).mean() for f in (fr[h] for fr, _, _ in mc)])
            rows.append({"hop": h, "relative_error": predicted / measured - 1, "mae": float(mae),
                         "mae_noise": float(noise)})
        out[method] = rows
        predicted = np.stack([expected_nodes_per_type(p, node_type, dataset.schema.num_types).sum(axis=1)
                              for p in hops])  # [L+1, T]
        with np.errstate(divide="ignore", invalid="ignore"):
            error, noise = predicted / measured_types - 1, se_types / measured_types
        per_type[method] = {name: [{"hop": h, "predicted": float(predicted[h, t]),
                                    "measured": float(measured_types[h, t]),
                                    "relative_error": None if measured_types[h, t] == 0 else float(error[h, t]),
                                    "relative_se": None if measured_types[h, t] == 0 else float(noise[h, t])}
                                   for h in range(len(fanouts) + 1)]
                            for t, name in enumerate(dataset.schema.node_types)}
    return out, per_type


def _type_tables(per_type: dict) -> str:
    """Markdown: one table per node type, a row per method, the relative error per hop (with the
    Monte-Carlo standard error, relative)."""
    lines = []
    for name in next(iter(per_type.values())):
        hops = len(next(iter(per_type.values()))[name])
        lines += ["", f"node type {name}: relative error of its vertices per minibatch (MC standard error)",
                  "| method | " + " | ".join(f"hop {h}" for h in range(hops)) + " |", "|---|" + "---:|" * hops]
        for method, types in per_type.items():
            cells = ["-" if r["relative_error"] is None else f"{r['relative_error']:+.2%} ({r['relative_se']:.2%})"
                     for r in types[name]]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("part_dir", metavar="PART_DIR", help="a partitioned directory")
    p.add_argument("--fanouts", default="15,10,5",
                   help="fanouts per hop (default 15,10,5); on a typed graph one list for every relation or one "
                        "per relation, REL=15,10;REL2=5,0")
    p.add_argument("--batch-size", type=int, default=1024, help="seeds per minibatch (default 1024)")
    p.add_argument("--methods", default="exact,cavity", help=f"VIP estimates, from {','.join(METHODS)}")
    p.add_argument("--replace", action="store_true", help="model sampling with replacement")
    p.add_argument("--sampler", default=DEFAULT_SAMPLER, choices=SAMPLERS,
                   help="the sampler modelled and drawn (LADIES: --fanouts are layer sizes)")
    p.add_argument("--mc-batches", type=int, default=0, metavar="B",
                   help="also compare with B sampled minibatches per partition (default 0: skip)")
    add_task_options(p)
    p.add_argument("--seed", type=parse_seed, default=0, help="seed of the Monte-Carlo batches")
    p.add_argument("--json", help="also write the results to this JSON file (must not exist)")


def main(args: argparse.Namespace) -> int:
    sampler = check_sampler(args.sampler)
    schema = graph_schema(args.part_dir)
    batch_size = check_batch_size(args.batch_size)
    workload = Workload(fanouts_from(args.fanouts, schema, sampler), batch_size, replace=args.replace, sampler=sampler,
                        edges=edge_seeds_from(args), schema=schema)
    fanouts = workload.fanouts
    methods = name_list(args.methods, "--methods", "exact,cavity")
    if not methods or any(m not in METHODS for m in methods):
        raise InputError(f"--methods must list some of {', '.join(METHODS)}, got {args.methods!r}")
    if args.mc_batches < 0:
        raise InputError(f"--mc-batches must be >= 0, got {args.mc_batches}")
    if args.json is not None:
        check_output_dir(args.json, "output file")
    dataset = load_partitioned(args.part_dir)
    if workload.edges is not None:
        dataset.require_link_split()
    _warm_up(methods, dataset.schema.num_relations > 1)
    timings = []
    for method in methods:
        timings.append(time_analysis(dataset, workload, method))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"VIP of {dataset.num_parts} partitions, N={dataset.num_nodes:,}, nnz={dataset.col.shape[0]:,}, "
          f"fanouts {fanouts_text(workload)}, batch {batch_size}, {numba.get_num_threads()} numba threads")
    print("| method | seconds | peak allocated MiB |\n|---|---:|---:|")
    for t in timings:
        print(f"| {t['method']} | {t['seconds']:.2f} | {t['peak_alloc_bytes'] / 2**20:.0f} |")
    print(f"process peak RSS so far: {rss / 2**20:.0f} MiB (includes the memory-mapped graph)")
    report = {"part_dir": str(dataset.path), "num_nodes": dataset.num_nodes, "num_edges": int(dataset.col.shape[0]),
              "num_parts": dataset.num_parts, "fanouts": workload.to_json()["fanouts"], "batch_size": batch_size,
              "replace": args.replace, "sampler": sampler.value, "workload": workload.to_json(), "threads": numba.get_num_threads(), "timings": timings, "peak_rss_bytes": rss}
    if args.mc_batches:
        start = time.perf_counter()
        mc = monte_carlo(dataset, workload, args.mc_batches, args.seed)
        acc, per_type = accuracy(dataset, workload, methods, mc)
        print(f"\nagainst {args.mc_batches} sampled minibatches per partition ({time.perf_counter() - start:.0f} s): "
              "relative error of vertices per minibatch / per-vertex MAE (MAE from MC noise alone)")
        print("| method | " + " | ".join(f"hop {h}" for h in range(len(fanouts) + 1)) + " |")
        print("|---|" + "---:|" * (len(fanouts) + 1))
        for method, rows in acc.items():
            print(f"| {method} | " + " | ".join(f"{r['relative_error']:+.2%} / {r['mae']:.4f} ({r['mae_noise']:.4f})"
                                                 for r in rows) + " |")
        report["accuracy"] = acc
        report["accuracy_per_type"] = per_type
        if dataset.schema.num_types > 1:  # a homogeneous graph's one type repeats the table above
            print(_type_tables(per_type))
        report["mc_batches"] = args.mc_batches
    write_outputs(args, KIND, report, args.json)
    return 0
