"""The JSON file a benchmark writes with ``--json``: its declared kind, then its results.

Every benchmark module declares ``KIND = "salientpp-bench-<name>"`` (``salientpp simulate``'s
kind is :data:`salientpp.cache.simulator.RESULT_KIND`) and writes through :func:`write_results`::

    {"kind": KIND, "salientpp_version": "0.1.0", <the results>}

A dict of results keeps its keys at the top level; a list of rows goes under ``"rows"``.
Readers (``salientpp bench report``) tell the files apart by the kind alone, never by the keys.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from .. import __version__
from ..io import atomic_output_file, mark_complete, strict_json, write_text_atomic

VERSION_KEY = "salientpp_version"
ROWS_KEY = "rows"  # where a list of rows goes


def results_document(kind: str, payload: dict[str, Any] | list[Any]) -> dict[str, Any]:
    """``payload`` under its declared ``kind`` and the version that wrote it."""
    head = {"kind": kind, VERSION_KEY: __version__}
    if isinstance(payload, dict):
        clash = head.keys() & payload.keys()
        if clash:
            raise ValueError(f"the results of {kind} use the reserved keys {sorted(clash)}")
        return {**head, **payload}
    return {**head, ROWS_KEY: list(payload)}


def write_results(path: str | os.PathLike, kind: str, payload: dict[str, Any] | list[Any]) -> Path:
    """Write :func:`results_document` to the new file ``path`` as strict JSON, atomically."""
    return write_text_atomic(path, strict_json(results_document(kind, payload), indent=2) + "\n")


def write_outputs(args: object, kind: str, payload: dict[str, Any] | list[Any], json_path: str | None,
                  plot_path: str | None = None, draw: Callable[[str], None] | None = None) -> None:
    """Write a run's files, each when given, then say where they went: ``json_path`` (``payload``
    under ``kind``, :func:`write_results`) and ``plot_path`` (``draw(path)`` saves the figure to
    the temporary file it is given, renamed into place when whole). Once both are written the
    run's output is complete (:func:`~salientpp.io.mark_complete` on ``args``, its parsed
    arguments), so the lines printed after them cannot fail the run."""
    lines = []
    if json_path is not None:
        write_results(json_path, kind, payload)
        lines.append(f"results written to {json_path}")
    if plot_path is not None:
        with atomic_output_file(plot_path) as tmp:
            draw(str(tmp))
        lines.append(f"plot written to {plot_path}")
    if lines:
        mark_complete(args, " and ".join(path for path in (json_path, plot_path) if path is not None))
    for line in lines:
        print(line)


def declared_kind(data: Any) -> str | None:
    """The kind a parsed results file declares, or None when it declares none."""
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None
