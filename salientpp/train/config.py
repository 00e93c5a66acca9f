"""The training configuration: every option of ``salientpp train`` as one dataclass, the schema.

Each field of :class:`TrainConfig` carries an :class:`~salientpp.options.Option` in its metadata
(the schema every command declares its options with, :mod:`salientpp.options`), and everything
else is derived from it: the command-line flag (:func:`add_options`, :func:`config_from_args`),
the options every rank must agree on (:func:`agreed_options`), those a cache plan decides
(``--plan`` refuses them), those a checkpoint must match to be resumed
(:func:`checkpoint_options`), and each option's own check. Adding an option is one field.

Two steps, each done once: :meth:`TrainConfig.validate` only checks (it changes nothing);
:meth:`TrainConfig.resolved` returns a copy with every default that depends on other options
filled in (a field left ``None`` means "the default": fanouts, evaluation fanouts and batch
size, the cache options). The defaults that depend on the machine (threads, pipeline depth) are
resolved with it by :func:`salientpp.train.run.resolve_run`.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from ..cache.options import DEFAULT_POLICY, LINK_TASK
from ..cache.workload import EVAL_NEGATIVES
from ..cache.plan import DEVICE_FRACTION, GPU_DEVICE_FRACTION, check_device_fraction, default_device_fraction
from ..cache.policies import get_policy
from ..distributed.group import DEFAULT_TIMEOUT_S, check_timeout, is_first_rank, may_be_a_restart
from ..distributed.network import parse_network
from ..embedding.optim import SPARSE_OPTIMIZERS
from ..errors import InputError, check_int, check_seed
from ..fullgraph.schedule import Dependencies
from ..host import check_fetch_thread
from ..io import check_output_location, check_unlocked, check_writable_file, output_parents
from ..models import MODELS, TYPED_MODELS
from ..models.typed import INPUTS, ROOTS, TypedStructure
from ..models.gnn import check_model, check_reads_edge_weights, runs_layer_by_layer, trains_full_graph
from ..options import Declared, Needs, Option, add_arguments, check_applies, declared, option, values_from
from ..parsing import parse_memory_limit
from ..sampling import (DEFAULT_SAMPLER, MINIBATCHES_PER_BULK, SAMPLERS, SAMPLING_DEVICES, check_fanouts,
                        check_sampler, check_sampling_device, parse_typed_fanouts)
from ..sampling.kinds import kind_needs
from ..sampling.link import LINK, NUM_NEGATIVES, TASKS, NegativeSampling
from .checkpoint import check_checkpoint_dir
from .link import DECODERS
from .tasks import METRICS, check_metric

DEVICES = ("cpu", "cuda")
# Training modes: sampled minibatches, or every layer over the whole graph (salientpp.fullgraph).
MINIBATCH, FULL_GRAPH = "minibatch", "full-graph"
MODES = (MINIBATCH, FULL_GRAPH)
SAMPLED, LAYERWISE = "sampled", "layerwise"
INFERENCE = (SAMPLED, LAYERWISE)
# What the cache plan built without --plan serves (--plan-workload): the training batches and the
# run's sampled evaluation (salientpp.train.setup.plan_request), or the training batches alone.
TRAIN_AND_EVAL, TRAIN_ONLY = "train+eval", "train"
PLAN_WORKLOADS = (TRAIN_AND_EVAL, TRAIN_ONLY)
# Number formats of the training step: float32, or bfloat16 under torch.autocast.
FP32, BF16 = "fp32", "bf16"
PRECISIONS = (FP32, BF16)
# The defaults that TrainConfig.resolved() fills in where a field is left None.
DEFAULT_FANOUTS = (15, 10, 5)
# --fanouts: one list for every relation, or (a typed graph's) one list per relation by name.
Fanouts = tuple[int, ...] | dict[str, tuple[int, ...]]
DEFAULT_EVAL_FANOUT = 20  # per layer
DEFAULT_REPLICATION = 0.1


def cpu_has_bf16() -> bool:
    """Whether this CPU has bfloat16 instructions (AVX512-BF16 or AMX), without which bfloat16
    matrix products are emulated and slower than float32."""
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


# ---- the schema: each field an Option (salientpp.options), these its Needs ------------------------

MINIBATCH_ONLY = Needs("--mode minibatch", lambda config: config.mode == MINIBATCH)
FULL_GRAPH_ONLY = Needs("--mode full-graph", lambda config: config.mode == FULL_GRAPH)
LINK_ONLY = LINK_TASK
BULK_ONLY = kind_needs("draws_in_bulk")
GPU_SAMPLER_ONLY = kind_needs("gpu")
LAYER_SIZES = kind_needs("layer_sizes")  # whose fanouts are nodes per layer
EMBEDDING_ONLY = Needs("--embedding-dim", lambda config: config.embedding_dim > 0)
CHECKPOINTS_ONLY = Needs("--checkpoint-dir", lambda config: bool(config.checkpoint_dir))
CACHED_ONLY = Needs("--mode minibatch and a --policy other than none",
                    lambda config: MINIBATCH_ONLY.holds(config) and config.policy != "none")
EVALUATED_ONLY = Needs("--eval-every 1 or more", lambda config: config.eval_every > 0)
STRUCTURED_ONLY = Needs(f"--model {' or '.join(TypedStructure.MODELS)}",  # None: the graph's, checked once named
                        lambda config: config.model is None or config.model in TypedStructure.MODELS)
SAMPLED_INFERENCE_ONLY = Needs("--eval-every 1 or more and --inference sampled in --mode minibatch",
                               lambda config: EVALUATED_ONLY.holds(config) and config.inference == SAMPLED
                               and MINIBATCH_ONLY.holds(config))


def option_of(f: dataclasses.Field) -> Option:
    return f.metadata["option"]


def flag_of(f: dataclasses.Field) -> str:
    """The field's command-line flag (``--batch-size``), or its name in capitals when positional."""
    return Declared(f.name, f.default, option_of(f)).flag


