"""Opening a trainer in the test's own process, as a launched rank opens it."""
from __future__ import annotations

from salientpp.host import local_world_size
from salientpp.train import RankSetup, resolve_run, trainer_for
from salientpp.train.fullgraph import FullGraphTrainer


def rank_trainer(config, ctx, **full_graph_options):
    """:func:`salientpp.train.trainer_for`; with ``full_graph_options`` (``cost``, ``plan``), the
    :class:`FullGraphTrainer` of the same resolved run given them."""
    if not full_graph_options:
        return trainer_for(config, ctx)
    return FullGraphTrainer(RankSetup.open(resolve_run(config, local_world_size()), ctx), **full_graph_options)
