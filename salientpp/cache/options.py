"""Command-line options of the sampled workloads a cache serves, and the policy context built
from them: shared by ``salientpp analyze``, ``salientpp simulate`` and ``salientpp bench vip``;
and the options of a cache plan (``salientpp analyze``): :func:`plan_request_from` reads them
into a :class:`~salientpp.cache.plan.PlanRequest`, and :func:`analyze_command` writes a request
back as the ``salientpp analyze`` command that builds it (its inverse, tested as such)."""
from __future__ import annotations

import argparse
import shlex

from ..data.format import SPLITS
from ..data.schema import GraphSchema
from ..errors import check_int
from ..io import read_meta
from ..options import Declared, Needs, Option, add_arguments, check_applies
from ..parsing import flag_names, name_list, parse_bytes, parse_seed
from ..partition.format import KIND as PART_KIND, PartitionedDataset
from ..sampling import DEFAULT_SAMPLER, SAMPLERS, check_sampler, fanout_table, parse_typed_fanouts
from ..sampling.link import LINK, NODE, NUM_NEGATIVES, TASKS, NegativeSampling
from .plan import (DEVICE_FRACTION, DEVICES, GPU_DEVICE_FRACTION, PLAN_EPOCHS, SIMULATION_EPOCHS, Budget, PlanOptions,
                   PlanRequest, check_device_fraction, default_device_fraction, shown_option)
from .policies import PolicyContext, available_policies
from .vip import METHODS
from .workload import EVAL_NEGATIVES, EdgeSeeds, Workload, fanouts_text


# The cache policy a plan is built with unless one is chosen (analyze --policy, train --policy).
DEFAULT_POLICY = "vip"

# The workload options that apply only with others: of --task link, and of --eval-fanouts.
LINK_TASK = Needs("--task link", lambda options: options.task == LINK)
LINK_OPTIONS = (
    Declared("num_negatives", None, Option("--task link: negatives per edge", type=int,
                                           default_text=str(NUM_NEGATIVES), needs=LINK_TASK)),
    Declared("negative_sampling", None, Option("--task link: uniform node pairs or per-source destinations",
                                               choices=tuple(m.value for m in NegativeSampling),
                                               default_text=NegativeSampling.UNIFORM.value, needs=LINK_TASK)))
EVAL_FANOUTS = Needs("--eval-fanouts", lambda args: args.eval_fanouts is not None)
EVAL_OPTIONS = (
    Declared("eval_batch_size", None, Option("inference seeds per minibatch", type=int, metavar="B",
                                             default_text="the training batch size", needs=EVAL_FANOUTS)),
    Declared("eval_splits", None, Option(f"seed splits of inference, from {','.join(SPLITS)}", metavar="S1,S2",
                                         default_text="valid", needs=EVAL_FANOUTS)),
    Declared("eval_weight", None, Option("inference passes per training epoch", type=float, metavar="W",
                                         default_text="1", needs=EVAL_FANOUTS)),
    Declared("eval_negatives", None, Option("--task link: destinations of its source each held-out edge of "
                                            "inference is ranked against", type=int, metavar="N",
                                            default_text=str(EVAL_NEGATIVES),
                                            needs=Needs("--task link and --eval-fanouts", lambda args: (
                                                args.task == LINK and EVAL_FANOUTS.holds(args))))))


def add_workload_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("part_dir", metavar="PART_DIR", help="a partitioned directory written by `salientpp partition`")
    parser.add_argument("--fanouts", required=True, metavar="F1,F2,...",
                        help="training fanouts per hop, first at the seeds; -1 = all neighbours (e.g. 15,10,5); "
                             "on a typed graph one list for every relation, or one per relation: "
                             "REL=15,10;REL2=5,0 (0 = none)")
    parser.add_argument("--batch-size", type=int, required=True, metavar="B", help="training seeds per minibatch")
    parser.add_argument("--replace", action="store_true", help="the sampler draws with replacement")
    parser.add_argument(*flag_names("--eval-fanouts"), metavar="F1,F2,...",
                        help="also serve sampled inference with these fanouts (a mixed workload)")
    add_arguments(parser, EVAL_OPTIONS, defaults=True)
    parser.add_argument("--vip-method", choices=METHODS,
                        help="VIP estimate of the vip policy (default: the sampler's, "
                             + ", ".join(f"{name} {check_sampler(name).default_vip_method}" for name in SAMPLERS)
                             + "; cavity corrects the hop>=2 over-estimate)")
    parser.add_argument("--sampler", default=DEFAULT_SAMPLER, choices=SAMPLERS,
                        help="the training sampler (default nodewise; bulk: the same draws in bulk; ladies: "
                             "layer-wise, --fanouts are nodes per layer)")
    add_task_options(parser)
    parser.add_argument("--seed", type=parse_seed, default=0, help="seed of the evaluated run and of random choices (default 0)")
    parser.add_argument("--simulation-epochs", type=int, default=SIMULATION_EPOCHS, metavar="E",
                        help=f"epochs sampled by the vip-simulation policy (default {SIMULATION_EPOCHS})")
    parser.add_argument(*flag_names("--sampler-threads"), type=int, default=1, metavar="T",
                        help="sampler threads (default 1)")


