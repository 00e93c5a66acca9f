"""Synthetic graphs shaped like OGB's product and citation graphs, and like IGBH (typed).

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

**Typed graphs** (the ``igbh`` preset, :class:`IgbhConfig`) are the same model over several node
types and relations (:meth:`SyntheticConfig.layout`); a homogeneous preset is its one-type,
one-relation case and draws exactly what it drew before typed graphs existed. Every node type
has its own communities (the same ``num_communities``, log-normal sizes of its own) and Pareto
weights; an edge of a relation ``src -> dst`` picks its source among the ``src`` nodes by weight
and its destination among the ``dst`` nodes of the source's community (probability the
relation's intra fraction) or among all ``dst`` nodes. The target type (``paper``, type 0) has
the labels and splits as above; every type has features: the centroid of its community's class
(a width and centroids of its own) plus noise. A paper's class is thus its community's, which its
authors, fields of study and citations mostly share: the relations carry the signal that the
paper's own (noisy) features lack, and the paper-to-author and paper-to-topic relations carry
more of it than the citations do (lower intra fraction), as a model of IGBH should reward.

Node ids are shuffled at the end (within each type, whose ids stay one contiguous range), so they
carry no community information. Every random draw is a pure function of the seed and of the
draw's position, so the arrays do not depend on the number of threads.
"""
from __future__ import annotations

import dataclasses
import math
import os
import typing
from dataclasses import dataclass

import numba
import numpy as np

from ..errors import SEED_LIMIT, InputError, counted
from ..hashing import GOLDEN, splitmix64
from ..io import NpyWriter, atomic_output_dir, save_array, write_meta
from ..parsing import integer, real
from .csr import build_csr, build_typed_csr, keys_fit, sorted_unique
from .format import SPLIT_FILES, Dataset, dataset_meta, feature_file, load_dataset
from .options import ImportOptions
from .schema import GraphSchema, Relation

# Relative shortfall of nnz / N from avg_degree that is accepted, and rounds of draws to reach it.
_DEGREE_TOLERANCE = 0.01
_MAX_ROUNDS = 4
# Peak memory per directed edge (edge list, CSR build, result; ~40 B measured on `products`)
# and per node (weights, ids, labels, splits), for the memory check.
_BYTES_PER_EDGE = 48
_BYTES_PER_NODE = 96
# What write_synthetic keeps per node of every type (its docstring's "about 128 bytes per node").
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
class NodeTypeLayout:
    """One node type of a synthetic graph.

    Attributes:
        name: the type's name; num_nodes: its nodes; num_features: its feature width;
        feature_noise: the standard deviation of its features' noise.
    """

    name: str
    num_nodes: int
    num_features: int
    feature_noise: float


@dataclass(frozen=True)
class RelationLayout:
    """One relation of a synthetic graph, whose reverse the schema adds.

    Attributes:
        relation: ``(src, name, dst)``.
        entries: the CSR entries that the relation and its reverse should hold together (twice its
            distinct edges), met within 1% like ``avg_degree``.
        intra_fraction: probability that an edge's destination is drawn in its source's community.
    """

    relation: Relation
    entries: float
    intra_fraction: float


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

    def layout(self) -> tuple[tuple[NodeTypeLayout, ...], tuple[RelationLayout, ...]]:
        """The node types (the first is the target, of ``num_nodes`` nodes) and the relations
        to draw: here one type and one relation, ``avg_degree * num_nodes`` entries."""
        node = GraphSchema.homogeneous(self.num_nodes)
        return ((NodeTypeLayout(node.target, self.num_nodes, self.num_features, self.feature_noise),),
                (RelationLayout(node.relations[0], self.avg_degree * self.num_nodes, self.intra_fraction),))

    def schema(self) -> GraphSchema:
        """The graph's schema: :meth:`layout`'s types and relations with their reverses."""
        types, relations = self.layout()
        return GraphSchema.with_reverses([t.name for t in types], [t.num_nodes for t in types],
                                         [r.relation for r in relations], types[0].name)

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


