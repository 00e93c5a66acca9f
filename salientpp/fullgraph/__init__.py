"""Full-graph distributed training with per-vertex dependency management (cache or communicate).

:mod:`.schedule` decides what each rank computes and exchanges, :mod:`.calibrate` times this
machine for the cost model, :mod:`.engine` runs the forward pass whose backward sends the
gradients of exchanged rows back to their owners. The trainer is
:class:`salientpp.train.fullgraph.FullGraphTrainer` (``salientpp train --mode full-graph``).
"""
from .calibrate import calibrate
from .engine import FullGraphEngine, active_levels, predicted_epoch_s
from .schedule import CostModel, Dependencies, DependencySchedule, check_dependencies, schedule_dependencies

__all__ = ["CostModel", "Dependencies", "DependencySchedule", "FullGraphEngine", "active_levels", "calibrate",
           "check_dependencies", "schedule_dependencies", "predicted_epoch_s"]
