"""The ``npz:PATH`` source: one ``.npz`` archive holding the graph, features, labels and splits,
and optionally held-out edges for link prediction."""
from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

from ..errors import InputError, shown
from ..io import check_input_file
from .convert import as_features, as_labels, as_split
from .csr import build_csr
from .format import Dataset, entry_relations
from .links import EDGE_SPLITS, LinkSplit, check_edge_array, check_held_out, remove_edges
from .options import ImportOptions
from .schema import GraphSchema, Relation

_NPZ_SIGNATURES = (b"PK\x03\x04", b"PK\x05\x06")   # a zip archive (an empty one: end of central directory)
_NPY_MAGIC = b"\x93NUMPY"
_SPLIT_KEYS = (("train_idx", "train_mask"), ("val_idx", "val_mask"), ("test_idx", "test_mask"))


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` archive; one sentence for anything that is not a readable one."""
    check_input_file(path, "npz file", "give the path of an .npz archive")
    try:
        with open(path, "rb") as f:
            magic = f.read(len(_NPY_MAGIC))
    except OSError as exc:
        raise InputError(f"npz file {path} could not be read ({shown(str(exc))}); check the file") from None
    if magic.startswith(_NPY_MAGIC):
        raise InputError(f"{path} is a single .npy array, not an npz archive; write all arrays into one archive with "
                         "numpy.savez(path, edge_index=..., x=..., y=..., train_idx=..., val_idx=..., test_idx=...)")
    if not magic.startswith(_NPZ_SIGNATURES):
        raise InputError(f"{path} is not an npz archive (it does not start with the zip signature); write it with "
                         "numpy.savez or numpy.savez_compressed")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except ValueError as exc:
        if "pickle" in str(exc):
            raise InputError(f"{path} holds pickled (object) arrays, which salientpp never loads; save plain numeric "
                             "arrays with numpy.savez") from None
        reason = exc
    except (OSError, EOFError, KeyError, NotImplementedError, OverflowError, MemoryError, zipfile.BadZipFile,
            zlib.error) as exc:
        reason = exc
    raise InputError(f"{path} is a truncated or corrupt npz archive ({shown(str(reason) or type(reason).__name__)}); "
                     "write it again with numpy.savez")


def _from_npz(path: Path, options: ImportOptions) -> Dataset:
    arrays = _read_npz(path)
    for idx_key, mask_key in _SPLIT_KEYS:
        if idx_key not in arrays and mask_key in arrays:
            arrays[idx_key] = arrays[mask_key]
    needed = ("edge_index", "x", "y", "train_idx", "val_idx", "test_idx")
    missing = [key for key in needed if key not in arrays]
    if missing:
        raise InputError(f"{path} lacks the key(s) {', '.join(missing)}; an npz source needs {', '.join(needed)} "
                         "(the splits as id arrays or boolean masks; train_mask, val_mask, test_mask also work)")
    x = arrays["x"]
    num_nodes = int(x.shape[0]) if x.ndim >= 1 else 0
    rowptr, col = build_csr(arrays["edge_index"], num_nodes, options.keep_self_loops)
    schema = GraphSchema.homogeneous(num_nodes)
    link_split = _npz_link_split(arrays, path, num_nodes, schema.relations[0])
    if link_split is not None:  # held-out edges leave the message-passing graph
        edge_rel = entry_relations(None, schema, col.shape[0])
        rowptr, col, edge_rel = remove_edges(rowptr, col, edge_rel, np.concatenate([link_split.valid, link_split.test],
                                                                                  axis=1), 0, 0)
        check_held_out(rowptr, col, edge_rel, schema, link_split, str(path), "every training edge must be in "
                       "edge_index and in neither valid_edges nor test_edges")
    return Dataset(rowptr=rowptr, col=col, x=as_features(x, num_nodes, f"x in {path}"),
                   y=as_labels(arrays["y"], num_nodes, f"y in {path}"),
                   train_idx=as_split(arrays["train_idx"], num_nodes, "train_idx"),
                   valid_idx=as_split(arrays["val_idx"], num_nodes, "val_idx"),
                   test_idx=as_split(arrays["test_idx"], num_nodes, "test_idx"),
                   source=f"npz:{path.resolve()}", link_split=link_split)


def _npz_link_split(arrays: dict[str, np.ndarray], path: Path, num_nodes: int, relation: Relation
                    ) -> LinkSplit | None:
    """The held-out edges of an npz archive (keys ``train_edges``, ``valid_edges``, ``test_edges``,
    integer ``[2, E_s]`` of ids in ``[0, num_nodes)`` without self loops, all three or none) as
    int64 edges of ``relation`` (the graph's one), or ``None`` without them."""
    given = [key for key in EDGE_SPLITS if key in arrays]
    if not given:
        return None
    if len(given) != len(EDGE_SPLITS):
        raise InputError(f"{path} has {', '.join(given)} but not every one of {', '.join(EDGE_SPLITS)}; give all "
                         "three held-out edge arrays or none")
    edges = []
    for key in EDGE_SPLITS:
        array = np.asarray(arrays[key])
        if array.ndim != 2 or array.shape[0] != 2 or not np.issubdtype(array.dtype, np.integer):
            raise InputError(f"{key} in {path} must be an integer [2, E] edge array, got {array.dtype} "
                             f"{list(array.shape)}; store one column per edge")
        array = array.astype(np.int64)
        check_edge_array(array, num_nodes, f"{key} in {path}", "fix the held-out edges")
        edges.append(array)
    return LinkSplit(*edges, relation=relation)
