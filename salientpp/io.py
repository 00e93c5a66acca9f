"""Plain on-disk storage: ``.npy`` arrays plus one ``meta.json``, written atomically.

Every writer in salientpp goes through :func:`atomic_output_dir`, so an interrupted or failed
run never leaves a directory that looks complete.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .errors import InputError

_CHUNK = 1 << 24
_SHOWN_CHARS = 80


def shown(text: object) -> str:
    """``text`` (``repr`` unless a string) on one printable line of at most 80 characters: for
    echoing untrusted content (meta.json values, numpy's header errors) in a message."""
    text = text if isinstance(text, str) else repr(text)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS - 3] + "..."


def file_checksum(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes, read in 16 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def check_output_dir(out_dir: str | os.PathLike, what: str = "output directory") -> Path:
    """Raise :class:`InputError` unless ``out_dir`` is absent and its parent exists.

    Long-running commands call it before they start, so a bad path fails at once. ``what``
    names the output in the message (``"output file"`` for a single file).
    """
    out = Path(out_dir)
    if out.exists() or out.is_symlink():
        raise InputError(f"{what} {out} already exists; remove it or choose another path")
    if not out.parent.exists():
        raise InputError(f"the parent directory of {out} does not exist; create it first")
    return out


@contextmanager
def atomic_output_dir(out_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling of ``out_dir`` and rename it to ``out_dir`` on success.

    Refuses an ``out_dir`` that already exists. On any exception the temporary directory is
    removed, so nothing that looks complete is left behind.
    """
    out = check_output_dir(out_dir)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def atomic_output_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` (same suffix) and rename it to ``path`` on success.

    Refuses a ``path`` that already exists; on any exception the temporary file is removed, so a
    failed run leaves neither a truncated file nor a changed old one.
    """
    out = check_output_dir(path, "output file")
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}{out.suffix}"
    try:
        yield tmp
        os.rename(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_array(directory: Path, name: str, array: np.ndarray) -> dict[str, Any]:
    """Write ``directory/name.npy`` and return its meta.json entry (dtype, shape, checksum)."""
    path = Path(directory) / f"{name}.npy"
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)
    return {"dtype": str(array.dtype), "shape": list(array.shape), "checksum": file_checksum(path)}


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

    Raises :class:`InputError` when the file is missing, unreadable, of a dtype outside
    ``dtypes`` or another ``ndim``, or disagrees with the entry in dtype, shape or (with
    ``verify``) checksum. Never unpickles.
    """
    path = Path(directory) / f"{name}.npy"
    if not path.is_file():
        raise InputError(f"{path} is missing; {fix}")
    if entry is not None and not (isinstance(entry.get("dtype"), str) and isinstance(entry.get("checksum"), str)
                                  and isinstance(entry.get("shape"), list)
                                  and all(isinstance(d, int) for d in entry["shape"])):
        raise InputError(f"the meta.json entry of {path} lacks a valid dtype, shape or checksum; {fix}")
    try:
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
