"""Sparse optimisers of a partitioned embedding table: each step updates the touched rows only.

A rank owns a dense float table ``weight`` ``[n, D]`` (a plain tensor, updated in place). A step
gives the distinct local rows the batch touched and their summed gradients; the optimiser updates
those rows and keeps state only for rows that have ever been touched ("lazy"):

* ``slot``: int64 ``[n]``, the state row of each table row, -1 while the row has no state;
* per-row state tensors whose row ``slot[v]`` belongs to table row ``v``, allocated in order of
  first touch and grown by doubling their capacity.

**Memory**, for ``s`` touched rows and float32 state: ``8 n + s * b`` bytes, with ``b = 4 D`` for
:class:`SparseAdagrad` (the sum of squares) and ``b = 8 D + 8`` for :class:`SparseAdam` (two
moments and an int64 step count). Capacity is at most ``2 s`` rows (``2 s + s`` while a growth
copies), and :meth:`SparseOptimizer.state_dict` holds exactly ``8 n + s * b`` bytes.
"""
from __future__ import annotations

import abc
import math
from numbers import Real

import torch

from ..errors import InputError, check_keys

_ROW = "row"      # state of shape [slots, D], dtype of the weight
_COUNT = "count"  # state of shape [slots], int64


def _check_real(name: str, value, low: float, high: float, low_open: bool) -> float:
    """``value`` as a float if it lies in ``(low, high)`` (``[low, high)`` unless ``low_open``);
    else :class:`InputError`."""
    ok = (isinstance(value, Real) and not isinstance(value, bool)
          and (low < value if low_open else low <= value) and value < high)
    if not ok:
        bound = f"{'(' if low_open else '['}{low}, {high})"
        raise InputError(f"the embedding optimizer's {name} must be a number in {bound}, got {value!r}")
    return float(value)


def describe(value) -> str:
    """``"<dtype> [shape]"`` of a tensor, else its type's name (for error messages)."""
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} {list(value.shape)}"
    return type(value).__name__


