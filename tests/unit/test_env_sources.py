"""The environments' prompt sources take their own knobs and pass the shared fields on
(mintrl.env.source.EnvTaskSource, mintrl.data.reasoning_gym.ReasoningGymPrompts): the fields land where
the shared base keeps them, a keyword no class takes is a TypeError, and a task is the environment's
generator at the source's difficulty."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mintrl.data.base import DEFAULT_INSTRUCTION
from mintrl.data.reasoning_gym import ReasoningGymPrompts
from mintrl.env.python_tool.source import TOOL_INSTRUCTION, PythonToolPrompts
from mintrl.env.shell import tasks as shell_tasks
from mintrl.env.shell.source import ShellTasks
from mintrl.env.source import check_spans
from mintrl.env.sql import tasks as sql_tasks
from mintrl.env.sql.source import SqlTasks

SHARED = dict(train_size=3, val_size=2, train_seed=5, val_seed=6, max_prompt_tokens=300)


def test_the_python_tool_source_passes_the_task_fields_on():
    source = PythonToolPrompts(task="basic_arithmetic", example=False, chat_template_kwargs={"x": 1}, **SHARED)
    assert (source.task, source.sizes, source.seeds) == (
        "basic_arithmetic",
        {"train": 3, "val": 2},
        {"train": 5, "val": 6},
    )
    assert (source.max_prompt_tokens, source.chat_template_kwargs) == (300, {"x": 1})
    assert (source.instruction, source.example, source.history()) == (TOOL_INSTRUCTION, False, [])
    assert PythonToolPrompts(instruction="{question}?").instruction == "{question}?"
    assert ReasoningGymPrompts().instruction == DEFAULT_INSTRUCTION
    with pytest.raises(TypeError, match="chunk_size"):
        PythonToolPrompts(chunk_size=4)
    with pytest.raises(TypeError):
        PythonToolPrompts("basic_arithmetic")  # keywords only
    with pytest.raises(ValueError, match="train_seed and val_seed must differ"):
        PythonToolPrompts(train_seed=1, val_seed=1)


@pytest.mark.parametrize(
    "cls,tasks,knobs",
    [(SqlTasks, sql_tasks, {"min_rows": 4, "max_rows": 5}), (ShellTasks, shell_tasks, {"kinds": ("count_files",)})],
)
def test_the_environment_sources_pass_the_shared_fields_on(cls, tasks, knobs):
    source = cls(split_seed=7, example=False, **knobs, **SHARED)
    assert (source.sizes, source.seeds, source.split_seed) == ({"train": 3, "val": 2}, {"train": 5, "val": 6}, 7)
    assert (source.max_prompt_tokens, source.example, source.path) == (300, False, None)
    assert all(getattr(source.difficulty, k) == v for k, v in knobs.items())
    task = source.generate(5, 1)
    assert task == tasks.generate_task(5, 1, source.difficulty) != tasks.generate_task(5, 1)  # not the default
    assert source.render(task) == tasks.render_instruction(task) and source.examples() == tasks.example_messages()
    with pytest.raises(TypeError, match="max_turns"):
        cls(max_turns=2)
    with pytest.raises(ValueError, match="data.prompts.val_size"):
        cls(val_size=0)


@pytest.mark.parametrize(
    "low_value,high_value,message",
    [
        (0, 5, r"data.prompts.min_rows must be an integer >= 1, got 0"),
        (4, 3, r"data.prompts.max_rows must be an integer >= 4, got 3"),
        (2, 25, r"data.prompts.max_rows must be in \[1, 20\], got 25"),
    ],
)
def test_check_spans_names_the_knob_out_of_range(low_value, high_value, message):
    check_spans(
        SimpleNamespace(min_rows=1, max_rows=20, min_cols=3, max_cols=3),
        "data.prompts",
        [("rows", 1, 20), ("cols", 2, 6)],
    )
    with pytest.raises(ValueError, match=f"^{message}$"):
        check_spans(SimpleNamespace(min_rows=low_value, max_rows=high_value), "data.prompts", [("rows", 1, 20)])
