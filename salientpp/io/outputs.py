"""Output paths: checked before the work, written atomically, errors as one sentence.

Long commands check their outputs first (:func:`check_output_dir`, :func:`check_writable_dir`,
:func:`check_writable_file`, :func:`check_output_location`, :func:`check_output_paths`). Every
writer goes through :func:`atomic_output_dir` (or :func:`atomic_output_file`), so an interrupted
or failed run never leaves a directory that looks complete, and the temporaries of killed runs
are removed by the next one. An ``OSError`` of writing (full disk, read-only file system, no
permission, a path through a file) becomes one sentence (:func:`write_error`,
:func:`output_errors`)."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import InputError, shown

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


def _output_path(path: str | os.PathLike, what: str) -> Path:
    """``path`` as a :class:`Path`, or :class:`InputError` when it is empty: ``Path("")`` is the
    current directory, which no command means to write (``prepare SOURCE ''``)."""
    if not os.fspath(path):
        raise InputError(f"{what} is an empty path; give the path to write, e.g. ./out")
    return Path(path)


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

    - ``path`` is empty (:func:`_output_path`);
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
    out = _output_path(path, what)
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
    when ``path`` is empty or a directory; when it exists and ``exist_ok`` is false; when it exists and
    cannot be opened for appending (nothing is written and its bytes and times stay as they
    were); or when it is absent and its parent (with ``parents``, the nearest existing
    ancestor) is missing, is a file, or does not let a file be created in it.
    """
    out = _output_path(path, what)
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


def output_parents(path: str | os.PathLike) -> list[Path]:
    """The directories an output ``path`` lies in, as written (``..`` folded) and as reached
    through symbolic links (of the path's directories and of the path itself): an output must be
    judged by where its bytes land, not by the name it was given."""
    written, reached = Path(os.path.abspath(path)).parents, Path(os.path.realpath(path)).parents
    return list(dict.fromkeys([*written, *reached]))


def owning_directory(path: str | os.PathLike) -> str | None:
    """The directory salientpp manages that ``path`` lies in (its parent or above), described for a message
    (``"the partitioned directory /data/p4"``), else ``None``: a directory with a
    ``meta.json`` of a salientpp kind (a dataset, partition, cache plan, predictions,
    experiment), or a checkpoint directory (one holding ``last.pt``). A run's outputs must not
    go there: they would change the files the directory's checksums or checkpoints describe."""
    for directory in output_parents(path):
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
    """Refuse an output ``path`` (``what`` names it: ``"--json"``) that is empty or is or lies in a
    directory salientpp manages (:func:`owning_directory`), in one sentence."""
    owner = owning_directory(_output_path(path, what))
    if owner is not None:
        raise InputError(f"{what} {path} lies in {owner}, whose files a run must not change; write it elsewhere")