@dataclass(frozen=True)
class IgbhConfig(SyntheticConfig):
    """A typed graph shaped like IGBH (the Illinois Graph Benchmark's heterogeneous graphs, the
    graph of MLPerf Training's R-GAT benchmark).

    Node types: ``paper`` (the target: ``num_nodes`` papers with ``num_features`` features, the
    labels and splits), ``author``, ``institute``, ``fos`` (field of study) and, with
    ``venues=1``, ``journal`` and ``conference``. Relations (each with its reverse ``rev_NAME``):
    ``paper-cites-paper`` (symmetric, ``avg_degree`` CSR entries per paper, ``intra_fraction``),
    ``paper-written_by-author``, ``author-affiliated_to-institute``, ``paper-topic-fos`` and, with
    venues, ``paper-published-journal`` and ``paper-venue-conference``, whose destinations follow
    the source's community with probability ``relation_intra``.

    The default ratios are IGBH-small's (1,000,000 papers, 1,926,066 authors, 14,751 institutes,
    190,449 fields of study, 15,277 journals, 1,215 conferences; 12,070,502 citations, 4,553,516
    paper-author, 7,234,122 paper-fos and 1,630,476 author-institute edges), as the node counts of
    MLPerf Training's GNN reference (``NODE_COUNTS``) and the edge counts of IGB's own processing
    tables give them; IGBH-full has about one author per paper (277,220,883 for 269,346,174
    papers), 14.8 citations, 2.7 authors and 3.9 fields per paper (3,996,442,004 citations,
    716,761,549 paper-author, 1,050,280,600 paper-fos edges), 26,918 institutes and 712,960
    fields. The venue edges are not in those tables: one venue link per paper of each kind is an
    assumption. Every type gets at least ``num_communities`` nodes (one per community).

    Attributes (besides :class:`SyntheticConfig`'s, which concern the papers and citations):
        author_ratio, institute_ratio, fos_ratio, journal_ratio, conference_ratio: nodes of each
            type per paper.
        authors_per_paper, topics_per_paper: written_by and topic edges per paper.
        affiliations_per_author: affiliated_to edges per author.
        venues: 1 adds the journal and conference types (IGBH's large and full sizes have them).
        venues_per_paper: published and venue edges per paper (each).
        author_features, institute_features, fos_features, venue_features: feature widths (0: the
            type has no features, as ogbn-mag's authors, institutions and fields).
        other_noise: the feature noise of the types other than paper.
        relation_intra: the intra fraction of every relation but the citations.
    """

    author_ratio: float = 1.926066
    institute_ratio: float = 0.014751
    fos_ratio: float = 0.190449
    journal_ratio: float = 0.015277
    conference_ratio: float = 0.001215
    authors_per_paper: float = 4.553516
    topics_per_paper: float = 7.234122
    affiliations_per_author: float = 0.846531
    venues: int = 0
    venues_per_paper: float = 1.0
    author_features: int = 32
    institute_features: int = 16
    fos_features: int = 16
    venue_features: int = 16
    other_noise: float = 0.5
    relation_intra: float = 0.9

    def _types(self) -> list[tuple[str, float, int]]:
        """(name, nodes per paper, feature width) of every type but paper."""
        types = [("author", self.author_ratio, self.author_features),
                 ("institute", self.institute_ratio, self.institute_features),
                 ("fos", self.fos_ratio, self.fos_features)]
        if self.venues:
            types += [("journal", self.journal_ratio, self.venue_features),
                      ("conference", self.conference_ratio, self.venue_features)]
        return types

    def layout(self) -> tuple[tuple[NodeTypeLayout, ...], tuple[RelationLayout, ...]]:
        n = self.num_nodes
        types = [NodeTypeLayout("paper", n, self.num_features, self.feature_noise)]
        types += [NodeTypeLayout(name, max(self.num_communities, round(ratio * n)), width, self.other_noise)
                  for name, ratio, width in self._types()]
        count = {t.name: t.num_nodes for t in types}
        per_source = [("paper", "written_by", "author", self.authors_per_paper),
                      ("author", "affiliated_to", "institute", self.affiliations_per_author),
                      ("paper", "topic", "fos", self.topics_per_paper)]
        if self.venues:
            per_source += [("paper", "published", "journal", self.venues_per_paper),
                           ("paper", "venue", "conference", self.venues_per_paper)]
        relations = [RelationLayout(Relation("paper", "cites", "paper"), self.avg_degree * n, self.intra_fraction)]
        relations += [RelationLayout(Relation(src, name, dst), 2 * degree * count[src], self.relation_intra)
                      for src, name, dst, degree in per_source]
        return tuple(types), tuple(relations)

    def validate(self) -> None:
        super().validate()
        for name in ("author_features", "institute_features", "fos_features", "venue_features"):
            if not 0 <= getattr(self, name) <= MAX_COUNT:
                raise InputError(f"invalid synthetic graph: {name} must lie in [0, 2^40] (0: no features), got "
                                 f"{getattr(self, name)}")
        checks = [
            (self.venues in (0, 1), "venues must be 0 (no journal and conference types) or 1"),
            (self.other_noise >= 0, "other_noise must be >= 0"),
            (0 <= self.relation_intra <= 1, "relation_intra must lie in [0, 1]"),
            (all(getattr(self, f"{name}_ratio") > 0 for name in ("author", "institute", "fos", "journal", "conference")),
             "every *_ratio (nodes of a type per paper) must be positive"),
        ]
        for ok, message in checks:
            if not ok:
                raise InputError(f"invalid synthetic graph: {message}")
        types, relations = self.layout()
        count = {t.name: t.num_nodes for t in types}
        for layout in relations[1:]:
            r = layout.relation
            per_source = layout.entries / 2 / count[r.src]
            if not 0 < per_source < count[r.dst]:
                raise InputError(f"invalid synthetic graph: the {r.name} edges per {r.src} ({per_source:g}) must lie "
                                 f"in (0, {count[r.dst]}), the {r.dst} nodes; change the degree or the ratio")


