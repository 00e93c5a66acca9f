"""The extension's row gather (the CPU twin of csrc/gather.cu) writes what torch indexing writes."""
from __future__ import annotations

import pytest
import torch

from salientpp.distributed.device import RowSource, gather_rows, gather_rows_reference
from salientpp.selfcheck import random_sources

CPU = torch.device("cpu")


@pytest.mark.parametrize("seed", range(6))
# float32 x 200 is 800-byte rows: wider than the 512 bytes the copy loop prefetches of each row.
@pytest.mark.parametrize("dtype,width", [(torch.float32, 16), (torch.float16, 3), (torch.int64, 5),
                                         (torch.uint8, 7), (torch.float32, 200)])
def test_the_row_gather_writes_what_torch_indexing_writes_on_random_plans(seed, dtype, width):
    gen = torch.Generator().manual_seed(seed)
    # Owned (two tiers), received, device cache, host cache; some parts empty, as in real batches.
    sizes = [(int(torch.randint(0, 40, (1,), generator=gen)), 30, 20 * (seed % 2)),
             (int(torch.randint(0, 40, (1,), generator=gen)) * (seed != 2), 50, 0),
             (0 if seed == 3 else 10, 12, 0),
             (int(torch.randint(0, 40, (1,), generator=gen)), 0 if seed == 4 else 25, 5)]
    num_rows = sum(n for n, _, _ in sizes) + 3  # three rows no source writes
    sources = random_sources(gen, CPU, num_rows, width, sizes, dtype)
    fill = torch.full((num_rows, width), 7).to(dtype)
    ours = gather_rows(fill.clone(), sources)
    expected = gather_rows_reference(fill.clone(), sources)
    assert torch.equal(ours, expected)


def test_a_source_without_positions_fills_the_output_in_order_from_both_tiers():
    low, high = torch.arange(12.).view(4, 3), -torch.arange(6.).view(2, 3)
    rows = torch.tensor([5, 0, 4, 3, 3])
    out = gather_rows(torch.empty(5, 3), [RowSource(low, rows, high=high)])
    assert torch.equal(out, torch.cat([low, high])[rows])
    # Without idx a source takes its table's rows in order.
    out = gather_rows(torch.zeros(6, 3), [RowSource(low, pos=torch.tensor([5, 4, 1, 0]))])
    assert torch.equal(out[[5, 4, 1, 0]], low) and not out[[2, 3]].any()


def test_the_row_gather_does_not_depend_on_the_thread_count():
    gen = torch.Generator().manual_seed(9)
    sources = random_sources(gen, CPU, 5000, 64, [(3000, 800, 400), (2000, 600, 0)])
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = gather_rows(torch.zeros(5000, 64), sources)
        torch.set_num_threads(2)
        two = gather_rows(torch.zeros(5000, 64), sources)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two) and torch.equal(one, gather_rows_reference(torch.zeros(5000, 64), sources))


# Outputs over 16 MiB are written with streaming stores when their rows are 16-byte aligned
# (csrc/gather_ops.cpp); 404-byte rows and an output 4 bytes off alignment take the plain copy.
@pytest.mark.parametrize("width,offset", [(100, 0), (101, 0), (100, 1)])
def test_outputs_larger_than_the_streaming_threshold_get_the_same_rows(width, offset):
    gen = torch.Generator().manual_seed(width + offset)
    num_rows = 50_000  # 20 MB of float32 rows at width 100
    sources = random_sources(gen, CPU, num_rows, width, [(30_000, 40_000, 5_000), (19_000, 20_000, 0)])
    out = torch.full((num_rows * width + offset,), 7.0)[offset:].view(num_rows, width)
    expected = gather_rows_reference(out.clone(), sources)
    assert torch.equal(gather_rows(out, sources), expected)


@pytest.mark.parametrize("source,message", [
    (RowSource(torch.zeros(4, 3), torch.tensor([0, 4]), torch.tensor([0, 1])), r"idx\[1\] = 4 is outside \[0, 4\)"),
    (RowSource(torch.zeros(4, 3), torch.tensor([0]), torch.tensor([-1])), r"pos\[0\] = -1 is outside"),
    (RowSource(torch.zeros(4, 2), torch.tensor([0])), "every table must be a contiguous"),
    (RowSource(torch.zeros(4, 3, dtype=torch.float64), torch.tensor([0])), "every table must be"),
    (RowSource(torch.zeros(4, 3), torch.tensor([0, 1]), torch.tensor([0])), "the same length"),
    (RowSource(torch.zeros(4, 3), torch.tensor([0, 1], dtype=torch.int32)), "int64"),
    (RowSource(torch.zeros(4, 3), pos=torch.tensor([0, 1])), "takes its table's 4 rows"),
])
def test_the_row_gather_refuses_indices_out_of_range_and_mismatched_tables(source, message):
    with pytest.raises(RuntimeError, match=message):
        gather_rows(torch.zeros(4, 3), [source])


def test_one_gather_takes_at_most_eight_sources():
    source = RowSource(torch.zeros(1, 3), torch.tensor([0]), torch.tensor([0]))
    gather_rows(torch.zeros(1, 3), [source] * 8)
    with pytest.raises(RuntimeError, match="at most 8 row sources"):
        gather_rows(torch.zeros(1, 3), [source] * 9)
