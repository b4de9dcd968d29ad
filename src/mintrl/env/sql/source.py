"""``data.prompts`` for ``env=sql``: SQL tasks, generated or read from a DB-bench file."""

from __future__ import annotations

from typing import Any

from mintrl.data.base import RowFilter
from mintrl.env.source import EnvTaskSource
from mintrl.env.sql.loader import load_dbbench
from mintrl.env.sql.tasks import Difficulty, example_messages, generate_task, render_instruction

TASK = "sql"


class SqlTasks(EnvTaskSource):
    """Train and validation SQL tasks (:mod:`mintrl.env.sql.tasks`) as prompt items.

    Each item's ``question`` is the instruction (table, question, protocol:
    :func:`~mintrl.env.sql.tasks.render_instruction`), ``entry`` the task dict the environment and
    the SQL judge run, ``task`` ``"sql"``, and ``reference`` the reference action an intervention
    writes (``entry["reference_action"]``): the reference statement in a ```sql block, for a SELECT
    too, so that a corrected agent sees the result and then answers itself.

    Args:
        min_columns, max_columns, min_rows, max_rows, max_conditions, comparison_prob,
            aggregate_prob, mutation_fraction: the generator's difficulty
            (:class:`~mintrl.env.sql.tasks.Difficulty`, units there).
        show_rows: the instruction shows the table's rows (True), or only its schema and row count
            (False: the answer needs a query; the ``sql_schema`` level).
        source: the fields of :class:`~mintrl.env.source.EnvTaskSource`, as keywords: ``path`` (a
            local DB-bench ``.jsonl``/``.json`` file, :mod:`mintrl.env.sql.loader`, or None to
            generate tasks), ``train_size``, ``val_size``, ``train_seed``, ``val_seed`` (a generated
            training task identical to a validation task is skipped), ``split_seed``,
            ``max_prompt_tokens``, ``chat_template_kwargs``, ``example`` (a worked example episode
            before each task, :func:`~mintrl.env.sql.tasks.example_messages`, about 150 tokens of
            the prompt); any other keyword is a TypeError.

    Raises:
        ValueError: a field out of range (named ``data.prompts.<field>``), equal seeds, a missing
            file.
    """

    task = TASK
    generate_task = staticmethod(generate_task)

    def __init__(
        self,
        *,
        min_columns: int = 2,
        max_columns: int = 3,
        min_rows: int = 3,
        max_rows: int = 3,
        max_conditions: int = 1,
        comparison_prob: float = 0.0,
        aggregate_prob: float = 0.0,
        mutation_fraction: float = 0.0,
        show_rows: bool = True,
        **source,
    ):
        super().__init__(**source)
        self.show_rows = bool(show_rows)
        self.difficulty = Difficulty(
            min_columns=min_columns,
            max_columns=max_columns,
            min_rows=min_rows,
            max_rows=max_rows,
            max_conditions=max_conditions,
            comparison_prob=comparison_prob,
            aggregate_prob=aggregate_prob,
            mutation_fraction=mutation_fraction,
        )

    def render(self, entry: dict[str, Any]) -> str:
        """The instruction (:func:`~mintrl.env.sql.tasks.render_instruction`), rows shown or not."""
        return render_instruction(entry, self.show_rows)

    def examples(self) -> list[dict[str, str]]:
        """The worked example episode, its table shown as the tasks' are."""
        return example_messages(self.show_rows)

    def key(self, entry: dict[str, Any]) -> str:
        """Two tasks are the same when their instructions with the rows shown are (a schema-only
        instruction does not tell tables apart)."""
        return render_instruction(entry, show_rows=True)

    def load(self, rows: RowFilter | None) -> list[dict[str, Any]]:
        return load_dbbench(self.path, rows)