def holds_files(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds anything besides the writability probes of other processes
    (:func:`check_writable_dir` of a run starting beside this one creates and removes one)."""
    return any(not entry.name.startswith(_PROBE_PREFIX) for entry in Path(directory).iterdir())


def check_output_dir(out_dir: str | os.PathLike, what: str = "output directory") -> Path:
    """Raise :class:`InputError` unless ``out_dir`` is a path (not empty) that is absent and whose
    parent is an existing directory in which a file can be created.

    Long-running commands call it before they start, so a bad path fails at once. ``what``
    names the output in the message (``"output file"`` for a single file). The output itself may
    become a file or a directory: any existing entry is refused.
    """
    out = _output_path(out_dir, what)
    if _exists(out, out):
        raise InputError(f"{what} {out} already exists; remove it or choose another path")
    _check_parent(out, parents=False)
    return out


def check_output_paths(paths: dict[str, str | None]) -> None:
    """Raise :class:`InputError` when two options (option -> path, ``None`` = not given) name the
    same file: the second write would fail after all the work."""
    given = {option: path for option, path in paths.items() if path is not None}
    seen: dict[Path, str] = {}
    for option, path in given.items():
        key = Path(os.path.realpath(path))
        if key in seen:
            raise InputError(f"{seen[key]} and {option} name the same file {path}; give each its own path")
        seen[key] = option


# The attribute of a command's parsed arguments that names its complete output (:func:`mark_complete`).
_COMPLETE = "complete_output"


def mark_complete(args: object, path: str | os.PathLike) -> None:
    """Record on ``args``, a command's parsed arguments, that its output ``path`` is complete:
    the rename that commits it is done (:func:`atomic_output_dir`, :func:`atomic_output_file`)
    and what remains is its summary on standard output. From here on the command line does not
    let an interrupt or a standard output that cannot be written (a full disk, ``> /dev/full``)
    fail the command: it says on stderr that ``path`` is complete and exits 0
    (:func:`salientpp.cli.main`)."""
    setattr(args, _COMPLETE, os.fspath(path))


def completed_output(args: object) -> str | None:
    """The output :func:`mark_complete` recorded on ``args``, or ``None`` while none is complete."""
    return getattr(args, _COMPLETE, None)


_STALE_SUFFIX = re.compile(r"\.tmp-(?P<pid>\d+)")
# The longest file name, in bytes, of the file systems salientpp writes to (NAME_MAX of Linux's).
NAME_MAX = 255
# The digits a process id may take in a temporary's name (Linux's pid_max is at most 2^22).
_PID_DIGITS = 10


def _temporary_base(name: str, suffix: str = "") -> str:
    """The ``.NAME`` part of the temporaries ``.NAME.tmp-PID`` (+ ``suffix``) of the output
    ``name``. A name too long for that to fit in :data:`NAME_MAX` bytes with any process id keeps
    its start and gains a digest of the whole (``.START~DIGEST``), so the output's temporaries
    stay unique to it and recognisable to :func:`remove_stale_temporaries`: a name the file
    system accepts can be written atomically."""
    base = f".{name}"
    room = NAME_MAX - len(os.fsencode(f".tmp-{'9' * _PID_DIGITS}{suffix}"))
    if len(os.fsencode(base)) <= room:
        return base
    mark = "~" + hashlib.sha256(os.fsencode(name)).hexdigest()[:16]
    while len(base) > 1 and len(os.fsencode(base + mark)) > room:
        base = base[:-1]
    return base + mark


def _temporary(out: Path, suffix: str = "") -> Path:
    """This process's temporary sibling ``.NAME.tmp-PID`` (+ ``suffix``) of ``out`` (:func:`_temporary_base`)."""
    return out.parent / f"{_temporary_base(out.name, suffix)}.tmp-{os.getpid()}{suffix}"


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process on this machine (another user's included); a pid that
    names no single process (0 or less) counts as alive, so nothing is removed on its account."""
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
    base = _temporary_base(out.name, suffix)
    return _remove_dead(out.parent, re.compile(re.escape(base) + _STALE_SUFFIX.pattern + re.escape(suffix)))


def remove_stale_temporaries_in(directory: str | os.PathLike) -> list[Path]:
    """:func:`remove_stale_temporaries` of every output in ``directory``: each ``.NAME.tmp-PID``
    (with or without a suffix) whose process is gone."""
    return _remove_dead(Path(directory), re.compile(r"\..+" + _STALE_SUFFIX.pattern + r"(\.[^.]+)?"))


def _remove_dead(directory: Path, pattern: re.Pattern) -> list[Path]:
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if not match or int(match.group("pid")) == os.getpid() or pid_alive(int(match.group("pid"))):
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
    tmp = _temporary(out)
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
    tmp = _temporary(out, out.suffix)
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
    an ``OSError`` with its errno (``torch.save`` to a file raises a bare ``RuntimeError``).
    The temporary is ``.NAME.tmp-PID``, so the one a killed writer left is removed by the next
    write or :func:`remove_stale_temporaries`."""
    out = Path(path)
    remove_stale_temporaries(out)
    tmp = _temporary(out)
    with output_errors(out):
        try:
            with open(tmp, "wb") as f:
                f.write(data)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, out)
