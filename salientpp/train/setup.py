"""What a run decides once before any rank starts (:func:`resolve_run`, a :class:`ResolvedRun`
every rank receives), and what every rank opens from it before it trains (:class:`RankSetup`).

A :class:`ResolvedRun` holds the configuration with every default filled in (the options'
defaults, then the thread budget of this machine and the pipeline depth it gives), and the cache
plan the run trains with (:func:`choose_cache`). A :class:`RankSetup` is what both trainers start
from: the rank's context and health reports, its :class:`~salientpp.loader.graph.DistGraph`
(after the ranks agreed on their options), its task, and its cache plan (:func:`open_cache`).

The cache plan:

* ``--plan DIR`` (:attr:`TrainConfig.plan`): any plan ``salientpp analyze`` wrote, with a
  replication factor or byte budgets, under any ``--name`` or ``--out``. Its device and host
  tiers, its order of the owned rows and its number of owned rows on the device
  (``num_device_owned``) are used as they are; nothing is recomputed from the training options.
* Otherwise, with a cache policy and more than one partition: the plan ``salientpp analyze``
  writes for the run's :func:`plan_request` (``--policy``, ``--replication``, ``--device-fraction``,
  the sampler, the task and the seed), at analyze's default location ``PART_DIR/cache/<default
  name>``. When it is there, it is used; else rank 0 builds it as analyze does
  (:meth:`~salientpp.cache.plan.PlanRequest.build_and_save`) and saves it there
  while the other ranks wait at a barrier. Two jobs that build the same plan at once both
  succeed: the plan is renamed into place atomically and the job that loses the race uses the
  winner's. A rank whose machine does not share rank 0's file system finds no plan after the
  barrier: the first rank of that machine builds and saves it there too (same options and seed,
  so the same files). Any other failed save stops the job with one sentence; an unwritable
  ``PART_DIR`` is refused before any rank starts, so a plan never silently lives only in memory.
* ``--policy none``, one partition, or no features: no remote cache; the owned rows stay in id
  order and the first ``floor(device_fraction * n_k)`` of them live on the device.

A plan that exists is read (its meta.json, by :func:`~salientpp.cache.plan.read_plan_info`)
and checked (:func:`~salientpp.cache.plan.check_plan`) once, in :func:`choose_cache`; the ranks
receive that :class:`~salientpp.cache.plan.CheckedPlan` and only load their arrays, which are
compared with its checksums. A plan built by the job is read and checked once, after the build,
in :func:`open_cache`; the loaders open the checked plan without checking it again.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch
import torch.distributed as dist

from .. import __version__
from ..cache import plan as plans
from ..cache.options import analyze_command
from ..cache.plan import Budget, CheckedPlan, PlanOptions, PlanRequest, check_plan, read_plan_info
from ..cache.workload import EdgeSeeds, Workload, check_training_seeds
from ..distributed.group import DistContext, is_first_rank
from ..distributed.health import Health, agree
from ..host import ThreadBudget
from ..errors import InputError
from ..io import check_writable_dir, output_errors
from ..loader.graph import DistGraph
from ..data.learned import feature_widths, input_width, learned_types
from ..data.schema import GraphSchema
from ..models.gnn import build_model, check_model, check_reads_edge_weights, runs_layer_by_layer
from ..models.typed import TYPED_MODELS, TypedInput
from ..partition import PartitionedDataset, load_partitioned
from ..resources import check_memory, estimate_full_graph, estimate_train
from ..sampling import check_sampler, fanout_table
from ..sampling.link import LINK, NegativeSampling, link_batch_bound
from .checkpoint import LAST, PARTITION_ID, Checkpoint, check_finite_weights, describe_position, load_checkpoint
from .config import (FULL_GRAPH, SAMPLED_INFERENCE_ONLY, TRAIN_AND_EVAL, TrainConfig, agreed_options,
                     checkpoint_options, resumable_flags)
from .state import EVAL_SPLITS
from .tasks import Task, link_task, task_of


@dataclass(frozen=True)
class CacheChoice:
    """The cache plan of a run, decided once before any rank starts.

    Attributes:
        policy: the plan's policy, ``none`` without a cache.
        path: the plan directory; ``None`` without a cache.
        plan: the plan, read and checked (:func:`~salientpp.cache.plan.check_plan`); ``None``
            without a cache, and while the plan is still to be built (:attr:`to_build`).
        request: what the run asks of the plan (:func:`plan_request`); its ``options`` are
            ``None`` for a plan given with ``--plan``.
        reason: why the run has no cache (what rank 0 prints), empty with one.
        analyze: the ``salientpp analyze`` command that writes the plan of the run's request
            (for messages; empty for a given plan).
        built: a rank of this job built the plan (:func:`open_cache`).
    """

    policy: str
    path: Path | None = None
    plan: CheckedPlan | None = None
    request: PlanRequest | None = None
    reason: str = ""
    analyze: str = ""
    built: bool = False

    @property
    def to_build(self) -> bool:
        """Whether the job builds the plan (rank 0, or the first rank of a machine without it)."""
        return self.path is not None and self.plan is None

    @property
    def source(self) -> str:
        """What rank 0 reports: ``built PATH``, ``using PATH``, or why there is no cache."""
        return self.reason if self.path is None else f"{'built' if self.built else 'using'} {self.path}"


def plan_request(config: TrainConfig, schema: GraphSchema | None = None) -> PlanRequest:
    """What ``config``'s run (resolved) on the graph of ``schema`` (None: homogeneous) asks of a
    cache plan, derived once here for choosing, naming, building, checking and suggesting it: the
    training workload (the fanout table of ``--fanouts``, batch size, sampler, node or edge seeds
    with their negatives), one pass per epoch, then with ``--plan-workload train+eval`` (the
    default) the run's sampled evaluation (:func:`evaluation_workload`, when it has one); and,
    without ``--plan``, the plan's options (the policy, replication factor and device share of
    ``--policy``, ``--replication`` and ``--device-fraction``, the run's seed, and analyze's
    defaults for the rest). :class:`InputError` for fanouts that do not fit the graph or the
    layers."""
    edges = EdgeSeeds(config.num_negatives, config.negative_sampling) if config.task == LINK else None
    table = fanout_table(config.fanouts, schema, check_sampler(config.sampler), config.layers, "--fanouts")
    workloads = (Workload(table, config.batch_size, sampler=config.sampler, edges=edges, schema=schema),)
    evaluation = evaluation_workload(config, schema) if config.plan_workload == TRAIN_AND_EVAL else None
    if evaluation is not None:
        workloads += (evaluation,)
    if config.plan is not None or config.policy == "none":
        return PlanRequest(workloads)
    return PlanRequest(workloads, PlanOptions(config.policy, Budget(replication=config.replication),
                                              config.device_fraction, seed=config.seed))


def evaluation_workload(config: TrainConfig, schema: GraphSchema | None = None) -> Workload | None:
    """The sampled evaluation ``config``'s run (resolved) does on the graph of ``schema``, as the
    cache sees it: minibatches of ``--eval-batch-size`` seeds over the validation and test splits
    (an empty split adds none) drawn with ``--eval-fanouts`` through the cache, ``1 /
    --eval-every`` passes per training epoch; with ``--task link``, held-out edges with
    ``--eval-negatives`` destinations of their source each (:meth:`EdgeSeeds.evaluation`).
    ``None`` when it does none that reads the cache: ``--eval-every 0``, and layer-wise inference
    (and full-graph mode), which exchanges every halo row of every layer without it. The one place
    the run's evaluation becomes a workload (the plan, the memory estimate); :class:`InputError`
    for ``--eval-fanouts`` that do not fit the graph or the layers."""
    if not SAMPLED_INFERENCE_ONLY.holds(config):
        return None
    edges = EdgeSeeds.evaluation(config.eval_negatives) if config.task == LINK else None
    table = fanout_table(config.eval_fanouts, schema, layers=config.layers, what="--eval-fanouts")
    return Workload(table, config.eval_batch_size, splits=EVAL_SPLITS, weight=1 / config.eval_every, edges=edges,
                    schema=schema)


def choose_cache(config: TrainConfig, data: PartitionedDataset) -> CacheChoice:
    """The cache plan of ``config`` (resolved) on ``data``, read and checked when it exists;
    :class:`InputError` (one sentence) when the plan cannot be used or, when it is to be built,
    cannot be saved. The one place where the run's plan is decided."""
    if config.mode == FULL_GRAPH:  # every layer over the whole graph: no feature cache
        return CacheChoice("none", reason="full-graph")
    request = plan_request(config, data.schema)
    if config.plan is not None:
        plan = check_plan(read_plan_info(config.plan), data, request)
        return CacheChoice(plan.info.meta.options.policy, Path(config.plan), plan, request)
    if config.policy == "none" or data.num_parts == 1:  # one partition has no remote rows
        return CacheChoice("none", reason="none")
    if not config.features:  # the embedding's rows are never cached
        return CacheChoice("none", reason="none (no features)")
    request.options.budget.check(data.num_parts, 1)
    path = request.default_dir(config.part_dir)
    analyze = analyze_command(config.part_dir, request)
    if _there(path):
        return CacheChoice(config.policy, path, check_plan(read_plan_info(path), data, request), request,
                           analyze=analyze)
    try:
        check_writable_dir(path.parent, "cache plan directory", exist_ok=True)
    except InputError as exc:
        reason = str(exc).split("; ")[0]
        raise InputError(f"there is no cache plan at {path} and this run could not save the one it builds there "
                         f"({reason}); write it elsewhere with `{analyze}` and train with --plan DIR") from None
    return CacheChoice(config.policy, path, None, request, analyze=analyze)


