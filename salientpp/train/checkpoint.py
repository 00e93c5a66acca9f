"""Checkpoints: ``last.pt`` after every epoch, ``best.pt`` when the validation accuracy improves.

A checkpoint holds only tensors, numbers and strings (state dicts, the epoch, the history and
the options that must match on resume), so it loads with ``torch.load(weights_only=True)``.
Files are written to a temporary name and renamed, so a run killed mid-write leaves the
previous checkpoint intact.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import InputError

LAST, BEST = "last.pt", "best.pt"
# Options that must be equal for a checkpoint to be resumed.
MATCHING = ("model", "hidden", "layers", "fanouts", "batch_size", "seed")


@dataclass
class Checkpoint:
    """Training state after ``epoch`` completed epochs (0-based index of the last one)."""

    epoch: int
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    best_valid: float = -1.0
    best_epoch: int = -1
    history: list[dict[str, Any]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)


def save_checkpoint(directory: str | os.PathLike, ckpt: Checkpoint, best: bool) -> None:
    directory = Path(directory)
    directory.mkdir(exist_ok=True)
    state = ckpt.__dict__
    names = (LAST, BEST) if best else (LAST,)
    for name in names:
        tmp = directory / f".{name}.tmp-{os.getpid()}"
        torch.save(state, tmp)
        os.replace(tmp, directory / name)


def load_checkpoint(directory: str | os.PathLike, options: dict[str, Any], name: str = LAST) -> Checkpoint:
    """Load ``directory/name`` and check that it was written with the same model options."""
    path = Path(directory) / name
    if not path.is_file():
        raise InputError(f"there is no checkpoint {path} to resume from; run without --resume first")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        ckpt = Checkpoint(**state)
    except Exception as exc:  # a truncated or foreign file: tell the user which one
        raise InputError(f"{path} is not a salientpp checkpoint ({type(exc).__name__}); delete it or pick "
                         "another --checkpoint-dir") from None
    for key in MATCHING:
        if ckpt.options.get(key) != options.get(key):
            raise InputError(f"the checkpoint in {directory} was trained with {key}={ckpt.options.get(key)!r}, "
                             f"not {options.get(key)!r}; resume with the same options or use a new --checkpoint-dir")
    return ckpt
