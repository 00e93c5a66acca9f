"""What every source shares: an input array turned into the dataset format (labels, features,
split ids or masks), a random split of the labelled nodes, and the checks every imported dataset
passes (:func:`checked`: the feature dtype, float16 overflow, :meth:`Dataset.validate`, disjoint
splits)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError, shown
from ..io import read_rows, row_chunks
from .csr import build_typed_csr
from .format import Dataset, check_disjoint_splits, labelled
from .schema import GraphSchema, Relation

# The smallest magnitude that float16 rounds to infinity (its largest finite value is 65504).
FLOAT16_OVERFLOW = 65520.0


def check_fits_float16(x: np.ndarray, where: str) -> None:
    """Raise :class:`InputError` when finite values of the features ``x`` (numeric ``[N, F]``)
    would overflow float16 (a magnitude of :data:`FLOAT16_OVERFLOW` or more becomes infinite),
    naming the largest magnitude found; ``where`` names the dataset. NaN and infinities are
    left to :meth:`Dataset.validate`. One pass over ``x`` in chunks of about 16 MiB."""
    largest = 0.0
    for start, stop in row_chunks(x.shape[0], x.shape[1] * x.itemsize):
        magnitude = np.abs(read_rows(x, start, stop).astype(np.float64, copy=False))
        finite = magnitude[np.isfinite(magnitude)]
        if finite.size:
            largest = max(largest, float(finite.max()))
    if largest >= FLOAT16_OVERFLOW:
        raise InputError(f"the features (x) of {where} hold finite values as large as {largest:.6g} in magnitude, "
                         "which overflow float16 (its largest value is 65504); keep them float32 (--feature-dtype "
                         "float32) or scale them down")


def checked(dataset: Dataset, feature_dtype: str = "float32") -> Dataset:
    """``dataset`` with its features (``x`` and every node type's) converted to ``feature_dtype``
    (no copy when they have it), after the checks every imported dataset passes: finite
    features that fit ``feature_dtype`` (:func:`check_fits_float16`), :meth:`Dataset.validate`
    (CSR, shapes and dtypes, at least one feature column, finite features, labels, labelled split
    ids without repeats, a training node) and disjoint train/valid/test splits. Raises
    :class:`InputError` with one sentence naming ``dataset.source``."""
    check_feature_dtype(feature_dtype)
    converted = {}
    for node_type, x in dataset.x_dict.items():
        target = node_type == dataset.schema.target
        where = dataset.source if target else f"the {shown(node_type)} nodes of {dataset.source}"
        if np.iscomplexobj(x):  # a cast to real would drop the imaginary parts without a word
            raise InputError(f"the features of {where} are complex ({np.asarray(x).dtype}); give real "
                             "features, e.g. the real and imaginary parts as separate columns")
        if feature_dtype == "float16" and x.dtype != np.float16 and x.ndim == 2:
            check_fits_float16(x, where)
        converted[node_type] = np.asarray(x).astype(feature_dtype, copy=False)
    dataset.x = converted.pop(dataset.schema.target)
    dataset.features = converted
    dataset.validate()
    check_disjoint_splits({"train": dataset.train_idx, "valid": dataset.valid_idx, "test": dataset.test_idx},
                          dataset.num_nodes, dataset.source)
    return dataset


def check_feature_dtype(name: str) -> None:
    """Raise :class:`InputError` unless ``name`` is ``"float32"`` or ``"float16"``."""
    if name not in ("float32", "float16"):
        raise InputError(f"feature dtype must be float32 or float16, got {name!r}")


def _as_ids(array: np.ndarray, what: str) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise InputError(f"{what} must be a 1-D integer array, got {array.dtype} {list(array.shape)}")
    return array.astype(np.int64, copy=False)


def as_labels(array: np.ndarray, num_nodes: int, what: str) -> np.ndarray:
    """Labels in the dataset format from an input array with one entry or row per node.

    * ``[N]`` or ``[N, 1]`` integer or float: multi-class class ids, returned as int64 ``[N]``;
      a float NaN or -1 marks an unlabelled node (OGB's ``[N, 1]`` float labels).
    * ``[N, T]`` with ``T >= 2``, or bool ``[N, 1]``: multi-label (or binary) targets. Float
      values stay float32 (0 or 1, NaN = unknown target; other values are refused by
      :meth:`Dataset.validate`), bool stays bool, and integers of 0 and 1 only (OGB's
      ``ogbn-proteins``) become bool.

    A 1-D bool array is refused: it could be a binary target or two classes; give int64 class ids
    or a ``[N, 1]`` bool target. Raises :class:`InputError` naming ``what``.
    """
    array = np.asarray(array)
    if array.ndim == 2 and array.shape[1] == 1 and array.dtype != np.bool_:
        array = array[:, 0]
    if array.ndim not in (1, 2) or array.shape[0] != num_nodes:
        raise InputError(f"{what} must hold one label per node ({num_nodes}), got shape {list(array.shape)}; "
                         "give class ids [N] or multi-label targets [N, T]")
    if array.ndim == 2:
        if array.shape[1] == 0:
            raise InputError(f"{what} has shape {list(array.shape)}, no targets per node; give class ids [N] or "
                             "multi-label targets [N, T] with T >= 1")
        if array.dtype == np.bool_:
            return array
        if np.issubdtype(array.dtype, np.floating):
            return array.astype(np.float32, copy=False)
        if np.issubdtype(array.dtype, np.integer):
            if array.size and (array.min() < 0 or array.max() > 1):
                raise InputError(f"{what} holds integer multi-label targets other than 0 and 1 (from {array.min()} "
                                 f"to {array.max()}); give 0/1 targets, or float32 with NaN for unknown targets")
            return array.astype(bool)
        raise InputError(f"{what} must hold numbers or booleans, got dtype {array.dtype}")
    if array.dtype == np.bool_:
        raise InputError(f"{what} is a 1-D boolean array, which could be one binary target or two classes; give "
                         "int64 class ids [N] for multi-class labels, or reshape it to [N, 1] for one binary target")
    if np.issubdtype(array.dtype, np.floating):
        known = ~np.isnan(array)
        if np.any(array[known] != np.round(array[known])):
            raise InputError(f"{what} holds non-integer class ids; labels must be integers (NaN or -1 = unlabelled)")
        return np.where(known, array, -1).astype(np.int64)
    if not np.issubdtype(array.dtype, np.integer):
        raise InputError(f"{what} must be integer class ids, got dtype {array.dtype}")
    return array.astype(np.int64, copy=False)


def as_features(array: np.ndarray, num_nodes: int, what: str) -> np.ndarray:
    """``array`` as numeric ``[N, F]`` features (not converted: :func:`checked` does that), or
    :class:`InputError` naming ``what``."""
    array = np.asarray(array)
    if array.ndim != 2 or array.shape[0] != num_nodes:
        raise InputError(f"{what} must have shape [N={num_nodes}, F], got {list(array.shape)}; "
                         "the features and the graph disagree on the number of nodes")
    if not np.issubdtype(array.dtype, np.number):
        raise InputError(f"{what} must be numeric, got dtype {array.dtype}")
    return array


def random_split(y: np.ndarray, fractions: tuple[float, float, float], rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split the labelled nodes (see :func:`~salientpp.data.format.labelled`) of ``y`` at random
    into train/valid/test by ``fractions``.

    Returns three sorted int64 id arrays; fractions may sum to less than 1 (the rest is unused).
    The training set gets at least one node, so a tiny graph stays trainable.
    """
    ids = rng.permutation(np.flatnonzero(labelled(y)))
    n_train = min(ids.shape[0], max(1, int(round(fractions[0] * ids.shape[0]))))
    n_valid = int(round(fractions[1] * ids.shape[0]))
    n_test = min(ids.shape[0] - n_train - n_valid, int(round(fractions[2] * ids.shape[0])))
    parts = np.split(ids[:n_train + n_valid + n_test], [n_train, n_train + n_valid])
    return tuple(np.sort(p).astype(np.int64) for p in parts)


def as_split(array: np.ndarray, num_nodes: int, what: str) -> np.ndarray:
    """int64 ids from a 1-D integer id array or a boolean ``[N]`` mask (``what`` names it in
    messages); repeats and ranges are checked later, by :func:`checked`."""
    array = np.asarray(array)
    if array.dtype == np.bool_:
        if array.shape != (num_nodes,):
            raise InputError(f"the boolean mask {what} must have one entry per node ({num_nodes}), got shape "
                             f"{list(array.shape)}")
        return np.flatnonzero(array).astype(np.int64)
    return _as_ids(array, what)


def typed_dataset(num_nodes: Mapping[str, int], edges: Mapping[tuple[str, str, str], np.ndarray], target: str,
                  x: np.ndarray, y: np.ndarray, splits: Sequence[np.ndarray], features: Mapping[str, np.ndarray],
                  keep_self_loops: bool, source: str, **extra: Any) -> Dataset:
    """A typed :class:`Dataset` from a source's arrays, each indexed by the ids of its own node type.

    Args:
        num_nodes: nodes of each type, in the order of their global id ranges (the target first
            keeps the splits' ids equal to the source's).
        edges: per relation ``(src, name, dst)``, an integer ``[2, E]`` array: row 0 the ``src``
            ids, row 1 the ``dst`` ids of edges ``src -> dst``. Each gets its reverse, unless
            another is given as its reverse (:meth:`GraphSchema.with_reverses`), and the CSR is
            :func:`build_typed_csr`'s.
        target: the type of ``x``, ``y`` (one row each per target node) and ``splits`` (train,
            valid and test ids of target nodes).
        features: the features of other types, ``[n_t, F_t]`` each; a type without is absent.
        keep_self_loops: keep the ``(v, v)`` edges of a relation within one type.
        source: ``Dataset.source``, naming the input in messages; ``extra`` go to the Dataset.

    Raises :class:`InputError` (one sentence naming the relation or the type) for an edge array
    that is not ``[2, E]`` integers or holds an id outside its type, and for features or labels
    whose rows do not match their type's nodes.
    """
    schema = GraphSchema.with_reverses(list(num_nodes), list(num_nodes.values()), list(edges), target,
                                       list(edges.values()), keep_self_loops)
    by_schema = [np.empty((2, 0), dtype=np.int64)] * schema.num_relations
    for key, edge_index in edges.items():
        relation = Relation(*key)
        by_schema[schema.relation_index(relation)] = schema.global_edges(
            relation, np.asarray(edge_index), f"the {shown(str(relation))} edges of {source}")
    rowptr, col, edge_rel = build_typed_csr(by_schema, schema.reverse, schema.total_nodes, keep_self_loops)
    first, _ = schema.target_range
    n_target = num_nodes[target]
    return Dataset(rowptr=rowptr, col=col, x=as_features(x, n_target, f"the {target} features of {source}"),
                   y=as_labels(y, n_target, f"the {target} labels of {source}"),
                   **{f"{name}_idx": _as_ids(ids, f"the {name} split of {source}") + first
                      for name, ids in zip(("train", "valid", "test"), splits)},
                   source=source, schema=schema, edge_rel=edge_rel,
                   features={t: as_features(f, num_nodes[t], f"the {t} features of {source}")
                             for t, f in features.items()}, **extra)
