"""The ``ogb:NAME`` and ``ogb-lsc:mag240m`` sources: OGB node-property datasets (``ogbn-mag`` a
typed graph) and MAG240M (its paper citation graph, or with ``--all-types`` papers, authors and
institutions), read from files already on disk (never downloaded)."""
from __future__ import annotations

import contextlib
import os
import pickle
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..io import check_input_file
from .convert import _as_ids, as_features, as_labels, typed_dataset
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
    if name not in master or (master[name]["is hetero"] == "True" and name != MAG):
        known = ", ".join(k for k in master if master[k]["is hetero"] != "True" or k == MAG)
        raise InputError(f"{name!r} is not an OGB node-property dataset that salientpp reads; use one of {known}")
    info = master[name]
    if not options.root:
        raise InputError(f"ogb:{name} needs --root DIR, the directory that holds {name.replace('-', '_')}/")
    folder = Path(options.root) / name.replace("-", "_")
    if name == MAG:
        return _from_ogbn_mag(folder, info, options)
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


# ogbn-mag: OGB's only heterogeneous node-property dataset, its node types (the target first) and
# its relations as raw/triplet-type-list.csv.gz lists them.
MAG = "ogbn-mag"
MAG_TYPES = ("paper", "author", "institution", "field_of_study")
MAG_RELATIONS = (("author", "affiliated_with", "institution"), ("author", "writes", "paper"),
                 ("paper", "cites", "paper"), ("paper", "has_topic", "field_of_study"))


def _from_ogbn_mag(folder: Path, info, options: ImportOptions) -> Dataset:
    """ogbn-mag from OGB's raw heterogeneous layout under ``folder`` (read with
    ``ogb.io.read_graph_raw.read_csv_heterograph_raw``): a typed dataset of the types
    :data:`MAG_TYPES` and the relations :data:`MAG_RELATIONS` with their reverses; only papers
    have features (128 wide), so training the other types needs ``--embedding-dim``. Labels
    (349 venues) and the time split (``split/time/paper/{train,valid,test}.csv.gz``) are the
    papers'."""
    import pandas as pd
    from ogb.io.read_graph_raw import read_csv_heterograph_raw, read_node_label_hetero

    raw = folder / "raw"
    split_dir = folder / "split" / info["split"] / "paper"
    needed = [raw / "num-node-dict.csv.gz", raw / "triplet-type-list.csv.gz", raw / "nodetype-has-label.csv.gz",
              raw / "node-feat" / "paper" / "node-feat.csv.gz", raw / "node-label" / "paper" / "node-label.csv.gz"]
    for relation in MAG_RELATIONS:
        needed += [raw / "relations" / "___".join(relation) / f for f in ("edge.csv.gz", "num-edge-list.csv.gz")]
    needed += [split_dir / f"{s}.csv.gz" for s in ("train", "valid", "test")]
    for path in needed:
        check_input_file(path, f"{MAG} is not on disk under {folder.parent}:",
                         f"download {info['url']} and unzip it so that {folder}/raw and {folder}/split exist")
    try:
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            graph = read_csv_heterograph_raw(str(raw), add_inverse_edge=False)[0]  # prints and draws a progress bar
        labels = read_node_label_hetero(str(raw))["paper"]
        splits = [pd.read_csv(split_dir / f"{s}.csv.gz", compression="gzip", header=None).values[:, 0]
                  for s in ("train", "valid", "test")]
    except (OSError, ValueError, KeyError, RuntimeError, AssertionError) as exc:
        raise InputError(f"the OGB files of {MAG} under {folder} could not be read ({exc}); re-extract them") from None
    counts = graph["num_nodes_dict"]
    if set(counts) != set(MAG_TYPES) or set(graph["edge_index_dict"]) != set(MAG_RELATIONS):
        raise InputError(f"the OGB files of {MAG} under {folder} list the node types {sorted(counts)} and relations "
                         f"{sorted(graph['edge_index_dict'])}, not ogbn-mag's; re-extract them")
    return typed_dataset({t: int(counts[t]) for t in MAG_TYPES}, {r: graph["edge_index_dict"][r] for r in MAG_RELATIONS},
                         "paper",
                         graph["node_feat_dict"]["paper"], labels, splits, {}, options.keep_self_loops,
                         f"ogb:{MAG}")


