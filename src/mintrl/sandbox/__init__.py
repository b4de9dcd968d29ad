"""The process sandbox: isolated execution of untrusted generated code. The code reward and the
Python-tool environment run programs in a :class:`Sandbox`; the shell environment starts ``launcher.py``
in program mode (``launch.start_launcher``). A bottom layer: it imports nothing else of mintrl.

``launcher.py`` (isolation and limits of one process), ``candidate.py`` (the solution, answering calls),
``checks.py`` (the tests, counting the verdict), ``harness.py`` (a program without tests) and ``codec.py``
(plain values across the boundary) are stdlib-only scripts run as separate processes.

Threat model (the policy is an adversary of its reward): a solution's code can do anything inside
its own process and sandbox: read the files the sandbox shows, print anything, exit at any moment,
return any object, walk its own frames and memory, start processes (within the limits), use all its
CPU time. It cannot see the tests or their expected values (they are only in the checks' process),
reach the checks' process (another PID namespace), write the verdict (only the checks' process
counts, from plain decoded values) or outlive its run (PID namespace, wall-clock kill). See
docs/integrity.md.
"""

from mintrl.sandbox.program import Outcome, Program, ProgramResult
from mintrl.sandbox.runner import Sandbox

__all__ = ["Outcome", "Program", "ProgramResult", "Sandbox"]
