"""Command-line options of the sampled workloads a cache serves, and the policy context built
from them: shared by ``salientpp analyze``, ``salientpp simulate`` and ``salientpp bench vip``."""
from __future__ import annotations

import argparse

from ..data.format import SPLITS
from ..errors import check_int
from ..parsing import name_list
from ..partition.format import PartitionedDataset
from ..sampling import DEFAULT_SAMPLER, SAMPLERS, parse_fanouts
from ..sampling.link import LINK, NODE, TASKS, NegativeSampling
from .policies import PolicyContext
from .vip import METHODS
from .workload import EdgeSeeds, Workload


def add_workload_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("part_dir", metavar="PART_DIR", help="a partitioned directory written by `salientpp partition`")
    parser.add_argument("--fanouts", required=True, metavar="F1,F2,...",
                        help="training fanouts per hop, first at the seeds; -1 = all neighbours (e.g. 15,10,5)")
    parser.add_argument("--batch-size", type=int, required=True, metavar="B", help="training seeds per minibatch")
    parser.add_argument("--replace", action="store_true", help="the sampler draws with replacement")
    parser.add_argument("--inference-fanouts", metavar="F1,F2,...",
                        help="also serve sampled inference with these fanouts (a mixed workload)")
    parser.add_argument("--inference-batch-size", type=int, metavar="B",
                        help="inference seeds per minibatch (default: the training batch size)")
    parser.add_argument("--inference-splits", default="valid", metavar="S1,S2",
                        help=f"seed splits of inference, from {','.join(SPLITS)} (default valid)")
    parser.add_argument("--inference-weight", type=float, default=1.0, metavar="W",
                        help="inference passes per training epoch (default 1)")
    parser.add_argument("--vip-method", choices=METHODS,
                        help="VIP estimate of the vip policy (default exact, cavity with --sampler ladies; cavity "
                             "corrects the hop>=2 over-estimate)")
    parser.add_argument("--sampler", default=DEFAULT_SAMPLER.value, choices=SAMPLERS,
                        help="the training sampler (default nodewise; bulk: the same draws in bulk; ladies: "
                             "layer-wise, --fanouts are nodes per layer)")
    add_task_options(parser)
    parser.add_argument("--seed", type=int, default=0, help="seed of the evaluated run and of random choices (default 0)")
    parser.add_argument("--simulation-epochs", type=int, default=5, metavar="E",
                        help="epochs sampled by the vip-simulation policy (default 5)")
    parser.add_argument("--threads", type=int, default=1, metavar="T", help="sampler threads (default 1)")


def add_task_options(parser: argparse.ArgumentParser) -> None:
    """``--task`` and the negatives of link prediction (:func:`edge_seeds_from` reads them)."""
    parser.add_argument("--task", choices=TASKS, default=NODE,
                        help="node seeds, or link prediction: the held-out training edges of `prepare --link-split` "
                             "with negatives, --batch-size edges per batch (default node)")
    parser.add_argument("--num-negatives", type=int, default=1, help="--task link: negatives per edge (default 1)")
    parser.add_argument("--negative-sampling", choices=[m.value for m in NegativeSampling],
                        default=NegativeSampling.UNIFORM.value,
                        help="--task link: uniform node pairs or per-source destinations (default uniform)")


def edge_seeds_from(args: argparse.Namespace) -> EdgeSeeds | None:
    """The :class:`EdgeSeeds` of ``--task link`` (``None`` for node seeds)."""
    return EdgeSeeds(args.num_negatives, args.negative_sampling) if args.task == LINK else None


def workloads_from(args: argparse.Namespace) -> tuple[Workload, ...]:
    edges = edge_seeds_from(args)
    train = Workload(parse_fanouts(args.fanouts), args.batch_size, replace=args.replace, sampler=args.sampler,
                     edges=edges)
    if args.inference_fanouts is None:
        return (train,)
    splits = tuple(name_list(args.inference_splits, "--inference-splits", "valid,test"))
    inference = Workload(parse_fanouts(args.inference_fanouts), args.inference_batch_size or args.batch_size,
                         replace=args.replace, splits=splits, weight=args.inference_weight, edges=edges)
    return train, inference


def context_from(args: argparse.Namespace, dataset: PartitionedDataset, epochs: int) -> PolicyContext:
    check_int(args.threads, "--threads")
    if args.task == LINK:
        dataset.require_link_split()
    return PolicyContext(dataset, workloads_from(args), seed=args.seed, epochs=epochs,
                         simulation_epochs=args.simulation_epochs, vip_method=args.vip_method,
                         num_threads=args.threads, progress=True)
