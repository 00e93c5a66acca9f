"""``salientpp bench NAME ...``: performance benchmarks.

Each NAME of :data:`BENCHMARKS` is a module ``salientpp.bench.NAME`` with ``SUMMARY`` (its line
in ``salientpp bench --help``), ``add_arguments(parser)`` and ``main(args) -> int``; one that
writes ``--json`` also declares its ``KIND`` (:mod:`salientpp.bench.results`). To add a
benchmark, write the module and add its name here: a listed name without its module fails the
import of the command line, so none is ever skipped.
"""
from __future__ import annotations

import argparse
import importlib

BENCHMARKS = ("sampler", "vip", "simulate", "step", "train", "cluster", "tradeoff", "fullgraph", "partition", "report")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="performance benchmarks", description="Run a performance benchmark.")
    benches = p.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name in BENCHMARKS:
        module = importlib.import_module(f"...bench.{name}", __name__)
        parser = benches.add_parser(name, help=module.SUMMARY, description=module.__doc__)
        module.add_arguments(parser)
        parser.set_defaults(func=module.main)
