"""Importers: turn a ``SCHEME:ARG`` source string into a :class:`Dataset`.

Schemes:
    ``synthetic:PRESET[,key=value...]``  a generated graph (see :mod:`salientpp.data.synthetic`)
    ``npz:PATH``        keys edge_index [2, E], x [N, F], y [N], train_idx, val_idx, test_idx
    ``edgelist:PATH``   text lines ``u v`` (whitespace or comma separated, ``#`` comments), with
                        optional ``.npy`` features, labels and split files
    ``ogb:NAME``        an ``ogbn-*`` node-property dataset already on disk under ``--root``
    ``ogb-lsc:mag240m`` MAG240M's paper citation graph (papers only) already on disk under ``--root``
"""
from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError
from .csr import build_csr
from .format import Dataset

SCHEMES = ("synthetic", "npz", "edgelist", "ogb", "ogb-lsc")


@dataclass
class ImportOptions:
    """Options of ``salientpp prepare`` that some sources use.

    Attributes:
        root: directory that holds OGB datasets (``ogb:`` only).
        features, labels, train_idx, valid_idx, test_idx: ``.npy`` files (``edgelist:`` only).
        num_nodes: number of nodes when the edge list does not mention the last ones.
        feature_dtype: "float32" or "float16"; features are converted to it.
        keep_self_loops: keep (v, v) edges instead of dropping them.
        seed: seeds the random split, features and labels an edge list lacks.
        num_features, num_classes: shape of the random features/labels an edge list lacks.
    """

    root: str | None = None
    features: str | None = None
    labels: str | None = None
    train_idx: str | None = None
    valid_idx: str | None = None
    test_idx: str | None = None
    num_nodes: int | None = None
    feature_dtype: str = "float32"
    keep_self_loops: bool = False
    seed: int = 0
    num_features: int = 128
    num_classes: int = 2


def load_source(source: str, options: ImportOptions | None = None) -> Dataset:
    """Read ``source`` (``SCHEME:ARG``) into a validated :class:`Dataset`."""
    options = options or ImportOptions()
    scheme, sep, arg = source.partition(":")
    if not sep or scheme not in SCHEMES:
        raise InputError(f"unknown source {source!r}; use one of "
                         + ", ".join(f"{s}:..." for s in SCHEMES))
    if not arg:
        raise InputError(f"source {source!r} names no {scheme} argument; write it as {scheme}:ARG")
    if options.feature_dtype not in ("float32", "float16"):
        raise InputError(f"feature dtype must be float32 or float16, got {options.feature_dtype!r}")
    if scheme == "synthetic":
        from .synthetic import synthetic_dataset
        dataset = synthetic_dataset(arg)
    elif scheme == "npz":
        dataset = _from_npz(Path(arg), options)
    elif scheme == "edgelist":
        dataset = _from_edgelist(Path(arg), options)
    elif scheme == "ogb":
        dataset = _from_ogb(arg, options)
    else:
        dataset = _from_mag240m(arg, options)
    dataset.x = np.asarray(dataset.x).astype(options.feature_dtype, copy=False)
    dataset.validate()
    return dataset


def _read_npy(path: str | os.PathLike, what: str) -> np.ndarray:
    if not Path(path).is_file():
        raise InputError(f"{what} file {path} does not exist; check the path")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{what} file {path} is not a readable .npy array ({exc}); re-export it with numpy.save") from None


def _as_ids(array: np.ndarray, what: str) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise InputError(f"{what} must be a 1-D integer array, got {array.dtype} {list(array.shape)}")
    return array.astype(np.int64)


def _as_labels(array: np.ndarray, num_nodes: int, what: str) -> np.ndarray:
    """int64 labels from an integer or float (NaN = unlabelled) array of shape [N] or [N, 1]."""
    array = np.asarray(array)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1 or array.shape[0] != num_nodes:
        raise InputError(f"{what} must hold one label per node ({num_nodes}), got shape {list(array.shape)}")
    if np.issubdtype(array.dtype, np.floating):
        labelled = ~np.isnan(array)
        if np.any(array[labelled] != np.round(array[labelled])):
            raise InputError(f"{what} holds non-integer class ids; labels must be integers (NaN or -1 = unlabelled)")
        return np.where(labelled, array, -1).astype(np.int64)
    if not np.issubdtype(array.dtype, np.integer):
        raise InputError(f"{what} must be integer class ids, got dtype {array.dtype}")
    return array.astype(np.int64)


