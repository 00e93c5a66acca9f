"""Checkpoints: ``last.pt`` at every checkpoint, ``best.pt`` when the validation accuracy improves.

A checkpoint is a point a run can continue from, between two steps: ``step`` steps of epoch
``epoch`` are done (``step = 0``: the epoch has not started). Besides the model and the
optimizer it holds what makes the continuation identical to an uninterrupted run: each rank's
torch RNG state (dropout) and its running sums of the epoch in progress; the sampler's position
is ``(epoch, step)`` itself, since batch ``i`` of an epoch is a function of the seeds only.

It holds only tensors, numbers and strings, so it loads with ``torch.load(weights_only=True)``.
Rank 0 writes it to a temporary name and renames it, so a run killed mid-write leaves the
previous checkpoint intact.
"""
from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from ..errors import InputError, shown
from ..io import (check_input_file, check_torch_file, check_writable_dir, holds_files, output_errors,
                  remove_stale_temporaries_in, replace_file)
from .state import EpochSums

LAST, BEST = "last.pt", "best.pt"
# The key of a checkpoint's options that holds the partitioning it was trained on
# (:func:`~salientpp.cache.plan.partition_identity`); checkpoints of 0.1 named it "dataset".
PARTITION_ID = "partition_id"
# Checkpoint.metric_sums of a checkpoint written before it was recorded.
UNRECORDED = -1


