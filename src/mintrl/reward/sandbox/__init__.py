"""Sandboxed execution of untrusted generated code (the code reward's runner).

``launcher.py`` and ``harness.py`` are stdlib-only scripts run as separate processes, never imported.
"""

from mintrl.reward.sandbox.runner import Outcome, Program, ProgramResult, Sandbox

__all__ = ["Outcome", "Program", "ProgramResult", "Sandbox"]
