"""Plain on-disk storage: ``.npy`` arrays plus one ``meta.json``, written atomically.

Every writer in salientpp goes through :func:`atomic_output_dir` (or :func:`atomic_output_file`),
so an interrupted or failed run never leaves a directory that looks complete, and the temporaries
of killed runs are removed by the next one. Output paths are checked before the work
(:func:`check_output_dir`, :func:`check_writable_dir`, :func:`check_writable_file`), and an
``OSError`` of writing (full disk, read-only file system, no permission, a path through a file)
becomes one sentence (:func:`write_error`, :func:`output_errors`).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
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


# The key a dict written by :func:`strict_json` gains for its values that were not finite numbers.
NULL_REASONS = "null_reasons"


def strict_json(value: Any, indent: int | None = None) -> str:
    """``value`` as strict JSON (RFC 8259 has no NaN or Infinity, and strict parsers refuse
    them): a float that is not finite is written as ``null``, and the dict holding it gains
    ``"null_reasons": {key: "not a number" | "infinite"}``, so a reader can tell why it is missing."""
    return json.dumps(_finite(value), indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        out = {key: _finite(item) for key, item in value.items()}
        reasons = {key: "not a number" if math.isnan(item) else "infinite" for key, item in value.items()
                   if isinstance(item, float) and not math.isfinite(item)}
        if reasons:
            out[NULL_REASONS] = {**out.get(NULL_REASONS, {}), **reasons}
        return out
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def file_checksum(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes, read in 16 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


# ---- output paths: checked before the work, written atomically, errors as one sentence ------

# errno -> (what went wrong, how to fix it), for the messages of :func:`write_error`.
_WRITE_ERRORS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("no space left on device", "free space or choose another output path"),
    errno.EDQUOT: ("the disk quota is exceeded", "free space or choose another output path"),
    errno.EFBIG: ("the file grew larger than the file system allows", "choose another output path"),
    errno.EROFS: ("the file system is read-only", "choose an output path on a writable file system"),
    errno.EACCES: ("permission denied", "choose a writable output path or fix the permissions"),
    errno.EPERM: ("operation not permitted", "choose a writable output path or fix the permissions"),
    errno.ENOTDIR: ("a component of the path is a file, not a directory", "choose another output path"),
    errno.EISDIR: ("it is a directory", "choose another output path"),
    errno.EEXIST: ("it already exists", "remove it or choose another path"),
    errno.ENOTEMPTY: ("it already exists", "remove it or choose another path"),
    errno.ENAMETOOLONG: ("the name is too long", "choose a shorter output path"),
    errno.ELOOP: ("the path has a loop of symbolic links", "choose another output path"),
    errno.ENOENT: ("a directory on the path does not exist or was removed while writing",
                   "create it or choose another output path"),
    errno.EIO: ("an input/output error occurred", "check the device or choose another output path"),
}
WRITE_ERRNOS = frozenset(_WRITE_ERRORS)
"""The ``errno`` values that :func:`write_error` turns into a sentence: a full disk or quota, a
read-only file system, missing permissions, a path through a file, an existing target, ..."""

_STALE_SUFFIX = re.compile(r"\.tmp-(\d+)")


def write_error(path: str | os.PathLike, exc: OSError) -> InputError:
    """The one-sentence :class:`InputError` for ``exc``, an ``OSError`` met while writing ``path``:
    ``"cannot write PATH: no space left on device; free space or choose another output path"``.
    ``path`` is the output the user named (not a temporary). The caller raises it ``from None``."""
    reason, fix = _WRITE_ERRORS.get(exc.errno, (None, "check the path or choose another output path"))
    if reason is None:
        reason = (exc.strerror or type(exc).__name__).lower()
    return InputError(f"cannot write {path}: {reason}; {fix}")


def os_error_sentence(exc: OSError) -> str:
    """One sentence for an ``OSError`` that escaped the commands' own checks: ``"cannot write
    PATH: no space left on device; free space ..."`` for the errors only writing causes (full
    disk or quota, read-only file system), else ``"PATH: permission denied; ..."``."""
    name = exc.filename if isinstance(exc.filename, (str, bytes, os.PathLike)) else None
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS):
        return str(write_error(os.fsdecode(name) if name is not None else "the output", exc))
    reason = (exc.strerror or os.strerror(exc.errno or 0) or type(exc).__name__).lower()
    where = f"{shown(os.fsdecode(name))}: " if name is not None else ""
    return f"{where}{reason}; check the path, its permissions and the free space, then run again"


@contextmanager
def output_errors(path: str | os.PathLike) -> Iterator[None]:
    """Turn an ``OSError`` with an errno of :data:`WRITE_ERRNOS` raised in the block into
    :func:`write_error` of ``path``, unless it names a file outside ``path``'s directory (an
    input that failed); other exceptions pass unchanged. For writers outside
    :func:`atomic_output_dir` and :func:`atomic_output_file` (e.g. a metrics file appended to)."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in WRITE_ERRNOS or not _concerns(exc, Path(path)):
            raise
        raise write_error(path, exc) from None


