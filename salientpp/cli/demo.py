"""``salientpp demo``: the main job end to end on a built-in synthetic graph.

prepare (synthetic) -> partition (METIS) -> analyze (VIP cache plan) -> simulate (policies)
-> train (one local rank per partition). Each step is the real subcommand, so the demo shows
exactly what a user would type.
"""
from __future__ import annotations

import argparse
import shlex
import shutil
import tempfile
from pathlib import Path

from ..errors import InputError, check_int, counted
from ..io import check_output_dir, mark_complete, output_errors


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run prepare -> partition -> analyze -> simulate -> train on a synthetic graph",
                       description="Run the whole pipeline on a built-in synthetic graph and print each command.")
    p.add_argument("--preset", default="tiny", help="synthetic preset (default tiny, ~2k nodes)")
    p.add_argument("--parts", type=int, default=2, help="partitions = training ranks (default 2)")
    p.add_argument("--epochs", type=int, default=15, help="training epochs (default 15)")
    p.add_argument("--out", help="keep the demo's files in this new directory (default: a temporary one, removed)")
    p.set_defaults(func=run)


def steps(work: Path, preset: str, parts: int, epochs: int) -> list[list[str]]:
    """The demo's subcommands, in order, as argument lists for :func:`salientpp.cli.main`."""
    data, part = str(work / "dataset"), str(work / f"partitioned-{parts}")
    workload = ["--fanouts", "10,5", "--batch-size", "32"]
    # the evaluation train runs every epoch, which its cache plan serves beside training
    evaluation = ["--eval-fanouts", "20,20", "--eval-batch-size", "32", "--eval-splits", "valid,test"]
    return [
        ["prepare", f"synthetic:{preset}", data],
        ["partition", data, part, "--parts", str(parts)],
        ["analyze", part, *workload, *evaluation, "--policy", "vip", "--replication", "0.1"],
        ["simulate", part, *workload, *evaluation, "--policies", "vip,degree,halo,random,oracle",
         "--replication", "0,0.05,0.1,0.2", "--epochs", "2"],
        ["train", part, *workload, "--eval-fanouts", "20,20", "--epochs", str(epochs), "--hidden", "64", "--layers",
         "2", "--lr", "0.01", "--policy", "vip", "--replication", "0.1", "--json", str(work / "metrics.jsonl")],
    ]


def check_demo(preset: str, parts: int) -> None:
    """Refuse, before the first step, what a later step would refuse after minutes of work: an
    unknown preset, more parts than the graph has nodes, or than it has training nodes (every
    rank trains on its own), and more training ranks than this machine's memory holds (at least
    their processes, :func:`~salientpp.resources.rank_processes_bytes`; the train step checks its
    full estimate)."""
    from ..data.synthetic import parse_spec
    from ..partition.partitioner import check_options
    from ..resources import MemoryEstimate, check_memory, rank_processes_bytes

    config = parse_spec(preset)
    config.schema().require_homogeneous("demo", f"the {preset} preset", "choose a homogeneous preset")
    check_options(config.num_nodes, parts, "metis", 0)
    if parts > config.num_train:
        raise InputError(f"the {preset} graph has {counted(config.num_train, 'training node')} and every rank needs "
                         f"one, so it cannot train in {parts} parts; use at most --parts {config.num_train}")
    check_memory(MemoryEstimate(f"training {counted(parts, 'rank')}", {"Python + torch": rank_processes_bytes(parts)},
                                "use fewer --parts"), None)


def run(args: argparse.Namespace) -> int:
    from . import main

    check_int(args.parts, "--parts")
    check_int(args.epochs, "--epochs")
    check_demo(args.preset, args.parts)
    work = check_output_dir(args.out) if args.out is not None else Path(tempfile.mkdtemp(prefix="salientpp-demo-"))
    with output_errors(work):
        work.mkdir(exist_ok=True)
    finished = False
    try:
        for argv in steps(work, args.preset, args.parts, args.epochs):
            print(f"\n$ salientpp {shlex.join(argv)}", flush=True)
            code = main(argv, step=True)  # a Ctrl-C in a step stops the demo, whatever the step had written
            if code:
                return code
        finished = True
        if args.out is not None:
            mark_complete(args, work)
        print(f"\ndemo finished; per-epoch metrics in {work / 'metrics.jsonl'}"
              + ("" if args.out is not None else " (temporary directory, now removed: use --out DIR to keep it)"))
    finally:
        # --out holds the whole demo or nothing: a failed step, Ctrl-C or a full disk leaves no
        # half of it that a rerun would refuse.
        if not (args.out is not None and finished):
            shutil.rmtree(work, ignore_errors=True)
    return 0
