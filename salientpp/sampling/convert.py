"""Zero-copy conversion of user arrays (numpy, memory maps, tensors) to CPU tensors."""
from __future__ import annotations

import functools

import warnings
from collections.abc import Callable

import numpy as np
import torch

from ..errors import InputError


def as_int64_tensor(array: torch.Tensor | np.ndarray, name: str) -> torch.Tensor:
    """A contiguous 1-D int64 CPU tensor over ``array``, without a copy when possible."""
    return as_vector(array, name, torch.int64)


# How the error of :func:`as_vector` says to convert an array to each dtype.
_CONVERSIONS = {torch.int64: "astype(np.int64) / .long()", torch.int8: "astype(np.int8) / .to(torch.int8)"}


def as_vector(array: torch.Tensor | np.ndarray, name: str, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous 1-D CPU tensor of ``dtype`` (int64 or int8) over ``array``, without a copy when
    possible; :class:`InputError` for another shape or dtype."""
    tensor = as_tensor(array, name)
    if tensor.dim() != 1 or tensor.dtype != dtype:
        kind = str(dtype).removeprefix("torch.")
        raise InputError(f"{name} must be a 1-D {kind} array, got {tensor.dtype} of shape {list(tensor.shape)}; "
                         f"convert it with {_CONVERSIONS[dtype]}")
    return tensor


def as_tensor(array: torch.Tensor | np.ndarray, name: str) -> torch.Tensor:
    """A contiguous CPU tensor sharing memory with ``array`` when it is a contiguous ndarray
    (read-only memory maps included: the sampler never writes into it)."""
    if isinstance(array, torch.Tensor):
        if array.device.type != "cpu":
            raise InputError(f"{name} must live in CPU memory, got a tensor on {array.device}; call .cpu() first")
        return array.contiguous()
    if not isinstance(array, np.ndarray):
        raise InputError(f"{name} must be a numpy array or a torch tensor, got {type(array).__name__}")
    array = np.ascontiguousarray(array)
    if not array.flags.writeable:
        # torch warns on read-only arrays because writes would be undefined; nothing writes here.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(array)
    return torch.from_numpy(array)


@functools.lru_cache(maxsize=None)
def _zero(device: torch.device) -> torch.Tensor:
    """int64 ``[1]`` zero on ``device``, made once per device: the memory of every :func:`one_type`."""
    return torch.zeros(1, dtype=torch.int64, device=device)


def one_type(n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """int64 ``[n]`` zeros as a constant view of the device's one zero (stride 0, no allocation):
    the node type of every node, or the relation of every edge, of a graph of one type and one
    relation."""
    return _zero(torch.device(device)).expand(n)


def moved(t: torch.Tensor, move: Callable[[torch.Tensor], torch.Tensor], device: torch.device | str) -> torch.Tensor:
    """``move(t)``, a copy of ``t`` to ``device``, where a view of :func:`one_type` (slices of one
    included) is that view on ``device``: a one-type batch copies nothing to move its types."""
    return one_type(t.shape[0], device) if t._base is _zero(t.device) else move(t)
