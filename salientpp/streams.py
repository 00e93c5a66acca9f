"""The random streams of a run, all in one place.

Every random choice salientpp makes is drawn from a stream named here, keyed by the run's seed,
a partition and a workload (or an epoch). "Rows fetched equal the simulator's" rests on this
module: the trainer's loaders and the simulator's evaluated run draw from the same stream
(:data:`RUN_STREAM`), so they sample the same batches; the policies that sample for
themselves, the tie-breaks of a plan and the random policy draw from streams of their own, so
they never see the batches they are scored on.
"""
from __future__ import annotations

import numpy as np

# The training run itself: rank k's loaders, and the run `salientpp simulate` evaluates.
RUN_STREAM = 0
# The epochs the vip-simulation policy samples to count accesses.
SIMULATION_STREAM = 1
# Tie-breaks between vertices a policy scores equally.
TIEBREAK_STREAM = 2
# The random policy's scores.
RANDOM_STREAM = 3
# The dropout masks of training, one workload per epoch.
DROPOUT_STREAM = 7

# Workloads of a rank's loaders: the training split, and every other seed set (evaluation,
# prediction). The simulator's workload 0 is the training loader's.
TRAIN_WORKLOAD, OTHER_WORKLOAD = 0, 1


def loader_seed(seed: int, part: int, stream: int = RUN_STREAM, workload: int = TRAIN_WORKLOAD) -> int:
    """The seed (a 63-bit int) of partition ``part``'s loader of ``workload`` in ``stream``."""
    state = np.random.SeedSequence([int(seed), int(part), int(stream), int(workload)]).generate_state(2, np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1]))


def dropout_seed(seed: int, epoch: int, part: int = 0) -> int:
    """The seed of the dropout masks of ``epoch`` on partition ``part``'s rank (full-graph
    training keys its masks by vertex, so every rank uses partition 0's)."""
    return loader_seed(seed, part, DROPOUT_STREAM, epoch)
