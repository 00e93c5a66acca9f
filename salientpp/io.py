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


def file_checksum(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes, read in 16 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def check_output_dir(out_dir: str | os.PathLike) -> Path:
    """Raise :class:`InputError` unless ``out_dir`` is absent and its parent exists.

    Long-running commands call it before they start, so a bad path fails at once.
    """
    out = Path(out_dir)
    if out.exists():
        raise InputError(f"output directory {out} already exists; remove it or choose another path")
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


def save_array(directory: Path, name: str, array: np.ndarray) -> dict[str, Any]:
    """Write ``directory/name.npy`` and return its meta.json entry (dtype, shape, checksum)."""
    path = Path(directory) / f"{name}.npy"
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)
    return {"dtype": str(array.dtype), "shape": list(array.shape), "checksum": file_checksum(path)}


def load_array(directory: Path, name: str, entry: dict[str, Any] | None = None,
               mmap: bool = True, verify: bool = False) -> np.ndarray:
    """Memory-map ``directory/name.npy`` and check it against its meta.json ``entry``.

    Raises :class:`InputError` when the file is missing, unreadable, or disagrees with the
    entry in dtype, shape or (with ``verify``) checksum.
    """
    path = Path(directory) / f"{name}.npy"
    if not path.is_file():
        raise InputError(f"{path} is missing; re-create the directory with the command that wrote it")
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{path} is not a readable .npy file ({exc}); re-create it") from None
    if entry is not None:
        if str(array.dtype) != entry["dtype"] or list(array.shape) != list(entry["shape"]):
            raise InputError(
                f"{path} has dtype {array.dtype} and shape {list(array.shape)} but meta.json says "
                f"{entry['dtype']} {list(entry['shape'])}; the directory is corrupt, re-create it")
        if verify and file_checksum(path) != entry["checksum"]:
            raise InputError(f"{path} does not match its checksum in meta.json; the file is corrupt, re-create it")
    return array


def write_meta(directory: Path, meta: dict[str, Any]) -> None:
    with open(Path(directory) / "meta.json", "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")


def read_meta(directory: str | os.PathLike, kind: str) -> dict[str, Any]:
    """Read ``meta.json`` and check that it describes a directory of the given ``kind``."""
    path = Path(directory) / "meta.json"
    if not Path(directory).is_dir():
        raise InputError(f"{directory} is not a directory; pass a {kind} directory")
    if not path.is_file():
        raise InputError(f"{path} is missing, so {directory} is not a {kind} directory")
    try:
        with open(path) as f:
            meta = json.load(f)
    except (ValueError, OSError) as exc:
        raise InputError(f"{path} is not valid JSON ({exc}); re-create the directory") from None
    if not isinstance(meta, dict) or meta.get("kind") != kind:
        found = meta.get("kind") if isinstance(meta, dict) else None
        raise InputError(f"{directory} holds a {found!r} directory, not a {kind!r} one; pass a {kind} directory")
    return meta
