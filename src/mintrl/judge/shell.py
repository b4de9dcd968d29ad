"""``judge=shell``: a rule judge for the shell environment (``env=shell``) that executes the command.

It reads the whole action so far (the accepted ``prefix_text`` of the turn and the new steps) as
the environment would (:func:`mintrl.env.shell.protocol.parse_action`) and uses the request's
privileged ``entry`` (the task: init script, reference command, label, check):

- a ```bash block: the agent's command runs in a fresh sandboxed shell on the task's initial state
  (its init script; :func:`mintrl.env.shell.session.run_script`); the command is kept when its
  output is the answer (``label`` under the task's ``check``), else revised at the step where
  the block starts with the reference action (``entry["reference_action"]``: the reference
  command in a ```bash block) as the correction. A block wholly in the accepted prefix was judged
  before (Keep). An unfinished turn (``final`` False) is judged only once it holds a complete
  (closed) block;
- an ``<answer>`` (final turn only): compared with the label; a wrong answer is revised with
  ``<answer>label</answer>``;
- an invalid final turn: revised at its first step with the reference action.

The command runs on the initial state, not the episode's current one (the judge does not see the
episode's shell): an exploratory command (``ls``) is revised too, as the SQL judge revises an
exploratory query. A request without an entry, or one the judge cannot evaluate (an init that
fails, a sandbox failure), is kept (a failure counted in ``judge/shell_errors``); it never raises.
Reviews run one at a time under a lock, as uid ``uid`` (one live shell at a time).
"""

from __future__ import annotations

import logging
import threading
from typing import Sequence

from mintrl.env.shell.environment import check_task
from mintrl.env.shell.protocol import answers_match, find_command, parse_action
from mintrl.env.shell.session import ShellLimits, run_script
from mintrl.env.shell.tasks import reference_action
from mintrl.judge.base import REVISE, Judge, ReviewRequest, Verdict
from mintrl.judge.sql import step_at
from mintrl.training.checks import check_int, check_range

log = logging.getLogger(__name__)


class ShellJudge(Judge):
    """Execution-based judge of shell actions (see module docstring).

    Args:
        context: unused (judges receive the run's ModelContext).
        command_timeout_s: time limit of the init and of the command it runs (seconds, > 0).
        max_action_chars: longer actions are invalid, as in the environment (characters, >= 1).
        uid: sandbox uid of its shells (used only as root; not one of the environment's slots).
        memory_mb, processes: the sandbox limits of its shells (MiB, processes).

    Raises:
        ValueError: a field out of its range (named ``judge.<field>``).
    """

    def __init__(
        self,
        context=None,
        command_timeout_s: float = 2.0,
        max_action_chars: int = 1000,
        uid: int = 64400,
        memory_mb: int = 512,
        processes: int = 32,
    ):
        check_range("judge.command_timeout_s", command_timeout_s, 0.0, low_open=True)
        check_int("judge.max_action_chars", max_action_chars)
        check_int("judge.uid", uid)
        self.command_timeout_s, self.max_action_chars, self.uid = float(command_timeout_s), max_action_chars, uid
        self.limits = ShellLimits(
            wall_s=3 * self.command_timeout_s + 5.0, memory_mb=memory_mb, processes=processes, field="judge"
        )
        self.errors = 0
        self._lock = threading.Lock()

    def _answers(self, entry: dict, command: str) -> bool:
        """True when ``command`` prints the task's answer on its initial state."""
        with self._lock:
            result = run_script(entry["init"], command, self.uid, self.limits, self.command_timeout_s)
        return result.finished and answers_match(result.output, entry["label"], entry["check"])

    def review_one(self, request: ReviewRequest) -> Verdict:
        """Verdict for one request (see module docstring); never raises."""
        entry = request.entry
        if entry is None:
            return Verdict()
        try:
            return self._review(request, entry)
        except Exception as err:  # noqa: BLE001 - a judge never raises on model output
            self.errors += 1
            log.warning("shell judge failed: %s: %s", type(err).__name__, err)
            return Verdict()

    def _review(self, request: ReviewRequest, entry: dict) -> Verdict:
        check_task(entry)
        prefix = request.prefix_text or ""
        text = prefix + "".join(request.steps)
        if not request.final:
            block = find_command(text, allow_open=False)
            if block is None or block.end <= len(prefix):
                return Verdict()
            action = parse_action(text, self.max_action_chars, allow_open=False)
            if action.kind != "run":
                return Verdict()  # an answer or over-long text in an unfinished turn waits for its end
        else:
            action = parse_action(text, self.max_action_chars)
        correction = entry.get("reference_action") or reference_action(entry)
        if action.kind == "invalid":
            return Verdict(kind=REVISE, step=0, correction=correction)
        if action.end <= len(prefix):
            return Verdict()  # judged with the accepted prefix
        step = step_at(request.steps, max(action.start - len(prefix), 0))
        if action.kind == "answer":
            if answers_match(action.text, entry["label"], entry["check"]):
                return Verdict()
            return Verdict(kind=REVISE, step=step, correction=f"<answer>{entry['label']}</answer>")
        if self._answers(entry, action.text):
            return Verdict()
        return Verdict(kind=REVISE, step=step, correction=correction)

    def review(self, requests: Sequence[ReviewRequest]) -> list[Verdict]:
        """One verdict per request (never raises)."""
        return [self.review_one(r) for r in requests]

    def metrics(self) -> dict[str, float]:
        """``judge/shell_errors``: requests the judge could not evaluate (kept), since the last call."""
        out, self.errors = {"judge/shell_errors": float(self.errors)}, 0
        return out
