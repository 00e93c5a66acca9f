"""Distributed training: the configuration, the built-in trainer (a client of the public
loader API), evaluation, checkpoints, predictions, and the launch with restarts."""
from .config import TrainConfig
from .loop import Trainer
from .run import run_rank, train
from .state import TrainResult

__all__ = ["TrainConfig", "TrainResult", "Trainer", "run_rank", "train"]
