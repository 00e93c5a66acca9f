"""The ``edgelist:PATH`` source: a text edge list (plain, gzip, or UTF-16/32 with a byte-order
mark) parsed block by block without Python work per line, optional ``.npy`` features, labels and
split files, sparse ids compacted, and the memory check made before the graph is built."""
from __future__ import annotations

import codecs
import gzip
import os
import re
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

from ..errors import InputError, counted, shown
from ..io import check_input_file
from .convert import _as_ids, as_features, as_labels, random_split
from .csr import build_csr
from .format import Dataset
from .options import ImportOptions

# Classes of the random labels of an edge list without a labels file, unless --num-classes says.
RANDOM_CLASSES = 2
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


def _read_npy(path: str | os.PathLike, what: str) -> np.ndarray:
    check_input_file(path, f"{what} file", "give the path of a .npy file")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{what} file {path} is not a readable .npy array ({exc}); re-export it with numpy.save") from None


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
    check_input_file(path, "edge list", "give the path of a text edge list")
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
