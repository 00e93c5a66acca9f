"""METIS k-way partitioning with several balance constraints, called through ctypes.

``pymetis.part_graph`` always passes ``ncon = 1`` to METIS, so any further columns of vertex
weights are silently ignored. This module calls ``METIS_PartGraphKway`` of the METIS library
that ships inside the pymetis wheel directly, with ``ncon`` equal to the number of weight
columns. The index width and the option indices are read from that build (``pymetis._internal``)
rather than assumed. ``tpwgts`` and ``ubvec`` are passed as NULL (equal target weights, tolerance
from ``METIS_OPTION_UFACTOR``), so the width of METIS's ``real_t`` never matters.
"""
from __future__ import annotations

import ctypes
import functools
import os
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..errors import InputError, check_int

METIS_OK = 1
# METIS 5 (64-bit indices, 4 balance constraints): edge weights, coarsened graphs and refinement
# state. `partition products` (2.4M nodes, 119.8M edges, 8 parts) peaks at 12.15 GiB in total.
METIS_BYTES_PER_EDGE = 100
METIS_BYTES_PER_NODE = 400
_STATUS_MESSAGES = {
    -2: "METIS rejected the input graph or options (METIS_ERROR_INPUT); check that the graph is a valid "
        "symmetric CSR without self loops",
    -3: "METIS ran out of memory (METIS_ERROR_MEMORY); free memory or use a machine with more of it",
    -4: "METIS failed with an internal error (METIS_ERROR); try another --seed or the random method",
}


class EmptyPartitions(InputError):
    """METIS returned an assignment that leaves ``empty`` of the ``num_parts`` parts without a
    vertex. It does so on small graphs, or when a constraint has too few vertices of non-zero
    weight to spread over every part (4 training vertices of 50, 1 validation vertex, 2 parts).
    ``reason`` says what happened (``"METIS left 1 of 2 partitions empty"``); the message adds
    METIS's diagnostic (``said``) and how to avoid it.
    :func:`~salientpp.partition.partitioner.assign_or_fall_back` falls back to the random
    method on it."""

    def __init__(self, empty: int, num_parts: int, said: str = ""):
        self.reason = f"METIS left {empty} of {num_parts} partitions empty"
        super().__init__(f"{self.reason}{said}; use fewer parts or the random method")


@dataclass(frozen=True)
class _Metis:
    """The loaded library: its ``METIS_PartGraphKway`` and the build's constants."""

    part_graph_kway: Callable[..., int]
    set_default_options: Callable[..., int]
    idx_dtype: np.dtype
    idx_pointer: type
    num_options: int
    option_index: dict[str, int]


@functools.lru_cache(maxsize=1)
def _library() -> _Metis:
    try:
        import pymetis
        from pymetis import _internal
    except ImportError as exc:
        raise InputError(f"pymetis is not installed ({exc}); install it with `pip install pymetis`") from None
    candidates = sorted(Path(pymetis.__file__).parent.glob("_internal*.so"))
    if not candidates:
        raise InputError("the METIS library inside pymetis was not found; reinstall pymetis from its wheel")
    lib = ctypes.CDLL(str(candidates[0]))
    width = int(_internal._idx_type_width())
    idx_dtype = np.dtype({32: np.int32, 64: np.int64}[width])
    idx_p = ctypes.POINTER({32: ctypes.c_int32, 64: ctypes.c_int64}[width])

    kway = lib.METIS_PartGraphKway
    # nvtxs, ncon, xadj, adjncy, vwgt, vsize, adjwgt, nparts, tpwgts, ubvec, options, objval, part
    kway.argtypes = [idx_p, idx_p, idx_p, idx_p, idx_p, idx_p, idx_p, idx_p,
                     ctypes.c_void_p, ctypes.c_void_p, idx_p, idx_p, idx_p]
    kway.restype = ctypes.c_int
    defaults = lib.METIS_SetDefaultOptions
    defaults.argtypes = [idx_p]
    defaults.restype = ctypes.c_int
    indices = _internal.options_indices
    option_index = {name: int(getattr(indices, name)) for name in dir(indices) if name.isupper()}
    # METIS_NOPTIONS is 40 in every METIS 5 release; the largest option index must fit below it.
    if max(option_index.values()) >= 40:
        raise InputError("the METIS inside pymetis has an unexpected option layout; install pymetis 2023 or newer")
    return _Metis(kway, defaults, idx_dtype, idx_p, 40, option_index)


