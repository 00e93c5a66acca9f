"""``salientpp analyze PART_DIR --fanouts 15,10,5 --batch-size 1024 --policy vip --replication 0.1``:
score vertices with a cache policy and write one cache plan per partition."""
from __future__ import annotations

import argparse
import time

from ..cache.plan import describe, node_row_bytes, predicted_rows, smallest_row_bytes
from ..cache.policies import check_policies
from ..errors import InputError
from ..io import check_output_dir, check_output_location, check_writable_dir, mark_complete, output_errors, read_meta
from ..partition.format import KIND as PART_KIND, load_partitioned
from ..parsing import parse_memory_limit
from ..resources import check_memory, estimate_analyze
from ..cache.options import add_plan_options, graph_schema, plan_context_from, plan_request_from


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "analyze", help="VIP analysis: build the cache plan of every partition",
        description="Score every vertex with a cache policy (default: the analytic vertex inclusion "
                    "probability of the sampler), cache the best remote rows of each partition within "
                    "a replication factor or byte budgets, and write the plans next to the data "
                    "(PART_DIR/cache/NAME unless --out is given). Train with any plan it wrote by "
                    "`salientpp train PART_DIR --plan DIR`.")
    add_plan_options(parser)
    parser.add_argument("--name", help="plan name under PART_DIR/cache/ (default: from policy, fanouts and budget)")
    parser.add_argument("--out", metavar="DIR", help="write the plan here instead of PART_DIR/cache/NAME")
    parser.add_argument("--memory-limit", metavar="SIZE",
                        help="refuse to start when the memory estimate exceeds SIZE, e.g. 12GiB "
                             "(default: the memory available to this process)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_policies([args.policy], args.vip_method)
    request = plan_request_from(args, graph_schema(args.part_dir))
    budget, workloads = request.options.budget, request.workloads
    limit = parse_memory_limit(args.memory_limit)
    estimate = estimate_analyze(read_meta(args.part_dir, PART_KIND), workloads, budget, args.policy,
                                vip_method=args.vip_method, threads=args.sampler_threads)
    memory = check_memory(estimate, limit)
    # The output is checked before the long work; PART_DIR/cache is created only once the data passed.
    if args.out is not None:
        if args.name is not None:
            raise InputError("--name names a plan under PART_DIR/cache/ and --out a directory of its own; give one")
        check_output_location(args.out, "--out")
        out = check_output_dir(args.out)
    else:
        default = request.default_dir(args.part_dir, args.name)
        cache = check_writable_dir(default.parent, "plan directory", exist_ok=True)
        if cache.is_dir():
            check_output_dir(default)
    dataset = load_partitioned(args.part_dir)
    dataset.check_parts()  # before PART_DIR/cache is created
    ctx = plan_context_from(args, dataset, request)
    budget.check(dataset.num_parts, smallest_row_bytes(dataset))
    print(memory, flush=True)
    if args.out is None:
        with output_errors(cache):
            cache.mkdir(exist_ok=True)
        out = check_output_dir(default)
    start = time.perf_counter()
    try:
        plans = request.build_and_save(ctx, out)
    finally:
        # The rename of the plan directory is its commit point: out did not exist when checked above,
        # so once it does the plan is complete, and an interrupt from then on (Ctrl-C as the rename
        # returns) exits 0 saying so instead of 130 beside a plan that a rerun finds already there.
        if out.is_dir():
            mark_complete(args, out)
    scored = time.perf_counter() - start
    print(f"cache plans for {dataset.num_parts} partitions written to {out} (scoring took {scored:.1f} s)")
    no_cache, with_cache = predicted_rows(ctx, plans)
    print(describe(plans, node_row_bytes(dataset)))
    saved = 1 - with_cache.sum() / no_cache.sum() if no_cache.sum() else 0.0
    print(f"predicted remote rows per epoch (analytic VIP): {no_cache.sum():.4g} without a cache, "
          f"{with_cache.sum():.4g} with it ({saved:.1%} fewer)")
    return 0
