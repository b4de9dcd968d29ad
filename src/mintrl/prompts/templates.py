"""Prompt templates of judges and interventions, kept as text files (``src/mintrl/prompts/``).

A template is named by a file stem shipped with the package (``judge_math``, ``judge_code``,
``intervention_math``, ``intervention_code``, ``privileged_note``), by a path to any text file, or
given inline (any string containing a ``{placeholder}``).
Judge templates take ``{question}``, ``{reference}``, ``{prefix}``, ``{steps}`` (steps numbered
``[1]``, ``[2]``, ...) and must ask for one line ``KEEP`` or ``REVISE k`` (1-based ``k``); see
:func:`mintrl.judge.self_privileged.parse_verdict` for the variations that are accepted.
"""

from __future__ import annotations

from pathlib import Path

PROMPT_DIR = Path(__file__).resolve().parent


def load_prompt(name_or_path: str, required: tuple[str, ...] = ()) -> str:
    """The template text of a shipped name or a file path.

    Args:
        name_or_path: file stem under ``src/mintrl/prompts/``, a path to a text file, or the
            template itself (a string with a ``{`` in it).
        required: placeholders (e.g. ``"{question}"``) the template must contain.

    Raises:
        FileNotFoundError: neither a shipped name nor an existing file (shipped names listed).
        ValueError: a required placeholder is missing (named).
    """
    if "{" in name_or_path:
        text = name_or_path
        missing = [p for p in required if p not in text]
        if missing:
            raise ValueError(f"inline prompt lacks {missing}")
        return text
    path = Path(name_or_path)
    if not path.is_file():
        path = PROMPT_DIR / f"{name_or_path}.txt"
    if not path.is_file():
        names = sorted(p.stem for p in PROMPT_DIR.glob("*.txt"))
        raise FileNotFoundError(f"prompt {name_or_path!r} is neither a file nor one of {names}")
    text = path.read_text().rstrip("\n")
    missing = [p for p in required if p not in text]
    if missing:
        raise ValueError(f"prompt {name_or_path!r} lacks {missing}")
    return text