def _as_features(array: np.ndarray, num_nodes: int, what: str) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim != 2 or array.shape[0] != num_nodes:
        raise InputError(f"{what} must have shape [N={num_nodes}, F], got {list(array.shape)}; "
                         "the features and the graph disagree on the number of nodes")
    if not np.issubdtype(array.dtype, np.number):
        raise InputError(f"{what} must be numeric, got dtype {array.dtype}")
    return array


def random_split(y: np.ndarray, fractions: tuple[float, float, float], rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split the labelled nodes (``y >= 0``) at random into train/valid/test by ``fractions``.

    Returns three sorted int64 id arrays; fractions may sum to less than 1 (the rest is unused).
    The training set gets at least one node, so a tiny graph stays trainable.
    """
    ids = rng.permutation(np.flatnonzero(y >= 0))
    n_train = min(ids.shape[0], max(1, int(round(fractions[0] * ids.shape[0]))))
    n_valid = int(round(fractions[1] * ids.shape[0]))
    n_test = min(ids.shape[0] - n_train - n_valid, int(round(fractions[2] * ids.shape[0])))
    parts = np.split(ids[:n_train + n_valid + n_test], [n_train, n_train + n_valid])
    return tuple(np.sort(p).astype(np.int64) for p in parts)


def _from_npz(path: Path, options: ImportOptions) -> Dataset:
    if not path.is_file():
        raise InputError(f"npz file {path} does not exist; check the path")
    try:
        data = np.load(path, allow_pickle=False)
        arrays = {key: data[key] for key in data.files}
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{path} is not a readable .npz archive ({exc})") from None
    needed = ("edge_index", "x", "y", "train_idx", "val_idx", "test_idx")
    missing = [key for key in needed if key not in arrays]
    if missing:
        raise InputError(f"{path} lacks the key(s) {', '.join(missing)}; an npz source needs {', '.join(needed)}")
    x = arrays["x"]
    num_nodes = int(x.shape[0]) if x.ndim >= 1 else 0
    rowptr, col = build_csr(arrays["edge_index"], num_nodes, options.keep_self_loops)
    return Dataset(rowptr=rowptr, col=col, x=_as_features(x, num_nodes, f"x in {path}"),
                   y=_as_labels(arrays["y"], num_nodes, f"y in {path}"),
                   train_idx=_as_ids(arrays["train_idx"], "train_idx"),
                   valid_idx=_as_ids(arrays["val_idx"], "val_idx"),
                   test_idx=_as_ids(arrays["test_idx"], "test_idx"),
                   source=f"npz:{path.resolve()}")


def _read_edgelist(path: Path) -> np.ndarray:
    if not path.is_file():
        raise InputError(f"edge list {path} does not exist; check the path")
    with open(path) as f:
        text = f.read().replace(",", " ")
    lines = [line.split("#", 1)[0] for line in text.splitlines()]
    try:
        values = np.array(" ".join(lines).split(), dtype=np.int64)
    except ValueError:
        raise InputError(f"edge list {path} holds something other than integer node ids; "
                         "write one 'u v' pair of ids per line") from None
    if values.shape[0] % 2:
        raise InputError(f"edge list {path} has an odd number of ids; write one 'u v' pair per line")
    return values.reshape(-1, 2).T


def _from_edgelist(path: Path, options: ImportOptions) -> Dataset:
    edge_index = _read_edgelist(path)
    rng = np.random.default_rng(options.seed)
    generated = []
    x = _read_npy(options.features, "features") if options.features else None
    y = _read_npy(options.labels, "labels") if options.labels else None
    num_nodes = options.num_nodes
    if num_nodes is None:
        num_nodes = x.shape[0] if x is not None and x.ndim else int(edge_index.max(initial=-1)) + 1
    if edge_index.shape[1] and edge_index.max() >= num_nodes:
        raise InputError(f"edge list {path} mentions node {edge_index.max()} but the graph has {num_nodes} nodes; "
                         "pass --num-nodes or features with one row per node")
    rowptr, col = build_csr(edge_index, num_nodes, options.keep_self_loops)
    if x is None:
        x = rng.standard_normal((num_nodes, options.num_features), dtype=np.float32)
        generated.append("features")
    if y is None:
        y = rng.integers(0, options.num_classes, num_nodes)
        generated.append("labels")
    x = _as_features(x, num_nodes, "features")
    y = _as_labels(y, num_nodes, "labels")
    split_files = (options.train_idx, options.valid_idx, options.test_idx)
    if all(split_files):
        splits = [_as_ids(_read_npy(f, name), name) for f, name in zip(split_files, ("train_idx", "valid_idx", "test_idx"))]
    elif any(split_files):
        raise InputError("give all three split files (--train-idx, --valid-idx, --test-idx) or none for a random split")
    else:
        splits = random_split(y, (0.08, 0.02, 0.90), rng)
        generated.append("split")
    return Dataset(rowptr=rowptr, col=col, x=x, y=y, train_idx=splits[0], valid_idx=splits[1], test_idx=splits[2],
                   source=f"edgelist:{path.resolve()}",
                   extra_meta={"generated": generated, "seed": options.seed} if generated else {})


def _from_ogb(name: str, options: ImportOptions) -> Dataset:
    """An ogbn-* dataset from its raw files on disk, read with the ``ogb`` package's readers.

    ogb's own ``NodePropPredDataset`` is not used: on missing files it asks on stdin and downloads,
    and its cache is a pickle. Here missing files are an error that says where to put them.
    """
    try:
        import pandas as pd
        from ogb.io.read_graph_raw import read_binary_graph_raw, read_csv_graph_raw
        import ogb.nodeproppred
    except ImportError:
        raise InputError("the ogb package is not installed; run `pip install ogb` (or `pip install salientpp[ogb]`)") from None
    master = pd.read_csv(Path(ogb.nodeproppred.__file__).parent / "master.csv", index_col=0, keep_default_na=False)
    if name not in master or master[name]["is hetero"] == "True":
        known = ", ".join(k for k in master if master[k]["is hetero"] != "True")
        raise InputError(f"{name!r} is not a homogeneous OGB node-property dataset; use one of {known}")
    info = master[name]
    if not options.root:
        raise InputError(f"ogb:{name} needs --root DIR, the directory that holds {name.replace('-', '_')}/")
    folder = Path(options.root) / name.replace("-", "_")
    binary = info["binary"] == "True"
    raw = folder / "raw"
    needed = [raw / "data.npz", raw / "node-label.npz"] if binary else [raw / "edge.csv.gz", raw / "node-label.csv.gz"]
    split_dir = folder / "split" / info["split"]
    needed += [split_dir / f"{s}.csv.gz" for s in ("train", "valid", "test")]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        raise InputError(f"{name} is not on disk under {options.root}: {missing[0]} is missing; download "
                         f"{info['url']} and unzip it so that {folder}/raw and {folder}/split exist")
    try:
        if binary:
            graph = read_binary_graph_raw(str(raw))[0]
            labels = np.load(raw / "node-label.npz", allow_pickle=False)["node_label"]
        else:
            graph = read_csv_graph_raw(str(raw), add_inverse_edge=info["add_inverse_edge"] == "True")[0]
            labels = pd.read_csv(raw / "node-label.csv.gz", compression="gzip", header=None).values
        splits = [pd.read_csv(split_dir / f"{s}.csv.gz", compression="gzip", header=None).values[:, 0]
                  for s in ("train", "valid", "test")]
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise InputError(f"the OGB files of {name} under {folder} could not be read ({exc}); re-extract them") from None
    num_nodes = int(graph["num_nodes"])
    if graph.get("node_feat") is None:
        raise InputError(f"{name} has no node features in {raw}; salientpp needs node-feat in the raw files")
    rowptr, col = build_csr(graph["edge_index"], num_nodes, options.keep_self_loops)
    return Dataset(rowptr=rowptr, col=col, x=_as_features(graph["node_feat"], num_nodes, "node_feat"),
                   y=_as_labels(labels, num_nodes, "node labels"),
                   train_idx=_as_ids(splits[0], "train split"), valid_idx=_as_ids(splits[1], "valid split"),
                   test_idx=_as_ids(splits[2], "test split"), source=f"ogb:{name}")


def _numpy_pickle_globals() -> list:
    """What a ``torch.save``-d dict of numpy arrays references, under numpy 2's and numpy 1's names."""
    reconstruct = np._core.multiarray._reconstruct
    return [reconstruct, (reconstruct, "numpy.core.multiarray._reconstruct"), np.ndarray, np.dtype,
            *{type(np.dtype(t)) for t in ("i8", "i4", "f4", "f8", "f2")}]


def _from_mag240m(name: str, options: ImportOptions) -> Dataset:
    """MAG240M's paper-cites-paper graph, papers only (as SALIENT++ trains on it), read with
    ``ogb.lsc.MAG240MDataset`` from files already on disk.

    Features are float16 ``[num_papers, 768]`` (memory-mapped); labels are NaN except on the
    arXiv papers. The test labels are hidden by OGB-LSC, so the test split is empty and accuracy
    is measured on the validation split. The split file is read with torch's restricted
    (weights-only) unpickler, allowing only numpy arrays.
    """
    if name != "mag240m":
        raise InputError(f"ogb-lsc:{name} is not supported; the only OGB-LSC source is ogb-lsc:mag240m")
    try:
        import torch
        from ogb.lsc import MAG240MDataset
    except ImportError:
        raise InputError("the ogb package is not installed; run `pip install ogb` (or `pip install salientpp[ogb]`)") from None
    if not options.root:
        raise InputError("ogb-lsc:mag240m needs --root DIR, the directory that holds mag240m_kddcup2021/")
    folder = Path(options.root) / "mag240m_kddcup2021"
    needed = [folder / f"RELEASE_v{MAG240MDataset.version}.txt", folder / "meta.pt", folder / "split_dict.pt",
              folder / "processed" / "paper" / "node_feat.npy", folder / "processed" / "paper" / "node_label.npy",
              folder / "processed" / "paper___cites___paper" / "edge_index.npy"]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        raise InputError(f"mag240m is not on disk under {options.root}: {missing[0]} is missing; download "
                         f"{MAG240MDataset.url} and unzip it in {options.root}")
    try:
        # Checked above, so MAG240MDataset neither asks on stdin nor downloads.
        with torch.serialization.safe_globals(_numpy_pickle_globals()):
            lsc = MAG240MDataset(str(options.root))
        edge_index = lsc.edge_index("paper", "cites", "paper")
        x, labels = lsc.paper_feat, lsc.paper_label
        train, valid = lsc.get_idx_split("train"), lsc.get_idx_split("valid")
        num_nodes = int(lsc.num_papers)
    except (OSError, ValueError, KeyError, RuntimeError, AssertionError, EOFError, pickle.UnpicklingError) as exc:
        raise InputError(f"the MAG240M files under {folder} could not be read ({str(exc).splitlines()[0]}); "
                         "re-extract them") from None
    rowptr, col = build_csr(np.asarray(edge_index), num_nodes, options.keep_self_loops)
    return Dataset(rowptr=rowptr, col=col, x=_as_features(x, num_nodes, "paper features"),
                   y=_as_labels(labels, num_nodes, "paper labels"),
                   train_idx=_as_ids(np.asarray(train), "train split"), valid_idx=_as_ids(np.asarray(valid), "valid split"),
                   test_idx=np.empty(0, dtype=np.int64), source="ogb-lsc:mag240m",
                   extra_meta={"test_split": "empty: the MAG240M test labels are hidden; use the validation accuracy"})
