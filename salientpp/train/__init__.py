"""The built-in trainer: its configuration (the schema of ``salientpp train``), what a run decides
before its ranks start, the trainers, and the launch of the ranks."""
from .config import TrainConfig
from .loop import MinibatchTrainer, Trainer
from .run import open_trainer, run_rank, train, trainer_for
from .setup import RankSetup, ResolvedRun, resolve_run
from .state import TrainResult

__all__ = ["MinibatchTrainer", "RankSetup", "ResolvedRun", "TrainConfig", "TrainResult", "Trainer", "open_trainer",
           "resolve_run", "run_rank", "train", "trainer_for"]
