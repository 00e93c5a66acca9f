"""The ``ogb:NAME`` and ``ogb-lsc:mag240m`` sources: OGB node-property datasets and MAG240M's
paper citation graph, read from files already on disk (never downloaded)."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..io import check_input_file
from .convert import _as_ids, as_features, as_labels
from .csr import build_csr
from .format import Dataset
from .options import ImportOptions


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
    for path in needed:
        check_input_file(path, f"{name} is not on disk under {options.root}:",
                         f"download {info['url']} and unzip it so that {folder}/raw and {folder}/split exist")
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
    return Dataset(rowptr=rowptr, col=col, x=as_features(graph["node_feat"], num_nodes, "node_feat"),
                   y=as_labels(labels, num_nodes, "node labels"),
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
    for path in needed:
        check_input_file(path, f"mag240m is not on disk under {options.root}:",
                         f"download {MAG240MDataset.url} and unzip it in {options.root}")
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
    return Dataset(rowptr=rowptr, col=col, x=as_features(x, num_nodes, "paper features"),
                   y=as_labels(labels, num_nodes, "paper labels"),
                   train_idx=_as_ids(np.asarray(train), "train split"), valid_idx=_as_ids(np.asarray(valid), "valid split"),
                   test_idx=np.empty(0, dtype=np.int64), source="ogb-lsc:mag240m",
                   extra_meta={"test_split": "empty: the MAG240M test labels are hidden; use the validation accuracy"})
