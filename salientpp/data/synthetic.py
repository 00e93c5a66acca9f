"""Synthetic graphs shaped like OGB's product and citation graphs.

The model is a degree-corrected stochastic block model:

* nodes fall into ``num_communities`` communities of log-normally spread sizes;
* each node has a weight drawn from a Pareto law truncated so that no expected degree exceeds
  ``max_degree``; its expected degree is proportional to its weight (heavy-tailed degrees);
* each undirected edge picks its first end in proportion to the weights, and its second end
  from the same community (probability ``intra_fraction``) or from the whole graph, again in
  proportion to the weights, so most edges stay inside communities and METIS finds them;
* each community has a class; a node takes its community's class with probability
  ``label_purity``, else a uniformly random one;
* features are the class centroid plus Gaussian noise, so a feature-only classifier is
  mediocre while averaging neighbours (mostly of the same class) removes much of the noise.
* with ``num_tasks = T >= 1`` the labels are multi-label instead: bool ``[N, T]`` targets, each
  class having a fixed random 0/1 pattern over the T tasks (every task has both values); a
  node takes its class's pattern, each target replaced by a fair coin flip with probability
  ``1 - label_purity``. The class still drives the features, so the targets follow the
  communities and the features as the classes do. ``unknown_fraction > 0`` makes them float32
  with that fraction of targets NaN (unknown), every node keeping at least one known target.

Node ids are shuffled at the end, so they carry no community information. Every random draw is
a pure function of the seed and of the draw's position, so the arrays do not depend on the
number of threads.
"""
from __future__ import annotations

import dataclasses
import math
import os
import typing
from dataclasses import dataclass

import numba
import numpy as np

from ..errors import SEED_LIMIT, InputError
from ..hashing import GOLDEN, splitmix64
from ..io import NpyWriter, atomic_output_dir, save_array, write_meta
from .csr import build_csr, sorted_unique
from .format import SPLIT_FILES, Dataset, dataset_meta, load_dataset

# Relative shortfall of nnz / N from avg_degree that is accepted, and rounds of draws to reach it.
_DEGREE_TOLERANCE = 0.01
_MAX_ROUNDS = 4
# Peak memory per directed edge (edge list, CSR build, result; ~40 B measured on `products`)
# and per node (weights, ids, labels, splits), for the memory check.
_BYTES_PER_EDGE = 48
_BYTES_PER_NODE = 96
# What write_synthetic keeps per node (its docstring's "about 128 bytes per node").
_OUT_OF_CORE_BYTES_PER_NODE = 128
# The largest count a synthetic parameter may take (node ids, features, classes): 2^40.
MAX_COUNT = 2**40
# Rows of features generated per step (bounds the temporary memory of the noise).
_FEATURE_CHUNK = 1 << 16
# Out of core (write_synthetic): edge draws per batch (2 x 8 M int64, ~1 GiB of temporaries) and
# directed edges per bucket file (64 M int64 keys, ~2 GiB to sort and deduplicate).
_DRAW_BATCH = 1 << 23
_BUCKET_KEYS = 1 << 26