PRESETS: dict[str, SyntheticConfig] = {
    "tiny": SyntheticConfig(),
    "small": SyntheticConfig(num_nodes=100_000, avg_degree=20.0, num_features=100, num_classes=20,
                             num_communities=100, max_degree=2000, feature_noise=0.42),
    "products": SyntheticConfig(num_nodes=2_400_000, avg_degree=50.0, num_features=100, num_classes=47,
                                num_communities=400, max_degree=5000, feature_noise=0.32),
    # Papers as IGBH has them (about 24 CSR entries per paper from 12 citations each), noisy paper
    # features and citations that stay in their community less than authors and topics do.
    "igbh": IgbhConfig(num_nodes=4000, avg_degree=24.0, num_features=32, num_classes=8, num_communities=16,
                       max_degree=400, intra_fraction=0.5, feature_noise=1.0),
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


def parse_spec(spec: str, options: ImportOptions | None = None) -> SyntheticConfig:
    """Parse ``"PRESET[,key=value...]"`` (e.g. ``"tiny,seed=3,num_nodes=5000"``) into a config, with
    ``prepare``'s ``--feature-dtype`` (``options.feature_dtype``, when not at its default) applied:
    the one place where a spec and the options become the config that is generated and recorded.

    Numbers are read as command-line options read them (:func:`~salientpp.parsing.integer`,
    :func:`~salientpp.parsing.real`; an integer may be written ``3e3``). Raises :class:`InputError`
    on an unknown preset or key, a malformed item, a bad value, or a spec's ``feature_dtype`` that
    ``--feature-dtype`` contradicts.
    """
    name, *items = [part.strip() for part in spec.split(",")]
    if name not in PRESETS:
        raise InputError(f"unknown synthetic preset {name!r}; choose one of {', '.join(PRESETS)}")
    types = typing.get_type_hints(type(PRESETS[name]))
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
    dtype = ImportOptions.feature_dtype if options is None else options.feature_dtype
    if dtype != ImportOptions.feature_dtype:
        if overrides.setdefault("feature_dtype", dtype) != dtype:
            raise InputError(f"--feature-dtype {dtype} contradicts the spec's feature_dtype="
                             f"{overrides['feature_dtype']}; keep one of them")
    config = dataclasses.replace(PRESETS[name], **overrides)
    config.validate()
    return config


def _convert(key: str, text: str, kind: type) -> typing.Any:
    """``text`` as a value of the field ``key`` of type ``kind``, or :class:`InputError`."""
    try:
        if kind is int:
            try:
                return integer(text)
            except ValueError:
                number = real(text)  # accept "1e6" when it is a whole number
                if not number.is_integer():
                    raise
                return int(number)
        if kind is float:
            return real(text)
        return text
    except (ValueError, OverflowError):
        expected = "an integer" if kind is int else "a number"
        raise InputError(f"synthetic parameter {key} must be {expected} in ASCII digits (like {key}=3 or "
                         f"{key}=3e3), got {text!r}") from None


def synthetic_dataset(spec: str, options: ImportOptions | None = None) -> Dataset:
    """Generate the dataset described by ``spec`` and ``options`` (see :func:`parse_spec`).

    The result is validated; its ``source`` is ``"synthetic:<spec>"`` and its ``extra_meta``
    holds the full configuration under ``"synthetic"``.
    """
    dataset = generate(parse_spec(spec, options)).dataset
    dataset.source = f"synthetic:{spec}"
    return dataset


@dataclass(frozen=True)
class _Model:
    """What every draw of a config reads: the block structure and the node weights of every node
    type (tuples indexed by type, in :meth:`SyntheticConfig.layout`'s order), and the relations.

    Attributes:
        types, relations: :meth:`SyntheticConfig.layout`.
        schema: the graph's schema (:meth:`SyntheticConfig.schema`).
        starts: per type, int64 ``[C + 1]``: community c owns the internal ids ``[starts[c], starts[c+1])``.
        comm_internal: per type, int64 ``[n_t]`` community of every internal id.
        cum: per type, float64 ``[n_t]`` cumulative node weights (internal order).
        to_external: per type, int64 ``[n_t]`` the shuffled global id of every internal id.
        edge_keys: per relation of ``relations``, the key of its counter-based edge draws.
        seeds: the seed sequences of labels, features, splits and multi-label targets.
        feature_seeds: per type after the first, the seed sequence of its features.
    """

    types: tuple[NodeTypeLayout, ...]
    relations: tuple[RelationLayout, ...]
    schema: GraphSchema
    starts: tuple[np.ndarray, ...]
    comm_internal: tuple[np.ndarray, ...]
    cum: tuple[np.ndarray, ...]
    to_external: tuple[np.ndarray, ...]
    edge_keys: tuple[np.uint64, ...]
    seeds: tuple[np.random.SeedSequence, ...]
    feature_seeds: tuple[np.random.SeedSequence, ...]

    @property
    def num_nodes(self) -> int:
        """N, every type together."""
        return self.schema.total_nodes


def _model(config: SyntheticConfig) -> _Model:
    types, relations = config.layout()
    schema = config.schema()
    # The first type and relation read the eight children of a homogeneous graph (the eighth only
    # feeds multi-label targets: the first seven are those of spawn(7)); every further type reads
    # four more (sizes, weights, permutation, features) and every further relation one more.
    children = np.random.SeedSequence(config.seed).spawn(8 + 4 * (len(types) - 1) + len(relations) - 1)
    seq_size, seq_weight, seq_perm, seq_edges, seq_label, seq_features, seq_split, seq_tasks = children[:8]
    per_type = [(seq_size, seq_weight, seq_perm)] + [tuple(children[8 + 4 * i:11 + 4 * i]) for i in range(len(types) - 1)]
    feature_seeds = tuple(children[11 + 4 * i] for i in range(len(types) - 1))
    edge_seeds = [seq_edges] + children[8 + 4 * (len(types) - 1):]
    starts, comm_internal, cum, to_external = [], [], [], []
    for layout, offset, (size, weight, perm) in zip(types, schema.offsets, per_type):
        n = layout.num_nodes
        sizes = _community_sizes(n, config.num_communities, config.community_size_spread, np.random.default_rng(size))
        starts.append(np.zeros(config.num_communities + 1, dtype=np.int64))
        np.cumsum(sizes, out=starts[-1][1:])
        comm_internal.append(np.repeat(np.arange(config.num_communities, dtype=np.int64), sizes))
        cum.append(np.cumsum(_node_weights(n, config.degree_exponent, config.max_degree / config.avg_degree,
                                           np.random.default_rng(weight))))
        to_external.append(np.random.default_rng(perm).permutation(n).astype(np.int64) + offset)
    return _Model(types, relations, schema, tuple(starts), tuple(comm_internal), tuple(cum), tuple(to_external),
                  tuple(seq.generate_state(1, np.uint64)[0] for seq in edge_seeds),
                  (seq_label, seq_features, seq_split, seq_tasks), feature_seeds)


def _draw_edges(model: _Model, relation: int, first: int, count: int) -> np.ndarray:
    """int64 ``[2, count]`` the draws ``first, ..., first + count - 1`` of ``model.relations[relation]``
    (global ids: row 0 the sources, row 1 the destinations)."""
    layout = model.relations[relation]
    src, dst = (model.schema.type_index(t) for t in (layout.relation.src, layout.relation.dst))
    edges = np.empty((2, count), dtype=np.int64)
    _sample_edges(model.cum[src], model.starts[src], model.comm_internal[src], model.to_external[src],
                  model.cum[dst], model.starts[dst], model.to_external[dst], layout.intra_fraction,
                  model.edge_keys[relation], first, edges)
    return edges


def _in_rounds(model: _Model, build: typing.Callable[[list[int]], list[int]]) -> None:
    """Call ``build(num_draws)`` (it builds the graph of the first ``num_draws[r]`` draws of every
    relation r and returns the CSR entries of each, its reverse's included) until every relation's
    entries are within 1% of its target (:attr:`RelationLayout.entries`; for a homogeneous graph
    ``avg_degree * N``): duplicate draws (mostly between hubs) are merged, so later rounds draw more
    of a relation that falls short. Edge e of a relation is the same in every round."""
    targets = [layout.entries for layout in model.relations]
    num_draws = [int(round(target / 2)) for target in targets]
    for _ in range(_MAX_ROUNDS):
        nnz = build(num_draws)
        short = [0 < got < (1 - _DEGREE_TOLERANCE) * target for got, target in zip(nnz, targets)]
        if not any(short):
            return
        num_draws = [int(round(draws * target / got)) if low else draws
                     for draws, target, got, low in zip(num_draws, targets, nnz, short)]


def _relation_entries(model: _Model, counts: np.ndarray) -> list[int]:
    """The CSR entries of every relation of ``model.relations`` and its reverse, from ``counts``,
    the entries of every relation of the schema (int ``[R]``)."""
    schema = model.schema
    entries = []
    for layout in model.relations:
        r = schema.relation_index(layout.relation)
        entries.append(int(counts[r]) + (int(counts[schema.reverse[r]]) if schema.reverse[r] != r else 0))
    return entries


def _node_arrays(model: _Model, config: SyntheticConfig
                 ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...], np.ndarray]:
    """``community`` int64 ``[N]`` (global ids, every type), the target type's class ids int64
    ``[n_0]``, its three splits, and the class of every community (int64 ``[C]``)."""
    seq_label, _, seq_split, _ = model.seeds
    community = np.empty(model.num_nodes, dtype=np.int64)
    for to_external, comm in zip(model.to_external, model.comm_internal):
        community[to_external] = comm
    n = config.num_nodes
    rng = np.random.default_rng(seq_label)
    community_class = _community_classes(config, rng)
    y = _labels(community[:n], community_class, config, rng)
    return community, y, _splits(n, config, np.random.default_rng(seq_split)), community_class


