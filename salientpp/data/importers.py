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
    ``ogb-lsc:mag240m`` MAG240M's paper citation graph (papers only) already on disk under ``--root``
"""
from __future__ import annotations

import codecs
import gzip
import os
import pickle
import re
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from ..errors import InputError, counted
from .csr import build_csr
from ..io import read_rows, row_chunks, shown
from .format import MULTICLASS, Dataset, check_disjoint_splits, class_count, labelled
from .links import EDGE_SPLITS, LinkSplit, check_edge_array, check_held_out, remove_edges

SCHEMES = ("synthetic", "npz", "edgelist", "ogb", "ogb-lsc")
# Classes of the random labels of an edge list without a labels file, unless --num-classes says.
RANDOM_CLASSES = 2
# The smallest magnitude that float16 rounds to infinity (its largest finite value is 65504).
FLOAT16_OVERFLOW = 65520.0


@dataclass
class ImportOptions:
    """Options of ``salientpp prepare`` that some sources use.

    Attributes:
        root: directory that holds OGB datasets (``ogb:`` only).
        features, labels, train_idx, valid_idx, test_idx: ``.npy`` files (``edgelist:`` only);
            labels are class ids ``[N]`` or multi-label targets ``[N, T]`` (see :func:`as_labels`).
        num_nodes: number of nodes when the edge list does not mention the last ones.
        feature_dtype: "float32" or "float16"; features are converted to it.
        keep_self_loops: keep (v, v) edges instead of dropping them.
        seed: seeds the random split, features and labels an edge list lacks.
        num_features: width of the random features an edge list lacks.
        num_classes: the number of classes, recorded as meta.json's ``num_classes``: of the random
            labels an edge list lacks (default :data:`RANDOM_CLASSES`), or the bound that the class
            ids a source gives must lie below (default: their largest id + 1).
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
    num_classes: int | None = None


def load_source(source: str, options: ImportOptions | None = None) -> Dataset:
    """Read ``source`` (``SCHEME:ARG``) into a validated :class:`Dataset`."""
    options = options or ImportOptions()
    scheme, sep, arg = source.partition(":")
    if not sep or scheme not in SCHEMES:
        raise InputError(f"unknown source {source!r}; use one of "
                         + ", ".join(f"{s}:..." for s in SCHEMES))
    if not arg:
        raise InputError(f"source {source!r} names no {scheme} argument; write it as {scheme}:ARG")
    check_feature_dtype(options.feature_dtype)
    check_counts(options)
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
    if options.num_classes is not None:
        declare_classes(dataset, options.num_classes)
    return checked(dataset, options.feature_dtype)


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
    """``dataset`` with its features converted to ``feature_dtype`` (no copy when they have it),
    after the checks every imported dataset passes: finite features that fit ``feature_dtype``
    (:func:`check_fits_float16`), :meth:`Dataset.validate` (CSR, shapes and dtypes, at least
    one feature column, finite features, labels, labelled split ids without repeats, a training
    node) and disjoint train/valid/test splits. Raises :class:`InputError` with one sentence
    naming ``dataset.source``."""
    check_feature_dtype(feature_dtype)
    if feature_dtype == "float16" and dataset.x.dtype != np.float16 and dataset.x.ndim == 2:
        check_fits_float16(dataset.x, dataset.source)
    dataset.x = np.asarray(dataset.x).astype(feature_dtype, copy=False)
    dataset.validate()
    check_disjoint_splits({"train": dataset.train_idx, "valid": dataset.valid_idx, "test": dataset.test_idx},
                          dataset.num_nodes, dataset.source)
    return dataset


def check_feature_dtype(name: str) -> None:
    """Raise :class:`InputError` unless ``name`` is ``"float32"`` or ``"float16"``."""
    if name not in ("float32", "float16"):
        raise InputError(f"feature dtype must be float32 or float16, got {name!r}")


