"""``data.prompts`` for ``env=python_tool``: reasoning-gym tasks with the Python-tool protocol."""

from __future__ import annotations

from mintrl.data.reasoning_gym import ReasoningGymPrompts
from mintrl.env.python_tool.protocol import output_observation

TOOL_INSTRUCTION = (
    "{question}\nYou can run Python: write code in a ```python block that prints what you need, and you "
    "will see its output. Give the final answer inside <answer></answer> tags."
)
EXAMPLE_QUESTION = "Calculate 23 + 19."


class PythonToolPrompts(ReasoningGymPrompts):
    """Train and validation prompts of one reasoning-gym task for ``env=python_tool``.

    Each item is a :class:`ReasoningGymPrompts` item (``question`` the task text, ``reference`` the
    answer, ``entry`` the reasoning-gym entry the environment scores), prompted with
    ``instruction`` (the tool protocol) and, with ``example``, a worked example episode as earlier
    chat turns (:meth:`history`).

    Args:
        instruction: user-message template with ``{question}`` (default: :data:`TOOL_INSTRUCTION`).
        example: put a worked example episode (about 120 tokens) before each task.
        task: the task's fields, keywords of :class:`~mintrl.data.reasoning_gym.ReasoningGymPrompts`
            (``task``, ``task_kwargs``, ``train_size``, ``val_size``, ``train_seed``, ``val_seed``,
            ``max_prompt_tokens``, ``chat_template_kwargs``; sizes in prompts, ``max_prompt_tokens``
            in tokens); any other keyword is a TypeError.

    Raises:
        ValueError: as :class:`~mintrl.data.reasoning_gym.ReasoningGymPrompts` (unknown task,
            non-positive sizes, equal seeds, no ``{question}`` in the instruction).
    """

    def __init__(self, *, instruction: str = TOOL_INSTRUCTION, example: bool = True, **task):
        super().__init__(instruction=instruction, **task)
        self.example = bool(example)

    def history(self) -> list[dict[str, str]]:
        """The worked example episode as chat messages (none without ``example``): the instruction
        on :data:`EXAMPLE_QUESTION`, a ```python block that prints the sum, the environment's
        observation of its output, the answer."""
        if not self.example:
            return []
        return [
            {"role": "user", "content": self.instruction.format(question=EXAMPLE_QUESTION)},
            {"role": "assistant", "content": "```python\nprint(23 + 19)\n```"},
            {"role": "user", "content": output_observation("42")},
            {"role": "assistant", "content": "<answer>42</answer>"},
        ]
