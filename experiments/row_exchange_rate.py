"""How fast two local ranks exchange feature rows: the rows stage's all-to-all alone.

    python experiments/row_exchange_rate.py [--rows 140000] [--features 100] [--repeats 25]

Two ranks (salientpp's launcher, gloo over 127.0.0.1) each send ``--rows`` float32 rows of
``--features`` columns to the other with the same ``all_to_all_single`` the rows stage starts,
after a barrier, ``--repeats`` times. It prints, per rank, the median and fastest exchange and
the rate of one direction (bytes one rank sends over the median seconds). The defaults are one
``products`` batch in 2 parts without a cache: about 140,000 rows fetched per rank and batch.
Run it on an otherwise idle machine; the training's exchanges share their cores with the model.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

from salientpp.distributed import init_distributed, launch, shutdown_distributed


def _exchange(rows: int, features: int, repeats: int) -> list[float]:
    ctx = init_distributed()
    try:
        rows_of = lambda rank: torch.randn(rows, features, generator=torch.Generator().manual_seed(rank))
        send = rows_of(ctx.rank)
        recv = torch.empty_like(send)
        splits = [0 if k == ctx.rank else rows for k in range(ctx.world_size)]  # nothing to itself
        seconds = []
        for _ in range(repeats):
            dist.barrier()
            start = time.perf_counter()
            dist.all_to_all_single(recv, send, splits, splits)
            seconds.append(time.perf_counter() - start)
        if not torch.equal(recv, rows_of(1 - ctx.rank)):
            raise RuntimeError(f"rank {ctx.rank} received other rows than its peer sent")
        return seconds
    finally:
        shutdown_distributed()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=140_000)
    p.add_argument("--features", type=int, default=100)
    p.add_argument("--repeats", type=int, default=25)
    args = p.parse_args()
    megabytes = args.rows * args.features * 4 / 1e6
    for rank, seconds in enumerate(launch(_exchange, (args.rows, args.features, args.repeats), nprocs=2)):
        median = statistics.median(seconds)
        print(f"rank {rank}: {megabytes:.0f} MB each way, median {median * 1e3:.1f} ms (fastest "
              f"{min(seconds) * 1e3:.1f} ms), {megabytes / 1e3 / median:.2f} GB/s per direction")


if __name__ == "__main__":
    main()
