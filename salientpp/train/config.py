"""The training configuration: every option of ``salientpp train`` as one dataclass."""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..cache.plan import GPU_FRACTION, read_plan_info
from ..cache.policies import get_policy
from ..cache.workload import check_fanouts
from ..distributed.group import restart_count
from ..distributed.threads import ThreadBudget, local_world_size
from ..errors import InputError
from ..io import check_writable_file
from ..models import MODELS
from ..models.factory import check_model
from ..sampling.kinds import MINIBATCHES_PER_BULK, SamplerKind, check_layer_sizes, check_sampler
from .link import DECODERS, LINK, TASKS, check_link_metric
from .tasks import check_metric
from .checkpoint import check_checkpoint_dir
from ..fullgraph.plan import Dependencies, check_dependencies

DEVICES = ("cpu", "cuda")
# Training modes: sampled minibatches, or every layer over the whole graph (salientpp.fullgraph).
MINIBATCH, FULL_GRAPH = "minibatch", "full-graph"
MODES = (MINIBATCH, FULL_GRAPH)
INFERENCE = ("sampled", "layerwise")
# Number formats of the training step: float32, or bfloat16 under torch.autocast.
FP32, BF16 = "fp32", "bf16"
PRECISIONS = (FP32, BF16)


def cpu_has_bf16() -> bool:
    """Whether this CPU has bfloat16 instructions (AVX512-BF16 or AMX), without which bfloat16
    matrix products are emulated and slower than float32."""
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
# What a cache plan decides, so these options cannot be combined with one (``plan``).
PLAN_DECIDES = ("cache", "replication", "gpu_fraction")


def plan_conflict(plan: str, options: list[str]) -> InputError:
    """The error for ``options`` (``["--cache", ...]``) given together with ``--plan plan``."""
    return InputError(f"{' and '.join(options)} cannot be combined with --plan {plan}: the plan decides what is "
                      f"cached and where (it was written by `salientpp analyze`); drop "
                      f"{'it' if len(options) == 1 else 'them'}, or train without --plan")


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    return value


def parse_interval(text: str) -> tuple[int, str]:
    """``"500"`` or ``"500steps"`` -> ``(500, "steps")``; ``"1epoch"``/``"2epochs"`` -> ``(n, "epochs")``."""
    match = re.fullmatch(r"\s*(\d+)\s*(steps?|epochs?)?\s*", str(text))
    if not match or int(match.group(1)) < 1:
        raise InputError(f"--checkpoint-every must be a positive number of steps or epochs such as 500, 500steps "
                         f"or 1epoch, got {text!r}")
    unit = match.group(2) or "steps"
    return int(match.group(1)), "epochs" if unit.startswith("epoch") else "steps"


def _fanouts(name: str, values: Any, layers: int) -> tuple[int, ...]:
    out = check_fanouts(values)
    if len(out) != layers:
        raise InputError(f"{name} gives {len(out)} hops but the model has {layers} layers; "
                         f"pass one fanout per layer")
    return out


