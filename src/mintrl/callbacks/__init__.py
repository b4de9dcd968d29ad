"""Lightning callbacks of a run (``callbacks=`` config group)."""

from mintrl.callbacks.export import HFExport
from mintrl.callbacks.summary import RunSummary
from mintrl.callbacks.timing import StepTimer

__all__ = ["HFExport", "RunSummary", "StepTimer"]