def _numpy_pickle_globals() -> list:
    """What a ``torch.save``-d dict of numpy arrays references, under numpy 2's and numpy 1's names."""
    reconstruct = np._core.multiarray._reconstruct
    return [reconstruct, (reconstruct, "numpy.core.multiarray._reconstruct"), np.ndarray, np.dtype,
            *{type(np.dtype(t)) for t in ("i8", "i4", "f4", "f8", "f2")}]


# MAG240M with --all-types: its node types (the target first) and relations.
MAG240M_TYPES = ("paper", "author", "institution")
MAG240M_RELATIONS = (("author", "writes", "paper"), ("author", "affiliated_with", "institution"),
                     ("paper", "cites", "paper"))


def _from_mag240m(name: str, options: ImportOptions) -> Dataset:
    """MAG240M read with ``ogb.lsc.MAG240MDataset`` from files already on disk: its
    paper-cites-paper graph, papers only (as SALIENT++ trains on it), or with ``--all-types``
    (``options.all_types``) a typed dataset of papers, authors and institutions and the relations
    :data:`MAG240M_RELATIONS` with their reverses, where only papers have features.

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
    relations = MAG240M_RELATIONS if options.all_types else (("paper", "cites", "paper"),)
    needed = [folder / f"RELEASE_v{MAG240MDataset.version}.txt", folder / "meta.pt", folder / "split_dict.pt",
              folder / "processed" / "paper" / "node_feat.npy", folder / "processed" / "paper" / "node_label.npy"]
    needed += [folder / "processed" / "___".join(relation) / "edge_index.npy" for relation in relations]
    for path in needed:
        check_input_file(path, f"mag240m is not on disk under {options.root}:",
                         f"download {MAG240MDataset.url} and unzip it in {options.root}")
    try:
        # Checked above, so MAG240MDataset neither asks on stdin nor downloads.
        with torch.serialization.safe_globals(_numpy_pickle_globals()):
            lsc = MAG240MDataset(str(options.root))
        edges = {relation: np.asarray(lsc.edge_index(*relation)) for relation in relations}
        x, labels = lsc.paper_feat, lsc.paper_label
        train, valid = lsc.get_idx_split("train"), lsc.get_idx_split("valid")
        counts = {"paper": int(lsc.num_papers), "author": int(lsc.num_authors),
                  "institution": int(lsc.num_institutions)}
    except (OSError, ValueError, KeyError, RuntimeError, AssertionError, EOFError, pickle.UnpicklingError) as exc:
        raise InputError(f"the MAG240M files under {folder} could not be read ({str(exc).splitlines()[0]}); "
                         "re-extract them") from None
    extra_meta = {"test_split": "empty: the MAG240M test labels are hidden; use the validation accuracy"}
    splits = (np.asarray(train), np.asarray(valid), np.empty(0, dtype=np.int64))
    if options.all_types:
        return typed_dataset({t: counts[t] for t in MAG240M_TYPES}, edges, "paper", x, labels, splits, {},
                             options.keep_self_loops, "ogb-lsc:mag240m", extra_meta=extra_meta)
    num_nodes = counts["paper"]
    rowptr, col = build_csr(edges[relations[0]], num_nodes, options.keep_self_loops)
    return Dataset(rowptr=rowptr, col=col, x=as_features(x, num_nodes, "paper features"),
                   y=as_labels(labels, num_nodes, "paper labels"),
                   train_idx=_as_ids(splits[0], "train split"), valid_idx=_as_ids(splits[1], "valid split"),
                   test_idx=splits[2], source="ogb-lsc:mag240m", extra_meta=extra_meta)