def _concerns(exc: OSError, out: Path) -> bool:
    """Whether ``exc`` may come from writing ``out`` or a sibling temporary: it names no file
    (a failed ``write``), or a file in ``out``'s directory or below."""
    names = [n for n in (exc.filename, exc.filename2) if isinstance(n, (str, bytes, os.PathLike))]
    if not names:
        return True
    parent = os.path.abspath(out.parent)
    return any(os.path.abspath(os.fsdecode(n)) == parent or os.path.abspath(os.fsdecode(n)).startswith(
        parent.rstrip(os.sep) + os.sep) for n in names)


# The names of the empty files :func:`_probe` creates and removes at once.
_PROBE_PREFIX = ".salientpp-probe-"


def _probe(directory: Path, target: Path) -> None:
    """Create and remove an empty file in ``directory``; :func:`write_error` of ``target`` when it fails."""
    try:
        fd, name = tempfile.mkstemp(prefix=_PROBE_PREFIX, dir=directory)
    except OSError as exc:
        raise write_error(target, exc) from None
    os.close(fd)
    try:
        os.unlink(name)
    except OSError:
        pass


def _exists(path: Path, target: Path) -> bool:
    try:
        return path.exists() or path.is_symlink()
    except OSError as exc:  # e.g. EACCES on a directory without search permission
        raise write_error(target, exc) from None


def _check_parent(out: Path, parents: bool) -> None:
    """``out`` is absent: its parent (``parents``: its nearest existing ancestor) must be a
    writable directory."""
    if not _exists(out.parent, out):
        ancestor = out.parent
        while not _exists(ancestor, out) and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if _exists(ancestor, out) and not ancestor.is_dir():
            raise InputError(f"cannot write {out}: {ancestor} is a file, not a directory; choose another path")
        if not parents:
            raise InputError(f"the parent directory of {out} does not exist; create it first")
        _probe(ancestor, out)
        return
    if not out.parent.is_dir():
        raise InputError(f"cannot write {out}: {out.parent} is a file, not a directory; choose another path")
    _probe(out.parent, out)


def check_writable_dir(path: str | os.PathLike, what: str = "output directory", exist_ok: bool = False,
                       parents: bool = False) -> Path:
    """Check, before any long work, that the directory ``path`` can be created or written; return it.

    Raises :class:`InputError` (one sentence naming ``path``, ``what`` names it: e.g.
    ``"--checkpoint-dir"``) when:

    - ``path`` exists and is not a directory (a file, or a symbolic link to one);
    - ``path`` exists and ``exist_ok`` is false (``"... already exists; remove it or choose another path"``);
    - ``path`` exists, ``exist_ok`` is true, and a file cannot be created in it (read-only, no permission);
    - ``path`` is absent and its parent is missing (unless ``parents``: then the nearest existing
      ancestor counts), is a file, or does not let a file be created in it.

    Writability is probed by creating and removing an empty temporary file, so it also holds for
    root and on read-only mounts. Nothing else is created: the caller makes the directory
    (``mkdir(parents=parents, exist_ok=exist_ok)``). A full disk is not detected here (an empty
    file still fits); writes inside :func:`output_errors` report it.
    """
    out = Path(path)
    if _exists(out, out):
        if not out.is_dir():
            kind = "a file" if out.is_file() else "a broken link" if out.is_symlink() else "a special file"
            raise InputError(f"{what} {out} is {kind}, not a directory; choose another path")
        if not exist_ok:
            raise InputError(f"{what} {out} already exists; remove it or choose another path")
        _probe(out, out)
        return out
    _check_parent(out, parents)
    return out