def _features(model: _Model, config: SyntheticConfig, y: np.ndarray, community: np.ndarray, community_class: np.ndarray
              ) -> typing.Iterator[tuple[NodeTypeLayout, typing.Iterator[tuple[int, np.ndarray]]]]:
    """``(type, row chunks)`` of the features of every type, the target first (see
    :func:`_feature_chunks`): the centroid of the class ``y`` (int64 ``[n_0]``) of each target
    node, and of each other node's community's class, plus noise."""
    target = model.types[0]
    yield target, _feature_chunks(y, target.num_features, target.feature_noise, config, model.seeds[1])
    offsets = model.schema.offsets
    for t, (layout, seq) in enumerate(zip(model.types[1:], model.feature_seeds), start=1):
        if not layout.num_features:  # a type without features (as ogbn-mag's authors)
            continue
        classes = community_class[community[offsets[t]:offsets[t + 1]]]
        yield layout, _feature_chunks(classes, layout.num_features, layout.feature_noise, config, seq)


def generate(config: SyntheticConfig) -> SyntheticGraph:
    """Generate a graph from a config (deterministic for ``config.seed``), in memory.

    A typed config (:class:`IgbhConfig`) gives a typed dataset: ``schema``, ``edge_rel``, ``x``
    the papers' features (the target type, ids ``0..num_nodes-1``) and ``features`` the other types'.
    """
    config.validate()
    _check_memory(config)
    model = _model(config)
    n = model.num_nodes
    graph: list[np.ndarray | None] = []

    def build(num_draws: list[int]) -> list[int]:
        edges = [_draw_edges(model, r, 0, draws) for r, draws in enumerate(num_draws)]
        if model.schema.is_homogeneous:
            graph[:] = [*build_csr(edges[0], n), None]
            return [graph[1].shape[0]]
        by_schema = [np.empty((2, 0), dtype=np.int64)] * model.schema.num_relations
        for layout, relation_edges in zip(model.relations, edges):
            by_schema[model.schema.relation_index(layout.relation)] = relation_edges
        graph[:] = build_typed_csr(by_schema, model.schema.reverse, n)
        return _relation_entries(model, np.bincount(graph[2], minlength=model.schema.num_relations))

    _in_rounds(model, build)
    rowptr, col, edge_rel = graph
    community, y, (train_idx, valid_idx, test_idx), community_class = _node_arrays(model, config)
    features = {}
    for layout, chunks in _features(model, config, y, community, community_class):
        features[layout.name] = np.empty((layout.num_nodes, layout.num_features), dtype=config.feature_dtype)
        for start, rows in chunks:
            features[layout.name][start:start + rows.shape[0]] = rows
    x = features.pop(model.schema.target)
    if config.num_tasks:
        y = _targets(y, config, np.random.default_rng(model.seeds[3]))
    typed = not model.schema.is_homogeneous
    dataset = Dataset(rowptr=rowptr, col=col, x=x, y=y, train_idx=train_idx, valid_idx=valid_idx,
                      test_idx=test_idx, source="synthetic", extra_meta={"synthetic": dataclasses.asdict(config)},
                      schema=model.schema if typed else None, edge_rel=edge_rel, features=features)
    dataset.validate()
    return SyntheticGraph(dataset=dataset, community=community)


