"""Importers: turn a ``SCHEME:ARG`` source string into a :class:`Dataset`.

Schemes:
    ``synthetic:PRESET[,key=value...]``  a generated graph (see :mod:`salientpp.data.synthetic`)
    ``npz:PATH``        keys edge_index [2, E], x [N, F], y [N] (or [N, T] multi-label targets),
                        train_idx, val_idx, test_idx (id arrays or boolean masks); optionally the
                        held-out edges train_edges, valid_edges, test_edges ([2, E_s], all or none)
    ``edgelist:PATH``   text lines ``u v`` (spaces, tabs or commas, ``#`` comments; plain, gzip, or
                        UTF-16/32 with a byte-order mark), with optional ``.npy`` features, labels
                        and split files indexed by the ids of the edge list. Without such files (or
                        ``--num-nodes``), ids of which fewer than half of ``0..max`` occur are
                        compacted to ``0..n-1`` and the dataset keeps ``input_id``.
    ``ogb:NAME``        an ``ogbn-*`` node-property dataset already on disk under ``--root``
                        (``ogbn-mag``: a typed graph of papers, authors, institutions and fields of study)
    ``ogb-lsc:mag240m`` MAG240M's paper citation graph (papers only; with ``--all-types`` papers,
                        authors and institutions, a typed graph) already on disk under ``--root``
    ``igbh:PATH``       IGBH's on-disk layout (a ``.npy`` per node type and relation) of one size,
                        ``PATH/processed/...`` (:mod:`.igbh`; a typed graph)

This module is the entry point: :func:`load_source` dispatches by scheme to the source's own
module (:mod:`.synthetic`, :mod:`.npz`, :mod:`.edgelist`, :mod:`.ogb` for both OGB schemes, :mod:`.igbh`) and
makes every dataset pass :func:`~salientpp.data.convert.checked`. The options are
:class:`~salientpp.data.options.ImportOptions`; what the sources share is in :mod:`.convert`.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..options import check_applies, declared
from .convert import check_feature_dtype, checked
from .edgelist import _from_edgelist
from .format import MULTICLASS, Dataset, class_count
from .igbh import _from_igbh
from .npz import _from_npz
from .ogb import _from_mag240m, _from_ogb
from .options import ImportOptions, Source, check_counts

SCHEMES = ("synthetic", "npz", "edgelist", "ogb", "ogb-lsc", "igbh")


def load_source(source: str, options: ImportOptions | None = None) -> Dataset:
    """Read ``source`` (``SCHEME:ARG``) into a validated :class:`Dataset`; :class:`InputError` for an
    option of ``options`` its scheme does not read (:func:`~salientpp.options.check_applies`), before
    any input is read."""
    options = options or ImportOptions()
    scheme, sep, arg = source.partition(":")
    if not sep or scheme not in SCHEMES:
        raise InputError(f"unknown source {source!r}; use one of "
                         + ", ".join(f"{s}:..." for s in SCHEMES))
    if not arg:
        raise InputError(f"source {source!r} names no {scheme} argument; write it as {scheme}:ARG")
    check_applies(options, declared(ImportOptions), Source(scheme))
    check_feature_dtype(options.feature_dtype)
    check_counts(options)
    feature_dtype = options.feature_dtype
    if scheme == "synthetic":
        from .synthetic import synthetic_dataset
        dataset = synthetic_dataset(arg, options)
        feature_dtype = dataset.x.dtype.name  # the spec's feature_dtype or --feature-dtype (parse_spec)
    elif scheme == "npz":
        dataset = _from_npz(Path(arg), options)
    elif scheme == "edgelist":
        dataset = _from_edgelist(Path(arg), options)
    elif scheme == "ogb":
        dataset = _from_ogb(arg, options)
    elif scheme == "igbh":
        dataset = _from_igbh(Path(arg), options)
    else:
        dataset = _from_mag240m(arg, options)
    if options.num_classes is not None:
        declare_classes(dataset, options.num_classes)
    return checked(dataset, feature_dtype)


def declare_classes(dataset: Dataset, num_classes: int) -> None:
    """Set ``dataset.declared_classes`` to ``num_classes`` (``prepare --num-classes``).

    Raises :class:`InputError` when the labels are multi-label targets, or when a class id of
    the int64 ``[N]`` labels is ``num_classes`` or more (one pass over the labels)."""
    if dataset.label_kind != MULTICLASS:
        raise InputError(f"--num-classes applies to class ids but {dataset.source} has multi-label targets "
                         f"({dataset.y.dtype} {list(dataset.y.shape)}); drop --num-classes")
    largest = class_count(dataset.y) - 1
    if largest >= num_classes:
        raise InputError(f"the labels of {dataset.source} hold the class id {largest}, outside [-1, {num_classes}) "
                         f"for --num-classes {num_classes}; pass --num-classes {largest + 1} or more, or fix the "
                         "labels")
    dataset.declared_classes = num_classes