def check_writable_file(path: str | os.PathLike, what: str = "output file", exist_ok: bool = False,
                        parents: bool = False) -> Path:
    """Check, before any long work, that the file ``path`` can be created (or, with ``exist_ok``,
    appended to); return it.

    Raises :class:`InputError` (one sentence naming ``path``; ``what`` names it, e.g. ``"--json"``)
    when ``path`` is a directory; when it exists and ``exist_ok`` is false; when it exists and
    cannot be opened for appending (nothing is written and its bytes and times stay as they
    were); or when it is absent and its parent (with ``parents``, the nearest existing
    ancestor) is missing, is a file, or does not let a file be created in it.
    """
    out = Path(path)
    if _exists(out, out):
        if out.is_dir():
            raise InputError(f"{what} {out} is a directory, not a file; choose a file path")
        if not out.is_file():  # a device (/dev/full), a FIFO or a socket: writes may fail or block later
            raise InputError(f"{what} {out} is not a regular file; choose a file path")
        if not exist_ok:
            raise InputError(f"{what} {out} already exists; remove it or choose another path")
        try:
            with open(out, "ab"):
                pass
        except OSError as exc:
            raise write_error(out, exc) from None
        return out
    _check_parent(out, parents)
    return out


def owning_directory(path: str | os.PathLike) -> str | None:
    """The directory salientpp manages that ``path`` lies in (its parent or above), described for a message
    (``"the partitioned directory /data/p4"``), else ``None``: a directory with a
    ``meta.json`` of a salientpp kind (a dataset, partition, cache plan, predictions,
    experiment), or a checkpoint directory (one holding ``last.pt``). A run's outputs must not
    go there: they would change the files the directory's checksums or checkpoints describe."""
    for directory in Path(os.path.abspath(path)).parents:
        meta = directory / "meta.json"
        try:
            if meta.is_file():
                with open(meta) as f:
                    kind = json.load(f).get("kind")
                if isinstance(kind, str) and kind.startswith("salientpp-"):
                    return f"the {shown(kind.removeprefix('salientpp-').replace('-', ' '))} directory {directory}"
            if (directory / "last.pt").is_file():
                return f"the checkpoint directory {directory}"
        except (OSError, ValueError, AttributeError, RecursionError):
            continue  # unreadable or not a JSON object: not a directory salientpp wrote
    return None


def check_output_location(path: str | os.PathLike, what: str) -> None:
    """Refuse an output ``path`` (``what`` names it: ``"--json"``) that is or lies in a directory
    salientpp manages (:func:`owning_directory`), in one sentence."""
    owner = owning_directory(path)
    if owner is not None:
        raise InputError(f"{what} {path} lies in {owner}, whose files a run must not change; write it elsewhere")


@contextmanager
def output_lock(path: str | os.PathLike, what: str, directory: bool) -> Iterator[None]:
    """Hold an exclusive lock on an output ``path`` (a directory, or a file appended to) for
    the block, so two runs never write the same output: a second run is refused in one sentence
    naming ``what`` (``"--checkpoint-dir"``).

    The lock is ``flock`` on the path itself, which the kernel releases when the holder exits,
    however it exits (a killed run leaves no stale lock). ``path`` is created when absent (its
    parent must exist) and removed again at the end when it is still empty, so a run that fails
    before writing leaves nothing behind.
    """
    out = Path(path)
    created = not _exists(out, out)
    try:
        if directory:
            out.mkdir(exist_ok=True)
            fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
        else:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        raise write_error(out, exc) from None
    try:
        _lock(fd, out, what)
        try:
            yield
        finally:
            if created:
                try:
                    if directory:
                        out.rmdir()
                    elif out.stat().st_size == 0:
                        out.unlink()
                except OSError:
                    pass  # not empty (or already gone): the run wrote it
    finally:
        os.close(fd)


def _lock(fd: int, path: Path, what: str) -> None:
    """Take the exclusive lock of :func:`output_lock` on ``fd``, or refuse in one sentence."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise InputError(f"another salientpp run is writing {what} {path} (it holds its lock); wait for it to end, "
                         f"or choose another {what}") from None


def holds_files(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds anything besides the writability probes of other processes
    (:func:`check_writable_dir` of a run starting beside this one creates and removes one)."""
    return any(not entry.name.startswith(_PROBE_PREFIX) for entry in Path(directory).iterdir())


def check_unlocked(path: str | os.PathLike, what: str) -> None:
    """Refuse, like :func:`output_lock`, an output that another run holds the lock of; takes no
    lock itself (a check before the long work; the run takes the lock when it starts)."""
    out = Path(path)
    try:
        fd = os.open(out, os.O_RDONLY)
    except OSError:
        return  # absent or unreadable: nobody holds it, or the writability checks say why
    try:
        _lock(fd, out, what)
    finally:
        os.close(fd)  # closing releases the lock just taken