def write_synthetic(spec: str, out_dir: str | os.PathLike, bucket_keys: int = _BUCKET_KEYS,
                    options: ImportOptions | None = None) -> Dataset:
    """Generate the dataset of ``spec`` and ``options`` (:func:`parse_spec`) straight into the dataset directory ``out_dir``, out of
    core: the arrays and meta.json equal those :func:`synthetic_dataset` and
    :func:`~salientpp.data.format.save_dataset` write, but the edges pass through bucket files (by
    source id range) on disk, each sorted and deduplicated alone, and the features of every type
    (a typed preset's ``x_T.npy`` too, named by :func:`~salientpp.data.format.feature_file`) are
    written in chunks. Memory: about 128 bytes per node of every type, one batch of draws, one
    bucket of ``bucket_keys`` directed edges and one chunk of features; disk: 8 bytes per directed
    edge of temporaries. Written atomically; returns the written dataset, memory-mapped. A graph
    that does not fit even so is refused in one sentence (:func:`_check_out_of_core`)."""
    config = parse_spec(spec, options)
    _check_out_of_core(config)
    model = _model(config)
    schema = model.schema
    with atomic_output_dir(out_dir) as tmp:
        files: dict[str, typing.Any] = {}
        _in_rounds(model, lambda num_draws: _csr_files(model, num_draws, tmp, bucket_keys, files))
        community, y, splits, community_class = _node_arrays(model, config)
        for layout, chunks in _features(model, config, y, community, community_class):
            name = feature_file(schema, layout.name)
            writer = NpyWriter(tmp / f"{name}.npy", config.feature_dtype, (layout.num_nodes, layout.num_features))
            for start, rows in chunks:
                writer.write(start, rows)
            files[name] = writer.close()
        del community
        if config.num_tasks:
            y = _targets(y, config, np.random.default_rng(model.seeds[3]))
        files["y"] = save_array(tmp, "y", y)
        files.update({name: save_array(tmp, name, ids) for name, ids in zip(SPLIT_FILES, splits)})

        def mapped(name: str) -> np.ndarray:
            return np.load(tmp / f"{name}.npy", mmap_mode="r")

        typed = not schema.is_homogeneous
        dataset = Dataset(rowptr=mapped("rowptr"), col=mapped("col"), x=mapped("x"), y=y,
                          **dict(zip(SPLIT_FILES, splits)), source=f"synthetic:{spec}",
                          extra_meta={"synthetic": dataclasses.asdict(config)}, schema=schema if typed else None,
                          edge_rel=mapped("edge_rel") if typed else None,
                          features={t.name: mapped(feature_file(schema, t.name)) for t in model.types[1:]
                                    if t.num_features})
        dataset.validate()
        write_meta(tmp, dataset_meta(dataset, files))
        del dataset
    return load_dataset(out_dir, verify=False, validate=False)