def positive(value: Any, flag: str) -> None:
    check_int(value, flag)


def non_negative(value: Any, flag: str) -> None:
    check_int(value, flag, minimum=0)


def positive_number(value: Any, flag: str) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise InputError(f"{flag} must be a positive finite number, got {value}")


def _not_layer_by_layer(model: str, what: str) -> str:
    """Why ``what`` (``"layer-wise inference"``, ``"--mode full-graph"``), which runs a model layer by
    layer over the whole graph, cannot run ``model`` (:func:`runs_layer_by_layer`, or for full-graph
    training :func:`trains_full_graph`, is false): a typed model has no full-graph training yet; a
    user's model is not made of the trainer's layers."""
    if model in TYPED_MODELS:
        return f"{what} is not implemented for the typed model {model} yet (typed models train on sampled batches only)"
    return f"{what} runs the built-in models layer by layer, not {model}"


def one_of(choices: tuple[str, ...], what: str) -> Callable[[Any, str], None]:
    """The check of a value that must be one of ``choices``; the message calls it ``what``."""
    listed = " or ".join(choices) if len(choices) == 2 else "one of " + ", ".join(choices)

    def check(value: Any, flag: str) -> None:
        if value not in choices:
            raise InputError(f"unknown {what} {value!r}; choose {listed}")
    return check


def _at_least_0(value: Any, what: str) -> None:
    if not (value >= 0 and math.isfinite(value)):
        raise InputError(f"{what} must be a finite number of at least 0, got {value}")


def _dropout(value: Any, flag: str) -> None:
    if not 0 <= value < 1:
        raise InputError(f"{flag} must lie in [0, 1), got {value}")


def _seed(value: Any, flag: str) -> None:
    check_seed(value, "the seed")


def _policy(value: Any, flag: str) -> None:
    if value != "none":
        get_policy(value)


def parse_interval(text: str) -> tuple[int, str]:
    """``"500"`` or ``"500steps"`` -> ``(500, "steps")``; ``"1epoch"``/``"2epochs"`` -> ``(n, "epochs")``."""
    match = re.fullmatch(r"\s*(\d+)\s*(steps?|epochs?)?\s*", str(text))
    if not match or int(match.group(1)) < 1:
        raise InputError(f"--checkpoint-every must be a positive number of steps or epochs such as 500, 500steps "
                         f"or 1epoch, got {text!r}")
    unit = match.group(2) or "steps"
    return int(match.group(1)), "epochs" if unit.startswith("epoch") else "steps"


