"""``data.prompts`` for ``env=shell``: shell tasks, generated or read from an AgentBench OS file."""

from __future__ import annotations

from typing import Any, Sequence

from mintrl.data.base import RowFilter
from mintrl.env.shell.loader import load_os_tasks
from mintrl.env.shell.tasks import KINDS, Difficulty, example_messages, generate_task, render_instruction
from mintrl.env.source import EnvTaskSource

TASK = "shell"


class ShellTasks(EnvTaskSource):
    """Train and validation shell tasks (:mod:`mintrl.env.shell.tasks`) as prompt items.

    Each item's ``question`` is the instruction (question and protocol:
    :func:`~mintrl.env.shell.tasks.render_instruction`), ``entry`` the task dict the environment and
    the shell judge run, ``task`` ``"shell"``, and ``reference`` the reference action an
    intervention writes (``entry["reference_action"]``: the reference command in a ```bash block,
    so that a corrected agent sees the output and then answers itself).

    Args:
        scripts_dir: folder of a benchmark file's ``{"file": ...}`` scripts (default: the file's folder).
        min_files, max_files, max_depth, min_lines, max_lines, kinds: the generator's difficulty
            (:class:`~mintrl.env.shell.tasks.Difficulty`, units there).
        uid: sandbox uid of the load-time runs of a file's rows (used only as root).
        writable_root: run a file's rows at load time on a writable root, as root of a user
            namespace (AgentBench's container: inits that write ``/usr`` or call ``useradd``);
            pair with ``env.writable_root``. Root only.
        root_uids: the first of the 65536 host uids that load-time namespace maps to (with
            ``writable_root``; a range nothing else uses).
        state_checks: with ``writable_root``, load rows whose check tests the final state (run at
            the episode's end); False: they are invalid rows. A check script that runs what the
            agent wrote trusts what it prints (docs/integrity.md).
        source: the fields of :class:`~mintrl.env.source.EnvTaskSource`, as keywords: ``path`` (a
            local AgentBench OS ``.json``/``.jsonl`` file, :mod:`mintrl.env.shell.loader`, each
            row's init run once in the sandbox at load time; or None to generate tasks),
            ``train_size``, ``val_size``, ``train_seed``, ``val_seed`` (a generated training task
            whose instruction and init equal a validation task's is skipped), ``split_seed``,
            ``max_prompt_tokens``, ``chat_template_kwargs``, ``example`` (a worked example episode
            before each task, :func:`~mintrl.env.shell.tasks.example_messages`); any other keyword
            is a TypeError.

    Raises:
        ValueError: a field out of range (named ``data.prompts.<field>``), equal seeds, a missing file.
    """

    task = TASK
    generate_task = staticmethod(generate_task)
    render = staticmethod(render_instruction)
    examples = staticmethod(example_messages)

    def __init__(
        self,
        *,
        scripts_dir: str | None = None,
        min_files: int = 2,
        max_files: int = 4,
        max_depth: int = 0,
        min_lines: int = 1,
        max_lines: int = 3,
        kinds: Sequence[str] = ("count_files", "file_content"),
        uid: int = 64300,
        writable_root: bool = False,
        root_uids: int = 2_100_000_000,
        state_checks: bool = False,
        **source,
    ):
        super().__init__(**source)
        self.difficulty = Difficulty(
            min_files=min_files,
            max_files=max_files,
            max_depth=max_depth,
            min_lines=min_lines,
            max_lines=max_lines,
            kinds=tuple(kinds),
        )
        self.scripts_dir, self.uid = scripts_dir, uid
        self.root_uids = int(root_uids) if writable_root else None
        self.state_checks = bool(state_checks)

    def load(self, rows: RowFilter | None) -> list[dict[str, Any]]:
        return load_os_tasks(
            self.path, rows, self.scripts_dir, self.uid, root_uids=self.root_uids, state_checks=self.state_checks
        )

    def key(self, entry: dict[str, Any]) -> tuple[str, str, str]:
        """The instruction, the init script and the start command: two tasks that ask the same of
        different files (or of a different variable set by the start) differ."""
        return render_instruction(entry), entry["init"], entry.get("start", "")


__all__ = ["KINDS", "ShellTasks", "TASK"]
