"""Opening a trainer in the test's own process, as a launched rank opens it."""
from __future__ import annotations

from salientpp.host import local_world_size
from salientpp.train import RankSetup, resolve_run, trainer_for
from salientpp.train.fullgraph import FullGraphTrainer


def rank_trainer(config, ctx, **full_graph_options):
    """:func:`salientpp.train.trainer_for`; with ``full_graph_options`` (``cost``, ``schedule``), the
    :class:`FullGraphTrainer` of the same resolved run given them."""
    if not full_graph_options:
        return trainer_for(config, ctx)
    return FullGraphTrainer(RankSetup.open(resolve_run(config, local_world_size()), ctx), **full_graph_options)


def store_contexts(world: int, timeout_s: float = 10.0) -> list:
    """``world`` rank contexts of one job in this process that share a rendezvous store but no
    process group: enough for what ranks check through the store (their agreement on options,
    data and plans), not for collectives."""
    import torch

    from salientpp.distributed import DistContext

    from salientpp.host import ThreadBudget

    store, cpu = torch.distributed.HashStore(), torch.device("cpu")
    return [DistContext(r, world, r, cpu, cpu, "gloo", rendezvous_store=store, timeout_s=timeout_s,
                        threads=ThreadBudget.for_rank(world)) for r in range(world)]


def on_ranks(fn, contexts) -> list:
    """``fn(ctx)`` on every context at once, one thread each: what each returned, or the exception
    it raised, in rank order."""
    import threading

    results: list = [None] * len(contexts)

    def run(ctx):
        try:
            results[ctx.rank] = fn(ctx)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            results[ctx.rank] = exc
    threads = [threading.Thread(target=run, args=(ctx,)) for ctx in contexts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
