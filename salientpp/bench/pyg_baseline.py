"""The baseline of ``salientpp bench train``: PyG's ``NeighborLoader`` + DDP, features replicated.

Every rank holds all of ``x`` (no fetch, no cache) and samples its partition's training vertices
with PyG's ``NeighborLoader`` (sampling and the ``x[n_id]`` gather in the training process, as
in PyG's examples). On a homogeneous graph the model (``BaselineConfig.model``) is
either :class:`PyGReferenceModel`, the trainer's SAGE as PyG builds it (PyG's ``SAGEConv``
and torch's ReLU and dropout), or :data:`OURS`, the trainer's own :class:`~salientpp.models.MFGModel`
(CSR aggregation, fused dropout) on MFGs built from PyG's batches, so that one row shows what
the sampling and fetching gain and the other what the model step gains. On a typed graph PyG
holds a ``HeteroData`` (:func:`pyg_graph`) and trains :class:`PyGHeteroModel`, what
``to_hetero`` makes of a SAGE model (PyG's model only: ``OURS`` is homogeneous); a type without
features (or every type, with ``--no-features``) gets its input rows from an ``nn.Embedding`` of
``--embedding-dim`` columns, replicated in every rank as the features are, where salientpp's
trainer looks them up in its partitioned embedding (train's :func:`~salientpp.train.setup.model_input_of`
decides which types and their widths for both). Like ours, each
layer runs on its own hop's edges (PyG's "hierarchical" trimming; the seeds' outputs equal
those of the model over the whole subgraph, at a fraction of the compute).
Ranks with fewer batches run empty steps so that DDP's all-reduces stay in lockstep, as in the
trainer. Every rank runs under the same :class:`~salientpp.host.ThreadBudget` as
the trainer's (PyG's loader samples on the training thread).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..distributed import init_distributed, launch, shutdown_distributed
from ..distributed.health import Stage
from ..host import ThreadBudget, local_world_size
from ..models import MFGModel
from ..partition import PartitionedDataset, load_partitioned
from ..sampling import MFG
from ..models.typed import TypedInput
from ..train.setup import default_model, model_input_of
from ..train.state import TRAIN_CPU

# BaselineConfig.model: PyG's SAGE (PyGReferenceModel) or salientpp's MFGModel.
PYG, OURS = "pyg", "salientpp"
# PyG's key of an edge type, and the one relation of a homogeneous batch (sampled_per_hop's form).
EdgeType = tuple[str, str, str]
HOMOGENEOUS: EdgeType = ("", "", "")
# The built-in typed models PyGHeteroModel builds as PyG would, with the PyG convolution that
# to_hetero repeats per relation in each.
TYPED_BASELINE_MODELS = {"rsage": "SAGE", "rgat": "GAT"}


class PyGReferenceModel(MFGModel):
    """The built-in SAGE/GAT/GIN as PyG runs them: PyG's convolutions (scatter over a gathered
    ``[E, F]`` message tensor) with torch's ReLU and dropout, whatever the blocks carry."""

    def layer(self, i: int, h: torch.Tensor, block) -> torch.Tensor:
        out = self.convs[i]((h, h[:block.num_dst]), block.edge_index)
        return F.dropout(torch.relu(out), self.dropout, self.training) if i < self.num_layers - 1 else out


def sampling_backend() -> str | None:
    """What PyG's NeighborLoader samples with here (``pyg-lib`` or ``torch_sparse``), or ``None``."""
    import torch_geometric.typing as pyg_typing
    if pyg_typing.WITH_PYG_LIB:
        return "pyg-lib"
    return "torch_sparse" if pyg_typing.WITH_TORCH_SPARSE else None


def unavailable_reason() -> str | None:
    """``None`` when PyG's NeighborLoader can sample here, else why not (one sentence)."""
    if sampling_backend() is None:
        return "PyG's NeighborLoader needs pyg-lib or torch_sparse, and neither is importable here"
    return None


def sampling_workers(budget: ThreadBudget) -> int:
    """PyG's ``num_workers``: on a GPU the budget's sampler threads, as worker processes (PyG's
    GPU examples sample in workers, and salientpp's sampler gets those cores); on the CPU 0, so
    that PyG samples on the training thread, whose cores the model's threads hold."""
    return budget.sampler_threads if budget.gpu else 0