def add_task_options(parser: argparse.ArgumentParser) -> None:
    """``--task`` and the negatives of link prediction (:func:`edge_seeds_from` reads them)."""
    parser.add_argument("--task", choices=TASKS, default=NODE,
                        help="node seeds, or link prediction: the held-out training edges of `prepare --link-split` "
                             "with negatives, --batch-size edges per batch (default node)")
    add_arguments(parser, LINK_OPTIONS, defaults=True)


def edge_seeds_from(args: argparse.Namespace) -> EdgeSeeds | None:
    """The :class:`EdgeSeeds` of ``--task link`` (``None`` for node seeds)."""
    check_applies(args, LINK_OPTIONS)
    if args.task != LINK:
        return None
    default = EdgeSeeds()
    return EdgeSeeds(default.num_negatives if args.num_negatives is None else args.num_negatives,
                     default.negative_sampling if args.negative_sampling is None else args.negative_sampling)


def graph_schema(part_dir) -> GraphSchema:
    """The schema a partitioned directory's meta.json records (homogeneous when it records none),
    read before the data is: what ``--fanouts`` is checked against."""
    meta = read_meta(part_dir, PART_KIND)
    return GraphSchema.from_meta(meta, int(meta["num_nodes"]), f"meta.json in {part_dir}")


def fanouts_from(text: str, schema: GraphSchema | None, sampler, what: str = "--fanouts"):
    """The fanouts of the option ``what`` (its ``text``) on the graph of ``schema``: int64 ``[L, R]``
    (:func:`~salientpp.sampling.kinds.fanout_table`, from one list for every relation or one list
    per relation, :func:`~salientpp.sampling.kinds.parse_typed_fanouts`), errors naming ``what``."""
    return fanout_table(parse_typed_fanouts(text, what), schema, check_sampler(sampler), what=what)


def workloads_from(args: argparse.Namespace, schema: GraphSchema | None = None) -> tuple[Workload, ...]:
    """The workloads of the options on the graph of ``schema`` (``None``: homogeneous)."""
    edges = edge_seeds_from(args)
    train = Workload(fanouts_from(args.fanouts, schema, args.sampler), args.batch_size, replace=args.replace,
                     sampler=args.sampler, edges=edges, schema=schema)
    check_applies(args, EVAL_OPTIONS)
    if args.eval_fanouts is None:
        return (train,)
    splits = ("valid",) if args.eval_splits is None else tuple(name_list(args.eval_splits, "--eval-splits",
                                                                          "valid,test"))
    inference = Workload(fanouts_from(args.eval_fanouts, schema, DEFAULT_SAMPLER, "--eval-fanouts"),
                         args.eval_batch_size or args.batch_size, replace=args.replace, splits=splits,
                         weight=1.0 if args.eval_weight is None else args.eval_weight,
                         edges=None if edges is None else EdgeSeeds.evaluation(args.eval_negatives), schema=schema)
    return train, inference


def _threads_for(args: argparse.Namespace, dataset: PartitionedDataset) -> int:
    """``--sampler-threads``, checked, once the dataset has what the workload options need (the held-out
    edges of ``--task link``)."""
    check_int(args.sampler_threads, "--sampler-threads")
    if args.task == LINK:
        dataset.require_link_split()
    return args.sampler_threads


def context_from(args: argparse.Namespace, dataset: PartitionedDataset, epochs: int) -> PolicyContext:
    """The policy context of the workload options on ``dataset``, evaluating ``epochs`` epochs."""
    threads = _threads_for(args, dataset)
    return PolicyContext(dataset, workloads_from(args, dataset.schema), seed=args.seed, epochs=epochs,
                         simulation_epochs=args.simulation_epochs, vip_method=args.vip_method,
                         sampler_threads=threads, progress=True)


