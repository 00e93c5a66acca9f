"""Models by name: the built-in ``sage``/``gat``/``gin``, or a user's factory ``PKG.MODULE:FACTORY``.

A factory is called as ``factory(in_dim, hidden, out_dim, num_layers)`` and returns an
``nn.Module`` with either forward signature:

* ``forward(x, edge_index)`` (PyG style): ``x`` ``[num_nodes, in_dim]`` of the batch, the
  hop-ordered edges of :attr:`salientpp.Batch.edge_index`; returns ``[num_nodes, out_dim]`` (or
  at least the seeds' rows first). ``torch_geometric.utils.trim_to_layer`` may be used with the
  batch's ``num_sampled_nodes``/``num_sampled_edges``, which the trainer passes as keywords when
  ``forward`` accepts them.
* ``forward(x, mfgs)`` (one message-flow graph per layer, as the built-in models): returns the
  seeds' ``[batch_size, out_dim]``.

The second parameter's name tells which (``mfgs`` or ``edge_index``).
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from ..errors import InputError
from .gnn import MODELS, MFGModel, no_pyg_tempfiles

EDGE_INDEX, MFGS = "edge_index", "mfgs"


def _factory(spec: str) -> Callable[..., nn.Module]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"unknown model {spec!r}; choose one of {', '.join(MODELS)} or give a factory as "
                         "PKG.MODULE:FUNCTION")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"cannot import {module_name!r} for --model {spec} ({exc}); put the module on "
                         "PYTHONPATH or in the working directory") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InputError(f"{module_name} has no function {attr!r} for --model {spec}; define "
                         f"{attr}(in_dim, hidden, out_dim, num_layers) -> torch.nn.Module there")
    return factory


def check_model(spec: str) -> str:
    """Check a ``--model`` value before any rank starts (a user factory is imported); returns it."""
    if spec not in MODELS:
        _factory(spec)
    return spec


def build_model(spec: str, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float = 0.5
                ) -> nn.Module:
    """The model ``spec`` names (see the module docstring); PyG's generated files are removed."""
    if spec in MODELS:
        return MFGModel(spec, in_dim, hidden, out_dim, num_layers, dropout)
    with no_pyg_tempfiles():
        model = _factory(spec)(in_dim, hidden, out_dim, num_layers)
    if not isinstance(model, nn.Module):
        raise InputError(f"the model factory {spec} returned {type(model).__name__}, not a torch.nn.Module")
    forward_kind(model)
    return model


def forward_kind(model: nn.Module) -> str:
    """:data:`MFGS` or :data:`EDGE_INDEX`: what ``model.forward`` takes after ``x``."""
    params = [p for p in inspect.signature(model.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(params) < 2:
        raise InputError(f"{type(model).__name__}.forward takes {len(params)} positional argument(s); it must be "
                         "forward(x, edge_index) or forward(x, mfgs)")
    return MFGS if params[1].name == MFGS else EDGE_INDEX


@dataclass
class SeedForward:
    """Calls a model on a :class:`~salientpp.distributed.loader.Batch` the way its forward wants and
    returns the seeds' outputs ``[batch_size, out_dim]`` (float32).

    The model's input is ``[x || embedding(n_id)]``: the batch's features (unless ``features`` is
    false) followed by the rows of a :class:`~salientpp.embedding.DistEmbedding`, when given.
    A user's model gets float32 rows; a built-in :class:`~salientpp.models.gnn.MFGModel`
    (``takes_stored_features``) gets features without an embedding as stored, float16 included, and
    converts them as its first layer reads them.
    """

    model: nn.Module
    kind: str
    trim_keywords: bool
    embedding: Any = None
    features: bool = True
    takes_stored_features: bool = False

    @classmethod
    def of(cls, model: nn.Module, embedding: Any = None, features: bool = True) -> "SeedForward":
        inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        params = inspect.signature(inner.forward).parameters
        return cls(model, forward_kind(inner), {"num_sampled_nodes", "num_sampled_edges"} <= set(params),
                   embedding, features, isinstance(inner, MFGModel))

    def inputs(self, batch) -> torch.Tensor:
        """``[num_nodes, in_dim]`` the model's input rows of ``batch`` (a collective with an
        embedding): float32, or the stored features' dtype for a built-in model."""
        if self.embedding is None:
            return batch.x if self.takes_stored_features else batch.x.float()
        rows = self.embedding(batch.n_id)
        return torch.cat([batch.x.float(), rows], dim=1) if self.features else rows

    def __call__(self, batch) -> torch.Tensor:
        x = self.inputs(batch)
        if self.kind == MFGS:
            return self.model(x, batch.mfgs)
        extra = ({"num_sampled_nodes": batch.num_sampled_nodes, "num_sampled_edges": batch.num_sampled_edges}
                 if self.trim_keywords else {})
        return self.model(x, batch.edge_index, **extra)[:batch.batch_size]

    def seed_outputs(self, batch) -> torch.Tensor | None:
        """:meth:`__call__` of a batch with seeds; ``None`` for an empty step, which still takes
        part in the embedding's exchange (a collective) when there is one."""
        if batch.batch_size:
            return self(batch)
        if self.embedding is not None:
            self.embedding(batch.n_id)
        return None