@dataclass(frozen=True)
class BaselineConfig:
    """What the baseline trains: the same options as the compared ``salientpp train`` runs."""

    part_dir: str
    epochs: int
    fanouts: tuple[tuple[int, ...], ...]  # the fanout table: L rows (hops) of R ints (relations)
    batch_size: int
    hidden: int
    lr: float = 0.003
    dropout: float = 0.5
    device: str = "cpu"
    seed: int = 0
    timeout_s: float = 300.0
    model: str = PYG
    typed_model: str | None = None  # a typed graph's PyGHeteroModel, of TYPED_BASELINE_MODELS; None: default_model
    embedding_dim: int = 0  # as --embedding-dim: learned input rows of the types without features (typed graphs)
    features: bool = True  # as --no-features (False): every type's input rows learned
    torch_threads: int | None = None  # as the compared runs' --torch-threads (None: the budget's)
    workers: int | None = None  # PyG's num_workers (None: sampling_workers of the budget)


def sampled_per_hop(edge_index: Mapping[EdgeType, torch.Tensor], seeds: Mapping[str, int],
                    num_hops: int) -> tuple[dict[str, list[int]], dict[EdgeType, list[int]]]:
    """PyG's ``num_sampled_nodes_dict`` and ``num_sampled_edges_dict`` of a batch, from its edges
    alone (torch_sparse's sampler does not report them): the nodes of each type found at each
    hop (entry 0: the seeds) and the edges of each relation drawn at each hop (entry 0: hop 1).

    ``edge_index``: each relation's int64 ``[2, E_r]`` edges of the batch (row 0 sources, row 1
    destinations, local ids of their types); ``seeds``: the seeds of each type (types absent:
    none). PyG appends each type's nodes in the order it finds them and, at hop ``h``, the edges
    of each relation into the nodes found at hop ``h - 1``, in order (so a relation's targets
    ascend): the edges of hops ``1..h`` of a relation are those whose target lies below the end of
    its destination type's hop ``h - 1`` nodes, and a type's hop ``h`` nodes end after the largest
    source of those edges among the relations out of it. A homogeneous batch is the one-type case.
    """
    types = set(seeds) | {key[0] for key in edge_index} | {key[-1] for key in edge_index}
    node_ends = {t: [int(seeds.get(t, 0))] for t in types}
    edge_ends: dict[EdgeType, list[int]] = {key: [] for key in edge_index}
    for _ in range(num_hops):
        found = {t: ends[-1] for t, ends in node_ends.items()}
        for key, (src, tgt) in edge_index.items():
            e = int(torch.searchsorted(tgt, node_ends[key[-1]][-1]))
            edge_ends[key].append(e)
            if e:
                found[key[0]] = max(found[key[0]], int(src[:e].max()) + 1)
        for t, ends in node_ends.items():
            ends.append(found[t])
    counts = lambda ends: np.diff(ends, prepend=0).tolist()
    return {t: counts(ends) for t, ends in node_ends.items()}, {key: counts(ends) for key, ends in edge_ends.items()}


def _mfgs(batch, num_layers: int) -> list[MFG]:
    """The MFG of each layer (model order) of a PyG subgraph batch: layer ``i`` drops the last
    ``i`` hops. PyG's edge targets ascend, so each layer's edges are already grouped by
    destination and its ``rowptr`` counts them."""
    nodes, edges = getattr(batch, "num_sampled_nodes", None), getattr(batch, "num_sampled_edges", None)
    if nodes is None or edges is None:
        per_type, per_relation = sampled_per_hop({HOMOGENEOUS: batch.edge_index}, {"": int(batch.batch_size)},
                                                 num_layers)
        nodes, edges = per_type[""], per_relation[HOMOGENEOUS]
    node_ends, edge_ends = np.cumsum(nodes).tolist(), np.cumsum(edges).tolist()
    mfgs = []
    for i in range(num_layers):
        num_src, num_dst = int(node_ends[num_layers - i]), int(node_ends[num_layers - 1 - i])
        edge_index = batch.edge_index[:, :int(edge_ends[num_layers - 1 - i])]
        counts = torch.bincount(edge_index[1], minlength=num_dst)
        rowptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        mfgs.append(MFG(num_src, num_dst, edge_index, rowptr))
    return mfgs


def _type_rows(data: PartitionedDataset, ids: np.ndarray) -> np.ndarray:
    """int64 ``[n]``: the row of each partitioned id of ``ids`` (int64 ``[n]``) among the nodes of
    its type in PyG's ``HeteroData`` (partition 0's nodes of the type first, then partition 1's,
    ...): the id plus its block's shift. On one type every shift is 0."""
    sizes = data.book.block_sizes
    before = (np.cumsum(sizes, axis=0) - sizes).reshape(-1)  # the type's nodes in earlier partitions
    return ids + (before - np.asarray(data.book.blocks)[:-1])[data.book.block_of(ids)]