def _joined(values: tuple[int, ...]) -> str:
    return ",".join(map(str, values))


@dataclass(frozen=True)
class TrainConfig:
    """What to train, where, and how: one field per option of ``salientpp train`` (each field's
    :class:`Option` holds its help, which is the reference; ``salientpp train --help`` prints it).

    Fields left ``None`` take a default that depends on other options, filled in by
    :meth:`resolved` where the option applies to the run (else it stays ``None``): ``fanouts``
    (15,10,5; full-graph mode aggregates every neighbour without them), ``eval_fanouts``
    (20 per layer), ``eval_batch_size`` (the batch size), ``policy``/``replication``/
    ``device_fraction``/``plan_workload`` (vip, 0.1, 0.15 on the CPU and 1 on a GPU, train+eval;
    ``None`` with ``--plan``, whose plan decides them), and
    ``pipeline_depth``, ``sampler_threads``, ``torch_threads`` (the thread budget of this machine,
    resolved with it by :func:`salientpp.train.run.resolve_run`).
    """

    part_dir: str = option(dataclasses.MISSING, "a partitioned directory (salientpp partition)", flag="",
                           metavar="PART_DIR")
    epochs: int = option(10, "total epochs (a resumed run continues up to this number)", type=int, check=positive,
                         agreed=True)
    mode: str = option(MINIBATCH, "sampled minibatches, or one exact step per epoch over the whole graph (no "
                       "sampling, batches, cache or pipeline; layer-wise evaluation)", choices=MODES,
                       check=one_of(MODES, "mode"), agreed=True)
    dependencies: str = option(
        Dependencies.HYBRID.value, "--mode full-graph: recompute remote vertices' hidden rows (cache), exchange them "
        "every layer (communicate), or choose per vertex or level by a cost model calibrated on this machine, timing "
        "the plans it predicts close to the fastest once at start-up", choices=tuple(d.value for d in Dependencies),
        check=one_of(tuple(d.value for d in Dependencies), "dependency mode"), agreed=True, needs=FULL_GRAPH_ONLY)
    model: str | None = option(None, "a built-in model or a factory FUNCTION(in_dim, hidden, out_dim, num_layers) -> "
                               "torch.nn.Module (see salientpp.models.gnn for how the trainer calls it)",
                               metavar="sage|gat|gin|gcn|rsage|rgcn|rgat|PKG.MODULE:FUNCTION",
                               default_text="the graph's: sage for one node type, rsage for several",
                               check=lambda value, flag: check_model(value), agreed=True, resume_matches=True)
    metric: str | None = option(None, "validation/test metric", choices=METRICS,
                                default_text="accuracy for class labels, roc-auc for multi-label and for --task link",
                                check=lambda value, flag: check_metric(value), agreed=True)
    task: str = option("node", "node classification, or link prediction over the held-out edges of `salientpp "
                       "prepare --link-split`", choices=TASKS, check=one_of(TASKS, "task"), agreed=True,
                       resume_matches=True, needs=MINIBATCH_ONLY)
    num_negatives: int = option(NUM_NEGATIVES, "--task link: negatives per training edge", type=int, check=positive,
                                agreed=True, needs=LINK_ONLY)
    negative_sampling: str = option(
        NegativeSampling.UNIFORM.value, "--task link: uniform random node pairs, or random destinations of each "
        "edge's source", choices=tuple(m.value for m in NegativeSampling),
        check=one_of(tuple(m.value for m in NegativeSampling), "negative sampling"), agreed=True, needs=LINK_ONLY)
    decoder: str = option("dot", "--task link: how a node pair is scored from its embeddings", choices=DECODERS,
                          check=one_of(DECODERS, "decoder"), agreed=True, resume_matches=True, needs=LINK_ONLY)
    eval_negatives: int = option(EVAL_NEGATIVES, "--task link: negatives of its source each held-out edge is ranked "
                                 "against (MRR, hits@K)", type=int, check=positive, agreed=True, needs=LINK_ONLY)
    hidden: int = option(256, "hidden width", type=int, check=positive, agreed=True, resume_matches=True)
    layers: int = option(3, "number of layers", type=int, check=positive, agreed=True, resume_matches=True)
    fanouts: Fanouts | None = option(
        None, f"neighbours per hop, seeds first, one per layer; -1: every neighbour ({LAYER_SIZES.what}: nodes per "
        "layer); on a typed graph for every relation, or one list per relation: REL=15,10,5;REL2=5,5,5 (0: none at that hop)",
        parse=parse_typed_fanouts, default_text=_joined(DEFAULT_FANOUTS), agreed=True, resume_matches=True,
        needs=MINIBATCH_ONLY)
    typed_root: str = option(TypedStructure.root, "R-SAGE's root weight and bias: one per destination node type (the "
                             "sum over the relations into it), or one per relation, as PyG's to_hetero(SAGE) keeps them",
                             choices=ROOTS, check=one_of(ROOTS, "typed root"), agreed=True, resume_matches=True,
                             needs=STRUCTURED_ONLY)
    typed_input: str = option(TypedStructure.input, "R-SAGE's first layer: over every node type's input rows projected "
                              "to --hidden first, or over the rows as they come, as PyG's to_hetero(SAGE) and DGL's "
                              "HeteroGraphConv(SAGEConv) convolve them (fewer parameters)", choices=INPUTS,
                              check=one_of(INPUTS, "typed input"), agreed=True, resume_matches=True,
                              needs=STRUCTURED_ONLY)
    batch_size: int = option(1024, "seeds per batch per rank (--task link: training edges)", type=int,
                             check=positive, agreed=True, resume_matches=True)
    sampler: str = option(DEFAULT_SAMPLER, "training sampler; bulk: the same draws, many batches at "
                          "once; ladies: layer-wise importance sampling, --fanouts are nodes per layer (SAGE)",
                          choices=SAMPLERS, check=one_of(SAMPLERS, "sampler"), agreed=True, needs=MINIBATCH_ONLY)
    minibatches_per_bulk: int = option(MINIBATCHES_PER_BULK, f"minibatches drawn at once with {BULK_ONLY.what}",
                                       flag="--bulk-size", type=int, metavar="K", check=positive, agreed=True,
                                       needs=BULK_ONLY)
    lr: float = option(0.003, "Adam learning rate", type=float,
                       check=lambda value, flag: positive_number(value, f"the learning rate ({flag})"), agreed=True)
    weight_decay: float = option(0.0, "Adam's L2 penalty of the model's parameters", type=float,
                                 check=lambda value, flag: _at_least_0(value, f"the weight decay ({flag})"),
                                 agreed=True)
    dropout: float = option(0.5, "dropout between layers", type=float, check=_dropout, agreed=True)
    embedding_dim: int = option(0, "learn a D-wide embedding, partitioned like the features and updated by a "
                                "sparse optimiser, of the node types without features; where every type has features, "
                                "of every node of a homogeneous graph, fed to the model beside them: [x || emb]",
                                type=int, metavar="D",
                                default_text="0: none", check=non_negative, agreed=True, resume_matches=True,
                                needs=MINIBATCH_ONLY)
    features: bool = option(True, "feed the model the learned embedding alone (needs --embedding-dim); no features "
                            "are fetched", flag="--no-features", agreed=True, resume_matches=True, needs=EMBEDDING_ONLY)
    embedding_optimizer: str = option("adam", "the embedding's sparse optimiser", choices=tuple(SPARSE_OPTIMIZERS),
                                      check=one_of(tuple(SPARSE_OPTIMIZERS), "embedding optimizer"), agreed=True,
                                      resume_matches=True, needs=EMBEDDING_ONLY)
    embedding_lr: float = option(0.01, "the embedding's learning rate", type=float,
                                 check=lambda value, flag: positive_number(value, f"the embedding learning rate ({flag})"),
                                 agreed=True, needs=EMBEDDING_ONLY)
    plan: str | None = option(None, "a cache plan directory written by `salientpp analyze` (a replication factor or "
                              "byte budgets, any --name or --out): its device and host tiers and its owned rows on "
                              "the device are used as they are, so --policy, --replication and --device-fraction cannot "
                              "be given with it", metavar="DIR", needs=MINIBATCH_ONLY)
    policy: str | None = option(None, "without --plan: the cache policy (vip, degree, halo, ...) or none; the plan "
                               "`salientpp analyze` writes for it is used from PART_DIR/cache, or built there",
                               default_text=DEFAULT_POLICY, check=_policy, agreed=True, plan_decides=True,
                               needs=MINIBATCH_ONLY)
    replication: float | None = option(None, "without --plan: alpha, each rank caches floor(alpha*N/K) remote rows",
                                       type=float, default_text=str(DEFAULT_REPLICATION),
                                       check=lambda value, flag: _at_least_0(value, "replication (alpha)"),
                                       agreed=True, plan_decides=True, needs=CACHED_ONLY)
    device_fraction: float | None = option(None, "without --plan: fraction of the owned rows kept on the device, by "
                                        "the plan's order, as far as the device's free memory allows", type=float,
                                        default_text=f"{DEVICE_FRACTION} on the CPU, {GPU_DEVICE_FRACTION:g} on a GPU",
                                        check=check_device_fraction, agreed=True, plan_decides=True, needs=MINIBATCH_ONLY)
    plan_workload: str | None = option(
        None, "without --plan: what the cache plan serves, weighted by passes per epoch: the training batches and the "
        "sampled evaluation the run does every --eval-every epochs (train+eval; layer-wise inference reads no cached "
        "rows), or the training batches alone (train)", choices=PLAN_WORKLOADS, default_text=TRAIN_AND_EVAL,
        check=one_of(PLAN_WORKLOADS, "plan workload"), agreed=True, plan_decides=True, needs=CACHED_ONLY)
    device: str = option("cpu", "training device", choices=DEVICES, check=one_of(DEVICES, "device"), agreed=True)
    precision: str = option(FP32, "number format of the training step: bf16 runs the forward under torch.autocast "
                            "with bfloat16 (CPUs with AVX512-BF16 or AMX, or GPUs)", choices=PRECISIONS,
                            check=one_of(PRECISIONS, "precision"), agreed=True, needs=MINIBATCH_ONLY)
    nprocs: int | None = option(None, "local ranks to start", type=int, default_text="one per partition",
                                check=positive)
    pipeline_depth: int | None = option(
        None, "batches in flight between sampling and the model", type=int,
        default_text="from the thread budget: 4 on a GPU or when --torch-threads leaves cores free, else 1",
        check=positive, agreed=True,
        alias=("--no-pipeline", 1, "run the stages of each batch one after another (--pipeline-depth 1)"),
        needs=MINIBATCH_ONLY)
    sampling_device: str = option("cpu", "where the training batches are drawn: the host's cores, or the training GPU "
                                  f"(with {GPU_SAMPLER_ONLY.what}, the graph's CSR on the GPU)", choices=SAMPLING_DEVICES,
                                  agreed=True, needs=GPU_SAMPLER_ONLY)
    fetch_thread: bool | None = option(
        None, "run the pipeline's fetch stages (the exchange and the assembly of each batch) on a thread of their own, "
        "one batch ahead of the model step", choices=("on", "off"), parse=lambda text: text == "on",
        default_text="on with a GPU and a pipeline, else off", check=lambda value, flag: check_fetch_thread(value),
        needs=MINIBATCH_ONLY)
    inference: str = option(SAMPLED, "validation/test inference: sampled minibatches, or exact layer-wise over all "
                            "neighbours", choices=INFERENCE, check=one_of(INFERENCE, "inference"), agreed=True,
                            needs=EVALUATED_ONLY)
    eval_fanouts: Fanouts | None = option(None, "fanouts of sampled inference (as --fanouts)",
                                          parse=lambda text: parse_typed_fanouts(text, what="--eval-fanouts"),
                                                  default_text=f"{DEFAULT_EVAL_FANOUT} per layer", agreed=True,
                                                  needs=SAMPLED_INFERENCE_ONLY)
    eval_batch_size: int | None = option(None, "seeds per batch of sampled inference, destinations per chunk of "
                                         "layer-wise inference (lower it on power-law graphs)", type=int,
                                         default_text="--batch-size", check=positive, agreed=True, needs=EVALUATED_ONLY)
    eval_every: int = option(1, "evaluate every N epochs and after the last (0: never)", type=int,
                             check=non_negative, agreed=True)
    checkpoint_dir: str | None = option(None, "write last.pt and best.pt here", agreed=lambda path: path is not None,
                                        trains=False)
    checkpoint_every: str = option("1epoch", "checkpoint after every N steps (and at each epoch's end) or every N "
                                   "epochs", metavar="N[steps|epochs]",
                                   check=lambda value, flag: parse_interval(value), agreed=True, needs=CHECKPOINTS_ONLY)
    resume: bool = option(False, "continue from last.pt in --checkpoint-dir", agreed=True, trains=False,
                          needs=CHECKPOINTS_ONLY)
    max_restarts: int = option(0, "when a rank fails, restart all ranks from the last checkpoint up to N times, like "
                               "torchrun --max-restarts", type=int, check=non_negative)
    json_path: str | None = option(None, "append one JSON line per epoch", flag="--json", metavar="FILE")
    seed: int = option(0, "seed of the model, dropout and loaders (see salientpp.streams)", type=int, check=_seed,
                       agreed=True, resume_matches=True)
    sampler_threads: int | None = option(None, "C++ sampler threads per rank; they run at low priority unless "
                                         "--sampler-threads and --torch-threads together fit in a rank's cores",
                                         type=int, metavar="T", default_text="from the thread budget, a rank's "
                                         "cores / 8, at least 1", check=positive)
    torch_threads: int | None = option(None, "torch intra-op threads per rank", type=int, metavar="T",
                                       default_text="from the thread budget, a rank's cores = the cores of this "
                                       "machine / local ranks", check=positive)
    timeout_s: float = option(DEFAULT_TIMEOUT_S, "seconds before a stuck collective fails", flag="--timeout", type=float,
                              metavar="S", check=check_timeout, agreed=True)
    network: str | None = option(None, "emulate a cluster network for the row exchange: every all-to-all takes the "
                                 "time its bytes take on a link of RATE per rank and direction, plus LATENCY per "
                                 "collective (tc's units, e.g. 1gbit,50us); the bytes and results are unchanged",
                                 metavar="RATE[,LATENCY]", check=lambda value, flag: parse_network(value),
                                 agreed=True)
    reuse_freed_memory: bool = option(
        True, "let each rank's host allocator return freed blocks to the system, as glibc does by default, instead of "
        "keeping them for the next step: less resident memory between steps, but each step faults its large tensors "
        "in again (measured up to 1.7x slower epochs on the CPU)", flag="--no-reuse-freed-memory")
    memory_limit: int | None = option(None, "refuse to start when this machine's ranks are estimated to need more, "
                                      "e.g. 16GiB", metavar="SIZE", parse=parse_memory_limit,
                                      default_text="the available memory", check=positive)
    progress: bool = option(True, "no progress bar or per-epoch lines", flag="--quiet")

    # -- the two steps ------------------------------------------------------------------------------
    def validate(self) -> "TrainConfig":
        """Check every option; raise :class:`InputError` with one sentence on the first bad one.
        Checks only: returns ``self`` unchanged."""
        if not self.part_dir or not Path(self.part_dir).is_dir():
            raise InputError(f"{self.part_dir} is not a directory; pass a partitioned directory "
                             "written by `salientpp partition`")
        for f in fields(self):
            check, value = option_of(f).check, getattr(self, f.name)
            if check is not None and value is not None:
                check(value, flag_of(f))
        self._check_combinations()
        filled = self._with_defaults()
        # one list per relation needs the graph's relations: resolve_run checks them (plan_request)
        if filled.fanouts is not None and not isinstance(filled.fanouts, Mapping):
            check_fanouts(filled.fanouts, check_sampler(filled.sampler), self.layers, "--fanouts")
        if filled.eval_fanouts is not None and not isinstance(filled.eval_fanouts, Mapping):
            check_fanouts(filled.eval_fanouts, layers=self.layers, what="--eval-fanouts")
        self._check_output_paths()
        if self.checkpoint_dir is not None:
            # run_rank checks again once the ranks agree on whether this is a restart.
            check_checkpoint_dir(self.checkpoint_dir, self.resume, restarted=may_be_a_restart())
        if self.json_path is not None:
            check_writable_file(self.json_path, "--json", exist_ok=True)
        return self

    def resolved(self) -> "TrainConfig":
        """:meth:`validate`, then a copy with every default that depends on other options filled
        in (see the class docstring) and the names in their canonical spelling."""
        return self.validate()._with_defaults()

    def _check_output_paths(self) -> None:
        """The run's outputs go nowhere salientpp manages: not into a dataset, partition or plan
        directory (the part directory's ``meta.json`` included), not into another run's
        checkpoints, and the JSON lines not into the run's own checkpoint directory."""
        outputs = (("--checkpoint-dir", self.checkpoint_dir), ("--json", self.json_path))
        for flag, path in outputs:
            if path is not None:
                check_output_location(path, flag)
                if is_first_rank():  # the process that will hold the outputs' locks
                    check_unlocked(path, flag)
        if self.json_path and self.checkpoint_dir:
            checkpoints = {Path(os.path.abspath(self.checkpoint_dir)), Path(os.path.realpath(self.checkpoint_dir))}
            if checkpoints & set(output_parents(self.json_path)):
                raise InputError(f"--json {self.json_path} lies in --checkpoint-dir {self.checkpoint_dir}, which "
                                 "holds the run's checkpoints only; write the JSON lines elsewhere")

    def _with_defaults(self) -> "TrainConfig":
        """The defaults filled in; an option that does not apply to the run (its ``needs``) is left
        at its field default, so resolving a resolved config changes nothing."""
        full_graph = self.mode == FULL_GRAPH
        planned = self.plan is not None
        link = self.task == LINK
        filled = replace(
            self,
            plan=None if self.plan is None else str(self.plan),
            fanouts=(-1,) * self.layers if full_graph else _fanouts(self.fanouts or DEFAULT_FANOUTS),
            eval_fanouts=_fanouts(self.eval_fanouts or (DEFAULT_EVAL_FANOUT,) * self.layers),
            eval_batch_size=self.eval_batch_size or self.batch_size,
            inference=LAYERWISE if full_graph else self.inference,
            sampler=check_sampler(self.sampler).value, dependencies=Dependencies(self.dependencies).value,
            negative_sampling=NegativeSampling(self.negative_sampling).value,
            metric=None if self.metric is None else check_metric(self.metric, LINK if link else None),
            policy=None if planned else (DEFAULT_POLICY if self.policy is None else self.policy),
            replication=None if planned else (DEFAULT_REPLICATION if self.replication is None else self.replication),
            plan_workload=None if planned else (self.plan_workload or TRAIN_AND_EVAL),
            device_fraction=None if planned else default_device_fraction(self.device, self.device_fraction))
        return replace(filled, **{f.name: f.default for f in fields(filled)
                                  if option_of(f).needs is not None and not option_of(f).needs.holds(filled)})

    def _check_combinations(self) -> None:
        """The rules between options, on the options as given."""
        check_applies(self, declared(TrainConfig))
        if self.plan is not None:
            given = [d.flag for d in declared(TrainConfig) if d.option.plan_decides and getattr(self, d.name) is not None]
            if given:
                raise plan_conflict(self.plan, given)
        if self.task == LINK:
            if self.inference == LAYERWISE:
                raise InputError("--task link evaluates sampled batches of edges; use --inference sampled (with "
                                 "--eval-fanouts -1,-1,... for every neighbour)")
        kind = check_sampler(self.sampler)
        if kind.weighted:
            check_reads_edge_weights(self.model, kind.value)
        check_sampling_device(self.sampling_device, kind, self.device)
        # the model first: a user's model has no layer-wise inference whatever else is given
        # (no --model: the graph's default, checked once resolve_run names it)
        if self.inference == LAYERWISE and self.model is not None and not runs_layer_by_layer(self.model):
            raise InputError(f"{_not_layer_by_layer(self.model, 'layer-wise inference')}; use --inference sampled "
                             "(with --eval-fanouts -1,-1,... for every neighbour)")
        if self.precision == BF16 and self.device == "cpu" and not cpu_has_bf16():
            raise InputError("--precision bf16 needs a CPU with AVX512-BF16 or AMX instructions, which this one "
                             "lacks (bfloat16 would be emulated and slower); use --precision fp32")
        if self.mode == FULL_GRAPH and self.model is not None and not trains_full_graph(self.model):
            raise InputError(f"{_not_layer_by_layer(self.model, '--mode full-graph')}; use --model "
                             f"{' or '.join(MODELS)}, or --mode minibatch")

    # -- derived views -----------------------------------------------------------------------------
    @property
    def structure(self) -> TypedStructure:
        """The built-in typed model's structure these options give (:func:`typed_structure`)."""
        return typed_structure(self.to_dict())

    @property
    def checkpoint_interval(self) -> tuple[int, str]:
        """``(count, "steps" | "epochs")`` from :attr:`checkpoint_every`."""
        return parse_interval(self.checkpoint_every)

    def to_dict(self) -> dict[str, Any]:
        """Every option, JSON-ready (tuples as lists): what checkpoints record."""
        return {k: _jsonable(v) for k, v in dataclasses.asdict(self).items()}