@contextmanager
def _diagnostics_captured() -> Iterator[list[str]]:
    """Redirect file descriptor 1 while METIS runs: it prints warnings ("Cannot bisect a graph
    with 0 vertices!") with printf. The yielded list receives those lines afterwards."""
    sys.stdout.flush()
    libc = ctypes.CDLL(None)
    saved = os.dup(1)
    lines: list[str] = []
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 1)
        try:
            yield lines
        finally:
            libc.fflush(None)  # C stdio buffers what printf wrote; flush it into the capture file
            os.dup2(saved, 1)
            os.close(saved)
            capture.seek(0)
            lines.extend(line.strip(" *\t") for line in capture.read().decode(errors="replace").splitlines()
                         if line.strip())


def _pointer(array: np.ndarray, lib: _Metis):
    return array.ctypes.data_as(lib.idx_pointer)


def part_graph_kway(rowptr: np.ndarray, col: np.ndarray, vertex_weights: np.ndarray, num_parts: int,
                    seed: int = 0, ufactor: int = 30, edge_weights: np.ndarray | None = None
                    ) -> tuple[np.ndarray, int]:
    """Partition a symmetric graph into ``num_parts`` parts, minimising the edge cut while
    balancing every column of ``vertex_weights`` separately.

    Args:
        rowptr: int64 ``[N + 1]``; col: int64 ``[nnz]`` symmetric CSR without self loops.
        vertex_weights: non-negative integer ``[N, ncon]`` (or ``[N]`` for ``ncon = 1``); METIS
            balances the per-partition sum of each column.
        num_parts: K >= 1.
        seed: METIS's random seed (the result is deterministic for a seed).
        ufactor: allowed imbalance per constraint in thousandths (30: each part's weight at most
            1.03 times the mean). METIS aims for it but does not guarantee it.
        edge_weights: positive integer ``[nnz]`` weight of every edge (both directions equal), or
            ``None`` for all ones; the cut is then the summed weight of cut edges.

    Returns:
        ``parts`` int64 ``[N]`` partition of each vertex, and the edge cut (undirected edges)
        METIS reports.

    Raises :class:`EmptyPartitions` when METIS leaves a part empty, :class:`InputError` on
    any other failure.
    """
    n = int(rowptr.shape[0] - 1)
    weights = vertex_weights.reshape(n, -1)
    check_int(num_parts, "the number of parts")
    if weights.shape[1] < 1 or (weights < 0).any():
        raise InputError("vertex weights must have at least one column and no negative entries")
    if num_parts == 1 or n == 0:
        return np.zeros(n, dtype=np.int64), 0
    lib = _library()
    idx = lib.idx_dtype
    heaviest = max(int(weights.sum(axis=0).max()), 0 if edge_weights is None else int(np.sum(edge_weights)))
    if max(col.shape[0], heaviest) > np.iinfo(idx).max:
        raise InputError(f"the graph is too large for the {idx.itemsize * 8}-bit METIS inside pymetis; "
                         "install a pymetis build with 64-bit indices")
    xadj = np.ascontiguousarray(rowptr, dtype=idx)
    adjncy = np.ascontiguousarray(col, dtype=idx)
    vwgt = np.ascontiguousarray(weights, dtype=idx)
    adjwgt = None if edge_weights is None else np.ascontiguousarray(edge_weights, dtype=idx)
    options = np.empty(lib.num_options, dtype=idx)
    lib.set_default_options(_pointer(options, lib))
    options[lib.option_index["OBJTYPE"]] = 0  # METIS_OBJTYPE_CUT
    options[lib.option_index["NUMBERING"]] = 0
    options[lib.option_index["SEED"]] = seed
    options[lib.option_index["UFACTOR"]] = ufactor
    nvtxs = np.array([n], dtype=idx)
    ncon = np.array([weights.shape[1]], dtype=idx)
    nparts = np.array([num_parts], dtype=idx)
    objval = np.zeros(1, dtype=idx)
    parts = np.empty(n, dtype=idx)
    with _diagnostics_captured() as diagnostics:
        status = lib.part_graph_kway(
            _pointer(nvtxs, lib), _pointer(ncon, lib), _pointer(xadj, lib), _pointer(adjncy, lib),
            _pointer(vwgt, lib), None, None if adjwgt is None else _pointer(adjwgt, lib), _pointer(nparts, lib),
            None, None,
            _pointer(options, lib), _pointer(objval, lib), _pointer(parts, lib))
    said = f" (METIS: {diagnostics[0]})" if diagnostics else ""
    if status != METIS_OK:
        raise InputError(_STATUS_MESSAGES.get(status, f"METIS returned the unknown status {status}; "
                                                      "try another --seed or the random method") + said)
    empty = num_parts - np.unique(parts).shape[0]
    if empty:
        raise EmptyPartitions(empty, num_parts, said)
    return parts.astype(np.int64, copy=False), int(objval[0])