@dataclass
class TrainConfig:
    """What to train, where, and how.

    Attributes:
        part_dir: a partitioned directory (``salientpp partition``); one partition per rank.
        epochs: total number of epochs (a resumed run continues up to this number).
        mode: ``minibatch`` (sampled batches) or ``full-graph``: one step per epoch over every
            training vertex with all its neighbours at every layer (:mod:`salientpp.fullgraph`; the
            sampling, batch, cache and pipeline options do not apply, and evaluation is layer-wise).
        dependencies: ``full-graph``: how a rank gets the hidden embeddings of remote vertices:
            ``cache`` (recompute them), ``communicate`` (exchange them every layer) or ``hybrid``
            (per vertex or per level, by a cost model calibrated on this machine; the plans it
            predicts close to the fastest are timed at start-up, and one timed clearly faster
            than the predicted fastest replaces it).
        model: ``sage``, ``gat``, ``gin`` or a factory ``PKG.MODULE:FUNCTION`` called as
            ``FUNCTION(in_dim, hidden, out_dim, num_layers)`` (see :mod:`salientpp.models.factory`);
            hidden: hidden width; layers: number of layers.
        metric: the validation/test metric (``accuracy``, ``roc-auc``, ``f1-micro``); default:
            accuracy for class labels, ROC-AUC for multi-label ones.
        fanouts: neighbours sampled per hop, ``fanouts[0]`` at the seeds, one per layer (LADIES:
            nodes sampled per layer).
        sampler: the training loader's sampler, ``nodewise``, ``bulk`` or ``ladies``
            (:class:`~salientpp.sampling.SamplerKind`); sampled inference is always node-wise.
        minibatches_per_bulk: batches the bulk and LADIES samplers draw at once (``--bulk-size``).
        batch_size: seeds per minibatch per rank; lr: Adam learning rate; weight_decay: Adam's L2
            penalty of the model's parameters; dropout: between layers.
        embedding_dim: D > 0 learns a ``[N, D]`` node embedding table partitioned like the
            features (:class:`~salientpp.embedding.DistEmbedding`, never cached) and feeds the
            model ``[x || emb]``; 0: none.
        features: feed the dataset's features to the model (``--no-features``: the embedding
            alone, which needs ``embedding_dim``; the features are then not fetched at all).
        embedding_optimizer: the embedding's sparse optimiser, ``adam`` or ``adagrad``;
            embedding_lr: its learning rate.
        task: ``node`` (classify the labelled nodes) or ``link`` (link prediction over the
            held-out edges of ``salientpp prepare --link-split``; :mod:`salientpp.train.link`):
            batches of ``batch_size`` training edges with ``num_negatives`` negatives each,
            drawn ``negative_sampling`` (``uniform`` or ``per-source``), scored by a ``decoder``
            (``dot`` or ``mlp``) over the model's ``hidden``-wide outputs; validation and test
            rank each held-out edge against ``eval_negatives`` negatives of its source. Its
            metric is ``roc-auc`` (default), ``mrr`` or ``hits@10/50/100``.
        cache: cache policy name (``vip``, ``degree``, ...) or ``none``; without ``plan``, the
            plan ``salientpp analyze`` writes for this policy, ``replication`` and
            ``gpu_fraction`` is used from ``PART_DIR/cache/<default name>``, or built there.
        replication: alpha, cached remote rows per rank = floor(alpha * N / K), in [0, K - 1].
        gpu_fraction: fraction of the owned rows kept on the device, first by the plan's order.
        plan: a cache plan directory written by ``salientpp analyze`` (replication or byte
            budgets, any name or ``--out``): its tiers and the device share of the owned rows
            are used as they are, so ``cache``, ``replication`` and ``gpu_fraction`` keep their
            defaults.
        device: ``cpu`` or ``cuda``.
        precision: ``fp32``, or ``bf16``: the training step's forward runs under ``torch.autocast``
            with bfloat16 (weights, gradients and the optimizer stay float32; evaluation runs in
            float32). On CPU it needs AVX512-BF16 or AMX.
        nprocs: number of local ranks to start (default: one per partition).
        pipeline_depth: batches in flight (1 = the stages of a batch one after another). ``None``:
            the thread budget's choice (:meth:`~salientpp.distributed.threads.ThreadBudget.pipeline_depth`:
            4 on a GPU or when ``torch_threads`` leaves cores free, else 1).
        inference: ``sampled`` (minibatches with ``eval_fanouts``, through the cache) or
            ``layerwise`` (exact: every layer over all neighbours, halo rows exchanged per layer).
        eval_fanouts: fanouts of sampled inference (default 20 per layer).
        eval_batch_size: seeds per batch of sampled inference, destinations per chunk of
            layer-wise inference (default: batch_size).
        eval_every: evaluate every this many epochs and after the last one (0: never).
        checkpoint_dir: where ``last.pt`` and ``best.pt`` go; resume: continue from ``last.pt``.
        checkpoint_every: ``"N"``/``"Nsteps"`` (after every N-th step of an epoch and at its end)
            or ``"Nepochs"`` (after every N-th epoch and the last).
        max_restarts: restart every rank from the last checkpoint up to this many times after a
            rank fails (the local launcher's counterpart of ``torchrun --max-restarts``).
        memory_limit: refuse to start when the estimated memory of this machine's ranks exceeds
            this many bytes (or the available memory, when smaller).
        json_path: append one JSON line per epoch to this file.
        seed: seeds the model, dropout and the loaders (see ``salientpp.cache.accesses.loader_seed``).
        num_threads: C++ sampler threads per rank (``--threads``); torch_threads: torch intra-op
            threads per rank (``--torch-threads``). ``None``: from the thread budget
            (:class:`~salientpp.distributed.threads.ThreadBudget`: the cores of this machine
            shared by its local ranks; the samplers run at low priority unless both counts are
            given and fit in a rank's share).
        timeout_s: every collective fails after this many seconds instead of hanging.
        reuse_freed_memory: each rank's host allocator keeps freed blocks for the next step
            instead of returning them to the system (:mod:`salientpp.distributed.host_memory`;
            glibc only): resident memory stays near its peak, and steps stop faulting in fresh pages.
        progress: show a tqdm bar on rank 0.
    """

    part_dir: str
    epochs: int = 10
    mode: str = MINIBATCH
    dependencies: str = Dependencies.HYBRID.value
    model: str = "sage"
    metric: str | None = None
    hidden: int = 256
    layers: int = 3
    fanouts: tuple[int, ...] = (15, 10, 5)
    sampler: str = SamplerKind.NODEWISE.value
    minibatches_per_bulk: int = MINIBATCHES_PER_BULK
    batch_size: int = 1024
    lr: float = 0.003
    weight_decay: float = 0.0
    dropout: float = 0.5
    embedding_dim: int = 0
    features: bool = True
    embedding_optimizer: str = "adam"
    embedding_lr: float = 0.01
    task: str = "node"
    num_negatives: int = 1
    negative_sampling: str = "uniform"
    decoder: str = "dot"
    eval_negatives: int = 100
    cache: str = "vip"
    replication: float = 0.1
    gpu_fraction: float = GPU_FRACTION
    plan: str | None = None
    device: str = "cpu"
    precision: str = FP32
    nprocs: int | None = None
    pipeline_depth: int | None = None
    inference: str = "sampled"
    eval_fanouts: tuple[int, ...] | None = None
    eval_batch_size: int | None = None
    eval_every: int = 1
    checkpoint_dir: str | None = None
    resume: bool = False
    checkpoint_every: str = "1epoch"
    max_restarts: int = 0
    memory_limit: int | None = None
    json_path: str | None = None
    seed: int = 0
    num_threads: int | None = None
    torch_threads: int | None = None
    timeout_s: float = 300.0
    reuse_freed_memory: bool = True
    progress: bool = True

    def validate(self) -> "TrainConfig":
        """Check every option; raise :class:`InputError` with one sentence on the first bad one.
        Returns ``self`` with the defaults that depend on other options filled in."""
        if not Path(self.part_dir).is_dir():
            raise InputError(f"{self.part_dir} is not a directory; pass a partitioned directory "
                             "written by `salientpp partition`")
        _positive_int("the number of epochs", self.epochs)
        if self.mode not in MODES:
            raise InputError(f"unknown mode {self.mode!r}; choose {' or '.join(MODES)}")
        check_model(self.model)
        if self.task not in TASKS:
            raise InputError(f"unknown task {self.task!r}; choose {' or '.join(TASKS)}")
        if self.task == LINK:
            self._check_link()
        else:
            self.metric = None if self.metric is None else check_metric(self.metric)
        _positive_int("the hidden size", self.hidden)
        _positive_int("the number of layers", self.layers)
        if self.mode == FULL_GRAPH:  # every neighbour at every layer
            if self.fanouts != self.__dataclass_fields__["fanouts"].default and set(self.fanouts) != {-1}:
                raise InputError("--fanouts does not apply to --mode full-graph, which aggregates every neighbour; "
                                 "drop it")
            self.fanouts = (-1,) * self.layers
        self.fanouts = _fanouts("fanouts", self.fanouts, self.layers)
        kind = check_sampler(self.sampler)
        self.sampler = kind.value
        check_layer_sizes(kind, self.fanouts)
        _positive_int("--bulk-size (minibatches per bulk)", self.minibatches_per_bulk)
        if kind.weighted and self.model in MODELS and self.model != "sage":
            raise InputError(f"the {kind.value} sampler's edge weights estimate a mean aggregation, which the "
                             f"built-in {self.model} model does not compute; use --model sage (or your own model "
                             "reading mfg.edge_weight)")
        self.eval_fanouts = _fanouts("eval fanouts", self.eval_fanouts or (20,) * self.layers, self.layers)
        _positive_int("the batch size", self.batch_size)
        self.eval_batch_size = _positive_int("the evaluation batch size", self.eval_batch_size or self.batch_size)
        if not self.lr > 0:
            raise InputError(f"the learning rate must be positive, got {self.lr}")
        if not self.weight_decay >= 0:
            raise InputError(f"the weight decay must be at least 0, got {self.weight_decay}")
        if not 0 <= self.dropout < 1:
            raise InputError(f"dropout must lie in [0, 1), got {self.dropout}")
        self._check_embedding()
        if self.cache != "none":
            get_policy(self.cache)
        if not self.replication >= 0:
            raise InputError(f"replication (alpha) must be at least 0, got {self.replication}")
        if not 0 <= self.gpu_fraction <= 1:
            raise InputError(f"the GPU fraction must lie in [0, 1], got {self.gpu_fraction}")
        if self.plan is not None:
            self.plan = str(self.plan)
            fields = self.__dataclass_fields__
            given = [f"--{name.replace('_', '-')}" for name in PLAN_DECIDES
                     if getattr(self, name) != fields[name].default]
            if given:
                raise plan_conflict(self.plan, given)
            read_plan_info(self.plan).meta.check_compatible(self.part_dir, self.fanouts, self.batch_size, self.plan,
                                                            given=True, sampler=kind, link=self.task == LINK)
        if self.device not in DEVICES:
            raise InputError(f"unknown device {self.device!r}; choose cpu or cuda")
        if self.precision not in PRECISIONS:
            raise InputError(f"unknown precision {self.precision!r}; choose {' or '.join(PRECISIONS)}")
        if self.precision == BF16 and self.device == "cpu" and not cpu_has_bf16():
            raise InputError("--precision bf16 needs a CPU with AVX512-BF16 or AMX instructions, which this one "
                             "lacks (bfloat16 would be emulated and slower); use --precision fp32")
        if self.nprocs is not None:
            _positive_int("the number of processes", self.nprocs)
        if self.pipeline_depth is not None:
            _positive_int("the pipeline depth", self.pipeline_depth)
        if self.inference not in INFERENCE:
            raise InputError(f"unknown inference {self.inference!r}; choose sampled or layerwise")
        if self.inference == "layerwise" and self.model not in MODELS:
            raise InputError(f"layer-wise inference runs the built-in models layer by layer, not {self.model}; "
                             "use --inference sampled (with --eval-fanouts -1,-1,... for every neighbour)")
        if isinstance(self.eval_every, bool) or not isinstance(self.eval_every, int) or self.eval_every < 0:
            raise InputError(f"eval-every must be a non-negative integer, got {self.eval_every!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise InputError(f"the seed must be an integer in [0, 2^63), got {self.seed!r}")
        if self.num_threads is not None:
            _positive_int("--threads (sampler threads per rank)", self.num_threads)
        if self.torch_threads is not None:
            _positive_int("--torch-threads (torch intra-op threads per rank)", self.torch_threads)
        if not self.timeout_s > 0:
            raise InputError(f"the timeout must be positive, got {self.timeout_s}")
        if self.mode == FULL_GRAPH:
            self._check_full_graph()
        parse_interval(self.checkpoint_every)
        if isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            raise InputError(f"--max-restarts must be a non-negative integer, got {self.max_restarts!r}")
        if self.memory_limit is not None and not self.memory_limit > 0:
            raise InputError(f"--memory-limit must be positive, got {self.memory_limit}")
        if self.resume and not self.checkpoint_dir:
            raise InputError("--resume needs --checkpoint-dir, the directory of the run to continue")
        if self.checkpoint_dir:
            # Under torchrun a rank of a restarted job can see TORCHELASTIC_RESTART_COUNT=0 (its
            # agent did not count the restart): run_rank checks again once the ranks agree on it.
            check_checkpoint_dir(self.checkpoint_dir, self.resume,
                                 restarted=restart_count() > 0 or "TORCHELASTIC_RUN_ID" in os.environ)
        if self.json_path:
            check_writable_file(self.json_path, "--json", exist_ok=True)
        return self

    def _check_link(self) -> None:
        from ..sampling.link import check_negative_sampling, check_num_negatives

        self.metric = check_link_metric(self.metric)
        self.num_negatives = check_num_negatives(self.num_negatives)
        self.negative_sampling = check_negative_sampling(self.negative_sampling).value
        if self.decoder not in DECODERS:
            raise InputError(f"unknown decoder {self.decoder!r}; choose {' or '.join(DECODERS)}")
        _positive_int("--eval-negatives", self.eval_negatives)
        if self.inference == "layerwise":
            raise InputError("--task link evaluates sampled batches of edges; use --inference sampled (with "
                             "--eval-fanouts -1,-1,... for every neighbour)")

    def _check_full_graph(self) -> None:
        self.dependencies = check_dependencies(self.dependencies).value
        if self.model not in MODELS:
            raise InputError(f"--mode full-graph runs the built-in models layer by layer, not {self.model}; use "
                             f"--model {' or '.join(MODELS)}, or --mode minibatch")
        refused = [(self.task == LINK, "--task link"), (self.embedding_dim > 0, "--embedding-dim"),
                   (self.plan is not None, "--plan"), (self.precision != FP32, "--precision bf16")]
        for given, option in refused:
            if given:
                raise InputError(f"{option} cannot be combined with --mode full-graph, which trains node "
                                 "classification in float32 on the stored features without a feature cache; drop "
                                 f"{option} or use --mode minibatch")
        self.inference = "layerwise"

    def _check_embedding(self) -> None:
        from ..embedding import SPARSE_OPTIMIZERS

        if isinstance(self.embedding_dim, bool) or not isinstance(self.embedding_dim, int) or self.embedding_dim < 0:
            raise InputError(f"--embedding-dim must be a non-negative integer (0: no embedding), got "
                             f"{self.embedding_dim!r}")
        if not self.features and not self.embedding_dim:
            raise InputError("--no-features leaves the model without input; give it --embedding-dim D to learn "
                             "a node embedding instead")
        if self.embedding_optimizer not in SPARSE_OPTIMIZERS:
            raise InputError(f"unknown embedding optimizer {self.embedding_optimizer!r}; choose "
                             f"{' or '.join(SPARSE_OPTIMIZERS)}")
        if not self.embedding_lr > 0:
            raise InputError(f"the embedding learning rate must be positive, got {self.embedding_lr}")
        if self.embedding_dim and self.inference == "layerwise":
            raise InputError("layer-wise inference reads the stored features only, not a learned embedding; use "
                             "--inference sampled (with --eval-fanouts -1,-1,... for every neighbour)")

    def thread_budget(self, local_ranks: int | None = None) -> ThreadBudget:
        """This rank's :class:`~salientpp.distributed.threads.ThreadBudget`: the cores shared among
        ``local_ranks`` ranks (default: the machine's ``LOCAL_WORLD_SIZE``; the launcher, which has
        none yet, passes the ranks it is about to start), with ``torch_threads`` and ``num_threads``
        as overrides."""
        ranks = local_world_size() if local_ranks is None else local_ranks
        return ThreadBudget.for_rank(ranks, self.torch_threads, self.num_threads)

    @property
    def checkpoint_interval(self) -> tuple[int, str]:
        """``(count, "steps" | "epochs")`` from :attr:`checkpoint_every`."""
        return parse_interval(self.checkpoint_every)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}
