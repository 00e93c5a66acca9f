"""Distributed training: the configuration, the trainer, evaluation and checkpoints."""
from .config import TrainConfig
from .trainer import Trainer, TrainResult, run_rank, train

__all__ = ["TrainConfig", "TrainResult", "Trainer", "run_rank", "train"]
