"""The batch pipeline: sample -> exchange counts -> exchange ids -> slice & exchange rows -> assemble."""
from .device import CudaOps, DeviceOps, Event, HostOps, device_ops
from .pipeline import Pipeline, StageTimes
from .stages import AssembleStage, CountsStage, IdsStage, InFlight, RowsStage, SampleStage, fetch_stages

__all__ = ["AssembleStage", "CountsStage", "CudaOps", "DeviceOps", "Event", "HostOps", "IdsStage", "InFlight",
           "Pipeline", "RowsStage", "SampleStage", "StageTimes", "device_ops", "fetch_stages"]