def check_counts(options: ImportOptions) -> None:
    """Raise :class:`InputError` unless ``num_nodes`` (when given), ``num_features`` and
    ``num_classes`` are positive: checked before any input is read."""
    for flag, value in (("--num-nodes", options.num_nodes), ("--num-features", options.num_features),
                        ("--num-classes", options.num_classes)):
        if value is None or value >= 1:
            continue
        if flag == "--num-features":
            raise InputError(f"--num-features must be at least 1, got {value}: at least one feature column is needed "
                             "in a dataset; to train on a learned embedding alone, pass --num-features 1 and train "
                             "with --embedding-dim D --no-features")
        raise InputError(f"{flag} must be a positive count, got {value}; pass {flag} 1 or more")


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


_NPZ_SIGNATURES = (b"PK\x03\x04", b"PK\x05\x06")   # a zip archive (an empty one: end of central directory)
_NPY_MAGIC = b"\x93NUMPY"
_SPLIT_KEYS = (("train_idx", "train_mask"), ("val_idx", "val_mask"), ("test_idx", "test_mask"))


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` archive; one sentence for anything that is not a readable one."""
    if not path.is_file():
        raise InputError(f"npz file {path} does not exist; check the path")
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
    link_split = _npz_link_split(arrays, path, num_nodes)
    if link_split is not None:  # held-out edges leave the message-passing graph
        rowptr, col = remove_edges(rowptr, col, np.concatenate([link_split.valid, link_split.test], axis=1))
        check_held_out(rowptr, col, link_split, str(path), "every training edge must be in edge_index and in "
                       "neither valid_edges nor test_edges")
    return Dataset(rowptr=rowptr, col=col, x=as_features(x, num_nodes, f"x in {path}"),
                   y=as_labels(arrays["y"], num_nodes, f"y in {path}"),
                   train_idx=as_split(arrays["train_idx"], num_nodes, "train_idx"),
                   valid_idx=as_split(arrays["val_idx"], num_nodes, "val_idx"),
                   test_idx=as_split(arrays["test_idx"], num_nodes, "test_idx"),
                   source=f"npz:{path.resolve()}", link_split=link_split)


def _npz_link_split(arrays: dict[str, np.ndarray], path: Path, num_nodes: int) -> LinkSplit | None:
    """The held-out edges of an npz archive (keys ``train_edges``, ``valid_edges``, ``test_edges``,
    integer ``[2, E_s]`` of ids in ``[0, num_nodes)`` without self loops, all three or none) as
    int64, or ``None`` without them."""
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
    return LinkSplit(*edges)


# ---- edge lists ----------------------------------------------------------------------------

_BLOCK_BYTES = 1 << 24           # text parsed per step: bounds the temporaries to ~20x this
_LONGEST_LINE = 1 << 20          # a "line" longer than this means the file is no edge list
_SEPARATORS = bytes.maketrans(b"\t,\r", b"   ")
_COMMENT = re.compile(rb"#[^\n]*")
_INT64_MAX = np.uint64(2**63 - 1)
_MAX_DIGITS = 19                 # 10**19 - 1 < 2**64: up to 19 digits fit the uint64 accumulator
_NEGATIVE = re.compile(rb"-[0-9]+")
# Byte-order marks, longest first (the UTF-32 LE mark starts with the UTF-16 LE one).
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"), (b"\xff\xfe", "utf-16"),
         (b"\xfe\xff", "utf-16"))
_UTF8_BOM = b"\xef\xbb\xbf"
_GZIP = b"\x1f\x8b"
_OTHER_COMPRESSION = ((b"BZh", "bzip2", "bunzip2 -k"), (b"\xfd7zXZ\x00", "xz", "unxz -k"),
                      (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"), (b"PK\x03\x04", "zip", "unzip"))
# Peak bytes that `prepare` holds per node (rowptr, degree count, labels, split permutation and
# temporaries) and per input edge (build_csr's keys, copies and mask); see _check_edgelist_memory.
_BYTES_PER_NODE = 48
_BYTES_PER_EDGE = 64
# build_csr keys an edge as u * N + v in int64.
_MAX_NODES = 3_037_000_499


def _edgelist_blocks(path: Path) -> Iterator[bytes]:
    """The text of an edge list as ASCII/UTF-8 bytes, in blocks of whole lines (the last one may
    lack its line end). gzip is decompressed (recognised by its magic bytes, whatever the name)
    and text with a UTF-16 or UTF-32 byte-order mark decoded, both on the fly."""
    with open(path, "rb") as f:
        magic = f.read(6)
    for signature, name, tool in _OTHER_COMPRESSION:
        if magic.startswith(signature):
            raise InputError(f"edge list {path} is {name}-compressed, which salientpp does not read; decompress it "
                             f"first (`{tool} {path}`) or recompress it with gzip, which is read as is")
    with (gzip.open(path, "rb") if magic.startswith(_GZIP) else open(path, "rb")) as stream:
        chunk = stream.read(_BLOCK_BYTES)
        decoder = None
        for bom, codec in _BOMS:
            if chunk.startswith(bom):
                decoder = codecs.getincrementaldecoder(codec)()
                break
        else:
            if chunk.startswith(_UTF8_BOM):
                chunk = chunk[len(_UTF8_BOM):]
        carry, lines = b"", 0
        while chunk:
            if decoder is not None:
                chunk = decoder.decode(chunk).encode("utf-8")
            chunk = carry + chunk
            cut = chunk.rfind(b"\n") + 1
            if cut:
                lines += chunk.count(b"\n", 0, cut)
                yield chunk[:cut]
            elif len(chunk) > _LONGEST_LINE:
                raise InputError(f"line {lines + 1} of edge list {path} is longer than "
                                 f"{_LONGEST_LINE // 2**20} MiB, so the file is not a text edge list; give a "
                                 "text file with one 'u v' pair of node ids per line")
            carry = chunk[cut:]
            chunk = stream.read(_BLOCK_BYTES)
        if decoder is not None:
            carry += decoder.decode(b"", final=True).encode("utf-8")
        if carry:
            yield carry


class _EdgeListParser:
    """Parses an edge list block by block, vectorised: no Python work per line.

    Lines hold ``u v`` (spaces, tabs or commas between; ``#`` starts a comment; blank lines are
    skipped). Every data line must have the two columns of the first one. Any problem raises
    :class:`InputError` naming the (1-based) number of the first line at fault.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines_before = 0           # lines in the blocks already parsed
        self.columns: int | None = None    # tokens on the first data line
        self.first_data_line = 0

    def parse(self, block: bytes) -> np.ndarray:
        """int64 ``[k, 2]`` edges of one block of whole lines."""
        if b"\x00" in block:
            raise InputError(f"edge list {self.path} holds NUL bytes, so it is not ASCII/UTF-8 text (binary data, or "
                             "UTF-16/UTF-32 text without a byte-order mark); convert it, e.g. with `iconv -f UTF-16LE "
                             f"-t UTF-8 {self.path} > edges.txt`")
        first_line = self.lines_before + 1
        self.lines_before += block.count(b"\n")
        stripped = _COMMENT.sub(b"", block) if b"#" in block else block  # line ends stay where they were
        buf = np.frombuffer(stripped.translate(_SEPARATORS), dtype=np.uint8)
        is_token = (buf != 32) & (buf != 10)
        flips = np.diff(is_token.view(np.int8), prepend=np.int8(0), append=np.int8(0))
        starts, ends = np.flatnonzero(flips == 1), np.flatnonzero(flips == -1)
        del flips
        if not starts.shape[0]:
            return np.empty((0, 2), dtype=np.int64)
        newlines = np.flatnonzero(buf == 10)
        line_of = np.searchsorted(newlines, starts)   # 0-based line of each token in this block

        def line_number(line: int) -> int:
            return first_line + int(line)

        def line_text(line: int) -> str:
            begin = int(newlines[line - 1]) + 1 if line else 0
            end = int(newlines[line]) if line < newlines.shape[0] else len(stripped)
            return shown(stripped[begin:end].strip().decode("ascii", "backslashreplace"))

        def token(i: int) -> bytes:
            return stripped[starts[i]:ends[i]]

        # Tokens per line: runs of equal line_of.
        run_start = np.flatnonzero(np.diff(line_of, prepend=-1))
        counts = np.diff(run_start, append=starts.shape[0])
        # (line number, priority, message) of each kind of problem; the first line wins.
        problems: list[tuple[int, int, str]] = []

        bad = is_token & ((buf < 48) | (buf > 57))
        bad_token = -1
        if bad.any():
            position = int(bad.argmax())
            bad_token = int(np.searchsorted(starts, position, side="right")) - 1
            problems.append((line_number(line_of[bad_token]), 1, self._not_an_id(
                line_number(line_of[bad_token]), token(bad_token))))
        del bad, is_token

        values = _parse_digits(buf, starts, ends)
        too_big = values > _INT64_MAX
        for i in np.flatnonzero(ends - starts > _MAX_DIGITS):       # rare: leading zeros or huge ids
            if token(i).isdigit():
                value = int(token(i))
                too_big[i] = value > 2**63 - 1
                values[i] = min(value, 2**63 - 1)
        if too_big.any():
            i = int(too_big.argmax())
            problems.append((line_number(line_of[i]), 2,
                             f"line {line_number(line_of[i])} of edge list {self.path} holds the node id "
                             f"{shown(token(i).decode())}, which is not below 2**63; renumber the nodes with "
                             "smaller integers (e.g. 0..n-1)"))

        if self.columns is None:
            self.columns = int(counts[0])
            first = int(line_of[0])
            number = line_number(first)
            head_ok = (bad_token < 0 or bad_token >= min(self.columns, 2)) and not too_big[:min(self.columns, 2)].any()
            if self.columns == 1 and head_ok:
                problems.append((number, 0, f"line {number} of edge list {self.path} holds one node id "
                                 f"('{line_text(first)}') but each line needs two, 'u v'; write one pair of node ids "
                                 "per line"))
            elif self.columns > 2 and head_ok:
                head = stripped[:int(newlines[first]) if first < newlines.shape[0] else None]
                cut = f"cut -d, -f1,2 {self.path}" if b"," in head else f"awk '{{print $1, $2}}' {self.path}"
                problems.append((number, 0, f"line {number} of edge list {self.path} has {self.columns} columns "
                                 f"('{line_text(first)}') but edge weights and other per-edge values are not "
                                 f"supported; keep only the first two columns, e.g. with `{cut} > edges.txt`"))
            self.first_data_line = number
        ragged = counts != self.columns
        if ragged.any():
            run = int(ragged.argmax())
            line = int(line_of[run_start[run]])
            number = line_number(line)
            problems.append((number, 0, f"line {number} of edge list {self.path} has "
                             f"{counted(int(counts[run]), 'column')} ('{line_text(line)}') but line "
                             f"{self.first_data_line} has {self.columns}; write one 'u v' pair of node ids on "
                             "every line"))
        if problems:
            raise InputError(min(problems)[2])
        return values.view(np.int64).reshape(-1, 2)

    def _not_an_id(self, number: int, text: bytes) -> str:
        if _NEGATIVE.fullmatch(text):
            return (f"line {number} of edge list {self.path} holds the negative node id {text.decode()}; node ids "
                    "must be integers >= 0, so renumber the nodes")
        try:
            shown_text = shown(text.decode("utf-8"))
        except UnicodeDecodeError:
            shown_text = shown(text.decode("ascii", "backslashreplace"))
            return (f"line {number} of edge list {self.path} holds '{shown_text}', which is not an integer node id "
                    "and not UTF-8 (is the file in another encoding, e.g. Latin-1?); write integer ids in "
                    f"ASCII/UTF-8 text, converting with `iconv -f LATIN1 -t UTF-8 {self.path} > edges.txt` if needed")
        return (f"line {number} of edge list {self.path} holds '{shown_text}', which is not an integer node id; "
                "write one 'u v' pair of integer ids >= 0 per line (start a header line with '#')")


