"""The arrays of a salientpp directory: ``.npy`` files and the ``meta.json`` that lists each one's
dtype, shape and checksum. Written whole (:func:`save_array`) or piece by piece
(:class:`NpyWriter`), read back checked against meta.json (:func:`load_array`,
:func:`load_listed`, :func:`read_meta`), and read in row chunks that leave no pages of a memory
map resident (:func:`read_rows`, :func:`row_chunks`)."""
from __future__ import annotations

import hashlib
import json
import os
import threading
import zipfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..errors import InputError, shown
from .inputs import check_input_file

_CHUNK = 1 << 24
# numpy parses a .npy header with ast.literal_eval, which CPython 3.11.7 cannot run in two threads
# at once ("SystemError: AST constructor recursion depth mismatch", CPython gh-106905, fixed in
# later releases): ranks run as threads (the tests' start-up checks, a user's threads) load one
# at a time. With mmap a load reads the header only.
_NPY_LOAD_LOCK = threading.Lock()


def file_checksum(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes, read in 16 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def save_array(directory: Path, name: str, array: np.ndarray) -> dict[str, Any]:
    """Write ``directory/name.npy`` (the bytes ``np.save`` writes) and return its meta.json entry
    (dtype, shape, checksum). Written with Python's file I/O, not ``np.save``: numpy reports a
    short write (a full disk) as an ``OSError`` without an errno, which no caller can recognise."""
    path = Path(directory) / f"{name}.npy"
    data = np.ascontiguousarray(array)
    with open(path, "wb") as f:
        f.write(npy_header(data.dtype, data.shape))
        f.write(memoryview(data.reshape(-1)).cast("B"))
    return {"dtype": str(array.dtype), "shape": list(array.shape), "checksum": file_checksum(path)}


def read_rows(array: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Rows ``[lo, hi)`` of ``array`` as an in-memory array.

    A memory map of a whole C-ordered ``.npy`` array (as :func:`load_array` returns) is read
    with ``read()`` calls instead of through the map, so a pass over a file larger than memory
    never makes its pages part of this process's resident memory; other arrays are sliced.
    """
    if isinstance(array, np.memmap) and array.filename is not None and array.flags.c_contiguous:
        with open(array.filename, "rb") as f:
            if os.fstat(f.fileno()).st_size == array.offset + array.nbytes:  # the map is the whole array
                row_items = int(np.prod(array.shape[1:], dtype=np.int64))
                f.seek(array.offset + lo * row_items * array.itemsize)
                out = np.fromfile(f, dtype=array.dtype, count=(hi - lo) * row_items)
                if out.shape[0] != (hi - lo) * row_items:
                    raise InputError(f"{array.filename} ended early while being read; re-create it")
                return out.reshape((hi - lo,) + array.shape[1:])
    return np.asarray(array[lo:hi])


def row_chunks(num_rows: int, row_bytes: int, chunk_bytes: int = _CHUNK) -> Iterator[tuple[int, int]]:
    """``(lo, hi)`` row ranges of about ``chunk_bytes`` each (at least one row) covering ``num_rows``."""
    step = max(1, chunk_bytes // max(1, row_bytes))
    for lo in range(0, num_rows, step):
        yield lo, min(num_rows, lo + step)


def npy_header(dtype: np.dtype, shape: tuple[int, ...], length: int | None = None) -> bytes:
    """The ``.npy`` (version 1.0) header of a C-ordered array, padded as ``np.save`` pads it
    (to a multiple of 64 bytes) or to ``length`` bytes."""
    text = f"{{'descr': {np.lib.format.dtype_to_descr(np.dtype(dtype))!r}, 'fortran_order': False, " \
           f"'shape': {tuple(int(d) for d in shape)!r}, }}"
    prefix = 10  # magic string, version, header length
    length = length or -(-(prefix + len(text) + 1) // 64) * 64
    text = text.ljust(length - prefix - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode("latin1")


class NpyWriter:
    """An ``.npy`` file written piece by piece, so no piece is kept in memory.

    With a known ``shape``, the file is sized at once and :meth:`write` puts rows at any
    position (``pwrite``). With ``shape[0] = None`` the row count grows: :meth:`append` adds rows
    at the end and :meth:`close` writes the final shape into the header, which was reserved at
    its largest length. :meth:`close` returns the meta.json entry (dtype, shape, checksum).
    """

    def __init__(self, path: Path, dtype: np.dtype, shape: tuple[int | None, ...]):
        self.path, self.dtype = Path(path), np.dtype(dtype)
        self.growable = shape[0] is None
        self.shape = (0 if self.growable else int(shape[0]),) + tuple(int(d) for d in shape[1:])
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize
        self._file = open(self.path, "wb")
        header = npy_header(self.dtype, ((10**18,) if self.growable else self.shape[:1]) + self.shape[1:])
        self._file.write(header)
        self._file.flush()
        self.data_offset = len(header)
        self._file.truncate(self.data_offset + self.shape[0] * self.row_bytes)

    def write(self, first_row: int, rows: np.ndarray) -> None:
        """Write ``rows`` (``[r, ...]`` of this dtype and row shape) as rows ``first_row, ...``."""
        data = np.ascontiguousarray(rows, dtype=self.dtype)
        view = memoryview(data).cast("B")
        offset = self.data_offset + first_row * self.row_bytes
        while view:
            written = os.pwrite(self._file.fileno(), view, offset)
            view, offset = view[written:], offset + written

    def append(self, rows: np.ndarray) -> None:
        """Add ``rows`` after the last row (a growable file)."""
        first = self.shape[0]
        self.shape = (first + rows.shape[0],) + self.shape[1:]
        self.write(first, rows)

    def close(self) -> dict[str, Any]:
        """Close the file and return its meta.json entry (dtype, shape, checksum)."""
        if self.growable:
            os.pwrite(self._file.fileno(), npy_header(self.dtype, self.shape, self.data_offset), 0)
        self._file.close()
        return {"dtype": str(self.dtype), "shape": list(self.shape), "checksum": file_checksum(self.path)}


def load_array(directory: Path, name: str, entry: dict[str, Any] | None = None, mmap: bool = True,
               verify: bool = True, dtypes: tuple[str, ...] | None = None, ndim: int | None = None,
               fix: str = "re-create it") -> np.ndarray:
    """Memory-map ``directory/name.npy`` and check it against its meta.json ``entry``.

    Args:
        entry: ``{"dtype": str, "shape": [int, ...], "checksum": "sha256:..."}`` from meta.json;
            ``None`` skips the comparison.
        verify: also recompute the checksum (one read of the whole file) and compare.
        dtypes, ndim: the dtypes and the number of dimensions the format allows for this array
            (meta.json may lie too).
        fix: how the user repairs the directory, the end of every message.

    Raises :class:`InputError` when the file is missing or no regular file
    (:func:`~salientpp.io.check_input_file`), unreadable, of a dtype outside ``dtypes`` or another
    ``ndim``, or disagrees with the entry in dtype, shape or (with ``verify``) checksum. Never
    unpickles.
    """
    path = check_input_file(Path(directory) / f"{name}.npy", fix=fix)
    if entry is not None and not (isinstance(entry.get("dtype"), str) and isinstance(entry.get("checksum"), str)
                                  and isinstance(entry.get("shape"), list)
                                  and all(isinstance(d, int) for d in entry["shape"])):
        raise InputError(f"the meta.json entry of {path} lacks a valid dtype, shape or checksum; {fix}")
    try:
        with _NPY_LOAD_LOCK:
            array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError, OverflowError) as exc:
        reason = shown(str(exc) or type(exc).__name__)
        raise InputError(f"{path} is not a readable .npy file ({reason}); {fix}") from None
    if not isinstance(array, np.ndarray):  # an .npz archive under a .npy name
        array.close()
        raise InputError(f"{path} is an .npz archive, not a .npy file; {fix}")
    if dtypes is not None and str(array.dtype) not in dtypes:
        raise InputError(f"{path} holds {array.dtype} values but the format needs {' or '.join(dtypes)}; {fix}")
    if ndim is not None and array.ndim != ndim:
        raise InputError(f"{path} has shape {list(array.shape)} but the format needs a {ndim}-D array; {fix}")
    if entry is not None:
        if str(array.dtype) != entry["dtype"] or list(array.shape) != entry["shape"]:
            raise InputError(
                f"{path} has dtype {array.dtype} and shape {list(array.shape)} but meta.json says "
                f"{shown(entry['dtype'])} {shown(entry['shape'])}; {fix}")
        if verify and file_checksum(path) != entry["checksum"]:
            raise InputError(f"{path} does not match its checksum in meta.json, so the file is corrupt; {fix}")
    return array


def load_listed(root: Path, key: str, meta: dict[str, Any], fix: str, dtypes: tuple[str, ...] | None = None,
                ndim: int | None = None, verify: bool = True) -> np.ndarray:
    """:func:`load_array` of ``root/key.npy`` against ``meta["files"][key]``; ``key`` may name a
    sub-directory (``"part_0/x"``). Raises :class:`InputError` when meta.json does not list it."""
    entry = meta["files"].get(key)
    if not isinstance(entry, dict):
        raise InputError(f"meta.json in {root} does not list {key}.npy; {fix}")
    path = Path(root) / key
    return load_array(path.parent, path.name, entry, verify=verify, dtypes=dtypes, ndim=ndim, fix=fix)


def write_meta(directory: Path, meta: dict[str, Any]) -> None:
    with open(Path(directory) / "meta.json", "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")


def read_meta(directory: str | os.PathLike, kind: str) -> dict[str, Any]:
    """Read ``meta.json`` (plain JSON, never evaluated) and check that it describes a directory of
    the given ``kind`` and holds a ``files`` table."""
    path = Path(directory) / "meta.json"
    if not Path(directory).is_dir():
        raise InputError(f"{directory} is not a directory; pass a {kind} directory")
    if not path.is_file():
        raise InputError(f"{path} is missing, so {directory} is not a {kind} directory")
    try:
        with open(path) as f:
            meta = json.load(f)
    except (ValueError, OSError, RecursionError) as exc:
        raise InputError(f"{path} is not valid JSON ({shown(str(exc))}); re-create the directory") from None
    if not isinstance(meta, dict) or meta.get("kind") != kind:
        found = meta.get("kind") if isinstance(meta, dict) else None
        raise InputError(f"{path} says {directory} is a {shown(repr(found))} directory, not a {kind!r} one; "
                         f"pass a {kind} directory")
    if not isinstance(meta.get("files"), dict):
        raise InputError(f"{path} has no table of files; re-create the directory")
    return meta


# A count of a meta.json (nodes, edges, features, classes...) sizes int64 arrays: below 2^63.
_COUNT_LIMIT = 2**63


def meta_count(meta: dict[str, Any], key: str, where: str = "meta.json", fix: str = "re-create the directory",
               minimum: int = 1) -> int:
    """``meta[key]`` when it is an integer (not a bool) in ``[minimum, 2^63)``, the range of the
    int64 arrays it counts; else :class:`InputError`: ``"WHERE gives KEY as VALUE, not a positive
    integer below 2^63; FIX"``. The one check of every count a ``meta.json`` gives (``where``:
    ``"meta.json in DIR"``)."""
    value = meta.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value < _COUNT_LIMIT:
        rule = ("a positive integer" if minimum == 1 else "a non-negative integer" if minimum == 0
                else f"an integer of at least {minimum}")
        raise InputError(f"{where} gives {key} as {shown(repr(value))}, not {rule} below 2^63; {fix}")
    return value


def check_torch_file(path: str | os.PathLike, fix: str) -> None:
    """Raise :class:`InputError` (ending in ``fix``) unless ``path`` is a whole file that
    ``torch.save`` wrote: a zip archive every record of which matches its CRC-32 checksum, so a
    flipped byte or a truncated file is refused before ``torch.load`` reads it."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise InputError(f"{path} is not a whole checkpoint file ({shown(str(exc))}); {fix}") from None
    if bad is not None:
        raise InputError(f"{path} is corrupt: its record {shown(bad)} does not match its checksum; {fix}")