def _csr_files(model: _Model, num_draws: list[int], directory, bucket_keys: int,
               files: dict[str, typing.Any]) -> list[int]:
    """Write ``rowptr.npy``, ``col.npy`` and, for a typed graph, ``edge_rel.npy`` of the first
    ``num_draws[r]`` draws of every relation r under ``directory`` (as :func:`build_csr` and
    :func:`build_typed_csr` build them: both directions, no self loops, rows grouped by relation and
    sorted without duplicates) through bucket files of at most about ``bucket_keys`` entries;
    record their meta.json entries in ``files`` and return the entries of every relation
    (:func:`_in_rounds`). A key is ``(row * R + relation) * N + col``, so the rows of one bucket
    sort into CSR order; with one relation it is ``row * N + col``."""
    n, schema = model.num_nodes, model.schema
    num_relations = schema.num_relations
    num_buckets = max(1, -(-2 * sum(num_draws) // bucket_keys))
    rows_per_bucket = -(-n // num_buckets)
    paths = [directory / f".edges-{b}.bin" for b in range(num_buckets)]
    outs = [open(path, "wb") for path in paths]
    try:
        for layout, count in zip(model.relations, num_draws):
            r = schema.relation_index(layout.relation)
            back = schema.reverse[r]
            for first in range(0, count, _DRAW_BATCH):
                src, dst = _draw_edges(model, model.relations.index(layout), first, min(_DRAW_BATCH, count - first))
                keep = src != dst
                src, dst = src[keep], dst[keep]
                rows = np.concatenate([src, dst])
                keys = np.concatenate([(src * num_relations + back) * n + dst, (dst * num_relations + r) * n + src])
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
    per_relation = np.zeros(num_relations, dtype=np.int64)
    col = NpyWriter(directory / "col.npy", np.int64, (None,))
    edge_rel = None if schema.is_homogeneous else NpyWriter(directory / "edge_rel.npy", np.int8, (None,))
    for b, path in enumerate(paths):
        keys = np.fromfile(path, dtype=np.int64)
        path.unlink()
        keys = sorted_unique(keys)
        row_rel = keys // n
        lo = b * rows_per_bucket
        degree[lo:lo + rows_per_bucket] = np.bincount(row_rel // num_relations - lo,
                                                      minlength=min(rows_per_bucket, n - lo))
        col.append(keys % n)
        if edge_rel is not None:
            relation = (row_rel % num_relations).astype(np.int8)
            per_relation += np.bincount(relation, minlength=num_relations)
            edge_rel.append(relation)
    files["col"] = col.close()
    if edge_rel is not None:
        files["edge_rel"] = edge_rel.close()
    rowptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(degree, out=rowptr[1:])
    files["rowptr"] = save_array(directory, "rowptr", rowptr)
    return [int(rowptr[-1])] if schema.is_homogeneous else _relation_entries(model, per_relation)


def fits_in_memory(config: SyntheticConfig) -> bool:
    """Whether :func:`generate` can build ``config`` in the memory available now."""
    return _in_memory_bytes(config) <= _available_memory()


def _available_memory() -> int:
    from ..host import available_memory  # host loads torch, which the data package otherwise does not
    return available_memory()


def _in_memory_bytes(config: SyntheticConfig) -> int:
    """The peak memory of :func:`generate`: per directed edge, per node of every type, the
    features of every type, and a typed graph's ``edge_rel`` (int8, one byte per directed edge)."""
    types, relations = config.layout()
    itemsize = np.dtype(config.feature_dtype).itemsize
    edge_bytes = _BYTES_PER_EDGE + (0 if config.schema().is_homogeneous else np.dtype(np.int8).itemsize)
    return int(edge_bytes * sum(r.entries for r in relations) + sum(_BYTES_PER_NODE * t.num_nodes
               + t.num_nodes * t.num_features * itemsize for t in types))


def _feature_chunk_bytes(config: SyntheticConfig) -> int:
    """The memory of the widest type's features as :func:`_feature_chunks` makes them: one chunk of
    float32 noise and its ``feature_dtype`` copy, and the float32 class centroids."""
    types, _ = config.layout()
    itemsize = 4 + np.dtype(config.feature_dtype).itemsize
    return max(min(t.num_nodes, _FEATURE_CHUNK) * t.num_features * itemsize + config.num_classes * t.num_features * 4
               for t in types)


def _check_out_of_core(config: SyntheticConfig) -> None:
    """Refuse, in one sentence, a config that :func:`write_synthetic` cannot write: one needing more
    than the available memory at ``_OUT_OF_CORE_BYTES_PER_NODE`` per node of every type plus one
    chunk of the widest features (:func:`_feature_chunk_bytes`; the edges, ``edge_rel`` and the
    features written stay on disk), or whose CSR sort keys would not fit in int64
    (:func:`~salientpp.data.csr.keys_fit`)."""
    schema = config.schema()
    n = schema.total_nodes
    every_type = "" if schema.is_homogeneous else f" of every type, {n:,} in all"
    chunk = _feature_chunk_bytes(config)
    need, have = _OUT_OF_CORE_BYTES_PER_NODE * n + chunk, _available_memory()
    if need > have:
        raise InputError(f"this synthetic graph needs about {need / 2**30:.1f} GiB of memory even out of core "
                         f"({_OUT_OF_CORE_BYTES_PER_NODE} bytes per node{every_type}, and {chunk / 2**30:.1f} GiB "
                         f"for a chunk of features) but {have / 2**30:.1f} GiB is available; lower num_nodes or the "
                         "feature widths (num_features, *_features)")
    if not keys_fit(n, schema.num_relations):
        raise InputError(f"this synthetic graph's {n:,} nodes and {counted(schema.num_relations, 'relation')} are "
                         "too many for the int64 sort keys of its CSR (nodes^2 x relations must stay below 2^63); "
                         "lower num_nodes")


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


def _community_classes(config: SyntheticConfig, rng: np.random.Generator) -> np.ndarray:
    """int64 ``[C]``: the class of every community, drawn with probability ~ (k + 1)^-class_skew,
    every class owning a community when there are enough."""
    k, c = config.num_classes, config.num_communities
    prob = (np.arange(1, k + 1, dtype=np.float64)) ** -config.class_skew
    community_class = rng.choice(k, size=c, p=prob / prob.sum())
    community_class[:min(k, c)] = rng.permutation(k)[:min(k, c)]  # every class owns a community if it can
    return community_class


def _labels(community: np.ndarray, community_class: np.ndarray, config: SyntheticConfig,
            rng: np.random.Generator) -> np.ndarray:
    """int64 ``[n]``: the class of each node's community (``community``, int64 ``[n]``) with
    probability ``label_purity``, else a random class; ``rng`` goes on from :func:`_community_classes`."""
    k = config.num_classes
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


def _feature_chunks(y: np.ndarray, f: int, noise_std: float, config: SyntheticConfig, seq: np.random.SeedSequence
                    ) -> typing.Iterator[tuple[int, np.ndarray]]:
    """``(first row, rows)``: the ``[n, f]`` features of nodes of the classes ``y`` (int64 ``[n]``),
    class centroid (N(0, 1/f) coordinates, ``config.num_classes`` of them) plus N(0, noise_std^2)
    noise, of ``config.feature_dtype``, in fixed-size row chunks, each from its own child seed.

    Centroids have norm ~1 whatever f, so the separation of classes depends on ``noise_std`` and the
    number of classes, not on f.
    """
    n = y.shape[0]
    starts = range(0, n, _FEATURE_CHUNK)
    seq_centroids, *seq_chunks = seq.spawn(1 + len(starts))
    centroids = np.random.default_rng(seq_centroids).standard_normal((config.num_classes, f), dtype=np.float32)
    centroids /= np.float32(math.sqrt(f))
    for start, seq_chunk in zip(starts, seq_chunks):
        stop = min(start + _FEATURE_CHUNK, n)
        noise = np.random.default_rng(seq_chunk).standard_normal((stop - start, f), dtype=np.float32)
        noise *= np.float32(noise_std)
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
                  dst_cum: np.ndarray, dst_starts: np.ndarray, dst_to_external: np.ndarray,
                  intra: float, key: np.uint64, first: int, out: np.ndarray) -> None:
    """Fill ``out`` (int64 ``[2, M]``) with the edges ``first, ..., first + M - 1`` of the
    degree-corrected block model between a source type (``cum``, ``starts``, ``comm``,
    ``to_external``; see :class:`_Model`) and a destination type (``dst_*``; the same arrays for a
    relation within one type): the source by weight, the destination by weight within the
    source's community (probability ``intra``) or among all destination nodes.

    Edge e uses the three uniforms with counters 3e, 3e + 1, 3e + 2, so the result does not
    depend on how the loop is split across threads, nor on how the draws are split in batches.
    """
    n = cum.shape[0]
    n_dst = dst_cum.shape[0]
    for e in numba.prange(out.shape[1]):
        c = np.uint64(3) * np.uint64(first + e)
        u = _draw(cum, 0, n, _uniform(key, c))
        if _uniform(key, c + np.uint64(1)) < intra:
            k = comm[u]
            v = _draw(dst_cum, dst_starts[k], dst_starts[k + 1], _uniform(key, c + np.uint64(2)))
        else:
            v = _draw(dst_cum, 0, n_dst, _uniform(key, c + np.uint64(2)))
        out[0, e] = to_external[u]
        out[1, e] = dst_to_external[v]