def _parse_digits(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """uint64 value of each token ``buf[starts[i]:ends[i]]`` of at most 19 ASCII digits (others:
    garbage, or 0 when longer). Tokens are grouped by length, so each digit costs a few vector
    operations and no masking."""
    lengths = ends - starts
    digits = buf - np.uint8(48)
    values = np.zeros(starts.shape[0], dtype=np.uint64)
    counts = np.bincount(lengths)
    order = np.argsort(np.minimum(lengths, 255).astype(np.uint8), kind="stable")  # radix sort: cheap
    bounds = np.cumsum(counts)
    for length in np.flatnonzero(counts[:_MAX_DIGITS + 1]):
        chosen = order[bounds[length] - counts[length]:bounds[length]]
        position = starts[chosen]
        value = digits[position].astype(np.uint64)
        for k in range(1, int(length)):
            value *= np.uint64(10)
            value += digits[position + k]
        values[chosen] = value
    return values


def _read_edgelist(path: Path) -> np.ndarray:
    """int64 ``[2, E]`` edges of a text edge list (see :class:`_EdgeListParser`), plain or gzip."""
    if not path.is_file():
        raise InputError(f"edge list {path} does not exist; check the path")
    parser = _EdgeListParser(path)
    try:
        parts = [parser.parse(block) for block in _edgelist_blocks(path)]
    except UnicodeDecodeError as exc:
        raise InputError(f"edge list {path} starts with a {exc.encoding} byte-order mark but is not valid "
                         f"{exc.encoding} text ({shown(exc.reason)}); convert it to UTF-8 with iconv") from None
    except (OSError, EOFError, zlib.error) as exc:
        reason = shown(str(exc) or type(exc).__name__)
        if _starts_with(path, _GZIP):
            raise InputError(f"edge list {path} is a truncated or corrupt gzip file ({reason}); compress or "
                             "download it again") from None
        raise InputError(f"edge list {path} could not be read ({reason}); check the file") from None
    edges = np.concatenate(parts) if parts else np.empty((0, 2), dtype=np.int64)
    del parts
    return np.ascontiguousarray(edges.T)


def _starts_with(path: Path, magic: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(magic)) == magic
    except OSError:
        return False


def _compact_ids(edge_index: np.ndarray, largest: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(edge_index renumbered to 0..n-1, the n distinct ids ascending)`` when fewer than half of
    the ids ``0..largest`` occur, else ``None`` (the ids are kept)."""
    flat = edge_index.ravel()
    if largest + 1 <= 2 * flat.shape[0]:          # a bitmap no bigger than flat's bytes / 4
        seen = np.zeros(largest + 1, dtype=bool)
        seen[flat] = True
        if 2 * int(np.count_nonzero(seen)) >= largest + 1:
            return None
        ids = np.flatnonzero(seen)
    else:                                          # at most 2E distinct ids < (largest + 1) / 2
        ids = np.sort(flat)
        keep = np.empty(ids.shape[0], dtype=bool)
        keep[0] = True
        np.not_equal(ids[1:], ids[:-1], out=keep[1:])
        ids = ids[keep]
    return np.searchsorted(ids, edge_index).astype(np.int64, copy=False), ids.astype(np.int64, copy=False)


def _check_edgelist_memory(path: Path, num_nodes: int, num_edges: int, generated_width: int,
                           feature_dtype: str, basis: str, fix: str) -> None:
    """Refuse in one sentence when importing needs more memory than is available.

    Counts the per-node arrays (``_BYTES_PER_NODE``), build_csr's work on the edges
    (``_BYTES_PER_EDGE``) and the random features when they are generated
    (``generated_width`` columns); below 1 GiB the check is skipped. ``basis`` says where the
    number of nodes comes from and ``fix`` how to need less, for the message.
    """
    if num_nodes > _MAX_NODES:
        raise InputError(f"edge list {path} would have {counted(num_nodes, 'node', spec=',')} ({basis}) but at "
                         f"most {_MAX_NODES:,} are supported; "
                         f"{fix if '--num-nodes' in fix else 'renumber the nodes densely (0..n-1)'}")
    features = num_nodes * generated_width * (4 + (2 if feature_dtype == "float16" else 0))
    need = num_nodes * _BYTES_PER_NODE + features + num_edges * _BYTES_PER_EDGE
    if need < 2**30:
        return
    if 2 * features > need:
        fix += ", or pass a smaller --num-features"
    from ..host import available_memory, format_bytes
    available = available_memory()
    if need > available:
        raise InputError(f"edge list {path} needs about {format_bytes(need)} of memory for "
                         f"{counted(num_nodes, 'node', spec=',')} ({basis}) and {counted(num_edges, 'edge', spec=',')} "
                         f"but only {format_bytes(available)} is available; {fix}")


def _from_edgelist(path: Path, options: ImportOptions) -> Dataset:
    split_files = (options.train_idx, options.valid_idx, options.test_idx)
    if any(split_files) and not all(split_files):
        raise InputError("give all three split files (--train-idx, --valid-idx, --test-idx) or none for a random split")
    edge_index = _read_edgelist(path)
    rng = np.random.default_rng(options.seed)
    generated = []
    x = _read_npy(options.features, "features") if options.features else None
    y = _read_npy(options.labels, "labels") if options.labels else None
    num_edges = int(edge_index.shape[1])
    largest = int(edge_index.max()) if num_edges else -1
    input_id = None
    if options.num_nodes is not None:
        num_nodes, basis = options.num_nodes, f"--num-nodes {options.num_nodes}"
    elif x is not None and x.ndim:
        num_nodes, basis = int(x.shape[0]), f"one per row of the features {options.features}"
    elif y is not None and y.ndim:
        num_nodes, basis = int(y.shape[0]), f"one per label in {options.labels}"
    else:
        if not num_edges:
            raise InputError(f"edge list {path} holds no edges (only blank lines or comments); give one 'u v' pair "
                             "of node ids per line")
        num_nodes, basis = largest + 1, f"the largest id {largest:,} plus one"
        compacted = None if any(split_files) else _compact_ids(edge_index, largest)
        if compacted is not None:
            edge_index, input_id = compacted
            num_nodes, basis = int(input_id.shape[0]), f"the distinct ids, compacted from 0..{largest:,}"
    if largest >= num_nodes and input_id is None:
        fix = (f"pass --num-nodes {largest + 1} or more" if options.num_nodes is not None else
               f"give the .npy files one row per node id 0..{largest}, or renumber the nodes densely in all files")
        raise InputError(f"edge list {path} mentions node {largest} but the graph has {counted(num_nodes, 'node')} "
                         f"({basis}); {fix}")
    if x is not None:
        x = as_features(x, num_nodes, "features")
    if y is not None:
        y = as_labels(y, num_nodes, "labels")
    if options.num_nodes is not None:
        fix = "pass a smaller --num-nodes"
    elif x is None and y is None and any(split_files):
        fix = ("renumber the nodes densely (0..n-1) in the edge list and the split files (sparse ids are compacted "
               "by themselves only when no split, feature or label files are given)")
    else:
        fix = "use a machine with more memory"
    _check_edgelist_memory(path, num_nodes, num_edges, 0 if x is not None else options.num_features,
                           options.feature_dtype, basis, fix)
    rowptr, col = build_csr(edge_index, num_nodes, options.keep_self_loops)
    del edge_index
    if x is None:
        x = rng.standard_normal((num_nodes, options.num_features), dtype=np.float32)
        generated.append("features")
    declared = None
    if y is None:
        declared = options.num_classes or RANDOM_CLASSES
        y = rng.integers(0, declared, num_nodes)
        generated.append("labels")
    if all(split_files):
        splits = [_as_ids(_read_npy(f, name), name) for f, name in zip(split_files, ("train_idx", "valid_idx", "test_idx"))]
    else:
        splits = random_split(y, (0.08, 0.02, 0.90), rng)
        generated.append("split")
    return Dataset(rowptr=rowptr, col=col, x=x, y=y, train_idx=splits[0], valid_idx=splits[1], test_idx=splits[2],
                   source=f"edgelist:{path.resolve()}",
                   extra_meta={"generated": generated, "seed": options.seed} if generated else {},
                   input_id=input_id, declared_classes=declared)


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
    return Dataset(rowptr=rowptr, col=col, x=as_features(x, num_nodes, "paper features"),
                   y=as_labels(labels, num_nodes, "paper labels"),
                   train_idx=_as_ids(np.asarray(train), "train split"), valid_idx=_as_ids(np.asarray(valid), "valid split"),
                   test_idx=np.empty(0, dtype=np.int64), source="ogb-lsc:mag240m",
                   extra_meta={"test_split": "empty: the MAG240M test labels are hidden; use the validation accuracy"})
