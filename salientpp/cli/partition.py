"""``salientpp partition DATASET_DIR OUT_DIR --parts K``: multi-constraint METIS, the bounded-memory
multilevel partitioner, or random."""
from __future__ import annotations

import argparse
import time

from ..data.format import KIND, load_dataset
from ..errors import counted
from ..io import check_output_dir, check_output_location, mark_complete, read_meta
from ..partition.partitioner import METHODS, check_options, partition_dataset
from ..parsing import parse_memory_limit, parse_seed
from ..resources import check_memory, estimate_partition, multilevel_budget


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "partition", help="split a dataset into K partitions (METIS or multilevel, 4 balance constraints)",
        description="Partition a dataset directory: minimise the edge cut while balancing training, "
                    "validation and other vertices and total degree per partition, with METIS on the whole "
                    "graph or with the multilevel partitioner in bounded memory; vertices are renumbered so "
                    "partition k is one contiguous id range.")
    parser.add_argument("dataset", metavar="DATASET_DIR", help="a dataset directory written by `salientpp prepare`")
    parser.add_argument("out", metavar="OUT_DIR", help="the partitioned directory to create (must not exist)")
    parser.add_argument("--parts", "-k", type=int, required=True, metavar="K", help="number of partitions")
    parser.add_argument("--method", choices=METHODS, default="metis",
                        help="metis (default): small edge cut, balanced; multilevel: the same goals in memory "
                             "that does not grow with the edges (reads the graph in chunks, coarsens it and "
                             "hands METIS a small graph); random: balanced random assignment. When METIS leaves a "
                             "part empty (a small graph), the random method stands in, with a note")
    parser.add_argument("--seed", type=parse_seed, default=0, help="random seed (default 0)")
    parser.add_argument("--memory-limit", metavar="SIZE",
                        help="refuse to start when the memory estimate exceeds SIZE, e.g. 12GiB "
                             "(default: the memory available to this process); multilevel keeps within it")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    limit = parse_memory_limit(args.memory_limit)
    check_output_location(args.out, "the output directory")
    check_output_dir(args.out)
    meta = read_meta(args.dataset, KIND)
    budget = multilevel_budget(meta, limit)  # --method multilevel's; also checks meta.json's counts
    estimate = estimate_partition(meta, args.parts, args.method, budget)
    check_options(meta["num_nodes"], args.parts, args.method, args.seed)
    memory = check_memory(estimate, limit)
    start = time.perf_counter()
    dataset = load_dataset(args.dataset, verify=True, validate=True)
    loaded = time.perf_counter() - start
    report = partition_dataset(dataset, args.out, args.parts, method=args.method, seed=args.seed,
                               memory_budget=budget)
    mark_complete(args, args.out)
    elapsed = time.perf_counter() - start
    if report.fallback:
        print(f"note: {report.fallback}")
    print(f"partitioned {counted(dataset.num_nodes, 'node', spec=',')} into {counted(args.parts, 'part', spec=',')} "
          f"with {report.method} (seed {args.seed}) in {elapsed:.1f} s -> {args.out}")
    print("time: " + ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in
                               {"load+check": loaded, **report.timings}.items()))
    print(f"memory: {memory}")
    print(report.quality.summary())
    return 0