def pyg_graph(data: PartitionedDataset):
    """The whole graph as PyG holds it in one process: a homogeneous graph's ``Data`` (``x``,
    ``y``, ``edge_index``; rows are the partitioned ids), a typed graph's ``HeteroData`` (each
    type's ``x`` where it has features, the target's ``y``, each relation's ``edge_index`` under
    its ``(src, name, dst)`` key; rows of a type in the order of :func:`_type_rows`). Edges are
    grouped by ascending destination, as ``is_sorted=True`` tells PyG, which then skips the sort
    of its CSC conversion (a sort of every edge would hold several copies of E in every rank's
    memory)."""
    from torch_geometric.data import Data, HeteroData

    parts = [data.part(k) for k in range(data.num_parts)]
    rows = lambda arrays: torch.from_numpy(np.concatenate([np.asarray(a) for a in arrays]))
    rowptr = torch.from_numpy(np.array(data.rowptr))
    dst = torch.repeat_interleave(torch.arange(data.num_nodes), rowptr[1:] - rowptr[:-1])
    if not data.is_typed:
        edge_index = torch.empty((2, int(rowptr[-1])), dtype=torch.int64)
        edge_index[0].numpy()[:] = data.col  # straight from the memory map, no intermediate copy
        edge_index[1] = dst
        return Data(x=rows(p.x for p in parts).float(), y=rows(p.y for p in parts), edge_index=edge_index,
                    num_nodes=data.num_nodes)
    schema, target = data.schema, data.schema.target_index
    graph = HeteroData()
    for t, name in enumerate(schema.node_types):
        graph[name].num_nodes = schema.num_nodes[t]
        if t == target or t in data.feature_types:
            graph[name].x = rows(p.x if t == target else p.features[name] for p in parts).float()
    graph[schema.target].y = rows(p.y for p in parts)
    col, edge_rel, dst = np.asarray(data.col), np.asarray(data.edge_rel), dst.numpy()
    for r, relation in enumerate(schema.relations):
        mine = edge_rel == r
        graph[relation.key].edge_index = torch.from_numpy(np.stack([_type_rows(data, col[mine]), _type_rows(data, dst[mine])]))
    return graph


def pyg_seeds(data: PartitionedDataset, k: int, split: str = "train"):
    """Partition ``k``'s ``split`` nodes as PyG's ``NeighborLoader`` takes its ``input_nodes``
    for :func:`pyg_graph`'s graph: rows (homogeneous), or ``(target type, rows)``."""
    ids = np.array(getattr(data.part(k), f"{split}_idx"))
    if not data.is_typed:
        return torch.from_numpy(ids)
    return data.schema.target, torch.from_numpy(_type_rows(data, ids))


def num_neighbors(fanouts: Sequence[Sequence[int]], data: PartitionedDataset):
    """PyG's ``num_neighbors`` of a fanout table (L rows of R ints, as
    :func:`~salientpp.sampling.kinds.fanout_table` makes it): a list on a homogeneous graph, a
    list per relation key on a typed one."""
    table = np.asarray(fanouts, dtype=np.int64).reshape(len(fanouts), -1)
    if not data.is_typed:
        return table[:, 0].tolist()
    return {relation.key: table[:, r].tolist() for r, relation in enumerate(data.schema.relations)}


