"""Memory estimates: what ``partition``, ``analyze`` and ``train`` hold at their peak, checked
against this machine's available memory and ``--memory-limit`` before any work starts.

An estimate itemises, in bytes, the peak resident set size (RSS) of a command summed over its
processes, and errs high: the coefficients below were fitted to measured peaks (``VmHWM``) of
the synthetic presets and the products preset (docs/input-checks.md, "Memory estimates and --memory-limit")
and rounded up, and the measured peaks lie between 1/2 and 1 times the estimates.

Memory-mapped input files are counted in full: on current kernels a touched ``.npy`` that is in
the page cache is mapped in large folios, so it shows up in the RSS whole. Such pages can be
reclaimed, which makes the estimate err on the safe side.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .cache.plan import Budget, type_row_bytes
from .cache.workload import Workload
from .data.learned import feature_widths, input_width, learned_types
from .data.schema import GraphSchema
from .errors import InputError, counted
from .host import MiB, format_bytes, memory_budget, sampler_read_ahead
from .io import meta_count
from .partition.format import PartitionedDataset
from .partition.metis import METIS_BYTES_PER_EDGE, METIS_BYTES_PER_NODE
from .partition.multilevel import MultilevelOptions, held_bytes, vertex_bytes
from .partition.partitioner import constraint_names
from .sampling.kinds import check_fanouts

# One Python process with numpy, torch, torch_geometric, numba (LLVM) and the extension
# imported; measured 465-508 MiB for `partition`, `analyze` and a training rank on `tiny`.
PROCESS_BYTES = 512 * MiB
# int64 words per vertex that `partition` holds while it lays the partitions out: the [N, 4]
# balance weights, the parts, both renumbering permutations, the new rowptr, the degree and its
# gather, the quality's marks, the mapped rowptr.
LAYOUT_VERTEX_WORDS = 12
# ... and while it assigns, besides the method's own: the balance weights and the mapped rowptr.
ASSIGN_VERTEX_WORDS = 5
# The chunks `partition` reads and writes at once (salientpp.partition.assemble): a chunk of
# col in and out with its sort order, a chunk of feature rows in and reordered.
PARTITION_CHUNK_BYTES = 6 * 64 * MiB
# The smallest budget of the multilevel partitioner: one chunk and a coarse graph of ~100k edges.
MIN_MULTILEVEL_BUDGET = 64 * MiB
# int64/float64 words per vertex that the analysis holds besides the [N, K] arrays: degree,
# masks, ranking permutations and their keys (plus one pick-weight array per hop).
ANALYSIS_VERTEX_WORDS = 16
# float64 [N, K] arrays alive while the VIP recurrence runs: two hops, the output, the memo.
VIP_ARRAYS = 4
# Policies that run the sampler over whole epochs (salientpp.cache.policies).
SAMPLING_POLICIES = ("oracle", "vip-simulation")
# Sampled batches a NeighborLoader keeps ready (its default read-ahead).
LOADER_READ_AHEAD = 4
# Bytes per batch node besides its feature rows: n_id and the row origins' int64 arrays.
BATCH_NODE_BYTES = 48
# Per model: float32 tensors of width d_out per destination node, and tensors per sampled edge
# (width d_in for SAGE and GIN, whose messages are gathered inputs; d_out for GAT's projected
# messages and attention). Fitted to forward + backward peaks of a 3-layer model.
ACTIVATION_TENSORS = {"sage": (4, 1), "gin": (6, 1), "gat": (4, 5), "gcn": (4, 1)}
# Bytes per scored pair of link prediction besides its embedding rows: the drawn pair and its
# index into the batch's nodes (int64, before and after deduplication), its label and score
# (float32) and the score's gradient.
LINK_PAIR_BYTES = 48
# Bytes per parameter: weight, gradient, Adam's two moments, DDP's gradient bucket (float32).
PARAMETER_BYTES = 20
# What a rank that keeps freed host memory for reuse (salientpp.distributed.host_memory) holds
# beyond its live peak, as a fraction of what a step allocates (batch buffers and activations):
# blocks that no longer fit where they were freed. Measured 0.53-0.61 on products in 2 parts, 0.4 in 4.
KEPT_FREED_FRACTION = 0.65
@dataclass
class MemoryEstimate:
    """The estimated peak memory of one command.

    Attributes:
        what: what needs the memory, e.g. ``"partitioning 2,400,000 nodes into 8 parts with metis"``.
        items: bytes per named component (``"METIS work space"``, ``"Python + torch"``...).
        advice: how to need less, completing "...; " in the refusal, e.g. ``"use fewer local ranks"``.
    """

    what: str
    items: dict[str, int] = field(default_factory=dict)
    advice: str = "use a machine with more memory"

    @property
    def total(self) -> int:
        """Bytes of all items together."""
        return sum(self.items.values())

    def describe(self) -> str:
        """``"about 13.4 GiB (METIS work space 12.1 GiB, features 0.9 GiB, ...)"``, largest first,
        items under 1 MiB left out."""
        shown = [f"{name} {format_bytes(size)}"
                 for name, size in sorted(self.items.items(), key=lambda item: -item[1]) if size >= MiB]
        return f"about {format_bytes(self.total)} ({', '.join(shown)})"


# ---- the check ----------------------------------------------------------------------------------

def check_memory(estimate: MemoryEstimate, limit: int | None) -> str:
    """Raise :class:`InputError` when ``estimate`` exceeds the budget (``limit`` bytes, at most the
    available memory); otherwise return the one-line summary to print,
    ``"<what> needs about X GiB (<items>) of memory (available Y GiB)"`` (or ``(limit Y GiB)``)."""
    budget, source = memory_budget(limit)
    if estimate.total > budget:
        if source == "--memory-limit":
            reason = f"--memory-limit allows only {format_bytes(budget)}; {estimate.advice}, or raise --memory-limit"
        else:
            reason = (f"only {format_bytes(budget)} is available (MemAvailable and the cgroup limit); "
                     f"free memory or {estimate.advice}")
        raise InputError(f"{estimate.what} needs about {format_bytes(estimate.total)} of memory but {reason}")
    label = "limit" if source == "--memory-limit" else "available"
    return f"{estimate.what} needs {estimate.describe()} of memory ({label} {format_bytes(budget)})"


# ---- reading meta.json --------------------------------------------------------------------------

def _count(meta: dict[str, Any], key: str, minimum: int = 1) -> int:
    return meta_count(meta, key, fix="re-create the directory with the command that wrote it", minimum=minimum)


def _row_bytes(meta: dict[str, Any]) -> int:
    """Bytes of one feature row, ``num_features * itemsize``."""
    try:
        if not isinstance(meta.get("feature_dtype"), str):
            raise TypeError
        itemsize = np.dtype(meta["feature_dtype"]).itemsize
    except TypeError:
        raise InputError(f"meta.json has no valid feature_dtype (found {meta.get('feature_dtype')!r}); "
                         "re-create the directory with the command that wrote it") from None
    return _count(meta, "num_features") * itemsize


def _csr_bytes(num_nodes: int, num_edges: int) -> int:
    """int64 ``rowptr`` [N + 1] and ``col`` [nnz]."""
    return 8 * (num_nodes + 1 + num_edges)


def _node_files_bytes(num_nodes: int, row_bytes: int) -> int:
    """Features [N, F], labels [N] and the split ids (at most N) of a directory."""
    return num_nodes * (row_bytes + 16)


def rank_processes_bytes(ranks: int) -> int:
    """The processes of ``ranks`` local ranks: :data:`PROCESS_BYTES` per rank, and once more for
    the launcher that starts them when there is more than one."""
    return (ranks + (ranks > 1)) * PROCESS_BYTES


# ---- sampled batches ----------------------------------------------------------------------------

@dataclass(frozen=True)
class BatchSize:
    """Estimated size of one sampled batch (:class:`salientpp.sampling.NeighborSampler`).

    Attributes:
        nodes: distinct nodes after each hop, ``[n_0, ..., n_L]`` (``n_0`` = the seeds).
        edges: edges drawn at each hop, ``[E_1, ..., E_L]``.
    """

    nodes: tuple[int, ...]
    edges: tuple[int, ...]


def batch_size_estimate(num_nodes: int, num_edges: int, fanouts: Sequence[int], batch_size: int) -> BatchSize:
    """Nodes and edges of one sampled batch, erring high.

    Every node reached so far draws ``f_h`` neighbours at hop h, so ``E_h = n_{h-1} f_h`` (at most
    nnz; a fanout of -1 takes every edge). The new nodes are the distinct ones among these draws:
    ``n_h = n_{h-1} + (N - n_{h-1}) (1 - exp(-E_h / N))``, their expected number were the draws
    uniform over the N nodes. Uniform draws spread the most, so the batches of real graphs, whose
    neighbourhoods overlap, are smaller: on the products preset 485,000 nodes against 847,000
    estimated for fanouts 15,10,5 and 1,024 seeds.
    """
    n = num_nodes
    nodes, edges = [min(batch_size, n)], []
    for fanout in check_fanouts(fanouts):
        drawn = num_edges if fanout == -1 else min(nodes[-1] * fanout, num_edges)
        reached = nodes[-1] + (n - nodes[-1]) * -np.expm1(-drawn / n)
        edges.append(drawn)
        nodes.append(min(n, int(np.ceil(reached))))
    return BatchSize(tuple(nodes), tuple(edges))


def _sampled_graph_bytes(size: BatchSize) -> int:
    """One sampled batch without features: n_id and counts (int64 per node), int64 edge pairs."""
    return 16 * size.nodes[-1] + 16 * sum(size.edges)


def _id_map_bytes(num_nodes: int, size: BatchSize) -> int:
    """The id map of one C++ sampler workspace (csrc/sampler.h; each sampling thread and the
    consumer that samples inline has one): a direct table of 8 bytes per vertex on graphs of at
    most ``dense_id_map_max_nodes`` vertices, else a hash map of 16-byte slots kept at most half
    full, which doubles past that (so up to 4 slots per batch node)."""
    from ._ext import extension

    if num_nodes <= extension().dense_id_map_max_nodes:
        return 8 * num_nodes
    return 16 * 4 * size.nodes[-1]


# ---- partition ----------------------------------------------------------------------------------

def estimate_partition(meta: dict[str, Any], parts: int, method: str,
                       multilevel_budget: int = MultilevelOptions.memory_budget) -> MemoryEstimate:
    """Peak memory of ``salientpp partition`` on the dataset directory described by ``meta``
    (its meta.json: ``num_nodes``, ``num_edges``, ``num_features``, ``feature_dtype``).

    The dataset is checked and laid out in chunks read with ``read()``
    (:mod:`salientpp.partition.assemble`), so besides the method's work space only per-vertex
    arrays and the chunks are held: those of the layout, or, if more, those of the assignment
    (the balance weights and the method's own). METIS reads the memory-mapped ``col`` whole and
    copies the graph; the multilevel partitioner holds its per-vertex arrays (one weight per
    balance constraint: more for a typed graph, whose schema meta.json records) plus
    ``multilevel_budget`` (:mod:`salientpp.partition.multilevel`). ``parts`` only names the work.
    """
    n, e = _count(meta, "num_nodes"), _count(meta, "num_edges", 0)
    _row_bytes(meta)  # checks num_features and feature_dtype
    assign_vertex = ASSIGN_VERTEX_WORDS * 8 * n
    items = {"Python + torch": PROCESS_BYTES, "chunks": PARTITION_CHUNK_BYTES}
    advice = "use a machine with more memory"
    if method == "metis":
        items["METIS work space"] = METIS_BYTES_PER_EDGE * e + METIS_BYTES_PER_NODE * n
        items["mapped graph"] = _csr_bytes(n, e)
        advice = "use --method multilevel, whose memory does not grow with the edges, or a machine with more memory"
    elif method == "multilevel":
        options = MultilevelOptions(memory_budget=multilevel_budget)
        schema = GraphSchema.from_meta(meta, n, "the dataset's meta.json")
        assign_vertex += vertex_bytes(n, len(constraint_names(schema)))
        items["multilevel chunk and coarse graphs"] = held_bytes(n, e, options)
        advice = "use a machine with more memory (the multilevel partitioner needs its per-vertex arrays)"
    items["vertex arrays"] = max(LAYOUT_VERTEX_WORDS * 8 * n, assign_vertex)
    return MemoryEstimate(f"partitioning {counted(n, 'node', spec=',')} and {counted(e, 'edge', spec=',')} into "
                          f"{counted(parts, 'part')} with {method}", items, advice)


def multilevel_budget(meta: dict[str, Any], limit: int | None) -> int:
    """The multilevel partitioner's budget for a dataset: what ``limit`` (or the available
    memory) leaves beside the rest of ``salientpp partition``, at most the default
    (:class:`~salientpp.partition.multilevel.MultilevelOptions`) and at least
    :data:`MIN_MULTILEVEL_BUDGET` (then :func:`check_memory` refuses a limit too small)."""
    rest = estimate_partition(meta, 1, "multilevel", multilevel_budget=0).total
    headroom = memory_budget(limit)[0] - rest
    return int(max(MIN_MULTILEVEL_BUDGET, min(MultilevelOptions.memory_budget, headroom)))


# ---- analyze ------------------------------------------------------------------------------------

def _analysis_items(num_nodes: int, num_edges: int, num_parts: int, row_bytes: int,
                    workloads: Sequence[Workload], budget: Budget, policy: str, vip_method: str,
                    threads: int) -> dict[str, int]:
    """What building the cache plans holds (:func:`salientpp.cache.plan.build_plans`), besides the
    process and the mapped files."""
    n, k = num_nodes, num_parts
    vip_arrays = (VIP_ARRAYS + 2 * (len(workloads) > 1)  # a second workload adds its own VIP and the sum
                  + (policy == "vip-cavity" and vip_method != "cavity"))  # two memoised methods
    hops = max(len(w.fanouts) for w in workloads)
    budget.check(k, row_bytes)  # also refuses a NaN or negative budget before it is used
    device_rows, host_rows = budget.rows(n, n, k, row_bytes)
    items = {
        "VIP arrays": vip_arrays * 8 * n * k,
        "vertex work arrays": (ANALYSIS_VERTEX_WORDS + hops) * 8 * n,
        "cache plans": 8 * n + 8 * k * (device_rows + host_rows),
    }
    if policy in SAMPLING_POLICIES:
        sizes = [batch_size_estimate(n, num_edges, w.hop_fanouts, w.batch_size) for w in workloads]
        items["sampled batches"] = 8 * n + (LOADER_READ_AHEAD + threads) * max(map(_sampled_graph_bytes, sizes))
        items["sampler id maps"] = (threads + 1) * max(_id_map_bytes(n, size) for size in sizes)
    return items


def estimate_analyze(meta: dict[str, Any], workloads: Sequence[Workload], budget: Budget, policy: str, *,
                     vip_method: str = "exact", threads: int = 1) -> MemoryEstimate:
    """Peak memory of ``salientpp analyze`` on the partitioned directory described by ``meta``
    (its meta.json: ``num_nodes``, ``num_edges``, ``num_parts``, ``num_features``, ``feature_dtype``).

    Items: the mapped partitioned files (the analysis reads the graph and every partition's
    seeds); the float64 [N, K] arrays of the VIP recurrence (:func:`salientpp.cache.vip.
    inclusion_probabilities`, computed for every policy: the predicted traffic uses it); the
    per-vertex work arrays of the ranking; the plans; and for the oracle and vip-simulation
    policies the access counts and the sampled batches of ``threads`` sampler threads.
    """
    n, e, k = _count(meta, "num_nodes"), _count(meta, "num_edges", 0), _count(meta, "num_parts")
    row = _row_bytes(meta)
    items = {
        "Python + torch": PROCESS_BYTES,
        "partitioned files (memory-mapped)": _csr_bytes(n, e) + 8 * (n + k + 1) + _node_files_bytes(n, row),
        **_analysis_items(n, e, k, row, workloads, budget, policy, vip_method, threads),
    }
    return MemoryEstimate(f"the {policy} analysis of {k} partitions of {n:,} nodes", items,
                          "use a partitioning with fewer parts (the VIP arrays hold N x K numbers) "
                          "or a machine with more memory")


# ---- train --------------------------------------------------------------------------------------

def _feature_batch_bytes(size: BatchSize, row_bytes: int) -> int:
    """One batch in flight: its sampled graph and row origins, and its feature rows (sliced and
    received, then assembled)."""
    return size.nodes[-1] * (row_bytes + BATCH_NODE_BYTES) + 16 * sum(size.edges)


def _activation_bytes(model: str, size: BatchSize, dims: Sequence[int], training: bool) -> int:
    """float32 activations of one batch. Model layer i reads hop L - i: ``n_src`` rows of width
    ``d_in`` into ``n_dst`` rows of width ``d_out`` over ``E`` sampled edges. A training step keeps
    every layer's tensors for the backward pass (the widest per-edge tensor is transient, so only
    the largest counts); inference without gradients holds one layer at a time."""
    # A user's model (PKG.MODULE:FUNCTION) is estimated like SAGE: one message per edge.
    node_tensors, edge_tensors = ACTIVATION_TENSORS.get(model, ACTIVATION_TENSORS["sage"])
    hops = len(size.edges)
    layers = []
    for i in range(hops):
        n_src, n_dst, e = size.nodes[hops - i], size.nodes[hops - i - 1], size.edges[hops - i - 1]
        d_in, d_out = dims[i], dims[i + 1]
        per_node = n_src * d_in + node_tensors * n_dst * d_out
        layers.append((per_node, edge_tensors * e * (d_out if model == "gat" else d_in)))
    if training:
        return 4 * (sum(per_node for per_node, _ in layers) + max(per_edge for _, per_edge in layers))
    return 4 * max(per_node + per_edge for per_node, per_edge in layers)


def _parameter_count(dims: Sequence[int]) -> int:
    """An upper bound of the parameters of any of the models: two input projections, an MLP
    layer and biases/attention vectors per layer."""
    return sum(2 * d_in * d_out + d_out * d_out + 4 * d_out for d_in, d_out in zip(dims, dims[1:]))


def estimate_train(data: PartitionedDataset, *, fanouts: Sequence[int], batch_size: int, hidden: int, layers: int,
                   pipeline_depth: int, policy: str, local_ranks: int, replication: float | None = None,
                   cached_rows: int | None = None, model: str = "sage", eval_fanouts: Sequence[int] | None = None,
                   eval_batch_size: int | None = None, embedding_dim: int = 0, features: bool = True,
                   reuse_freed_memory: bool = True, sampler_threads: int = 1,
                   link_pairs: tuple[int, int] = (0, 0)) -> MemoryEstimate:
    """Peak memory of ``salientpp train`` on one machine: ``local_ranks`` ranks of the partitioned
    dataset ``data`` together.

    Items (``R = local_ranks``; the ranks are assumed to hold the R partitions that own the most
    bytes of rows; a typed graph's rows are each node type's own width, and a row in a batch or the
    cache is counted at the widest):

    * ``Python + torch``: :data:`PROCESS_BYTES` per rank, and once more for the launcher when R > 1;
    * ``graph``: the global CSR and ``orig_id``, memory-mapped and shared by the ranks;
    * ``owned feature rows``: each rank's mapped feature files plus the feature store's
      reordered copy, and its labels (:func:`_owned_rows`);
    * with a cache (``policy != "none"`` and K > 1): the cached rows per rank (``cached_rows`` of
      an existing plan, else ``floor(replication * N / K)``), three times (the start-up all-to-all
      sends, receives and reorders them), and the int64 [N] cache-slot map with its start-up
      temporaries;
    * then the larger of two phases. Training: ``per-rank batch buffers``, ``pipeline_depth``
      batches in flight plus the one being assembled (:func:`batch_size_estimate`, rows once),
      ``sampled batches ahead`` (the sampled graphs a sampler read-ahead beyond the pipeline's
      depth holds, :func:`~salientpp.host.sampler_read_ahead`), and
      ``activations`` of one training step or one inference batch, whichever is larger, and
      with ``reuse_freed_memory`` the ``freed blocks kept for reuse``, :data:`KEPT_FREED_FRACTION`
      of those two. Start-up, when no plan exists yet (no ``cached_rows``): ``cache plan analysis (rank 0)`` (the analysis of
      :func:`estimate_analyze`, and every partition's features mapped) while the others wait;
    * ``model and optimizer``: :data:`PARAMETER_BYTES` per parameter;
    * ``sampler id maps``: per loader (training, and sampled evaluation), one per sampling thread
      and one for the training thread, which samples a batch itself when no thread has it ready
      (:func:`_id_map_bytes`);
    * with ``embedding_dim`` D > 0: ``embedding table and optimizer state``, each rank's owned
      learnable rows (:func:`~salientpp.data.learned.learned_types`) three times (the table
      and, once every row was touched, Adam's two moments) and 16 bytes per row (the optimiser's
      slot map and step count). Without ``features`` no
      feature row is read or fetched, so the feature items are left out;
    * with ``link_pairs`` (link prediction): ``scored pairs``, :data:`LINK_PAIR_BYTES` plus three
      float32 rows of ``hidden`` (the two endpoints' gathered embeddings and their product) per
      pair, for each training batch in flight and one evaluation batch.

    Args:
        fanouts, batch_size, hidden, layers, replication, pipeline_depth, policy, model: as in
            :class:`~salientpp.train.TrainConfig`; ``replication`` is needed with a cache unless
            ``cached_rows`` is given.
        cached_rows: the most remote rows a partition caches in the plan the run uses, when
            that plan exists (:attr:`~salientpp.cache.plan.PlanInfo.max_cached_rows`): no
            analysis at start-up.
        local_ranks: ranks started on this machine (1 <= R <= K).
        sampler_threads: C++ sampler threads per rank and loader.
        eval_fanouts, eval_batch_size: sampled inference (default batch size: ``batch_size``);
            ``None`` when the run does not evaluate or evaluates layer-wise. With link
            prediction both batch sizes count seed nodes (:func:`~salientpp.sampling.link.link_batch_bound`).
        link_pairs: ``(training, evaluation)`` scored node pairs per batch of link prediction.
    """
    n, k, e = data.num_nodes, data.num_parts, int(data.col.shape[0])
    if isinstance(local_ranks, bool) or not isinstance(local_ranks, int) or not 1 <= local_ranks <= k:
        raise InputError(f"{local_ranks!r} local ranks cannot train {k} partitions; start 1 to {k} ranks per machine")
    check_fanouts(fanouts, layers=layers)
    type_rows = type_row_bytes(data) * features  # [T]; a batch's or cached row counted at the widest
    row = int(type_rows.max())
    owned, embedded = _owned_rows(data, type_rows, embedding_dim, local_ranks)
    ranks = local_ranks
    items = {
        "Python + torch": rank_processes_bytes(ranks),
        "graph (memory-mapped, shared)": _csr_bytes(n, e) + 8 * (n + k + 1),
        "owned feature rows": owned,
    }
    analysis = 0
    if policy != "none" and k > 1:
        if cached_rows is None:
            if replication is None:
                raise ValueError("estimate_train needs replication or cached_rows with a cache")
            budget = Budget(replication=replication)
            workload = (Workload(tuple(fanouts), batch_size),)
            analysis = (sum(_analysis_items(n, e, k, row, workload, budget, policy, "exact", 1).values())
                        + _node_files_bytes(n, row))
            cached_rows, _ = budget.rows(n, n, k, row)
        items["cache rows"] = ranks * 3 * cached_rows * row
        items["cache-slot maps"] = ranks * 16 * n
    if embedding_dim:
        items["embedding table and optimizer state"] = embedded
    in_dim = input_width(data.schema, feature_widths(data, features), embedding_dim)
    dims = [in_dim] + [hidden] * (layers - 1) + [data.num_outputs]
    size = batch_size_estimate(n, e, fanouts, batch_size)
    batch_bytes, graph_bytes = _feature_batch_bytes(size, row), _feature_batch_bytes(size, 0)
    activations = _activation_bytes(model, size, dims, training=True)
    id_map = _id_map_bytes(n, size)
    if eval_fanouts is not None:
        size = batch_size_estimate(n, e, eval_fanouts, eval_batch_size or batch_size)
        batch_bytes = max(batch_bytes, _feature_batch_bytes(size, row))
        graph_bytes = max(graph_bytes, _feature_batch_bytes(size, 0))
        activations = max(activations, _activation_bytes(model, size, dims, training=False))
        id_map = max(id_map, _id_map_bytes(n, size))
    running = {"per-rank batch buffers": ranks * (pipeline_depth + 1) * batch_bytes,
               "activations": ranks * activations}
    ahead = sampler_read_ahead(pipeline_depth, sampler_threads) - pipeline_depth
    if ahead:  # sampled graphs waiting for the pipeline, without their feature rows yet
        running["sampled batches ahead"] = ranks * ahead * graph_bytes
    running.update(_kept_freed(sum(running.values()), reuse_freed_memory))
    if analysis > sum(running.values()):  # the start-up phase is the peak
        items["cache plan analysis (rank 0)"] = analysis
    else:
        items.update(running)
    if any(link_pairs):
        pair_bytes = LINK_PAIR_BYTES + 3 * 4 * hidden
        items["scored pairs"] = ranks * ((pipeline_depth + 1) * link_pairs[0] + link_pairs[1]) * pair_bytes
    items["model and optimizer"] = ranks * PARAMETER_BYTES * _parameter_count(dims)
    loaders = 1 + (eval_fanouts is not None)  # the training loader and the evaluation loader, each with its sampler
    items["sampler id maps"] = ranks * loaders * (sampler_threads + 1) * id_map
    negatives = ", --num-negatives, --eval-negatives" if any(link_pairs) else ""
    return MemoryEstimate(f"training {ranks} of {k} partitions of {n:,} nodes on this machine", items,
                          f"use fewer local ranks, a smaller --batch-size{negatives}, --pipeline-depth or "
                          "--replication, or a machine with more memory")


def _owned_rows(data: PartitionedDataset, type_rows: np.ndarray, embedding_dim: int,
                local_ranks: int) -> tuple[int, int]:
    """``(feature bytes, embedding bytes)`` the ``local_ranks`` partitions that hold the most own:
    each owned node's feature row of its type (``type_rows``, int64 ``[T]``) twice (the mapped file
    and the feature store's copy) and 16 bytes of label; with ``embedding_dim`` D, the nodes with
    learnable rows (of :func:`~salientpp.data.learned.learned_types`: the types without features,
    a homogeneous graph's every node) three
    rows of D float32 (the table and Adam's two moments) and 16 bytes of optimiser state."""
    counts = data.book.block_sizes
    learned = np.zeros(counts.shape[1], dtype=bool)
    learned[list(learned_types(data.schema, type_rows))] = True
    features = counts @ (2 * type_rows + 16)
    embeddings = counts @ learned * (3 * 4 * embedding_dim + 16) if embedding_dim else np.zeros(data.num_parts)
    largest = np.argsort(-(features + embeddings), kind="stable")[:local_ranks]
    return int(features[largest].sum()), int(embeddings[largest].sum())


def _kept_freed(step_bytes: int, reuse_freed_memory: bool) -> dict[str, int]:
    """The item of freed blocks a rank keeps for reuse, for ``step_bytes`` allocated per step."""
    return {"freed blocks kept for reuse": int(KEPT_FREED_FRACTION * step_bytes)} if reuse_freed_memory else {}


def estimate_full_graph(data: PartitionedDataset, *, hidden: int, layers: int, model: str, dependencies: str,
                        local_ranks: int, reuse_freed_memory: bool = True) -> MemoryEstimate:
    """Peak memory of ``salientpp train --mode full-graph`` on one machine: ``local_ranks`` ranks.

    Each partition's :class:`~salientpp.fullgraph.DependencySchedule` is built (``hybrid`` as
    ``cache``, its upper bound: it caches a subset) and the ranks are assumed to hold the R
    partitions whose schedules need the most. Per rank, besides the process, the shared graph and
    the model: its feature rows and the remote ones fetched at start-up, and the activations of
    every layer, kept for the backward pass (the input table of layer i, ``node_tensors`` rows of
    width d_{i+1} per destination as in :data:`ACTIVATION_TENSORS`, a float32 dropout mask, and
    the MFG's int64 ``[2, E]`` edges and per-edge tensors), and with ``reuse_freed_memory`` the
    freed blocks kept for reuse (:data:`KEPT_FREED_FRACTION` of the activations).
    """
    from .fullgraph import Dependencies, schedule_dependencies

    n, k, e = data.num_nodes, data.num_parts, int(data.col.shape[0])
    if isinstance(local_ranks, bool) or not isinstance(local_ranks, int) or not 1 <= local_ranks <= k:
        raise InputError(f"{local_ranks!r} local ranks cannot train {k} partitions; start 1 to {k} ranks per machine")
    mode = Dependencies.COMMUNICATE if dependencies == Dependencies.COMMUNICATE.value else Dependencies.CACHE
    row = data.num_features * data.feature_dtype.itemsize
    dims = [data.num_features] + [hidden] * (layers - 1) + [data.num_outputs]
    node_tensors, edge_tensors = ACTIVATION_TENSORS.get(model, ACTIVATION_TENSORS["sage"])
    rowptr, col = np.asarray(data.rowptr), np.asarray(data.col)
    per_rank = []
    for part in range(k):
        lo, hi = int(data.book.offsets[part]), int(data.book.offsets[part + 1])
        schedule = schedule_dependencies(rowptr, col, lo, hi, np.asarray(data.part(part).train_idx), layers, mode)
        features = schedule.computed[0].shape[0] * (row + 4 * data.num_features)
        activations = 0
        for i in range(layers):
            sources = schedule.computed[i].shape[0] + schedule.fetched[i].shape[0]
            dst, edges = schedule.computed[i + 1].shape[0], schedule.edges(i)
            activations += 4 * (sources * dims[i] + (node_tensors + 1) * dst * dims[i + 1])
            activations += 16 * edges + 4 * edge_tensors * edges * (dims[i + 1] if model == "gat" else 0)
        per_rank.append((features + activations, features, activations))
    chosen = sorted(per_rank, reverse=True)[:local_ranks]
    activations = sum(activations for _, _, activations in chosen)
    ranks = local_ranks
    items = {
        "Python + torch": rank_processes_bytes(ranks),
        "graph (memory-mapped, shared)": _csr_bytes(n, e) + 8 * (n + k + 1),
        "feature rows (owned and fetched)": sum(features for _, features, _ in chosen),
        "full-graph activations": activations,
        **_kept_freed(activations, reuse_freed_memory),
        "model and optimizer": ranks * PARAMETER_BYTES * _parameter_count(dims),
    }
    return MemoryEstimate(f"full-graph training of {ranks} of {k} partitions of {n:,} nodes on this machine "
                          f"({dependencies})", items,
                          "use more partitions (and machines), fewer --layers or a smaller --hidden, "
                          "--dependencies communicate (it recomputes nothing), or --mode minibatch")
