"""The batch pipeline: sample -> exchange counts -> exchange ids -> slice & exchange rows -> assemble."""
from .pipeline import Pipeline, StageTimes
from .stages import AssembleStage, CountsStage, IdsStage, InFlight, RowsStage, SampleStage, fetch_stages

__all__ = ["AssembleStage", "CountsStage", "IdsStage", "InFlight", "Pipeline", "RowsStage", "SampleStage",
           "StageTimes", "fetch_stages"]
