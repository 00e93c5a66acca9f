"""Communication volume of the cache policies over several sampling settings.

For each ``--setting FANOUTS:BATCH`` (e.g. ``15,10,5:1024`` and ``10,5:64``) it runs the
simulator (:func:`salientpp.cache.simulate`) on the same partitioned directory and prints the
rows fetched per epoch per policy and α and the saving efficiency
``(no cache - policy) / (no cache - oracle)``; the oracle is scored on the evaluated epochs
(use at least 10: with fewer it fits the sampling noise of those epochs).
"""
from __future__ import annotations

import argparse
import time

from ..cache.policies import PolicyContext, get_policy
from ..cache.simulator import check_replication, efficiency_text, mean_efficiency, simulate
from ..cache.options import fanouts_from, graph_schema
from ..cache.workload import Workload, fanouts_text
from ..data.schema import GraphSchema
from ..sampling import DEFAULT_SAMPLER
from ..errors import InputError
from ..partition.format import load_partitioned
from ..io import check_output_dir
from .results import write_outputs
from ..parsing import flag_names, name_list, number_list, parse_seed

# The kind its --json file declares (salientpp.bench.results) and its line in `salientpp bench --help`.
KIND = "salientpp-bench-simulate"
SUMMARY = "rows fetched per epoch per cache policy and alpha, saving efficiency vs the oracle"

DEFAULT_POLICIES = "vip,vip-cavity,vip-simulation,degree,halo,num-paths,random,oracle"


def parse_setting(text: str, schema: GraphSchema) -> Workload:
    """``"15,10,5:1024"`` -> the workload of fanouts 15,10,5 and batch size 1024 on the graph of
    ``schema``; FANOUTS may give one list per relation (``REL=15,10;REL2=5,0:1024``,
    :func:`~salientpp.cache.options.fanouts_from`)."""
    fanouts, sep, batch = text.rpartition(":")
    if not sep or not batch.strip().isdigit():
        raise InputError(f"a setting is FANOUTS:BATCH like 15,10,5:1024, got {text!r}")
    return Workload(fanouts_from(fanouts, schema, DEFAULT_SAMPLER, "the FANOUTS of --setting"), int(batch),
                    schema=schema)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("part_dir", metavar="PART_DIR", help="a partitioned directory")
    p.add_argument("--setting", action="append", metavar="FANOUTS:BATCH",
                   help="a sampling setting, repeatable (default: 15,10,5:1024 and 10,5:64)")
    p.add_argument("--policies", default=DEFAULT_POLICIES, help=f"policies (default {DEFAULT_POLICIES})")
    p.add_argument("--replication", default="0.01,0.05,0.1,0.2,0.5,1.0", help="replication factors alpha")
    p.add_argument("--epochs", type=int, default=10, help="evaluated epochs (default 10)")
    p.add_argument("--simulation-epochs", type=int, default=5, help="epochs sampled by vip-simulation (default 5)")
    p.add_argument("--seed", type=parse_seed, default=0, help="seed of the evaluated epochs (default 0)")
    p.add_argument(*flag_names("--sampler-threads"), type=int, default=1, help="sampler threads (default 1)")
    p.add_argument("--json", help="also write the results to this JSON file (must not exist)")


def main(args: argparse.Namespace) -> int:
    schema = graph_schema(args.part_dir)
    settings = [parse_setting(s, schema) for s in (args.setting or ["15,10,5:1024", "10,5:64"])]
    policies = name_list(args.policies, "--policies", "vip,degree")
    for name in policies:
        get_policy(name)
    if args.json is not None:
        check_output_dir(args.json, "output file")
    dataset = load_partitioned(args.part_dir)
    replication = check_replication(number_list(args.replication, float, "--replication", "0,0.1,0.5"), dataset.num_parts)
    reports = []
    for workload in settings:
        ctx = PolicyContext(dataset, (workload,), seed=args.seed, epochs=args.epochs,
                            simulation_epochs=args.simulation_epochs, sampler_threads=args.sampler_threads, progress=True)
        start = time.perf_counter()
        result = simulate(ctx, policies, replication)
        seconds = time.perf_counter() - start
        print(f"\n### {dataset.path.name}: {dataset.num_parts} partitions, fanouts {fanouts_text(workload)}, "
              f"batch {workload.batch_size}, {args.epochs} evaluated epochs ({seconds:.0f} s)\n")
        print(result.table())
        print("\nseconds: " + ", ".join(f"{k} {v:.1f}" for k, v in result.meta["seconds"].items()))
        eff = result.efficiency()
        if eff is not None:
            print("mean efficiency over α: " + ", ".join(f"{p} {efficiency_text(mean_efficiency(e))}"
                                                          for p, e in zip(policies, eff)))
        entry = workload.to_json()
        reports.append({"fanouts": entry["fanouts"], "batch_size": workload.batch_size, "seconds": seconds,
                        **result.to_json()})
    write_outputs(args, KIND, reports, args.json)
    return 0