@dataclass(frozen=True)
class SyntheticConfig:
    """Parameters of a synthetic graph (see the module docstring for the model).

    Attributes:
        num_nodes: N.
        avg_degree: target directed edges per node (nnz / N), met within 1% unless the
            graph is too small to hold that many distinct edges.
        num_features: F, feature columns.
        num_classes: number of labels.
        num_communities: number of communities (blocks of the block model).
        degree_exponent: gamma of the Pareto law of node weights, P(w) ~ w^-gamma.
        max_degree: largest expected degree (truncation of the Pareto law).
        intra_fraction: probability that an edge's second end is drawn inside the first's community.
        community_size_spread: sigma of the log-normal law of community sizes (0: equal sizes).
        label_purity: probability that a node's label is its community's class.
        class_skew: community classes are drawn with probability ~ (k + 1)^-class_skew.
        feature_noise: standard deviation of the per-coordinate noise; class centroids have
            N(0, 1/F) coordinates (norm ~1).
        train_fraction, valid_fraction, test_fraction: split sizes as fractions of N.
        feature_dtype: "float32" or "float16".
        seed: non-negative seed; the same config gives identical arrays.
        num_tasks: 0 for multi-class labels (int64 ``[N]``); T >= 1 for multi-label targets
            (bool ``[N, T]``, float32 with ``unknown_fraction``).
        unknown_fraction: with ``num_tasks``, the fraction of targets made NaN (unknown).
    """

    num_nodes: int = 2000
    avg_degree: float = 12.0
    num_features: int = 32
    num_classes: int = 8
    num_communities: int = 16
    degree_exponent: float = 2.5
    max_degree: int = 150
    intra_fraction: float = 0.85
    community_size_spread: float = 0.5
    label_purity: float = 0.9
    class_skew: float = 0.5
    feature_noise: float = 0.55
    train_fraction: float = 0.08
    valid_fraction: float = 0.02
    test_fraction: float = 0.90
    feature_dtype: str = "float32"
    seed: int = 0
    num_tasks: int = 0
    unknown_fraction: float = 0.0

    @property
    def num_train(self) -> int:
        """The training nodes: ``train_fraction`` of ``num_nodes``, rounded."""
        return round(self.train_fraction * self.num_nodes)

    def validate(self) -> None:
        """Raise :class:`InputError` naming the first parameter that is out of range."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise InputError(f"synthetic parameter {f.name} must be a finite number, got {value}")
        n = self.num_nodes
        for name in ("num_nodes", "num_features", "num_classes", "num_communities", "num_tasks"):
            if getattr(self, name) > MAX_COUNT:
                raise InputError(f"invalid synthetic graph: {name} must be at most 2^40, got {getattr(self, name)}")
        checks = [
            (n >= 2, "num_nodes must be at least 2"),
            (0 < self.avg_degree < n - 1, f"avg_degree must lie in (0, num_nodes - 1 = {n - 1})"),
            (self.avg_degree < self.max_degree <= n - 1,
             f"max_degree must be greater than avg_degree ({self.avg_degree}) and at most num_nodes - 1 ({n - 1})"),
            (self.num_features >= 1, "num_features must be at least 1"),
            (2 <= self.num_classes <= n, "num_classes must lie in [2, num_nodes]"),
            (1 <= self.num_communities <= n, "num_communities must lie in [1, num_nodes]"),
            (self.degree_exponent > 1, "degree_exponent must be greater than 1"),
            (0 <= self.intra_fraction <= 1, "intra_fraction must lie in [0, 1]"),
            (self.community_size_spread >= 0, "community_size_spread must be >= 0"),
            (0 <= self.label_purity <= 1, "label_purity must lie in [0, 1]"),
            (self.class_skew >= 0, "class_skew must be >= 0"),
            (self.feature_noise >= 0, "feature_noise must be >= 0"),
            (all(0 <= f <= 1 for f in (self.train_fraction, self.valid_fraction, self.test_fraction))
             and self.train_fraction + self.valid_fraction + self.test_fraction <= 1 + 1e-9,
             "train_fraction, valid_fraction and test_fraction must lie in [0, 1] and sum to at most 1"),
            (self.num_train >= 1, "train_fraction * num_nodes must give at least one training node"),
            (self.feature_dtype in ("float32", "float16"), "feature_dtype must be float32 or float16"),
            (0 <= self.seed < SEED_LIMIT, "seed must be a non-negative integer below 2^63"),
            (self.num_tasks >= 0, "num_tasks must be 0 (multi-class labels) or a positive number of targets"),
            (0 <= self.unknown_fraction < 1, "unknown_fraction must lie in [0, 1)"),
            (self.unknown_fraction == 0 or self.num_tasks >= 1,
             "unknown_fraction applies to multi-label targets only; give num_tasks too"),
        ]
        for ok, message in checks:
            if not ok:
                raise InputError(f"invalid synthetic graph: {message}")


PRESETS: dict[str, SyntheticConfig] = {
    "tiny": SyntheticConfig(),
    "small": SyntheticConfig(num_nodes=100_000, avg_degree=20.0, num_features=100, num_classes=20,
                             num_communities=100, max_degree=2000, feature_noise=0.42),
    "products": SyntheticConfig(num_nodes=2_400_000, avg_degree=50.0, num_features=100, num_classes=47,
                                num_communities=400, max_degree=5000, feature_noise=0.32),
}


@dataclass
class SyntheticGraph:
    """A generated dataset plus the hidden structure it was generated from.

    Attributes:
        dataset: the validated :class:`Dataset`.
        community: int64 ``[N]`` community of each node (in the dataset's node ids).
    """

    dataset: Dataset
    community: np.ndarray


def parse_spec(spec: str) -> SyntheticConfig:
    """Parse ``"PRESET[,key=value...]"`` (e.g. ``"tiny,seed=3,num_nodes=5000"``) into a config.

    Raises :class:`InputError` on an unknown preset or key, a malformed item or a bad value.
    """
    name, *items = [part.strip() for part in spec.split(",")]
    if name not in PRESETS:
        raise InputError(f"unknown synthetic preset {name!r}; choose one of {', '.join(PRESETS)}")
    types = typing.get_type_hints(SyntheticConfig)
    overrides: dict[str, typing.Any] = {}
    for item in items:
        key, sep, text = (s.strip() for s in item.partition("="))
        if not sep or not key:
            raise InputError(f"synthetic spec item {item!r} is not key=value; write e.g. {name},seed=3")
        if key not in types:
            raise InputError(f"unknown synthetic parameter {key!r}; valid ones are {', '.join(types)}")
        if key in overrides:
            raise InputError(f"synthetic parameter {key!r} is given twice; keep one")
        overrides[key] = _convert(key, text, types[key])
    config = dataclasses.replace(PRESETS[name], **overrides)
    config.validate()
    return config


def _convert(key: str, text: str, kind: type) -> typing.Any:
    try:
        if kind is int:
            try:
                return int(text)
            except ValueError:
                number = float(text)  # accept "1e6" when it is a whole number
                if not number.is_integer():
                    raise
                return int(number)
        if kind is float:
            return float(text)
        return text
    except (ValueError, OverflowError):
        expected = "an integer" if kind is int else "a number"
        raise InputError(f"synthetic parameter {key} must be {expected}, got {text!r}") from None


def synthetic_dataset(spec: str) -> Dataset:
    """Generate the dataset described by ``spec`` (see :func:`parse_spec`).

    The result is validated; its ``source`` is ``"synthetic:<spec>"`` and its ``extra_meta``
    holds the full configuration under ``"synthetic"``.
    """
    dataset = generate(parse_spec(spec)).dataset
    dataset.source = f"synthetic:{spec}"
    return dataset


@dataclass(frozen=True)
class _Model:
    """What every draw of a config reads: the block structure and the node weights.

    Attributes:
        starts: int64 ``[C + 1]`` community c owns the internal ids ``[starts[c], starts[c+1])``.
        comm_internal: int64 ``[N]`` community of every internal id.
        cum: float64 ``[N]`` cumulative node weights (internal order).
        to_external: int64 ``[N]`` the shuffled id of every internal id.
        edge_key: the key of the counter-based edge draws.
        seeds: the seed sequences of labels, features, splits and multi-label targets.
    """

    starts: np.ndarray
    comm_internal: np.ndarray
    cum: np.ndarray
    to_external: np.ndarray
    edge_key: np.uint64
    seeds: tuple[np.random.SeedSequence, ...]


def _model(config: SyntheticConfig) -> _Model:
    n = config.num_nodes
    # The eighth child only feeds multi-label targets: the first seven are those of spawn(7).
    seq_size, seq_weight, seq_perm, seq_edges, seq_label, seq_features, seq_split, seq_tasks = \
        np.random.SeedSequence(config.seed).spawn(8)
    sizes = _community_sizes(n, config.num_communities, config.community_size_spread,
                             np.random.default_rng(seq_size))
    starts = np.zeros(config.num_communities + 1, dtype=np.int64)
    np.cumsum(sizes, out=starts[1:])
    comm_internal = np.repeat(np.arange(config.num_communities, dtype=np.int64), sizes)
    weights = _node_weights(n, config.degree_exponent, config.max_degree / config.avg_degree,
                            np.random.default_rng(seq_weight))
    to_external = np.random.default_rng(seq_perm).permutation(n).astype(np.int64)
    return _Model(starts, comm_internal, np.cumsum(weights), to_external,
                  seq_edges.generate_state(1, np.uint64)[0], (seq_label, seq_features, seq_split, seq_tasks))


def _draw_edges(model: _Model, config: SyntheticConfig, first: int, count: int) -> np.ndarray:
    """int64 ``[2, count]`` the edge draws ``first, ..., first + count - 1`` (external ids)."""
    edges = np.empty((2, count), dtype=np.int64)
    _sample_edges(model.cum, model.starts, model.comm_internal, model.to_external, config.intra_fraction,
                  model.edge_key, first, edges)
    return edges


def _in_rounds(config: SyntheticConfig, build: typing.Callable[[int], int]) -> None:
    """Call ``build(num_draws)`` (it builds the graph of the first ``num_draws`` draws and
    returns its nnz) until nnz / N is within 1% of ``avg_degree``: duplicate draws (mostly
    between hubs) are merged, so later rounds draw more. Edge e is the same in every round."""
    target = config.num_nodes * config.avg_degree
    num_draws = int(round(target / 2))
    for _ in range(_MAX_ROUNDS):
        nnz = build(num_draws)
        if nnz >= (1 - _DEGREE_TOLERANCE) * target or nnz == 0:
            return
        num_draws = int(round(num_draws * target / nnz))


def _node_arrays(model: _Model, config: SyntheticConfig) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """``community`` int64 ``[N]`` (external ids), class ids int64 ``[N]`` and the three splits."""
    seq_label, _, seq_split, _ = model.seeds
    community = np.empty(config.num_nodes, dtype=np.int64)
    community[model.to_external] = model.comm_internal
    y = _labels(community, config, np.random.default_rng(seq_label))
    return community, y, _splits(config.num_nodes, config, np.random.default_rng(seq_split))


def generate(config: SyntheticConfig) -> SyntheticGraph:
    """Generate a graph from a config (deterministic for ``config.seed``), in memory."""
    config.validate()
    _check_memory(config)
    n = config.num_nodes
    model = _model(config)
    graph: list[np.ndarray] = []

    def build(num_draws: int) -> int:
        graph[:] = build_csr(_draw_edges(model, config, 0, num_draws), n)
        return graph[1].shape[0]

    _in_rounds(config, build)
    rowptr, col = graph
    community, y, (train_idx, valid_idx, test_idx) = _node_arrays(model, config)
    x = np.empty((n, config.num_features), dtype=config.feature_dtype)
    for start, rows in _feature_chunks(y, config, model.seeds[1]):
        x[start:start + rows.shape[0]] = rows
    if config.num_tasks:
        y = _targets(y, config, np.random.default_rng(model.seeds[3]))
    dataset = Dataset(rowptr=rowptr, col=col, x=x, y=y, train_idx=train_idx, valid_idx=valid_idx,
                      test_idx=test_idx, source="synthetic",
                      extra_meta={"synthetic": dataclasses.asdict(config)})
    dataset.validate()
    return SyntheticGraph(dataset=dataset, community=community)


def write_synthetic(spec: str, out_dir: str | os.PathLike, bucket_keys: int = _BUCKET_KEYS) -> Dataset:
    """Generate the dataset of ``spec`` straight into the dataset directory ``out_dir``, out of
    core: the arrays equal :func:`synthetic_dataset`'s, but the edges pass through bucket files
    (by source id range) on disk, each sorted and deduplicated alone, and the features are
    written in chunks. Memory: about 128 bytes per node, one batch of draws and one bucket of
    ``bucket_keys`` directed edges; disk: 8 bytes per directed edge of temporaries. Written
    atomically; returns the written dataset, memory-mapped."""
    config = parse_spec(spec)
    n = config.num_nodes
    need, have = _OUT_OF_CORE_BYTES_PER_NODE * n, _available_memory()
    if need > have:
        raise InputError(f"this synthetic graph needs about {need / 2**30:.1f} GiB of memory even out of core "
                         f"({_OUT_OF_CORE_BYTES_PER_NODE} bytes per node) but {have / 2**30:.1f} GiB is available; "
                         "lower num_nodes")
    model = _model(config)
    with atomic_output_dir(out_dir) as tmp:
        files: dict[str, typing.Any] = {}
        _in_rounds(config, lambda num_draws: _csr_files(model, config, num_draws, tmp, bucket_keys, files))
        _, y, splits = _node_arrays(model, config)
        x = NpyWriter(tmp / "x.npy", config.feature_dtype, (n, config.num_features))
        for start, rows in _feature_chunks(y, config, model.seeds[1]):
            x.write(start, rows)
        files["x"] = x.close()
        if config.num_tasks:
            y = _targets(y, config, np.random.default_rng(model.seeds[3]))
        files["y"] = save_array(tmp, "y", y)
        files.update({name: save_array(tmp, name, ids) for name, ids in zip(SPLIT_FILES, splits)})
        mapped = {name: np.load(tmp / f"{name}.npy", mmap_mode="r") for name in ("rowptr", "col", "x")}
        dataset = Dataset(**mapped, y=y, **dict(zip(SPLIT_FILES, splits)), source=f"synthetic:{spec}",
                          extra_meta={"synthetic": dataclasses.asdict(config)})
        dataset.validate()
        write_meta(tmp, dataset_meta(dataset, files))
        del dataset, mapped
    return load_dataset(out_dir, verify=False, validate=False)


def _csr_files(model: _Model, config: SyntheticConfig, num_draws: int, directory, bucket_keys: int,
               files: dict[str, typing.Any]) -> int:
    """Write ``rowptr.npy`` and ``col.npy`` of the first ``num_draws`` draws under ``directory``
    (as :func:`build_csr` builds them: both directions, no self loops, sorted rows without
    duplicates) through bucket files of at most about ``bucket_keys`` edges; record their
    meta.json entries in ``files`` and return the nnz."""
    n = config.num_nodes
    num_buckets = max(1, -(-2 * num_draws // bucket_keys))
    rows_per_bucket = -(-n // num_buckets)
    paths = [directory / f".edges-{b}.bin" for b in range(num_buckets)]
    outs = [open(path, "wb") for path in paths]
    try:
        for first in range(0, num_draws, _DRAW_BATCH):
            src, dst = _draw_edges(model, config, first, min(_DRAW_BATCH, num_draws - first))
            keep = src != dst
            src, dst = src[keep], dst[keep]
            rows = np.concatenate([src, dst])
            keys = np.concatenate([src * n + dst, dst * n + src])
            del src, dst, keep
            bucket = rows // rows_per_bucket
            del rows
            order = np.argsort(bucket, kind="stable")
            counts = np.bincount(bucket, minlength=num_buckets)
            keys = keys[order]
            del order, bucket
            for out, lo, hi in zip(outs, np.cumsum(counts) - counts, np.cumsum(counts)):
                keys[lo:hi].tofile(out)
    finally:
        for out in outs:
            out.close()
    degree = np.zeros(n, dtype=np.int64)
    col = NpyWriter(directory / "col.npy", np.int64, (None,))
    for b, path in enumerate(paths):
        keys = np.fromfile(path, dtype=np.int64)
        path.unlink()
        keys = sorted_unique(keys)
        lo = b * rows_per_bucket
        degree[lo:lo + rows_per_bucket] = np.bincount(keys // n - lo, minlength=min(rows_per_bucket, n - lo))
        col.append(keys % n)
    files["col"] = col.close()
    rowptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(degree, out=rowptr[1:])
    files["rowptr"] = save_array(directory, "rowptr", rowptr)
    return int(rowptr[-1])


def fits_in_memory(config: SyntheticConfig) -> bool:
    """Whether :func:`generate` can build ``config`` in the memory available now."""
    return _in_memory_bytes(config) <= _available_memory()


def _available_memory() -> int:
    from ..host import available_memory  # host loads torch, which the data package otherwise does not
    return available_memory()


def _in_memory_bytes(config: SyntheticConfig) -> int:
    n = config.num_nodes
    return int(_BYTES_PER_EDGE * n * config.avg_degree + _BYTES_PER_NODE * n
               + n * config.num_features * np.dtype(config.feature_dtype).itemsize)


def _check_memory(config: SyntheticConfig) -> None:
    """Refuse a config whose estimated peak memory exceeds this machine's physical memory."""
    need = _in_memory_bytes(config)
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have:
        raise InputError(f"this synthetic graph needs about {need / 2**30:.1f} GiB of memory but the machine has "
                         f"{have / 2**30:.1f} GiB; lower num_nodes, avg_degree or num_features")


def _community_sizes(n: int, k: int, spread: float, rng: np.random.Generator) -> np.ndarray:
    """int64 ``[k]`` sizes >= 1 summing to n, proportional to log-normal draws."""
    share = rng.lognormal(0.0, spread, size=k)
    return 1 + rng.multinomial(n - k, share / share.sum()).astype(np.int64)


def _node_weights(n: int, gamma: float, max_ratio: float, rng: np.random.Generator) -> np.ndarray:
    """float64 ``[n]`` Pareto(gamma) weights on [1, R] with max / mean = ``max_ratio``.

    The cap R is found by a fixed-point iteration on the sample's own mean, so that the largest
    possible expected degree is ``max_ratio`` times the average one.
    """
    u = rng.random(n)
    a = gamma - 1.0
    cap = max_ratio
    for _ in range(50):
        weights = (1.0 - u * (1.0 - cap ** -a)) ** (-1.0 / a)
        new_cap = max(max_ratio * weights.mean(), 1.0 + 1e-9)
        if abs(new_cap - cap) <= 1e-9 * cap:
            break
        cap = new_cap
    return weights


def _labels(community: np.ndarray, config: SyntheticConfig, rng: np.random.Generator) -> np.ndarray:
    """int64 ``[N]``: the community's class with probability ``label_purity``, else a random class."""
    k, c = config.num_classes, config.num_communities
    prob = (np.arange(1, k + 1, dtype=np.float64)) ** -config.class_skew
    community_class = rng.choice(k, size=c, p=prob / prob.sum())
    community_class[:min(k, c)] = rng.permutation(k)[:min(k, c)]  # every class owns a community if it can
    y = community_class[community].astype(np.int64)
    flip = rng.random(y.shape[0]) >= config.label_purity
    y[flip] = rng.integers(0, k, size=int(flip.sum()))
    return y


def _targets(y: np.ndarray, config: SyntheticConfig, rng: np.random.Generator) -> np.ndarray:
    """Multi-label targets from the class ids ``y`` (int64 ``[N]``): bool ``[N, T]``, or float32
    with NaN for unknown targets when ``config.unknown_fraction > 0`` (see the module docstring)."""
    n, k, t = y.shape[0], config.num_classes, config.num_tasks
    pattern = rng.random((k, t)) < 0.5
    constant = pattern.all(axis=0) | ~pattern.any(axis=0)   # a task every class agrees on teaches nothing
    pattern[rng.integers(0, k, size=t)[constant], np.flatnonzero(constant)] ^= True
    targets = pattern[y]
    noisy = rng.random((n, t)) >= config.label_purity
    targets[noisy] = rng.random(int(noisy.sum())) < 0.5
    if config.unknown_fraction == 0:
        return targets
    out = targets.astype(np.float32)
    unknown = rng.random((n, t)) < config.unknown_fraction
    unknown[np.arange(n), rng.integers(0, t, size=n)] = False   # every node keeps a known target
    out[unknown] = np.nan
    return out


def _feature_chunks(y: np.ndarray, config: SyntheticConfig, seq: np.random.SeedSequence
                    ) -> typing.Iterator[tuple[int, np.ndarray]]:
    """``(first row, rows)``: the ``[N, F]`` features, class centroid (N(0, 1/F) coordinates)
    plus N(0, feature_noise^2) noise, in fixed-size row chunks, each from its own child seed.

    Centroids have norm ~1 whatever F, so the separation of classes depends on
    ``feature_noise`` and the number of classes, not on F.
    """
    n, f = y.shape[0], config.num_features
    starts = range(0, n, _FEATURE_CHUNK)
    seq_centroids, *seq_chunks = seq.spawn(1 + len(starts))
    centroids = np.random.default_rng(seq_centroids).standard_normal((config.num_classes, f), dtype=np.float32)
    centroids /= np.float32(math.sqrt(f))
    for start, seq_chunk in zip(starts, seq_chunks):
        stop = min(start + _FEATURE_CHUNK, n)
        noise = np.random.default_rng(seq_chunk).standard_normal((stop - start, f), dtype=np.float32)
        noise *= np.float32(config.feature_noise)
        noise += centroids[y[start:stop]]
        yield start, noise.astype(config.feature_dtype, copy=False)


def _splits(n: int, config: SyntheticConfig, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Sorted, disjoint int64 train/valid/test ids of the requested fractions."""
    order = rng.permutation(n).astype(np.int64)
    n_train = config.num_train
    n_valid = round(config.valid_fraction * n)
    n_test = min(round(config.test_fraction * n), n - n_train - n_valid)
    bounds = np.cumsum([0, n_train, n_valid, n_test])
    return tuple(np.sort(order[bounds[i]:bounds[i + 1]]) for i in range(3))


@numba.njit(inline="always")
def _uniform(key: np.uint64, counter: np.uint64) -> float:
    """Uniform [0, 1) from the splitmix64 finaliser of key + counter * golden ratio."""
    z = splitmix64(key + counter * GOLDEN)
    return np.float64(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@numba.njit(inline="always")
def _draw(cum: np.ndarray, lo: int, hi: int, u: float) -> int:
    """Index i in [lo, hi) drawn with probability proportional to cum[i] - cum[i - 1]."""
    base = cum[lo - 1] if lo > 0 else 0.0
    target = base + u * (cum[hi - 1] - base)
    while lo < hi - 1:  # smallest i with cum[i] > target, searched in [lo, hi - 1]
        mid = (lo + hi - 1) // 2
        if cum[mid] > target:
            hi = mid + 1
        else:
            lo = mid + 1
    return lo


@numba.njit(parallel=True, cache=True)
def _sample_edges(cum: np.ndarray, starts: np.ndarray, comm: np.ndarray, to_external: np.ndarray,
                  intra: float, key: np.uint64, first: int, out: np.ndarray) -> None:
    """Fill ``out`` (int64 ``[2, M]``) with the edges ``first, ..., first + M - 1`` of the
    degree-corrected block model.

    Edge e uses the three uniforms with counters 3e, 3e + 1, 3e + 2, so the result does not
    depend on how the loop is split across threads, nor on how the draws are split in batches.
    """
    n = cum.shape[0]
    for e in numba.prange(out.shape[1]):
        c = np.uint64(3) * np.uint64(first + e)
        u = _draw(cum, 0, n, _uniform(key, c))
        if _uniform(key, c + np.uint64(1)) < intra:
            k = comm[u]
            v = _draw(cum, starts[k], starts[k + 1], _uniform(key, c + np.uint64(2)))
        else:
            v = _draw(cum, 0, n, _uniform(key, c + np.uint64(2)))
        out[0, e] = to_external[u]
        out[1, e] = to_external[v]
