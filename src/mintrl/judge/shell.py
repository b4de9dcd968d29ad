"""``judge=shell``: a rule judge for the shell environment (``env=shell``) that executes the command.

It reads the whole action so far (the accepted ``prefix_text`` of the turn and the new steps) as
the environment would (:func:`mintrl.env.shell.protocol.parse_action`) and uses the request's
privileged ``entry`` (the task: init script, reference command, label, check):

- a ```bash block: the agent's command runs in a fresh sandboxed shell on the task's initial state
  (its init script and start command; :func:`mintrl.env.shell.loader.run_task`); the command is kept when its
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

import threading
from typing import Any

from mintrl.core.checks import check_int, check_range
from mintrl.env.shell.environment import check_task
from mintrl.env.shell.loader import run_task
from mintrl.env.shell.protocol import answers_match, find_command, parse_action
from mintrl.env.shell.session import ShellLimits
from mintrl.env.shell.tasks import reference_action
from mintrl.judge.action import ActionJudge


class ShellJudge(ActionJudge):
    """Execution-based judge of shell actions (see module docstring).

    Args:
        context: unused (judges receive the run's ModelContext).
        command_timeout_s: time limit of the init and of the command it runs (seconds, > 0).
        max_action_chars: longer actions are invalid, as in the environment (characters, >= 1).
        uid: sandbox uid of its shells (used only as root; not one of the environment's slots).
        memory_mb, processes: the sandbox limits of its shells (MiB, processes).
        writable_root: run its shells on a writable root as root of a user namespace (as
            ``env.writable_root``; root only), mapped to the host uids ``root_uids`` onwards (65536).

    Raises:
        ValueError: a field out of its range (named ``judge.<field>``).
    """

    name = "shell"
    action_kind = "run"

    def __init__(
        self,
        context=None,
        command_timeout_s: float = 2.0,
        max_action_chars: int = 1000,
        uid: int = 64400,
        memory_mb: int = 512,
        processes: int = 32,
        writable_root: bool = False,
        root_uids: int = 2_110_000_000,
    ):
        check_range("judge.command_timeout_s", command_timeout_s, 0.0, low_open=True)
        super().__init__(max_action_chars)
        check_int("judge.uid", uid)
        self.command_timeout_s, self.uid = float(command_timeout_s), uid
        self.limits = ShellLimits(
            wall_s=3 * self.command_timeout_s + 5.0,
            memory_mb=memory_mb,
            processes=processes,
            writable_root=bool(writable_root),
            field="judge",
        )
        self.root_uids = int(root_uids)
        self._lock = threading.Lock()

    def _answers(self, entry: dict, command: str) -> bool:
        """True when ``command`` prints the task's answer on its initial state (after its init and
        its start command, as the agent's shell has them)."""
        with self._lock:
            result = run_task(
                entry["init"], entry.get("start", ""), command, self.uid, self.limits,
                self.command_timeout_s, self.root_uids,
            )  # fmt: skip
        return result.finished and answers_match(result.output, entry["label"], entry["check"])

    def check_entry(self, entry: dict[str, Any]) -> None:
        check_task(entry)

    def find_block(self, text: str, allow_open: bool):
        return find_command(text, allow_open=allow_open)

    def parse(self, text: str, allow_open: bool = True):
        return parse_action(text, self.max_action_chars, allow_open=allow_open)

    def reference(self, entry: dict[str, Any]) -> str:
        return reference_action(entry)

    def answer_ok(self, entry: dict[str, Any], answer: str) -> bool:
        """The answer against the label; a task whose check tests the final state (``check`` ``state``)
        is decided by that check at the episode's end, not by its answer: any answer is kept."""
        return entry["check"] == "state" or answers_match(answer, entry["label"], entry["check"])

    def action_ok(self, entry: dict[str, Any], action: str) -> bool:
        """Kept when the command prints the task's answer on its initial state."""
        return self._answers(entry, action)
