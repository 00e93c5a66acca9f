"""Cache policies: a policy scores every vertex for partition k; higher scores are cached first.

A policy is any callable ``policy(ctx: PolicyContext, k: int) -> float64 [N]`` registered by name::

    @register_policy("two-hop-degree")
    def two_hop_degree(ctx, k):
        return neighbour_sum(ctx.dataset.rowptr, ctx.dataset.col, ctx.degree()[:, None])[:, 0]

The plan builder and the simulator ignore the scores of vertices that partition k owns when they
choose what to cache (owned rows are never cached) and use them to order the local rows.
Ties are broken by a seeded random order, so a policy with many equal scores is not secretly
ranked by vertex id (ids follow the partitioner's order).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .. import streams
from ..errors import InputError, check_int
from ..sampling import make_sampler
from . import accesses
from .vip import METHODS, default_method, expected_accesses, neighbour_sum
from .workload import Workload

Policy = Callable[["PolicyContext", int], np.ndarray]
_REGISTRY: dict[str, Policy] = {}
_READS_VIP_METHOD: set[str] = set()  # the policies that score by ``ctx.vip_method``


@dataclass
class PolicyContext:
    """Everything a policy may look at, with memoised shared work (VIP, sampled counts).

    Attributes:
        dataset: the ``PartitionedDataset``.
        workloads: what the cache serves; ``workloads[0]`` is training (fanouts, batch size).
        seed: seed of the evaluated run (the oracle counts its epochs; stream 0 of
            :func:`salientpp.streams.loader_seed`).
        epochs: number of evaluated epochs.
        simulation_epochs: epochs that ``vip-simulation`` samples, from an independent stream.
        vip_method: ``exact``, ``taylor`` or ``cavity`` for the ``vip`` policy; ``None``: the
            training sampler's default (:func:`~salientpp.cache.vip.default_method`).
        num_threads: sampler threads (VIP uses numba's threads).
        progress: show tqdm bars while sampling.
    """

    dataset: object
    workloads: tuple[Workload, ...]
    seed: int = 0
    epochs: int = 1
    simulation_epochs: int = 5
    vip_method: str | None = None
    sampler_threads: int = 1
    progress: bool = False
    _memo: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.workloads = tuple(self.workloads)
        if not self.workloads:
            raise InputError("a policy context needs at least the training workload")
        if self.vip_method is None:
            self.vip_method = default_method(self.training.sampler)
        if self.vip_method not in METHODS:
            raise InputError(f"unknown VIP method {self.vip_method!r}; choose one of {', '.join(METHODS)}")
        for name in ("epochs", "simulation_epochs", "sampler_threads"):
            check_int(getattr(self, name), name.replace("_", " "))

    @property
    def training(self) -> Workload:
        """``workloads[0]``, the training workload."""
        return self.workloads[0]

    @property
    def num_nodes(self) -> int:
        return self.dataset.num_nodes

    @property
    def num_parts(self) -> int:
        return self.dataset.num_parts

    def _memoised(self, key, compute):
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def degree(self) -> np.ndarray:
        """int64 ``[N]``."""
        return self._memoised("degree", lambda: np.diff(np.asarray(self.dataset.rowptr)))

    def remote_mask(self, k: int) -> np.ndarray:
        """bool ``[N]``: True for the vertices partition ``k`` does not own."""
        mask = np.ones(self.num_nodes, dtype=bool)
        offsets = self.dataset.book.offsets
        mask[offsets[k]:offsets[k + 1]] = False
        return mask

    def expected_accesses(self, method: str | None = None) -> np.ndarray:
        """float64 ``[N, K]`` expected minibatches per epoch touching each vertex (see :mod:`.vip`)."""
        method = method or self.vip_method
        return self._memoised(("vip", method), lambda: expected_accesses(self.dataset, self.workloads,
                                                                        method=method))

    def rng(self, k: int, stream: int) -> np.random.Generator:
        return np.random.default_rng(streams.loader_seed(self.seed, k, stream))

    def samplers(self) -> list:
        data = self.dataset
        return self._memoised("samplers", lambda: [
            make_sampler(data.rowptr, data.col, w.fanout_table, w.sampler, w.replace, **data.sampler_args)
            for w in self.workloads])

    def access_counts(self, k: int, epochs: int, stream: int) -> np.ndarray:
        """float64 ``[N]`` weighted minibatch counts of partition ``k`` summed over ``epochs``
        epochs of one random stream (memoised; see :func:`salientpp.cache.accesses.access_counts`)."""
        return self._memoised(("counts", k, epochs, stream), lambda: accesses.access_counts(
            self.dataset, self.workloads, self.samplers(), k, epochs=epochs, seed=self.seed, stream=stream,
            sampler_threads=self.sampler_threads, progress=self.progress))

    def forget(self, k: int) -> None:
        """Drop the memoised access counts of partition ``k`` (they are ``[N]`` each)."""
        for key in [key for key in self._memo if isinstance(key, tuple) and key[0] == "counts" and key[1] == k]:
            del self._memo[key]


def register_policy(name: str, *, reads_vip_method: bool = False) -> Callable[[Policy], Policy]:
    """Decorator: make ``policy(ctx, k) -> float64 [N]`` available under ``name``;
    ``reads_vip_method``: its scores depend on ``ctx.vip_method`` (``--vip-method``), which is
    refused for the policies that do not."""
    if not isinstance(name, str) or not name or "," in name:
        raise ValueError(f"a policy name must be a non-empty string without commas, got {name!r}")

    def decorate(policy: Policy) -> Policy:
        if name in _REGISTRY and _REGISTRY[name] is not policy:
            raise ValueError(f"a different policy is already registered as {name!r}")
        _REGISTRY[name] = policy
        if reads_vip_method:
            _READS_VIP_METHOD.add(name)
        return policy

    return decorate


def available_policies() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get_policy(name: str) -> Policy:
    if name not in _REGISTRY:
        raise InputError(f"unknown cache policy {name!r}; choose one of {', '.join(_REGISTRY)} "
                         "or register your own with @register_policy")
    return _REGISTRY[name]


def check_policies(names: Sequence[str], vip_method: str | None) -> tuple[str, ...]:
    """``names``, each a registered policy, and a ``vip_method`` (``None``: not chosen) that one of
    them reads; :class:`InputError` (one sentence) otherwise."""
    for name in names:
        get_policy(name)
    if vip_method is not None and not _READS_VIP_METHOD.intersection(names):
        readers = " or ".join(sorted(_READS_VIP_METHOD))
        raise InputError(f"--vip-method chooses the estimate of the {readers} policy, and {', '.join(names)} "
                         f"{'does' if len(names) == 1 else 'do'} not use one; drop it, or add the {readers} policy")
    return tuple(names)


def policy_scores(ctx: PolicyContext, name: str, k: int) -> np.ndarray:
    """Run a registered policy for partition ``k`` and check what it returns: float64 ``[N]``, finite."""
    scores = np.asarray(get_policy(name)(ctx, k))
    if scores.shape != (ctx.num_nodes,):
        raise InputError(f"policy {name!r} returned shape {list(scores.shape)} for partition {k}; "
                         f"it must return one score per vertex, shape [{ctx.num_nodes}]")
    scores = scores.astype(np.float64, copy=False)
    if not np.all(np.isfinite(scores)):
        raise InputError(f"policy {name!r} returned NaN or infinite scores for partition {k}; return finite numbers")
    return scores


def rank_vertices(scores: np.ndarray, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``ids`` sorted by descending ``scores[ids]``, ties in a random order drawn from ``rng``."""
    shuffled = rng.permutation(np.asarray(ids, dtype=np.int64))
    return shuffled[np.argsort(-scores[shuffled], kind="stable")]


def _train_indicator(ctx: PolicyContext, k: int) -> np.ndarray:
    x = np.zeros((ctx.num_nodes, 1), dtype=np.float64)
    x[ctx.training.seed_nodes(ctx.dataset, k), 0] = 1.0
    return x


@register_policy("vip", reads_vip_method=True)
def vip_policy(ctx: PolicyContext, k: int) -> np.ndarray:
    """Analytic VIP (``ctx.vip_method``) as expected accesses per epoch over all workloads."""
    return ctx.expected_accesses()[:, k]


@register_policy("vip-cavity")
def vip_cavity_policy(ctx: PolicyContext, k: int) -> np.ndarray:
    """Analytic VIP with the non-backtracking (cavity) correction from hop 2 on."""
    return ctx.expected_accesses("cavity")[:, k]


@register_policy("vip-simulation")
def vip_simulation_policy(ctx: PolicyContext, k: int) -> np.ndarray:
    """Mean accesses per epoch over ``ctx.simulation_epochs`` sampled epochs, independent of the evaluated ones."""
    return ctx.access_counts(k, ctx.simulation_epochs, streams.SIMULATION_STREAM) / ctx.simulation_epochs


@register_policy("oracle")
def oracle_policy(ctx: PolicyContext, k: int) -> np.ndarray:
    """True access counts of the evaluated epochs (same seeds): no static cache of equal size fetches fewer rows."""
    return ctx.access_counts(k, ctx.epochs, streams.RUN_STREAM) / ctx.epochs


@register_policy("degree")
def degree_policy(ctx: PolicyContext, k: int) -> np.ndarray:
    """Highest degree first."""
    return ctx.degree().astype(np.float64)


@register_policy("halo")
def halo_policy(ctx: PolicyContext, k: int) -> np.ndarray:
    """1 for the 1-hop neighbours of partition k's training vertices, 0 elsewhere."""
    reach = neighbour_sum(ctx.dataset.rowptr, ctx.dataset.col, _train_indicator(ctx, k))[:, 0]
    return (reach > 0).astype(np.float64)


@register_policy("num-paths")
def num_paths_policy(ctx: PolicyContext, k: int) -> np.ndarray:
    """Number of walks of length 0..L from partition k's training vertices (L = number of hops)."""
    walks = _train_indicator(ctx, k)
    total = walks.copy()
    for _ in ctx.training.fanouts:
        walks = neighbour_sum(ctx.dataset.rowptr, ctx.dataset.col, walks)
        total += walks
    return total[:, 0]


@register_policy("random")
def random_policy(ctx: PolicyContext, k: int) -> np.ndarray:
    """Uniformly random (seeded by ``ctx.seed`` and k)."""
    return ctx.rng(k, streams.RANDOM_STREAM).random(ctx.num_nodes)