def check_output_dir(out_dir: str | os.PathLike, what: str = "output directory") -> Path:
    """Raise :class:`InputError` unless ``out_dir`` is absent and its parent is an existing
    directory in which a file can be created.

    Long-running commands call it before they start, so a bad path fails at once. ``what``
    names the output in the message (``"output file"`` for a single file). The output itself may
    become a file or a directory: any existing entry is refused.
    """
    out = Path(out_dir)
    if _exists(out, out):
        raise InputError(f"{what} {out} already exists; remove it or choose another path")
    _check_parent(out, parents=False)
    return out


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # not a process id we can ask about: keep the entry
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


def remove_stale_temporaries(out: str | os.PathLike, suffix: str = "") -> list[Path]:
    """Remove the temporaries ``.NAME.tmp-PID`` (+ ``suffix``) next to ``out`` that a killed run
    left behind: those whose PID is no live process on this machine. Temporaries of live
    processes (another run writing the same output now) are kept, and so is this process's own.
    Returns the removed paths; entries that cannot be removed are left alone."""
    out = Path(out)
    pattern = re.compile(re.escape(f".{out.name}") + _STALE_SUFFIX.pattern + re.escape(suffix))
    removed = []
    try:
        entries = list(os.scandir(out.parent))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if not match or int(match.group(1)) == os.getpid() or _pid_alive(int(match.group(1))):
            continue
        path = Path(entry.path)
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed


def _renamed(tmp: Path, out: Path) -> None:
    if _exists(out, out):  # appeared while this command ran; os.rename would replace an empty directory
        raise InputError(f"{out} was created by someone else while this command ran; remove it or choose "
                         "another path")
    os.rename(tmp, out)


@contextmanager
def atomic_output_dir(out_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling ``.NAME.tmp-PID`` of ``out_dir`` and rename it to ``out_dir`` on success.

    Refuses an ``out_dir`` that already exists or cannot be written (:func:`check_output_dir`).
    Removes the temporaries of killed earlier runs first (:func:`remove_stale_temporaries`). On
    any exception (KeyboardInterrupt and SIGTERM under the CLI included) the temporary
    directory is removed, so nothing that looks complete is left behind; an ``OSError`` of
    writing (:data:`WRITE_ERRNOS`: full disk, read-only, ...) raised in the block or by the
    final rename becomes :func:`write_error` of ``out_dir``.
    """
    out = check_output_dir(out_dir)
    remove_stale_temporaries(out)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        if _exists(tmp, out):
            shutil.rmtree(tmp)
        tmp.mkdir()
    except OSError as exc:
        raise write_error(out, exc) from None
    try:
        with output_errors(out):
            yield tmp
            _renamed(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def atomic_output_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling ``.NAME.tmp-PID.SUFFIX`` of ``path`` and rename it to ``path`` on success.

    Refuses a ``path`` that already exists or cannot be written; removes the temporaries of killed
    earlier runs first; on any exception the temporary file is removed, so a failed run leaves
    neither a truncated file nor a changed old one. An ``OSError`` of writing raised in the block
    becomes :func:`write_error` of ``path``, as in :func:`atomic_output_dir`.
    """
    out = check_output_dir(path, "output file")
    remove_stale_temporaries(out, out.suffix)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}{out.suffix}"
    try:
        with output_errors(out):
            yield tmp
            _renamed(tmp, out)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to the new file ``path`` through :func:`atomic_output_file`; return the path."""
    with atomic_output_file(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def replace_file(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` (new or replaced) through a temporary sibling renamed over it,
    so a failed write leaves the previous file as it was and becomes one sentence
    (:func:`write_error`). Written with Python's file I/O, whose short write on a full disk raises
    an ``OSError`` with its errno (``torch.save`` to a file raises a bare ``RuntimeError``)."""
    out = Path(path)
    tmp = out.with_name(f".{out.name}.tmp")
    with output_errors(out):
        try:
            with open(tmp, "wb") as f:
                f.write(data)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, out)


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


def check_output_paths(paths: dict[str, str | None]) -> None:
    """Raise :class:`InputError` when two options (option -> path, ``None`` = not given) name the
    same file: the second write would fail after all the work."""
    given = {option: path for option, path in paths.items() if path is not None}
    seen: dict[Path, str] = {}
    for option, path in given.items():
        key = Path(os.path.abspath(path))
        if key in seen:
            raise InputError(f"{seen[key]} and {option} name the same file {path}; give each its own path")
        seen[key] = option