def typed_structure(options: Mapping[str, Any]) -> TypedStructure:
    """The built-in typed model's structure of a run's options (:meth:`TrainConfig.to_dict`'s, or
    those a checkpoint recorded: one written before ``--typed-root`` and ``--typed-input`` existed
    has the defaults)."""
    return TypedStructure(options.get("typed_root", TypedStructure.root), options.get("typed_input", TypedStructure.input))


def _jsonable(value: Any) -> Any:
    """``value`` with its tuples as lists, in dicts too (one fanout list per relation)."""
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    return [_jsonable(v) for v in value] if isinstance(value, tuple) else value


def _fanouts(fanouts: Fanouts) -> Fanouts:
    """``fanouts`` with its lists as tuples: one for every relation, or one per relation."""
    if isinstance(fanouts, Mapping):
        return {name: tuple(values) for name, values in fanouts.items()}
    return tuple(fanouts)


def plan_conflict(plan: str, flags: list[str]) -> InputError:
    """The error for ``flags`` (``["--policy", ...]``) given together with ``--plan plan``."""
    return InputError(f"{' and '.join(flags)} cannot be combined with --plan {plan}: the plan decides what is "
                      f"cached and where (it was written by `salientpp analyze`); drop "
                      f"{'it' if len(flags) == 1 else 'them'}, or train without --plan")


