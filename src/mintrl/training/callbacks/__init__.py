"""Lightning callbacks of a run (``callbacks=`` config group)."""

from mintrl.training.callbacks.export import HFExport
from mintrl.training.callbacks.records import RolloutRecords
from mintrl.training.callbacks.run_summary import RunSummary
from mintrl.training.callbacks.timing import StepTimer

__all__ = ["HFExport", "RolloutRecords", "RunSummary", "StepTimer"]