class SparseOptimizer(abc.ABC):
    """Updates rows of ``weight`` (float ``[n, D]``, in place) from their summed gradients.

    Subclasses list their per-row state in :attr:`STATE` (name -> ``"row"``: ``[slots, D]`` of the
    weight's dtype, or ``"count"``: int64 ``[slots]``) and implement :meth:`_update`, which finds
    the state of its rows with :meth:`_slots`.

    Attributes:
        weight: the table ``[n, D]`` it updates in place.
        lr: the learning rate (> 0).
    """

    STATE: dict[str, str] = {}

    def __init__(self, weight: torch.Tensor, lr: float):
        if not isinstance(weight, torch.Tensor) or weight.ndim != 2 or not weight.is_floating_point():
            raise InputError("a sparse optimizer needs a 2-D floating-point tensor [n, D] to update")
        self.weight = weight
        self.lr = _check_real("learning rate", lr, 0.0, math.inf, low_open=True)
        self._slot = torch.full((weight.shape[0],), -1, dtype=torch.int64, device=weight.device)
        self._used = 0
        self._capacity = 0
        self._state = {name: self._empty(kind, 0) for name, kind in self.STATE.items()}

    def _empty(self, kind: str, size: int) -> torch.Tensor:
        """Zeroed state of ``kind`` for ``size`` slots."""
        if kind == _ROW:
            return self.weight.new_zeros((size, self.weight.shape[1]))
        return torch.zeros(size, dtype=torch.int64, device=self.weight.device)

    @property
    def touched(self) -> int:
        """The number of rows that have state (were ever updated)."""
        return self._used

    def _slots(self, rows: torch.Tensor) -> torch.Tensor:
        """int64 ``[m]`` state slots of ``rows`` (int64 ``[m]`` distinct), giving rows seen for the
        first time zeroed state."""
        new = rows[self._slot.index_select(0, rows) < 0]
        if new.numel():
            need = self._used + new.shape[0]
            if need > self._capacity:
                self._capacity = max(need, 2 * self._capacity)
                for name, kind in self.STATE.items():
                    grown = self._empty(kind, self._capacity)
                    grown[:self._used] = self._state[name][:self._used]
                    self._state[name] = grown
            self._slot[new] = torch.arange(self._used, need, device=self._slot.device)
            self._used = need
        return self._slot.index_select(0, rows)

    def step(self, rows: torch.Tensor, grads: torch.Tensor) -> None:
        """Update ``weight[rows]`` in place.

        Args:
            rows: int64 ``[m]`` distinct local row ids in ``[0, n)``.
            grads: ``[m, D]`` of the weight's dtype (float32), the summed gradient of each row.

        Raises:
            ValueError: on a wrong dtype or shape, a row out of range or a repeated row (a bug of
                the caller, which must sum a row's gradients before the step).
        """
        n, dim = self.weight.shape
        if rows.dtype != torch.int64 or rows.ndim != 1:
            raise ValueError(f"rows must be int64 [m], got {rows.dtype} {list(rows.shape)}")
        if grads.dtype != self.weight.dtype or tuple(grads.shape) != (rows.shape[0], dim):
            raise ValueError(f"grads must be {self.weight.dtype} [{rows.shape[0]}, {dim}], "
                             f"got {grads.dtype} {list(grads.shape)}")
        if not rows.numel():
            return
        low, high = int(rows.min()), int(rows.max())
        if low < 0 or high >= n:
            raise ValueError(f"rows must lie in [0, {n}), got {low}..{high}")
        if torch.unique(rows).shape[0] != rows.shape[0]:
            raise ValueError("rows repeat; sum the gradients of a row before the step")
        self._update(rows, grads)

    @abc.abstractmethod
    def _update(self, rows: torch.Tensor, grads: torch.Tensor) -> None:
        """Apply the rule to ``weight[rows]`` (``rows`` int64 ``[m]`` checked by :meth:`step`,
        ``grads`` ``[m, D]``) and advance the rows' state."""

    def state_dict(self) -> dict[str, torch.Tensor | int | float]:
        """The state of the touched rows only: ``"slot"`` (int64 ``[n]``) and each :attr:`STATE`
        tensor cut to its ``touched`` used rows; loadable with ``torch.load(weights_only=True)``.
        The learning rate and the rule's constants are not state: an optimiser that loads it keeps
        its own (a resumed run trains with the ``--embedding-lr`` it was given)."""
        return {"slot": self._slot.clone(),
                **{name: t[:self._used].clone() for name, t in self._state.items()}}

    def load_state_dict(self, state: dict[str, torch.Tensor | int | float]) -> None:
        """Restore :meth:`state_dict` of the same optimiser over a table of the same shape.

        Raises:
            InputError: if ``state`` is another optimiser's, or of another ``n`` or ``D``.
        """
        n, dim = self.weight.shape
        check_keys(state, ("slot", *self.STATE), f"the saved embedding optimizer state ({type(self).__name__})",
                   "resume with the same --embedding-optimizer")
        slot = state["slot"]
        if not isinstance(slot, torch.Tensor) or slot.dtype != torch.int64 or tuple(slot.shape) != (n,):
            raise InputError(f"the saved embedding optimizer state covers {describe(slot)} rows, not int64 "
                             f"[{n}]; resume with the same partitioning and ranks")
        used_slots = slot[slot >= 0]
        used = used_slots.shape[0]
        if not torch.equal(torch.sort(used_slots).values, torch.arange(used, device=slot.device)):
            raise InputError("the saved embedding optimizer state has a corrupt slot map; resume from another "
                             "checkpoint")
        for name, kind in self.STATE.items():
            want, got = self._empty(kind, used), state[name]
            if not isinstance(got, torch.Tensor) or got.dtype != want.dtype or got.shape != want.shape:
                raise InputError(f"the saved embedding optimizer state {name!r} is {describe(got)}, not "
                                 f"{want.dtype} {list(want.shape)} (D = {dim}); resume with the same "
                                 "--embedding-dim")
        self._slot = slot.to(self.weight.device, copy=True)
        self._used = self._capacity = used
        self._state = {name: state[name].to(self.weight.device, copy=True) for name in self.STATE}


