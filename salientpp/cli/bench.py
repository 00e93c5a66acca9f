"""``salientpp bench NAME ...``: performance benchmarks.

Each NAME is a module ``salientpp.bench.NAME`` with ``add_arguments(parser)`` and
``main(args) -> int``; to add a benchmark, write the module and list it in BENCHMARKS.
Listed modules that do not exist (yet) are skipped.
"""
from __future__ import annotations

import argparse
import importlib

BENCHMARKS = {
    "sampler": "sampled edges/s of the C++ node-wise, bulk and LADIES samplers vs PyG's NeighborLoader",
    "vip": "VIP analysis time, peak memory and accuracy against the sampler",
    "simulate": "rows fetched per epoch per cache policy and alpha, saving efficiency vs the oracle",
    "step": "the model step (CPU or --device cuda): aggregation kernels, fused dropout, whole training steps vs PyG's",
    "train": "distributed epoch time and its breakdown per cache setting, pipeline on and off",
    "cluster": "SALIENT++'s experiment on an emulated cluster network: epoch time against alpha per policy",
    "tradeoff": "test accuracy against sampled edges per batch, LADIES against node-wise sampling",
    "fullgraph": "full-graph training per dependency mode (cache, communicate, hybrid): time, bytes, prediction",
    "partition": "partitioning methods side by side: wall time, peak memory, edge cut, balance; scaling",
    "report": "Markdown tables and PNG plots from the --json outputs of the other benchmarks",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="performance benchmarks", description="Run a performance benchmark.")
    benches = p.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name, summary in BENCHMARKS.items():
        try:
            module = importlib.import_module(f"...bench.{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name == f"salientpp.bench.{name}":
                continue
            raise
        parser = benches.add_parser(name, help=summary, description=module.__doc__)
        module.add_arguments(parser)
        parser.set_defaults(func=module.main)
