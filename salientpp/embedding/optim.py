"""Sparse optimisers of a partitioned embedding table: each step updates the touched rows only.

A rank owns a dense float32 table ``weight`` ``[n, D]``. A step gives the distinct local rows
the batch touched and their summed gradients; the optimiser updates those rows in place and
keeps state only for rows that have ever been touched ("lazy"): an int64 ``[n]`` slot map
(-1 = no state yet) and state tensors with one row per touched row, grown by doubling.
Memory: ``8 n + s * (4 D * m + 8)`` bytes for ``s`` touched rows and ``m`` state rows per row
(Adagrad 1, Adam 2, plus Adam's int64 step count), at most twice that while the state grows.
"""
from __future__ import annotations

import abc

import torch

from ..errors import InputError


class SparseOptimizer(abc.ABC):
    """Updates rows of ``weight`` (float32 ``[n, D]``, in place) from their gradients.

    Subclasses name their per-row state tensors in :attr:`STATE` (float32 ``[slots, D]``) and
    implement :meth:`_update` on the slots of the touched rows.
    """

    NAME = ""
    STATE: tuple[str, ...] = ()

    def __init__(self, weight: torch.Tensor, lr: float):
        if not isinstance(weight, torch.Tensor) or weight.ndim != 2 or not weight.is_floating_point():
            raise InputError("a sparse optimiser needs a 2-D float tensor to update")
        if not lr > 0:
            raise InputError(f"the embedding learning rate must be positive, got {lr}")
        self.weight, self.lr = weight, float(lr)
        self.slot = torch.full((weight.shape[0],), -1, dtype=torch.int64)
        self.num_slots = 0
        self.state = {name: weight.new_zeros((0, weight.shape[1])) for name in self.STATE}
        self.steps = torch.zeros(0, dtype=torch.int64)  # per slot: how many updates its row had

    @property
    def touched(self) -> int:
        """Rows that have state (were ever updated)."""
        return self.num_slots

    def _slots(self, rows: torch.Tensor) -> torch.Tensor:
        """int64 slots of ``rows``, allocating zeroed state for rows seen for the first time."""
        new = rows[self.slot[rows] < 0]
        if new.numel():
            need = self.num_slots + new.shape[0]
            if need > self.steps.shape[0]:  # grow by doubling
                size = max(need, 2 * self.steps.shape[0], 16)
                for name, t in self.state.items():
                    grown = t.new_zeros((size, t.shape[1]))
                    grown[:self.num_slots] = t[:self.num_slots]
                    self.state[name] = grown
                steps = torch.zeros(size, dtype=torch.int64)
                steps[:self.num_slots] = self.steps[:self.num_slots]
                self.steps = steps
            self.slot[new] = torch.arange(self.num_slots, need)
            self.num_slots = need
        return self.slot[rows]

    def step(self, rows: torch.Tensor, grads: torch.Tensor) -> None:
        """Update ``rows`` (int64 ``[m]`` distinct local rows in ``[0, n)``) by ``grads`` (float32
        ``[m, D]``, each row's summed gradient)."""
        if rows.ndim != 1 or rows.dtype != torch.int64 or grads.shape != (rows.shape[0], self.weight.shape[1]):
            raise ValueError(f"rows must be int64 [m] and grads [m, {self.weight.shape[1]}], got "
                             f"{rows.dtype} {list(rows.shape)} and {list(grads.shape)}")
        if rows.numel() and torch.unique(rows).shape[0] != rows.shape[0]:
            raise ValueError("rows repeat; sum the gradients of a row before the step")
        if not rows.numel():
            return
        slots = self._slots(rows)
        self.steps[slots] += 1
        self._update(rows, slots, grads.to(self.weight.dtype))

    @abc.abstractmethod
    def _update(self, rows: torch.Tensor, slots: torch.Tensor, grads: torch.Tensor) -> None:
        """Apply the rule to ``weight[rows]`` with the state ``[slots]`` (step counts already advanced)."""

    def state_dict(self) -> dict:
        """The state of the touched rows only (tensors and numbers; ``torch.load(weights_only=True)``)."""
        used = self.num_slots
        return {"optimizer": self.NAME, "rows": self.weight.shape[0], "dim": self.weight.shape[1],
                "slot": self.slot.clone(), "steps": self.steps[:used].clone(),
                **{name: t[:used].clone() for name, t in self.state.items()}}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` of an optimiser of the same kind and table shape."""
        if (state.get("optimizer") != self.NAME or int(state["rows"]) != self.weight.shape[0]
                or int(state["dim"]) != self.weight.shape[1]):
            raise InputError(f"the saved embedding optimiser state is {state.get('optimizer')} over "
                             f"[{state.get('rows')}, {state.get('dim')}], not {self.NAME} over "
                             f"{list(self.weight.shape)}; resume with the same --embedding-dim and optimiser")
        self.slot = state["slot"].clone()
        self.steps = state["steps"].clone()
        self.num_slots = int(self.steps.shape[0])
        self.state = {name: state[name].clone() for name in self.STATE}


class SparseAdagrad(SparseOptimizer):
    """Per row: ``sum += g^2; w -= lr * g / (sqrt(sum) + eps)`` (``torch.optim.Adagrad`` on a dense
    table whose untouched rows get zero gradient)."""

    NAME = "adagrad"
    STATE = ("sum",)

    def __init__(self, weight: torch.Tensor, lr: float = 0.01, eps: float = 1e-10):
        super().__init__(weight, lr)
        self.eps = float(eps)

    def _update(self, rows, slots, grads):
        total = self.state["sum"][slots] + grads * grads
        self.state["sum"][slots] = total
        self.weight[rows] -= self.lr * grads / (total.sqrt() + self.eps)


class SparseAdam(SparseOptimizer):
    """Lazy Adam: a row's moments and bias correction advance only when the row is touched, so row
    v after its t-th update is where ``torch.optim.Adam`` would put it after t steps on v's
    gradients alone."""

    NAME = "adam"
    STATE = ("exp_avg", "exp_avg_sq")

    def __init__(self, weight: torch.Tensor, lr: float = 0.001, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        super().__init__(weight, lr)
        self.beta1, self.beta2 = (float(b) for b in betas)
        self.eps = float(eps)

    def _update(self, rows, slots, grads):
        m = self.state["exp_avg"][slots] * self.beta1 + grads * (1 - self.beta1)
        v = self.state["exp_avg_sq"][slots] * self.beta2 + grads * grads * (1 - self.beta2)
        self.state["exp_avg"][slots], self.state["exp_avg_sq"][slots] = m, v
        t = self.steps[slots].to(self.weight.dtype).unsqueeze(1)
        correction1 = 1 - self.beta1 ** t
        correction2 = 1 - self.beta2 ** t
        self.weight[rows] -= (self.lr / correction1) * m / (v.sqrt() / correction2.sqrt() + self.eps)


SPARSE_OPTIMIZERS = {SparseAdam.NAME: SparseAdam, SparseAdagrad.NAME: SparseAdagrad}
"""The sparse optimisers by name (``--embedding-optimizer``)."""


def make_sparse_optimizer(name: str, weight: torch.Tensor, lr: float) -> SparseOptimizer:
    """The optimiser ``name`` (:data:`SPARSE_OPTIMIZERS`) of ``weight`` with learning rate ``lr``."""
    if name not in SPARSE_OPTIMIZERS:
        raise InputError(f"unknown embedding optimizer {name!r}; choose {' or '.join(SPARSE_OPTIMIZERS)}")
    return SPARSE_OPTIMIZERS[name](weight, lr)