class SparseAdagrad(SparseOptimizer):
    """Adagrad on the touched rows: per row ``sum += g^2; w -= lr * g / (sqrt(sum) + eps)``.

    This is ``torch.optim.Adagrad(lr, eps=eps)`` (no decay, zero initial accumulator) on a dense
    table whose untouched rows get a zero gradient, which leaves them and their sums unchanged.
    State: ``"sum"`` ``[touched, D]``.
    """

    STATE = {"sum": _ROW}

    def __init__(self, weight: torch.Tensor, lr: float = 0.01, eps: float = 1e-10):
        super().__init__(weight, lr)
        self.eps = _check_real("eps", eps, 0.0, math.inf, low_open=False)

    def _update(self, rows: torch.Tensor, grads: torch.Tensor) -> None:
        slots = self._slots(rows)
        total = self._state["sum"].index_select(0, slots).addcmul_(grads, grads)
        self._state["sum"].index_copy_(0, slots, total)
        updated = self.weight.index_select(0, rows).addcdiv_(grads, total.sqrt_().add_(self.eps), value=-self.lr)
        self.weight.index_copy_(0, rows, updated)


class SparseAdam(SparseOptimizer):
    """Lazy Adam: a row's moments and step count advance only when the row is touched.

    With ``t_v`` the number of steps that touched row ``v``::

        m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
        w -= lr / (1 - b1^t_v) * m / (sqrt(v) / sqrt(1 - b2^t_v) + eps)

    (``torch.optim.Adam``'s rule, eps added after the bias correction), so row ``v`` after its
    ``t``-th update is where ``torch.optim.Adam`` would put it after ``t`` steps on ``v``'s
    gradients alone. State: ``"exp_avg"``, ``"exp_avg_sq"`` ``[touched, D]`` and int64 ``"step"``
    ``[touched]``.
    """

    STATE = {"exp_avg": _ROW, "exp_avg_sq": _ROW, "step": _COUNT}

    def __init__(self, weight: torch.Tensor, lr: float = 0.001, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        super().__init__(weight, lr)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise InputError(f"the embedding optimizer's betas must be two numbers in [0, 1), got {betas!r}")
        self.beta1 = _check_real("beta1", betas[0], 0.0, 1.0, low_open=False)
        self.beta2 = _check_real("beta2", betas[1], 0.0, 1.0, low_open=False)
        self.eps = _check_real("eps", eps, 0.0, math.inf, low_open=False)

    def _update(self, rows: torch.Tensor, grads: torch.Tensor) -> None:
        slots = self._slots(rows)
        state = self._state
        step = state["step"].index_select(0, slots).add_(1)
        exp_avg = state["exp_avg"].index_select(0, slots).lerp_(grads, 1 - self.beta1)
        exp_avg_sq = state["exp_avg_sq"].index_select(0, slots).mul_(self.beta2).addcmul_(
            grads, grads, value=1 - self.beta2)
        state["step"].index_copy_(0, slots, step)
        state["exp_avg"].index_copy_(0, slots, exp_avg)
        state["exp_avg_sq"].index_copy_(0, slots, exp_avg_sq)
        t = step.to(torch.float64).unsqueeze(1)  # bias corrections in float64, like torch's Python floats
        step_size = (self.lr / (1 - self.beta1 ** t)).to(self.weight.dtype)
        correction2_sqrt = (1 - self.beta2 ** t).sqrt().to(self.weight.dtype)
        denom = exp_avg_sq.sqrt_().div_(correction2_sqrt).add_(self.eps)
        updated = self.weight.index_select(0, rows).sub_(exp_avg.div_(denom).mul_(step_size))
        self.weight.index_copy_(0, rows, updated)


SPARSE_OPTIMIZERS: dict[str, type[SparseOptimizer]] = {"adam": SparseAdam, "adagrad": SparseAdagrad}
"""The sparse optimisers by name (``--embedding-optimizer``)."""


def make_sparse_optimizer(name: str, weight: torch.Tensor, lr: float) -> SparseOptimizer:
    """The optimiser ``name`` (a key of :data:`SPARSE_OPTIMIZERS`) of ``weight`` (float ``[n, D]``)
    with learning rate ``lr`` and default other options.

    Raises:
        InputError: on an unknown name, or on a bad ``weight`` or ``lr``.
    """
    if name not in SPARSE_OPTIMIZERS:
        raise InputError(f"unknown embedding optimizer {name!r}; choose {' or '.join(SPARSE_OPTIMIZERS)}")
    return SPARSE_OPTIMIZERS[name](weight, lr)
