"""The sparse optimisers of the embedding table against torch's dense ones, their laziness and state."""
from __future__ import annotations

import io

import pytest
import torch

from salientpp.embedding.optim import SPARSE_OPTIMIZERS, SparseAdagrad, SparseAdam, make_sparse_optimizer
from salientpp.errors import InputError

N, D = 40, 6


def _table(seed: int = 0, n: int = N, dim: int = D) -> torch.Tensor:
    return torch.randn((n, dim), generator=torch.Generator().manual_seed(seed))


def _random_steps(num_steps: int, seed: int = 1, n: int = N, dim: int = D):
    """``num_steps`` pairs (int64 distinct rows of a random subset, float32 gradients)."""
    gen = torch.Generator().manual_seed(seed)
    steps = []
    for _ in range(num_steps):
        count = int(torch.randint(1, n, (1,), generator=gen))
        rows = torch.randperm(n, generator=gen)[:count]
        steps.append((rows, torch.randn((count, dim), generator=gen)))
    return steps


def _dense_run(weight: torch.Tensor, optimizer_cls, steps, **options) -> torch.Tensor:
    """``weight`` after a torch optimiser's steps on a dense copy whose gradient is zero outside the rows."""
    param = torch.nn.Parameter(weight.clone())
    opt = optimizer_cls([param], **options)
    for rows, grads in steps:
        dense = torch.zeros_like(param)
        dense[rows] = grads
        param.grad = dense
        opt.step()
    return param.detach()


def test_sparse_adagrad_matches_dense_adagrad_with_zero_gradients_on_untouched_rows():
    weight = _table()
    steps = _random_steps(10)
    expected = _dense_run(weight, torch.optim.Adagrad, steps, lr=0.1, eps=1e-10)
    opt = SparseAdagrad(weight, lr=0.1, eps=1e-10)
    for rows, grads in steps:
        opt.step(rows, grads)
    torch.testing.assert_close(weight, expected, atol=1e-6, rtol=0)
    assert opt.touched == int(torch.unique(torch.cat([r for r, _ in steps])).numel())


def test_sparse_adam_matches_dense_adam_when_every_row_is_touched_at_every_step():
    weight = _table()
    gen = torch.Generator().manual_seed(2)
    steps = [(torch.randperm(N, generator=gen), torch.randn((N, D), generator=gen)) for _ in range(10)]
    expected = _dense_run(weight, torch.optim.Adam, steps, lr=0.05, betas=(0.8, 0.99), eps=0.1)
    opt = SparseAdam(weight, lr=0.05, betas=(0.8, 0.99), eps=0.1)
    for rows, grads in steps:
        opt.step(rows, grads)
    torch.testing.assert_close(weight, expected, atol=1e-6, rtol=0)


def test_sparse_adam_advances_a_row_only_on_the_steps_that_touch_it():
    weight = _table()
    before = weight.clone()
    lazy_row = 7
    gen = torch.Generator().manual_seed(3)
    other_rows = torch.tensor([1, 2, 3])
    lazy_grads = []
    opt = SparseAdam(weight, lr=0.1)
    for step in range(7):
        rows, grads = other_rows, torch.randn((3, D), generator=gen)
        if step in (2, 5):
            g = torch.randn((1, D), generator=gen)
            lazy_grads.append(g)
            rows, grads = torch.cat([rows, torch.tensor([lazy_row])]), torch.cat([grads, g])
        opt.step(rows, grads)
        if step == 3:  # between its updates the row stays where its first update put it
            after_first = _dense_run(before[lazy_row:lazy_row + 1], torch.optim.Adam,
                                     [(torch.tensor([0]), lazy_grads[0])], lr=0.1)
            torch.testing.assert_close(weight[lazy_row:lazy_row + 1], after_first, atol=1e-6, rtol=0)
    # two dense Adam steps on this row alone: bias corrections of t = 1, 2, not of steps 3 and 6
    expected = _dense_run(before[lazy_row:lazy_row + 1], torch.optim.Adam,
                          [(torch.tensor([0]), g) for g in lazy_grads], lr=0.1)
    torch.testing.assert_close(weight[lazy_row:lazy_row + 1], expected, atol=1e-6, rtol=0)
    untouched = torch.ones(N, dtype=torch.bool)
    untouched[[1, 2, 3, lazy_row]] = False
    assert torch.equal(weight[untouched], before[untouched])
    assert opt.touched == 4