def plan_context_from(args: argparse.Namespace, dataset: PartitionedDataset, request: PlanRequest) -> PolicyContext:
    """The policy context that builds ``request``'s plan (read from ``args`` by :func:`plan_request_from`)."""
    return request.context(dataset, sampler_threads=_threads_for(args, dataset), progress=True)


# ---- the options of a cache plan (salientpp analyze) ---------------------------------------------

def add_plan_options(parser: argparse.ArgumentParser) -> None:
    """The workload options and what a plan is built with: ``--policy``, the budget, the device
    share and the oracle's epochs (:func:`plan_request_from` reads them)."""
    add_workload_options(parser)
    parser.add_argument("--policy", default=DEFAULT_POLICY, metavar="NAME",
                        help=f"cache policy, one of {', '.join(available_policies())} (default {DEFAULT_POLICY})")
    parser.add_argument("--replication", type=float, metavar="ALPHA",
                        help="cache the top ALPHA*N/K remote rows per partition (a fraction in [0, K-1])")
    parser.add_argument(*flag_names("--device-cache-bytes"), metavar="BYTES",
                        help="device tier budget per partition, e.g. 2GiB (filled first); with --host-cache-bytes")
    parser.add_argument(*flag_names("--host-cache-bytes"), metavar="BYTES",
                        help="host tier budget per partition, e.g. 8GiB")
    parser.add_argument("--device", choices=DEVICES, default=DEVICES[0],
                        help="the training device the plan is for, as train's --device: it decides the default "
                             f"--device-fraction (default {DEVICES[0]})")
    parser.add_argument(*flag_names("--device-fraction"), type=float, metavar="FRAC",
                        help="fraction of each partition's own rows kept on the device, by score (default, as "
                             f"train's, {DEVICE_FRACTION} on the CPU, {GPU_DEVICE_FRACTION:g} on a GPU)")
    parser.add_argument("--epochs", type=int, default=PLAN_EPOCHS, metavar="E",
                        help=f"epochs counted by the oracle policy (default {PLAN_EPOCHS})")


def plan_request_from(args: argparse.Namespace, schema: GraphSchema | None = None) -> PlanRequest:
    """The :class:`PlanRequest` of :func:`add_plan_options`' options on the graph of ``schema``
    (``None``: homogeneous); :class:`InputError` (one sentence) for a bad option."""
    size = (None if args.device_cache_bytes is None else parse_bytes(args.device_cache_bytes),
            None if args.host_cache_bytes is None else parse_bytes(args.host_cache_bytes))
    budget = Budget.given(args.replication, *size)
    device_fraction = check_device_fraction(default_device_fraction(args.device, args.device_fraction),
                                            "--device-fraction")
    return PlanRequest(workloads_from(args, schema), PlanOptions(args.policy, budget, device_fraction, seed=args.seed,
                                                         epochs=args.epochs, simulation_epochs=args.simulation_epochs,
                                                         vip_method=args.vip_method))


def analyze_command(part_dir: str, request: PlanRequest, out: str = "DIR") -> str:
    """The ``salientpp analyze`` command that writes the plan of ``request`` to ``out``: every
    option that :func:`plan_request_from` would read back as ``request`` (the workloads, the
    policy, the budget, the device share, the seed and the epochs), those at their defaults
    left out."""
    train, options = request.workload, request.options
    words = ["salientpp", "analyze", part_dir, "--fanouts", fanouts_text(train), "--batch-size",
             str(train.batch_size)]
    if train.replace:
        words.append("--replace")
    if train.sampler.value != DEFAULT_SAMPLER:
        words += ["--sampler", train.sampler.value]
    if train.edges is not None:
        words += ["--task", LINK, "--num-negatives", str(train.edges.num_negatives),
                  "--negative-sampling", train.edges.negative_sampling.value]
    if len(request.workloads) > 1:
        inference = request.workloads[1]
        words += ["--eval-fanouts", fanouts_text(inference), "--eval-batch-size",
                  str(inference.batch_size), "--eval-splits", ",".join(inference.splits),
                  "--eval-weight", shown_option(inference.weight)]
        if inference.edges is not None:
            words += ["--eval-negatives", str(inference.edges.num_negatives)]
    budget = options.budget
    words += ["--policy", options.policy]
    words += (["--replication", f"{budget.replication:g}"] if budget.replication is not None else
              ["--device-cache-bytes", str(budget.device_bytes), "--host-cache-bytes", str(budget.host_bytes)])
    for f in options.changed_fields(request.default_options):
        words += [f.metadata["flag"], shown_option(getattr(options, f.name))]
    return shlex.join([*words, "--out", out])
