"""Interop with PyTorch Geometric: a ``torch_geometric.data.Data`` graph as a :class:`Dataset`.

``torch_geometric`` itself is not imported: any object with the attributes of a ``Data`` works.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputError
from .convert import as_features, as_labels, as_split, check_feature_dtype, checked
from .csr import build_csr
from .format import Dataset

# The attributes a Data must have, with the end of the sentence that says how to give them.
_REQUIRED = (
    ("edge_index", "edge_index; give it the edges as an int [2, E] tensor (the ToSparseTensor transform moves them "
                   "into adj_t, so leave that transform out)"),
    ("x", "node features (x); give it an [N, F] tensor with F >= 1 (to train on a learned embedding alone, give "
          "it one constant column and train with --embedding-dim D --no-features)"),
    ("y", "labels (y); give it one class id or one row of multi-label targets per node"),
)
# (keyword argument, PyG mask attribute) of each split.
_SPLITS = (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask"))


def _numpy(value: Any, what: str) -> np.ndarray:
    """A numpy view of a CPU tensor (a copy only for a tensor on another device, or of a float
    type numpy lacks: bfloat16 and the float8 types become float32, exactly, and go on like any
    other float type), or ``value`` as an array; ``what`` names it in messages."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided:
            raise InputError(f"{what} is a sparse tensor ({value.layout}); pass a dense one, e.g. {what}.to_dense()")
        value = value.detach().cpu()
        if value.dtype.is_floating_point and value.dtype not in (torch.float16, torch.float32, torch.float64):
            value = value.float()
        try:
            return value.numpy()
        except TypeError:  # a type numpy has no counterpart of, such as complex32
            raise InputError(f"{what} has the dtype {value.dtype}, which numpy cannot hold; convert it, e.g. "
                             f"{what}.float()") from None
    if type(value).__name__ == "SparseTensor":
        raise InputError(f"{what} is a torch_sparse SparseTensor; pass a dense tensor, e.g. {what}.to_dense()")
    array = np.asarray(value)
    if array.dtype == object:
        raise InputError(f"{what} is not a numeric array (got {type(value).__name__}); pass a tensor")
    return array


def _is_hetero(data: Any) -> bool:
    try:
        from torch_geometric.data import HeteroData
    except ImportError:
        return False
    return isinstance(data, HeteroData)


def from_pyg(data: Any, *, train: Any = None, valid: Any = None, test: Any = None,
             feature_dtype: str = "float32", keep_self_loops: bool = False, source: str | None = None) -> Dataset:
    """A validated :class:`Dataset` from a homogeneous ``torch_geometric.data.Data``.

    The graph is built as ``salientpp prepare npz:...`` builds it (the same helpers): edges are
    symmetrised, sorted, deduplicated and self-loops dropped (unless ``keep_self_loops``), the
    features converted to ``feature_dtype``, and the result goes through the same checks (no
    feature columns, NaN/Inf features, split ids out of range, repeated, unlabelled or shared by
    two splits, an empty training split: one sentence each, as :class:`InputError`).

    Args:
        data: a ``Data`` with ``edge_index`` (int ``[2, E]``), ``x`` (``[N, F]``, N = number of
            nodes; any real dtype, bfloat16 included), ``y`` (integer ``[N]`` or ``[N, 1]`` class ids, -1 or NaN = unlabelled; or
            ``[N, T]`` multi-label targets: float 0/1 with NaN = unknown, bool, or integer 0/1)
            and, for each split not given as an argument, a boolean mask attribute
            (``train_mask``, ``val_mask``, ``test_mask``, ``[N]``). Tensors on another device are
            copied to the CPU; CPU tensors are read without a copy, so the dataset may share
            memory with ``data`` (``x`` already of ``feature_dtype``, int64 ``y``, the CSR never).
        train, valid, test: the splits, each an integer tensor/array of node ids or a boolean
            ``[N]`` mask; they take precedence over the mask attributes.
        feature_dtype: ``"float32"`` or ``"float16"``.
        keep_self_loops: keep ``(v, v)`` edges.
        source: ``Dataset.source`` (meta.json's ``source``); default ``"pyg:<class name>"``.

    Raises :class:`InputError` with one sentence on anything :func:`salientpp.data.importers.load_source`
    would refuse, and for a heterogeneous graph, a missing attribute, a sparse ``x`` or a split
    given neither way.
    """
    kind = type(data).__name__
    if kind == "HeteroData" or _is_hetero(data):
        raise InputError("from_pyg takes a homogeneous torch_geometric Data, got a HeteroData; convert it with "
                         "data.to_homogeneous() or build a Data of one node type")
    check_feature_dtype(feature_dtype)
    name = source or f"pyg:{kind}"
    for attribute, message in _REQUIRED:
        if getattr(data, attribute, None) is None:
            raise InputError(f"the {kind} has no {message}")
    x = _numpy(data.x, "data.x")
    if x.ndim != 2:
        raise InputError(f"data.x must have shape [N, F], got {list(x.shape)}; give one feature row per node")
    num_nodes = int(x.shape[0])
    rowptr, col = build_csr(_numpy(data.edge_index, "data.edge_index"), num_nodes, keep_self_loops)
    splits = {}
    for (argument, mask), given in zip(_SPLITS, (train, valid, test)):
        value = given if given is not None else getattr(data, mask, None)
        what = argument if given is not None else f"data.{mask}"
        if value is None:
            raise InputError(f"the {argument} split is missing: pass {argument}=<node ids or boolean mask> or give "
                             f"the {kind} a boolean {mask} attribute")
        array = _numpy(value, what)
        if array.dtype == np.bool_ and array.ndim == 2:
            raise InputError(f"the boolean mask {what} has shape {list(array.shape)}, several splits (one per column); "
                             f"pass one column, e.g. from_pyg(data, {argument}={what}[:, 0], ...)")
        splits[argument] = as_split(array, num_nodes, what)
    dataset = Dataset(rowptr=rowptr, col=col, x=as_features(x, num_nodes, "data.x"),
                      y=as_labels(_numpy(data.y, "data.y"), num_nodes, "data.y"),
                      train_idx=splits["train"], valid_idx=splits["valid"], test_idx=splits["test"], source=name)
    return checked(dataset, feature_dtype)