def _roundtrip(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("name", sorted(SPARSE_OPTIMIZERS))
def test_resuming_from_a_state_dict_continues_exactly_as_the_uninterrupted_run(name):
    steps = _random_steps(6, seed=4)
    weight_a = _table()
    a = make_sparse_optimizer(name, weight_a, 0.05)
    for rows, grads in steps[:3]:
        a.step(rows, grads)
    weight_b = weight_a.clone()
    b = make_sparse_optimizer(name, weight_b, 0.05)
    b.load_state_dict(_roundtrip(a.state_dict()))
    assert b.touched == a.touched
    for rows, grads in steps[3:]:
        a.step(rows, grads)
        b.step(rows, grads)
    assert torch.equal(weight_a, weight_b)
    state_a, state_b = a.state_dict(), b.state_dict()
    assert state_a.keys() == state_b.keys()
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)


@pytest.mark.parametrize("name", sorted(SPARSE_OPTIMIZERS))
def test_state_dict_holds_state_for_the_touched_rows_only(name):
    n = 10000
    opt = make_sparse_optimizer(name, _table(n=n), 0.01)
    rows = torch.tensor([3, 70, 500, 4000, 9999])
    opt.step(rows, torch.ones((5, D)))
    state = opt.state_dict()
    assert opt.touched == 5
    assert state["slot"].shape == (n,) and int((state["slot"] >= 0).sum()) == 5
    assert all(v.shape[0] <= 10 for k, v in state.items() if k != "slot")
    # the live state grows by doubling, so it stays proportional to the touched rows too
    assert all(t.shape[0] <= 2 * opt.touched for t in opt._state.values())


def test_loading_another_optimizers_state_or_another_dimension_is_an_input_error():
    adam = SparseAdam(_table())
    adam.step(torch.tensor([0, 5]), torch.ones((2, D)))
    with pytest.raises(InputError, match="adagrad|Adagrad"):
        SparseAdagrad(_table()).load_state_dict(adam.state_dict())
    with pytest.raises(InputError, match="embedding-dim"):
        SparseAdam(_table(dim=D + 1)).load_state_dict(adam.state_dict())
    with pytest.raises(InputError, match="rows"):
        SparseAdam(_table(n=N + 1)).load_state_dict(adam.state_dict())


@pytest.mark.parametrize("make", [
    lambda w: SparseAdam(w, lr=0.0),
    lambda w: SparseAdagrad(w, lr=-1.0),
    lambda w: SparseAdam(w, lr=float("nan")),
    lambda w: SparseAdam(w, betas=(1.0, 0.999)),
    lambda w: SparseAdagrad(w, eps=-1.0),
    lambda w: SparseAdam(w[0]),
    lambda w: SparseAdagrad(w.long()),
])
def test_bad_options_are_input_errors(make):
    with pytest.raises(InputError):
        make(_table())


def test_an_unknown_optimizer_name_is_an_input_error_naming_the_choices():
    with pytest.raises(InputError, match="adam or adagrad"):
        make_sparse_optimizer("sgd", _table(), 0.1)


@pytest.mark.parametrize("rows, grads, message", [
    (torch.tensor([1, 4, 1]), torch.ones((3, D)), "repeat"),
    (torch.tensor([1, N]), torch.ones((2, D)), r"\[0, 40\)"),
    (torch.tensor([1, 2], dtype=torch.int32), torch.ones((2, D)), "int64"),
    (torch.tensor([1, 2]), torch.ones((2, D + 1)), "grads"),
    (torch.tensor([1, 2]), torch.ones((2, D), dtype=torch.float64), "grads"),
])
def test_a_malformed_step_is_a_value_error_and_changes_nothing(rows, grads, message):
    weight = _table()
    before = weight.clone()
    opt = SparseAdagrad(weight)
    with pytest.raises(ValueError, match=message):
        opt.step(rows, grads)
    assert torch.equal(weight, before) and opt.touched == 0