class PyGHeteroModel(nn.Module):
    """PyG's typed model of the baseline and of ``experiments/typed_accuracy.py``: what
    ``to_hetero(model, metadata, aggr="sum")`` makes of a homogeneous model of a ``Linear(F,
    hidden)`` input projection, ``num_layers`` PyG convolutions hidden -> hidden with LeakyReLU
    and dropout between them and a ``Linear`` head, written out as PyG's ``HeteroConv`` so that
    each layer can be trimmed to its hops (PyG's ``trim_to_layer``; the seeds' outputs are the
    same). ``model``: ``rsage`` (``SAGEConv``) or ``rgat`` (``GATConv(hidden, hidden / heads,
    heads, add_self_loops=False)``), the sizes of salientpp's ``TypedMFGModel``, for the
    ``HeteroData`` ``graph`` (its node and edge types, each type's feature width ``F_t``).
    ``inputs``: the run's model input (train's :func:`~salientpp.train.setup.model_input_of`): the
    types it gives no features (:attr:`~salientpp.models.typed.TypedInput.featureless`) read
    ``embedding_dim``-wide rows of an ``nn.Embedding`` of the type's nodes (PyG's own way, rows
    drawn from N(0, 1)) instead; None: every type's features in ``graph``.

    ``forward(x_dict, edge_index_dict, nodes_per_hop=None, edges_per_hop=None, n_id_dict=None)``:
    float32 ``[n_t, F_t]`` rows per type (a type without rows is left out of the layers' inputs),
    int64 ``[2, E_r]`` edges per relation key, the batch's :func:`sampled_per_hop` counts
    (``None``: no trimming), and int64 ``[n_t]`` the rows in ``graph`` of each type's batch nodes
    (PyG's ``n_id``), which the embedded types read; returns the target type's ``[n, out_dim]``
    outputs (its seeds first)."""

    def __init__(self, model: str, graph, hidden: int, out_dim: int, num_layers: int, target: str,
                 dropout: float = 0.5, heads: int = 4, inputs: TypedInput | None = None):
        from torch_geometric.nn import GATConv, HeteroConv, SAGEConv

        super().__init__()
        node_types, edge_types = graph.metadata()
        in_dims = ({t: graph[t].x.shape[1] for t in node_types} if inputs is None else
                   dict(zip(inputs.schema.node_types, inputs.input_dims())))
        conv = ((lambda: SAGEConv(hidden, hidden)) if TYPED_BASELINE_MODELS[model] == "SAGE" else
                (lambda: GATConv(hidden, hidden // heads, heads, add_self_loops=False)))
        self.types = list(node_types)
        self.embedding = nn.ModuleDict({t: nn.Embedding(graph[t].num_nodes, in_dims[t])
                                        for t in (() if inputs is None else inputs.featureless)})
        self.project = nn.ModuleList(nn.Linear(in_dims[t], hidden) for t in self.types)
        self.convs = nn.ModuleList(HeteroConv({key: conv() for key in edge_types}, aggr="sum")
                                   for _ in range(num_layers))
        self.head = nn.Linear(hidden, out_dim)
        self.target, self.dropout = target, float(dropout)

    def forward(self, x_dict, edge_index_dict, nodes_per_hop=None, edges_per_hop=None, n_id_dict=None) -> torch.Tensor:
        from torch_geometric.utils import trim_to_layer

        rows = {**{t: x for t, x in x_dict.items() if t not in self.embedding},
                **{t: table(n_id_dict[t]) for t, table in self.embedding.items() if t in n_id_dict}}
        h = {t: self.project[i](rows[t]) for i, t in enumerate(self.types) if t in rows}
        for i, conv in enumerate(self.convs):
            if nodes_per_hop is not None:
                h, edge_index_dict, _ = trim_to_layer(i, nodes_per_hop, edges_per_hop, h, edge_index_dict)
            h = conv(h, edge_index_dict)
            if i < len(self.convs) - 1:
                h = {t: F.dropout(F.leaky_relu(x), self.dropout, self.training) for t, x in h.items()}
        return self.head(h[self.target])


def _model(config: BaselineConfig, data: PartitionedDataset, graph) -> nn.Module:
    """The baseline's model, on the seed of ``config``: :class:`PyGHeteroModel` on a typed graph, else :class:`PyGReferenceModel` or :class:`~salientpp.models.MFGModel`."""
    torch.manual_seed(config.seed)
    layers = len(config.fanouts)
    if data.is_typed:
        return PyGHeteroModel(config.typed_model or default_model(data.schema), graph, config.hidden,
                              data.num_classes, layers, data.schema.target, config.dropout,
                              inputs=model_input_of(data, config.embedding_dim, config.features))
    return (PyGReferenceModel if config.model == PYG else MFGModel)(
        "sage", data.num_features, config.hidden, data.num_classes, layers, config.dropout)


def seed_outputs(model: nn.Module, batch, num_layers: int, target: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The seeds' outputs and labels of a PyG batch for the baseline's models (``target``: a typed
    graph's target type, each layer trimmed to its hops; ``None``: a homogeneous graph's MFGs)."""
    if target is None:
        return model(batch.x, _mfgs(batch, num_layers))[:batch.batch_size], batch.y[:batch.batch_size]
    seeds = batch[target].batch_size
    if "num_sampled_nodes" in batch[target]:  # pyg-lib reports them
        nodes, edges = batch.num_sampled_nodes_dict, batch.num_sampled_edges_dict
    else:
        nodes, edges = sampled_per_hop(batch.edge_index_dict, {target: seeds}, num_layers)
    return model(batch.x_dict, batch.edge_index_dict, nodes, edges, batch.n_id_dict)[:seeds], batch[target].y[:seeds]


def _empty_inputs(graph, num_layers: int, typed: bool, device: torch.device) -> tuple:
    """The model's inputs of an empty step (no nodes, no edges), which keeps DDP's all-reduces in
    lockstep on a rank out of batches."""
    if not typed:
        return torch.empty((0, graph.x.shape[1]), device=device), [MFG.empty(device)] * num_layers
    x_dict = {t: torch.empty((0, graph[t].x.shape[1]), device=device) for t in graph.node_types if "x" in graph[t]}
    edge_index_dict = {key: torch.empty((2, 0), dtype=torch.int64, device=device) for key in graph.edge_types}
    n_id_dict = {t: torch.empty(0, dtype=torch.int64, device=device) for t in graph.node_types}
    return x_dict, edge_index_dict, None, None, n_id_dict


def _rank(config: BaselineConfig) -> list[dict[str, float]]:
    from torch_geometric.loader import NeighborLoader

    budget = ThreadBudget.for_rank(local_world_size(), config.torch_threads, device=config.device)
    budget.apply()
    ctx = init_distributed(config.device, config.timeout_s)
    try:
        data = load_partitioned(config.part_dir)
        graph = pyg_graph(data)
        torch.manual_seed(config.seed + ctx.rank)
        with warnings.catch_warnings():  # PyG deprecates sampling without pyg-lib; the bench names the backend
            warnings.simplefilter("ignore", UserWarning)
            workers = sampling_workers(budget) if config.workers is None else config.workers
            # On a GPU the batches come in pinned memory, PyG's own setting for fast uploads.
            loader = NeighborLoader(graph, num_neighbors=num_neighbors(config.fanouts, data),
                                    input_nodes=pyg_seeds(data, ctx.rank), batch_size=config.batch_size,
                                    shuffle=True, is_sorted=True, num_workers=workers,
                                    persistent_workers=workers > 0, pin_memory=ctx.device.type == "cuda")
        model = _model(config, data, graph).to(ctx.device)
        target = data.schema.target if data.is_typed else None
        # A typed batch may not reach every relation, so DDP allows unused weights there (as the trainer).
        ddp = DistributedDataParallel(model, find_unused_parameters=data.is_typed) if ctx.distributed else model
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        empty = _empty_inputs(graph, len(config.fanouts), data.is_typed, ctx.device)
        mine = torch.zeros(ctx.world_size, dtype=torch.float64)
        mine[ctx.rank] = len(loader)
        if ctx.distributed:
            dist.all_reduce(mine)
        per_rank = [int(n) for n in mine.tolist()]
        history = []
        sample, train = Stage.SAMPLE.value, Stage.TRAIN.value  # the stage-time keys of our trainer
        for _ in range(config.epochs):
            times = {sample: 0.0, train: 0.0, TRAIN_CPU: 0.0}
            start = time.perf_counter()
            batches = iter(loader)
            for step in range(max(per_rank)):
                t0 = time.perf_counter()
                batch = next(batches, None)
                t1, c1 = time.perf_counter(), time.thread_time()
                optimizer.zero_grad(set_to_none=True)
                if batch is None:
                    loss = ddp(*empty).sum() * 0.0
                else:
                    out, y = seed_outputs(ddp, batch.to(ctx.device), len(config.fanouts), target)
                    ranks_with_data = sum(n > step for n in per_rank)
                    loss = F.cross_entropy(out, y) * (len(per_rank) / ranks_with_data)
                loss.backward()
                optimizer.step()
                times[sample] += t1 - t0
                times[train] += time.perf_counter() - t1
                times[TRAIN_CPU] += time.thread_time() - c1
            epoch_s = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            if ctx.distributed:
                dist.all_reduce(epoch_s, op=dist.ReduceOp.MAX)
            history.append({"epoch_s": float(epoch_s), "stage_s": times, "steps": max(per_rank)})
        return history
    finally:
        shutdown_distributed(ctx)


def run_baseline(config: BaselineConfig) -> list[dict[str, float]]:
    """Train the baseline on one local rank per partition; rank 0's history, one dict per epoch
    (``epoch_s``: the slowest rank's epoch; ``stage_s``: rank 0's sampling and compute seconds)."""
    num_parts = load_partitioned(config.part_dir, verify=False, check=False).num_parts  # the ranks check it
    if num_parts == 1:
        return _rank(config)
    return launch(_rank, (config,), num_parts)[0]