@dataclass
class Checkpoint:
    """Training state after ``step`` steps of epoch ``epoch``.

    Attributes:
        epoch, step: where to continue (0-based epoch, steps of it already done).
        model, optimizer: state dicts.
        rng: uint8 ``[K, S]`` each rank's RNG state (CPU generator, then the CUDA one if any);
            ``[0, 0]`` at an epoch boundary, where every epoch reseeds.
        partial: float64 ``[K, M]`` each rank's running sums of the epoch in progress
            (see :class:`~salientpp.train.state.EpochSums`); ``[0, 0]`` at a boundary.
        metric_sums: how many metric counts each row of ``partial`` holds (the writing run's
            :attr:`~salientpp.train.tasks.Task.num_sums`); :data:`UNRECORDED` in checkpoints
            written before it was recorded (they held 3, zeros for F1-macro), whose rows no run reads.
        best_valid, best_epoch: the best validation accuracy so far and its epoch.
        history: the metrics of every completed epoch.
        options: the training options (``TrainConfig.to_dict()`` plus :data:`PARTITION_ID`).
        embedding, best_embedding: the tags of the per-rank embedding shards (files
            ``embedding-TAG.rankK.pt`` beside it, :mod:`salientpp.embedding.table`) of this
            checkpoint and of ``best.pt``; ``""`` without an embedding.
        run_id: the run that wrote it (16 hex digits drawn when the run started afresh, kept by its
            resumes and restarts), also recorded in every embedding shard the run writes, so the
            shards of another run are refused; ``""`` in checkpoints written before it was recorded.
    """

    epoch: int
    step: int
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    rng: torch.Tensor = field(default_factory=lambda: torch.empty((0, 0), dtype=torch.uint8))
    partial: torch.Tensor = field(default_factory=lambda: torch.empty((0, 0), dtype=torch.float64))
    best_valid: float = -1.0
    best_epoch: int = -1
    history: list[dict[str, Any]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    embedding: str = ""
    best_embedding: str = ""
    run_id: str = ""
    metric_sums: int = UNRECORDED


def save_checkpoint(directory: str | os.PathLike, ckpt: Checkpoint, best: bool) -> None:
    """Write ``last.pt`` (and ``best.pt`` when ``best``) atomically; a failed write (a full disk)
    raises :class:`InputError` and leaves the previous checkpoint as it was."""
    directory = Path(directory)
    with output_errors(directory):
        directory.mkdir(exist_ok=True)
    buffer = io.BytesIO()
    torch.save(ckpt.__dict__, buffer)
    for name in (LAST, BEST) if best else (LAST,):
        replace_file(directory / name, buffer.getvalue())


def weights_misfit(expected: dict[str, torch.Tensor], weights: dict) -> str:
    """Why a checkpoint's ``weights`` (name -> tensor) cannot be loaded into a model whose state
    dict is ``expected``: a missing or extra name, or another shape; ``""`` when they fit."""
    for name, tensor in expected.items():
        if name not in weights:
            return f"it lacks {shown(name)}"
        shape = getattr(weights[name], "shape", None)
        if shape is None or tuple(shape) != tuple(tensor.shape):
            return f"its {shown(name)} has shape {shown(list(shape or ()))}, the model's {list(tensor.shape)}"
    extra = sorted(set(weights) - set(expected), key=str)
    return f"the model has no {shown(extra[0])}" if extra else ""


def check_finite_weights(ckpt: Checkpoint, path: str | os.PathLike, consequence: str, fix: str) -> None:
    """The one refusal of a checkpoint whose weights hold a NaN or an infinity
    (:func:`non_finite_weight`), by ``predict`` and ``--resume``: :class:`InputError` naming the
    first such tensor, then ``consequence`` (what they would cause) and ``fix``."""
    bad = non_finite_weight(ckpt.model)
    if bad:
        raise InputError(f"the weights in {path} are not finite ({shown(bad)}), so {consequence}; {fix}")


def non_finite_weight(weights: dict) -> str:
    """The name of the first floating-point tensor of ``weights`` (name -> tensor, a state dict)
    holding a NaN or an infinity, ``""`` when every one is finite."""
    for name, tensor in weights.items():
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return str(name)
    return ""


def _malformed(ckpt: Checkpoint) -> str:
    """What in ``ckpt``'s position is not what :func:`save_checkpoint` writes (``epoch`` and ``step``
    non-negative integers, ``metric_sums`` one too or :data:`UNRECORDED`; ``rng`` uint8 and
    ``partial`` float64 ``[K, *]``, with a row per rank and :class:`~salientpp.train.state.EpochSums`'
    width of ``metric_sums`` counts mid-epoch, its rows received per node type after the fixed
    counters on a graph of several types, ``[0, 0]`` at an epoch's end);
    ``""`` when nothing is. The size of an RNG state is checked where it is restored."""
    for name, least, what in (("epoch", 0, "a non-negative integer"), ("step", 0, "a non-negative integer"),
                              ("metric_sums", UNRECORDED, f"a count of metric sums (or {UNRECORDED})")):
        value = getattr(ckpt, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            return f"its {name} is {shown(repr(value))}, not {what}"
    for name, dtype in (("rng", torch.uint8), ("partial", torch.float64)):
        value = getattr(ckpt, name)
        if not isinstance(value, torch.Tensor) or value.dtype != dtype or value.ndim != 2:
            return f"its {name} is {_described(value)}, not a 2-D {dtype} tensor"
    if ckpt.step == 0:
        return ""
    width, ranks = EpochSums.width(max(ckpt.metric_sums, 0)), ckpt.rng.shape[0]
    if ranks == 0:
        return f"its step {ckpt.step} is mid-epoch, but it holds no RNG states"
    if ckpt.partial.shape[0] != ranks or ckpt.partial.shape[1] < width:
        return (f"its running sums are {_described(ckpt.partial)} mid-epoch, not [{ranks}, {width} or more] (a row "
                "per rank of its RNG states)")
    return ""


def running_sums(ckpt: Checkpoint, rank: int, num_sums: int, metric: str, directory: str | os.PathLike) -> EpochSums:
    """Rank ``rank``'s running sums of the epoch ``ckpt`` stopped in (mid-epoch: ``step > 0``), read
    for a task of ``num_sums`` metric counts named ``metric``; :class:`InputError` when the
    checkpoint's rows hold another number of them (written with another ``--metric``, or
    :data:`UNRECORDED`), which would be read as other counts."""
    if ckpt.metric_sums != num_sums:
        kept = "an unrecorded number of" if ckpt.metric_sums == UNRECORDED else str(ckpt.metric_sums)
        raise InputError(f"the checkpoint in {directory} was written mid-epoch with {kept} running metric sums per "
                         f"rank, but the metric {metric} keeps {num_sums}; resume with the --metric and the salientpp "
                         "version that wrote it, or start afresh with a new --checkpoint-dir")
    return EpochSums.from_tensor(ckpt.partial[rank], num_sums)


def _described(value: Any) -> str:
    """``"<dtype> [shape]"`` of a tensor, else its type's name."""
    return f"{value.dtype} {list(value.shape)}" if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"


def describe_position(epoch: int, step: int) -> str:
    """Where a checkpoint ``(epoch, step)`` stands, in the 0-based epochs of the progress lines:
    ``(3, 0)`` -> ``"the end of epoch 2"``, ``(3, 40)`` -> ``"step 40 of epoch 3"``."""
    return f"the end of epoch {epoch - 1}" if step == 0 else f"step {step} of epoch {epoch}"


def has_checkpoint(directory: str | os.PathLike | None) -> bool:
    return directory is not None and (Path(directory) / LAST).is_file()


def check_checkpoint_dir(directory: str | os.PathLike, resume: bool, restarted: bool = False) -> Path:
    """Refuse, before any rank starts, a ``--checkpoint-dir`` the run could not use.

    The directory (or, when absent, its parent) must be writable. With ``resume`` it must hold
    ``last.pt``. Without it, it must be absent or empty: a fresh run never overwrites another
    run's checkpoints. A ``restarted`` job (torchrun's or the local launcher's restart) continues
    in the directory its first attempt wrote, whatever it holds.
    """
    path = check_writable_dir(directory, "--checkpoint-dir", exist_ok=True)
    if path.is_dir():  # what a writer killed mid-write left (its process is gone) is no run's file
        remove_stale_temporaries_in(path)
    last = path / LAST
    if os.path.lexists(last):  # a directory, a pipe, a device or a broken link is no run's checkpoint
        check_input_file(last, "the checkpoint", "remove it, or choose another --checkpoint-dir")
    if restarted:
        return path
    if resume and not has_checkpoint(path):
        raise InputError(f"there is no checkpoint {path / LAST} to resume from; run without --resume first")
    if not resume and path.is_dir() and holds_files(path):
        raise InputError(f"the checkpoint directory {path} already holds another run's files; continue that run "
                         "with --resume, or choose another --checkpoint-dir")
    return path


def load_checkpoint(directory: str | os.PathLike, expected: dict[str, Any], name: str = LAST,
                    fix: str = "resume with the same data and options or use a new --checkpoint-dir",
                    unreadable: str = "delete it or pick another --checkpoint-dir",
                    comparable: Callable[[str, Any], Any] | None = None) -> Checkpoint:
    """Load ``directory/name`` and check that its options hold the ``expected`` values (the one
    match of a checkpoint: training resumes one whose partitioning (:data:`PARTITION_ID`) and
    :func:`~salientpp.train.config.checkpoint_options` are the run's; ``predict`` one trained on
    its data). :class:`InputError` otherwise, ending in ``fix``; for a file that is not a whole
    checkpoint (damaged, foreign, or with a position :func:`save_checkpoint` never writes), ending
    in ``unreadable``. ``comparable(key, value)`` maps an option's value, the stored one and the
    expected one alike, to what is compared (the fanout table of a spelling of fanouts); by default
    the values themselves."""
    path = Path(directory) / name
    if not path.is_file():
        raise InputError(f"there is no checkpoint {path} to resume from; run without --resume first")
    check_torch_file(path, unreadable)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        ckpt = Checkpoint(**state)
    except Exception as exc:  # a truncated or foreign file: tell the user which one
        raise InputError(f"{path} is not a salientpp checkpoint ({type(exc).__name__}); {unreadable}") from None
    malformed = _malformed(ckpt)
    if malformed:
        raise InputError(f"{path} is not a checkpoint salientpp train wrote ({malformed}); {unreadable}")
    if "dataset" in ckpt.options:  # a checkpoint of 0.1: read until the next release
        ckpt.options.setdefault(PARTITION_ID, ckpt.options.pop("dataset"))
    same = comparable or (lambda key, value: value)
    for key, value in expected.items():
        if same(key, ckpt.options.get(key)) != same(key, value):
            what = ("on another partitioned dataset" if key == PARTITION_ID
                    else f"with {key}={ckpt.options.get(key)!r}, not {value!r}")
            raise InputError(f"the checkpoint in {directory} was trained {what}; {fix}")
    return ckpt
