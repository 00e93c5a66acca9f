"""Typed VIP accuracy per node type and hop against the C++ typed sampler (issue #52).

For partition ``--part`` of a typed partitioned dataset (``salientpp prepare synthetic:igbh,...`` then
``salientpp partition --parts 4``), draws ``--batches`` minibatches as the lockstep loader cuts them
(S = max_k ceil(|T_k| / b) balanced batches; draw j is batch ``j % S`` of an independent shuffle) with
the C++ node-wise sampler over every relation, counts the nodes of each type in S^0..S^L, and compares
the mean with VIP summed over the type (:func:`~salientpp.cache.expected_nodes_per_type`) for every
``--methods`` entry. Prints a table of relative errors (estimate / sampled - 1) with the Monte-Carlo
standard error of each count, and writes it as JSON with ``--json``.

    PYTHONPATH=. python experiments/typed_vip_accuracy.py PART_DIR --batch-size 16 --batches 4000

A relation's fanout is the same list for every relation (``--fanouts 15,10,5``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

from salientpp.cache import expected_nodes_per_type, inclusion_probabilities
from salientpp.cache.workload import lockstep_steps
from salientpp.errors import InputError
from salientpp.partition import load_partitioned
from salientpp.sampling import NeighborSampler


def sampled_counts(data, part: int, fanouts: list[int], batch_size: int, batches: int, seed: int) -> np.ndarray:
    """int64 ``[batches, L + 1, T]``: the nodes of each type in S^h of each sampled minibatch."""
    schema = data.schema
    sampler = NeighborSampler(data.rowptr, data.col, list(fanouts), edge_rel=data.edge_rel, schema=schema)
    seeds = np.asarray(data.part(part).train_idx, dtype=np.int64)
    steps = lockstep_steps([data.part(k).train_idx.shape[0] for k in range(data.num_parts)], batch_size)
    bounds = (np.arange(steps + 1) * seeds.size) // steps  # S balanced batches
    node_type = data.book.type_of(np.arange(data.num_nodes))
    rng = np.random.default_rng(seed)
    counts = np.zeros((batches, len(fanouts) + 1, schema.num_types), dtype=np.int64)
    for j in range(batches):
        i = j % steps
        order = rng.permutation(seeds)
        batch = sampler.sample(torch.from_numpy(order[bounds[i]:bounds[i + 1]]), seed, j)
        n_id = batch.n_id.numpy()
        sizes = [batch.batch_size] + [m.num_src for m in reversed(batch.mfgs)]
        types = node_type[n_id]
        for h, size in enumerate(sizes):
            counts[j, h] = np.bincount(types[:size], minlength=schema.num_types)
    return counts


def measure(part_dir: str, part: int, fanouts: list[int], batch_size: int, batches: int, methods: list[str],
            seed: int = 0) -> dict:
    data = load_partitioned(part_dir)
    schema = data.schema
    start = time.perf_counter()
    counts = sampled_counts(data, part, fanouts, batch_size, batches, seed)
    sample_s = time.perf_counter() - start
    mean, se = counts.mean(0), counts.std(0) / np.sqrt(batches)
    node_type = data.book.type_of(np.arange(data.num_nodes))
    table = np.tile(np.asarray(fanouts, dtype=np.int64)[:, None], (1, schema.num_relations))
    seed_sets = [data.part(k).train_idx for k in range(data.num_parts)]
    result = dict(part_dir=str(part_dir), part=part, fanouts=fanouts, batch_size=batch_size, batches=batches,
                  seed=seed, types=list(schema.node_types), sampled=mean.tolist(),
                  relative_se=np.divide(se, mean, out=np.zeros_like(se), where=mean > 0).tolist(),
                  sample_seconds=sample_s, error={})
    for method in methods:
        hops = inclusion_probabilities(data.rowptr, data.col, seed_sets, table, batch_size, method=method,
                                       return_hops=True, edge_rel=data.edge_rel, schema=schema)
        predicted = np.stack([expected_nodes_per_type(p, node_type, schema.num_types)[:, part] for p in hops])
        error = np.divide(predicted - mean, mean, out=np.zeros_like(mean), where=mean > 0)
        result["error"][method] = error.tolist()
    return result


def print_table(result: dict) -> None:
    types = result["types"]
    print(f"{result['part_dir']} part {result['part']} b={result['batch_size']} fanouts {result['fanouts']} "
          f"{result['batches']} batches (seed {result['seed']}, sampling {result['sample_seconds']:.1f} s)")
    se = np.asarray(result["relative_se"])
    print("hop  " + "  ".join(f"{'':>7}{t:>10}" for t in types))
    for h in range(1, se.shape[0]):
        print(f"  {h}  se " + "  ".join(f"{100 * x:16.2f}%" for x in se[h]))
        for method, error in result["error"].items():
            print(f"     {method:>6} " + "  ".join(f"{100 * x:+15.2f}%" for x in np.asarray(error)[h]))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part_dirs", nargs="+")
    parser.add_argument("--part", type=int, default=0)
    parser.add_argument("--fanouts", default="15,10,5")
    parser.add_argument("--batch-size", type=int, action="append")
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--methods", default="exact,taylor,cavity,pair")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    results = []
    for part_dir in args.part_dirs:
        for b in args.batch_size or [16, 1024]:
            result = measure(part_dir, args.part, [int(f) for f in args.fanouts.split(",")], b, args.batches,
                             args.methods.split(","), args.seed)
            print_table(result)
            results.append(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    try:
        main()
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
