"""``salientpp simulate PART_DIR --fanouts 15,10,5 --batch-size 1024 --policies vip,degree,oracle
--replication 0,0.1,0.5 --epochs 5``: remote rows fetched per epoch per policy and replication factor."""
from __future__ import annotations

import argparse

from ..cache.policies import available_policies, check_policies
from ..bench.results import write_outputs
from ..cache.simulator import RESULT_KIND, check_replication, plot_volume, simulate
from ..io import check_output_dir, check_output_location, check_output_paths
from ..partition.format import load_partitioned
from ..parsing import name_list, number_list
from ..plots import check_plot_path
from ..cache.options import add_workload_options, context_from, graph_schema, workloads_from

DEFAULT_POLICIES = "vip,vip-simulation,degree,halo,num-paths,random,oracle"
DEFAULT_REPLICATION = "0,0.01,0.05,0.1,0.2,0.5,1.0"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "simulate", help="communication volume of cache policies, sampled with the trainer's sampler",
        description="Sample every partition's training epochs with the trainer's sampler and count, for "
                    "each cache policy and replication factor, the remote feature rows the minibatches "
                    "fetch (all policies are scored on the same batches). Prints a table; optionally "
                    "writes JSON and a log-scale plot (matplotlib).")
    add_workload_options(parser)
    parser.add_argument("--policies", default=DEFAULT_POLICIES, metavar="P1,P2,...",
                        help=f"policies to compare, from {', '.join(available_policies())} (default: all built-ins)")
    parser.add_argument("--replication", default=DEFAULT_REPLICATION, metavar="A1,A2,...",
                        help=f"replication factors alpha in [0, K-1] (default {DEFAULT_REPLICATION})")
    parser.add_argument("--epochs", type=int, default=5, metavar="E",
                        help="evaluated epochs (default 5; the oracle needs >= 10 to stop fitting sampling noise)")
    parser.add_argument("--json", metavar="OUT", help="write the results as JSON here (must not exist)")
    parser.add_argument("--plot", metavar="OUT.png",
                        help="write a log-scale plot of rows fetched vs alpha here (matplotlib; must not exist)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    policies = check_policies(name_list(args.policies, "--policies", "vip,degree"), args.vip_method)
    workloads_from(args, graph_schema(args.part_dir))  # a bad --fanouts fails before the data is read
    check_output_paths({"--json": args.json, "--plot": args.plot})
    for flag, path in (("--json", args.json), ("--plot", args.plot)):
        if path is not None:
            check_output_location(path, flag)
    if args.json is not None:
        check_output_dir(args.json, "output file")
    if args.plot is not None:
        check_plot_path(args.plot)
    replication = number_list(args.replication, float, "--replication", "0,0.1,0.5")
    dataset = load_partitioned(args.part_dir)
    dataset.check_parts()  # a corrupt partition fails now, not after minutes of sampling
    ctx = context_from(args, dataset, args.epochs)
    replication = check_replication(replication, dataset.num_parts)
    result = simulate(ctx, policies, replication)
    print(result.table())
    seconds = result.meta["seconds"]
    print("time: " + ", ".join(f"{name} {s:.1f} s" for name, s in seconds.items()))
    write_outputs(args, RESULT_KIND, result.to_json(), args.json, args.plot, lambda path: plot_volume(result, path))
    return 0
