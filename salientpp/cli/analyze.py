"""``salientpp analyze PART_DIR --fanouts 15,10,5 --batch-size 1024 --policy vip --replication 0.1``:
score vertices with a cache policy and write one cache plan per partition."""
from __future__ import annotations

import argparse
import time

from ..cache.plan import (GPU_FRACTION, Budget, build_and_save_plans, default_plan_dir, describe,
                          predicted_rows, row_bytes_of)
from ..cache.policies import available_policies, get_policy
from ..errors import InputError
from ..io import check_output_dir, check_writable_dir, output_errors, read_meta
from ..partition.format import KIND as PART_KIND, load_partitioned
from ..parsing import parse_bytes, parse_memory_limit
from ..resources import check_memory, estimate_analyze
from ..cache.options import add_workload_options, context_from, workloads_from


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "analyze", help="VIP analysis: build the cache plan of every partition",
        description="Score every vertex with a cache policy (default: the analytic vertex inclusion "
                    "probability of the sampler), cache the best remote rows of each partition within "
                    "a replication factor or byte budgets, and write the plans next to the data "
                    "(PART_DIR/cache/NAME unless --out is given). Train with any plan it wrote by "
                    "`salientpp train PART_DIR --plan DIR`.")
    add_workload_options(parser)
    parser.add_argument("--policy", default="vip", metavar="NAME",
                        help=f"cache policy, one of {', '.join(available_policies())} (default vip)")
    parser.add_argument("--replication", type=float, metavar="ALPHA",
                        help="cache the top ALPHA*N/K remote rows per partition (a fraction in [0, K-1])")
    parser.add_argument("--gpu-cache-bytes", metavar="BYTES",
                        help="GPU tier budget per partition, e.g. 2GiB (filled first); with --cpu-cache-bytes")
    parser.add_argument("--cpu-cache-bytes", metavar="BYTES", help="CPU tier budget per partition, e.g. 8GiB")
    parser.add_argument("--gpu-fraction", type=float, default=GPU_FRACTION, metavar="FRAC",
                        help=f"fraction of each partition's own rows kept on the GPU, by score (default {GPU_FRACTION})")
    parser.add_argument("--epochs", type=int, default=10, metavar="E",
                        help="epochs counted by the oracle policy (default 10)")
    parser.add_argument("--name", help="plan name under PART_DIR/cache/ (default: from policy, fanouts and budget)")
    parser.add_argument("--out", metavar="DIR", help="write the plan here instead of PART_DIR/cache/NAME")
    parser.add_argument("--memory-limit", metavar="SIZE",
                        help="refuse to start when the memory estimate exceeds SIZE, e.g. 12GiB "
                             "(default: the memory available to this process)")
    parser.set_defaults(func=run)


def budget_from(args: argparse.Namespace) -> Budget:
    by_bytes = args.gpu_cache_bytes is not None or args.cpu_cache_bytes is not None
    if args.replication is not None and by_bytes:
        raise InputError("give either --replication or --gpu-cache-bytes/--cpu-cache-bytes, not both")
    if args.replication is None and not by_bytes:
        raise InputError("say how much to cache: --replication ALPHA or --gpu-cache-bytes B --cpu-cache-bytes C")
    if args.replication is not None:
        return Budget(replication=args.replication)
    return Budget(gpu_bytes=parse_bytes(args.gpu_cache_bytes or 0), cpu_bytes=parse_bytes(args.cpu_cache_bytes or 0))


def run(args: argparse.Namespace) -> int:
    get_policy(args.policy)
    budget = budget_from(args)
    workloads = workloads_from(args)
    limit = parse_memory_limit(args.memory_limit)
    estimate = estimate_analyze(read_meta(args.part_dir, PART_KIND), workloads, budget, args.policy,
                                vip_method=args.vip_method, threads=args.threads)
    memory = check_memory(estimate, limit)
    # The output is checked before the long work; PART_DIR/cache is created only once the data passed.
    if args.out is not None:
        out = check_output_dir(args.out)
    else:
        default = default_plan_dir(args.part_dir, args.policy, workloads, budget, args.name)
        cache = check_writable_dir(default.parent, "plan directory", exist_ok=True)
        if cache.is_dir():
            check_output_dir(default)
    dataset = load_partitioned(args.part_dir)
    dataset.check_parts()  # before PART_DIR/cache is created
    ctx = context_from(args, dataset, args.epochs)
    budget.check(dataset.num_parts, row_bytes_of(dataset))
    print(memory, flush=True)
    if args.out is None:
        with output_errors(cache):
            cache.mkdir(exist_ok=True)
        out = check_output_dir(default)
    start = time.perf_counter()
    plans = build_and_save_plans(ctx, args.policy, budget, args.gpu_fraction, out)
    scored = time.perf_counter() - start
    print(f"cache plans for {dataset.num_parts} partitions written to {out} (scoring took {scored:.1f} s)")
    no_cache, with_cache = predicted_rows(ctx, plans)
    print(describe(plans))
    saved = 1 - with_cache.sum() / no_cache.sum() if no_cache.sum() else 0.0
    print(f"predicted remote rows per epoch (analytic VIP): {no_cache.sum():.4g} without a cache, "
          f"{with_cache.sum():.4g} with it ({saved:.1%} fewer)")
    return 0