def _options_where(config: TrainConfig, rule: str) -> dict[str, Any]:
    values = config.to_dict()
    return {f.name: values[f.name] for f in fields(config) if getattr(option_of(f), rule)}


def agreed_options(config: TrainConfig) -> dict[str, Any]:
    """The options every rank of a job must hold equal (those marked ``agreed``), of a resolved
    config: their values, or what their ``agreed`` function makes of them."""
    values = config.to_dict()
    return {f.name: option_of(f).agreed(values[f.name]) if callable(option_of(f).agreed) else values[f.name]
            for f in fields(config) if option_of(f).agreed}


def checkpoint_options(config: TrainConfig) -> dict[str, Any]:
    """The options a checkpoint must match to be resumed (those marked ``resume_matches``)."""
    return _options_where(config, "resume_matches")


def resumable_flags() -> dict[str, str]:
    """field -> flag of the options a resumed run may change that change its training (those
    every rank agrees on that shape the training, less those a checkpoint must match): ``--lr``,
    ``--epochs``, ..."""
    return {f.name: flag_of(f) for f in fields(TrainConfig)
            if option_of(f).agreed and option_of(f).trains and not option_of(f).resume_matches}


# ---- the command line -----------------------------------------------------------------------------

def add_options(parser: argparse.ArgumentParser) -> None:
    """One argument per :class:`TrainConfig` field, from its :class:`Option`
    (:func:`~salientpp.options.add_arguments`). Arguments left out stay out of the namespace, so
    the field's default applies and ``--plan`` can tell the options that were given."""
    add_arguments(parser, declared(TrainConfig))


def config_from_args(args: argparse.Namespace, ignore: tuple[str, ...] = ("command", "func")) -> TrainConfig:
    """The TrainConfig of the options given on the command line (those left out keep the
    field defaults). Every argument must map to a field (``ignore``: the parser's own keys):
    an argument that maps to none is a programming error, reported at once."""
    given = {name: value for name, value in vars(args).items() if name not in ignore}
    known = {f.name: f for f in fields(TrainConfig)}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError(f"the train parser has arguments that map to no TrainConfig field: {', '.join(unknown)}")
    return TrainConfig(**values_from(args, declared(TrainConfig)))