def _there(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _build_unless_there(choice: CacheChoice, data: PartitionedDataset, sampler_threads: int) -> bool:
    """Build the plans of every partition as ``salientpp analyze`` does and save them at
    ``choice.path`` (the policies that sample run ``sampler_threads`` sampler threads).

    Returns True when this job saved them, False when the path already held a plan, or another
    job that built the same plan at the same time renamed it into place first (its temporary
    directory is then removed, and this job uses the winner's plan). Any other failure raises.
    """
    path, request = choice.path, choice.request
    if _there(path):
        return False
    try:
        with output_errors(path.parent):
            path.parent.mkdir(exist_ok=True)
        request.build_and_save(request.context(data, sampler_threads=sampler_threads), path)
    except InputError:
        if _there(path):  # another job won the race to rename the same plan into place
            return False
        raise
    return True


def open_cache(choice: CacheChoice, data: PartitionedDataset, rank: int, local_rank: int,
               sampler_threads: int) -> CacheChoice:
    """``choice`` as this rank trains with it: when the choice says so, its plan built and saved
    first, then read and checked (a collective when distributed: every rank calls it).
    ``local_rank`` is the rank's index on its machine: where a machine does not see the plan rank
    0 saved, its local rank 0 builds and saves it there. A policy that samples to build the plan
    (``oracle``, ``vip-simulation``) runs ``sampler_threads`` sampler threads."""
    if not choice.to_build:
        return choice
    built = rank == 0 and _build_unless_there(choice, data, sampler_threads)
    if dist.is_initialized():
        dist.barrier()
        if local_rank == 0 and not _there(choice.path):  # not rank 0's file system
            built = _build_unless_there(choice, data, sampler_threads)
        dist.barrier()
    if not _there(choice.path):
        raise InputError(f"rank {rank} finds no cache plan at {choice.path}, which the first rank of its machine "
                         f"should have built; write one with `{choice.analyze}`, copy it to every machine and train "
                         "with --plan DIR")
    plan = check_plan(read_plan_info(choice.path), data, choice.request)
    return replace(choice, plan=plan, built=built)


# ---- the run, before any rank starts ----------------------------------------------------------------

@dataclass(frozen=True)
class ResolvedRun:
    """What a run decides once, before any rank starts; every rank receives it.

    Attributes:
        config: the configuration with every default filled in (:meth:`TrainConfig.resolved`),
            the pipeline depth included (the thread budget's choice unless given).
        threads: the thread budget of one of this machine's ranks.
        local_ranks: the ranks this machine runs.
        task: the loss and metric of the labels (or of link prediction), the metric checked
            against them.
        cache: the cache plan the run trains with.
        inputs: the model's input rows, per node type (:func:`model_input`).
        memory: the memory estimate of this machine's ranks, one line, when it was checked.
    """

    config: TrainConfig
    threads: ThreadBudget
    local_ranks: int
    task: Task
    cache: CacheChoice
    inputs: TypedInput
    memory: str = ""


def default_model(schema: GraphSchema) -> str:
    """The built-in model of a run without ``--model``, decided from the graph's ``schema`` (by
    ``train``, ``bench train`` and the PyG baseline alike): ``sage`` on one node type and one
    relation, ``rsage`` (SAGE per relation, summed) on several, the typed model that equals it on one."""
    return "sage" if schema.is_homogeneous else "rsage"


def resolve_run(config: TrainConfig, local_ranks: int | None = None, memory_check: bool = False) -> ResolvedRun:
    """Check ``config`` and decide everything it leaves open, once: its defaults (the model
    without ``--model`` the graph's, :func:`default_model`), this machine's
    thread budget for ``local_ranks`` ranks (default: ``config.nprocs``, else one per partition,
    which must be the number of partitions), the pipeline depth and fetch thread, and the cache plan (read and
    checked when it exists); with ``memory_check``, refuse a run whose ranks would not fit in
    this machine's memory (:func:`check_train_memory`). :class:`InputError` (one sentence) on the
    first problem. The partitioned dataset's arrays are not verified here: the ranks do it."""
    data = load_partitioned(config.part_dir, verify=False, check=False)
    check_typed_limits(config, data)  # before a typed graph's default model meets a homogeneous-only option
    config = replace(config, model=config.model or default_model(data.schema)).resolved()
    inputs = model_input(config, data)
    if config.task == LINK:
        data.require_link_split()
    if local_ranks is None:
        local_ranks = config.nprocs or data.num_parts
        if local_ranks != data.num_parts:
            raise InputError(f"{config.part_dir} has {data.num_parts} partitions but --nprocs is {local_ranks}; "
                             f"run one rank per partition (--nprocs {data.num_parts})")
    threads = ThreadBudget.for_rank(local_ranks, config.torch_threads, config.sampler_threads, config.device)
    if config.mode != FULL_GRAPH:  # the only mode with a pipeline
        depth = threads.pipeline_depth(config.pipeline_depth)
        config = replace(config, pipeline_depth=depth, fetch_thread=threads.fetch_thread(depth, config.fetch_thread))
    if config.resume:
        check_resume(config, plans.partition_identity(data.meta), data.schema)
    task = link_task(config.metric) if config.task == LINK else task_of(data, config.metric)
    if config.mode != FULL_GRAPH:  # every rank must have a training seed for every step
        workload = plan_request(config, data.schema).workload
        check_training_seeds([workload.num_seeds(data, k) for k in range(data.num_parts)], config.batch_size,
                             config.part_dir, "edges" if workload.edges is not None else "nodes")
        evaluation_workload(config, data.schema)  # --eval-fanouts checked against the graph and the layers
    if check_sampler(config.sampler).weighted and not runs_layer_by_layer(config.model):
        # a user's model can be asked whether it reads edge weights only once built: built here once
        model = build_model(config.model, *encoder_dims(config, data, task), config.layers, structure=config.structure)
        check_reads_edge_weights(model, config.sampler)
    run = ResolvedRun(config, threads, local_ranks, task, choose_cache(config, data), inputs)
    return replace(run, memory=check_train_memory(run, data)) if memory_check else run


def check_typed_limits(config: TrainConfig, data: PartitionedDataset) -> None:
    """Refuse (:class:`InputError`, one sentence) what a typed graph ``data`` cannot train with
    yet: full-graph mode; nothing on a homogeneous graph."""
    if config.mode == FULL_GRAPH:
        data.schema.require_homogeneous("full-graph training (--mode full-graph)", config.part_dir,
                                        "train it in minibatches")


def model_input(config: TrainConfig, data: PartitionedDataset) -> TypedInput:
    """The input of the run's model (resolved: :func:`check_typed_limits` passed) on ``data``, a
    graph of one type or several (:func:`model_input_of`). :class:`InputError` (one sentence) for a
    built-in model that reads one node type on a graph of several, a type without input rows (no
    features fed and no ``--embedding-dim``), or a built-in typed model asked for an embedding
    whose rows would go beside a type's features (:attr:`TypedInput.beside_features`: every type has
    features), which it does not read."""
    check_model(config.model, typed=data.is_typed)
    inputs = model_input_of(data, config.embedding_dim, config.features)
    if config.model in TYPED_MODELS and inputs.beside_features:
        raise InputError(f"--embedding-dim {config.embedding_dim} gives the node types without features a learnable "
                         f"embedding, but every type of {config.part_dir} has features, and the {config.model} model "
                         "reads one input per type; drop --embedding-dim, or add --no-features")
    inputs.input_dims()  # a type without input rows is refused here
    return inputs


def model_input_of(data: PartitionedDataset, embedding_dim: int, features: bool) -> TypedInput:
    """The model input of ``data`` with an ``embedding_dim``-wide embedding (0: none), the features
    fed to the model or not (``--no-features``): its schema, the width of each type's features fed
    (:func:`~salientpp.data.learned.feature_widths`) and the embedding's. Not checked
    (:func:`model_input` checks it against a run's options)."""
    widths = feature_widths(data, features)
    return TypedInput(data.schema, {name: width for name, width in zip(data.schema.node_types, widths) if width},
                      embedding_dim or None)


def embedded_types(data: PartitionedDataset, features: bool) -> tuple[str, ...]:
    """The names of the node types of ``data`` whose nodes ``--embedding-dim`` gives learnable rows,
    with the features fed to the model or not (:func:`~salientpp.data.learned.learned_types`: the
    types without features; on a homogeneous graph its one type, beside its features)."""
    return tuple(data.schema.node_types[t] for t in learned_types(data.schema, feature_widths(data, features)))


def encoder_dims(config: TrainConfig, data: PartitionedDataset, task: Task) -> tuple[int, int, int]:
    """``(in_dim, hidden, out_dim)`` of the run's model (the encoder of link prediction) on ``data``:
    the target type's input rows in (:func:`model_in_dim`), the task's outputs (link: a
    ``hidden``-wide embedding per node) out."""
    out_dim = config.hidden if config.task == LINK else task.num_outputs
    return model_in_dim(data, config.features, config.embedding_dim), config.hidden, out_dim


def model_in_dim(data: PartitionedDataset, features: bool, embedding_dim: int) -> int:
    """The width of the model's input rows of the target type of ``data``, its features fed or not
    (:func:`~salientpp.data.learned.input_width`: with the embedding's rows beside them when it
    learns the target's, ``[x || emb]``)."""
    return input_width(data.schema, feature_widths(data, features), embedding_dim)


def optimizer_options(config: TrainConfig) -> dict[str, float]:
    """The hyper-parameters of the model's Adam, from the run's options (``--lr``,
    ``--weight-decay``): the one place they are decided, for the optimizer a run builds and for
    the one a resumed run loads from its checkpoint (:func:`apply_optimizer_options`)."""
    return {"lr": config.lr, "weight_decay": config.weight_decay}


def build_optimizer(config: TrainConfig, parameters) -> torch.optim.Optimizer:
    """The model's Adam over ``parameters`` with the hyper-parameters of :func:`optimizer_options`."""
    return torch.optim.Adam(parameters, **optimizer_options(config))


def apply_optimizer_options(optimizer: torch.optim.Optimizer, config: TrainConfig) -> None:
    """Give every param group of ``optimizer`` the hyper-parameters of :func:`optimizer_options`:
    after a resume loads the checkpoint's optimizer state, whose groups hold the values of the run
    that wrote it, the resumed run trains with the ``--lr`` and ``--weight-decay`` it was given."""
    for group in optimizer.param_groups:
        group.update(optimizer_options(config))


def resume_checkpoint(config: TrainConfig, partition_id: str, schema: GraphSchema | None) -> Checkpoint:
    """The checkpoint a ``--resume`` run continues from: ``last.pt`` in ``--checkpoint-dir``,
    refused (one sentence) unless it was trained on the data of ``partition_id``
    (:func:`~salientpp.cache.plan.partition_identity`, whose graph has the ``schema``; None:
    homogeneous) with the run's :func:`~salientpp.train.config.checkpoint_options`, compared by
    value (fanouts by the table they give, so one list for every relation equals the same lists
    per relation): the one match of a resumed checkpoint, before any rank starts and on every
    rank that loads it."""
    kind = check_sampler(config.sampler)
    defaults = {f.name: f.default for f in fields(TrainConfig)}

    def comparable(key: str, value):
        if value is None:  # absent from a checkpoint written before the option existed: it had the default
            return defaults.get(key)
        if key != "fanouts":
            return value
        try:
            return fanout_table(value, schema, kind, config.layers).tolist()
        except InputError:  # a spelling that gives no table here compares as written
            return value
    return load_checkpoint(config.checkpoint_dir, {PARTITION_ID: partition_id, **checkpoint_options(config)},
                           comparable=comparable)


def check_resume(config: TrainConfig, partition_id: str, schema: GraphSchema | None) -> None:
    """Before any rank starts (and writes a cache plan): refuse a ``--resume`` whose checkpoint does
    not match (:func:`resume_checkpoint`), holds weights that are not finite, or already holds
    ``--epochs`` epochs; print the options that changed since it was written (those a resume may
    change, which apply from there on)."""
    ckpt = resume_checkpoint(config, partition_id, schema)
    check_finite_weights(ckpt, Path(config.checkpoint_dir) / LAST, "training cannot continue from them",
                         "start afresh with a new --checkpoint-dir")
    if ckpt.epoch >= config.epochs:
        raise InputError(f"the checkpoint in {config.checkpoint_dir} holds the run up to "
                         f"{describe_position(ckpt.epoch, ckpt.step)}, so --epochs {config.epochs} leaves nothing to "
                         f"train; pass --epochs above {ckpt.epoch} to train more")
    options = config.to_dict()
    changed = [f"{flag} {options[name]} (was {ckpt.options[name]})" for name, flag in resumable_flags().items()
               if name in ckpt.options and ckpt.options[name] != options[name]]
    if changed and config.progress and is_first_rank():  # once per job under torchrun
        print(f"resuming {config.checkpoint_dir} with options changed since it was written, which apply from here "
              f"on: {', '.join(changed)}", flush=True)


def check_train_memory(run: ResolvedRun, data: PartitionedDataset) -> str:
    """Refuse (InputError) a run whose ranks on this machine would not fit in its memory or in
    ``--memory-limit``; returns the estimate's one-line summary. The cached rows are the plan's
    when it exists, else what the replication factor gives. Full-graph training has no plan; its
    estimate counts every layer's activations instead."""
    config, local_ranks = run.config, run.local_ranks
    if config.mode == FULL_GRAPH:
        estimate = estimate_full_graph(data, hidden=config.hidden, layers=config.layers, model=config.model,
                                       dependencies=config.dependencies, local_ranks=local_ranks,
                                       reuse_freed_memory=config.reuse_freed_memory)
    else:
        evaluation = evaluation_workload(config, data.schema)
        sampled_eval = evaluation is not None
        cache = run.cache
        batch_size, eval_batch_size, link_pairs = config.batch_size, config.eval_batch_size, (0, 0)
        if config.task == LINK:  # a batch of B edges seeds their endpoints and their negatives'
            batch_size, train_pairs = link_batch_bound(config.batch_size, config.num_negatives,
                                                       config.negative_sampling)
            eval_pairs = 0
            if sampled_eval:
                eval_batch_size, eval_pairs = link_batch_bound(config.eval_batch_size, config.eval_negatives,
                                                               NegativeSampling.PER_SOURCE)
            link_pairs = (train_pairs, eval_pairs)
        # the most neighbours a node draws per hop over its relations (a typed graph's table summed)
        fanouts = plan_request(config, data.schema).workload.hop_fanouts
        eval_fanouts = evaluation.hop_fanouts if sampled_eval else None
        estimate = estimate_train(data, fanouts=fanouts, batch_size=batch_size, hidden=config.hidden,
                                  layers=config.layers, local_ranks=local_ranks, pipeline_depth=config.pipeline_depth,
                                  sampler_threads=run.threads.sampler_threads, model=config.model,
                                  eval_fanouts=eval_fanouts,
                                  eval_batch_size=eval_batch_size if sampled_eval else None, link_pairs=link_pairs,
                                  embedding_dim=config.embedding_dim, features=config.features,
                                  reuse_freed_memory=config.reuse_freed_memory, policy=cache.policy,
                                  cached_rows=None if cache.plan is None else cache.plan.info.max_cached_rows,
                                  replication=None if cache.request is None or cache.request.options is None
                                  else cache.request.options.budget.replication)
    return check_memory(estimate, config.memory_limit)


# ---- a rank, before it trains ------------------------------------------------------------------------

@dataclass
class RankSetup:
    """What every trainer of a rank starts from (:meth:`open`).

    Attributes:
        run: the run's decisions; config and threads are its own.
        ctx: the process-group context; health: this rank's position reports.
        graph: this rank's partition; task: the loss and metric of its labels.
    """

    run: ResolvedRun
    ctx: DistContext
    health: Health
    graph: DistGraph
    task: Task

    @property
    def config(self) -> TrainConfig:
        return self.run.config

    @property
    def threads(self) -> ThreadBudget:
        """The rank's thread budget: its context's, which ``run_rank`` gives the run's budget."""
        return self.ctx.threads

    @classmethod
    def open(cls, run: ResolvedRun, ctx: DistContext, health: Health | None = None) -> "RankSetup":
        """Agree with the other ranks on the options every rank must share and on the package
        versions (:func:`~salientpp.train.config.agreed_options`), open this rank's partition and
        its task. A collective when distributed."""
        config = run.config
        agree(ctx, "options and package versions",
              {"salientpp": __version__, "torch": torch.__version__, "ranks": ctx.world_size, **agreed_options(config)})
        graph = DistGraph(config.part_dir, ctx)
        return cls(run, ctx, Health(ctx) if health is None else health, graph, run.task)

    def open_cache(self) -> CacheChoice:
        """This rank's cache plan (:func:`open_cache`; a collective when the job builds it)."""
        return open_cache(self.run.cache, self.graph.data, self.ctx.rank, self.ctx.local_rank,
                          self.threads.sampler_threads)
