"""Tasks from a local AgentBench OS-interaction file (``data/os_interaction/data/*.json`` of
THUDM/AgentBench): a JSON list of rows (or one row), or a ``.jsonl`` file of rows.

A row holds ``description`` (the question), an optional ``create`` (``{"init": ...}``, the init
script: a string, ``{"code": ...}`` or ``{"file": ...}``; ``local``, the Docker image, is ignored)
and ``evaluation``, one of

- ``{"match": "text"}``: the answer must equal this text (check ``exact``);
- ``{"check": ..., "example": ...}``: ``example`` (a string, ``{"code": ...}`` or
  ``{"file": ...}``) is the reference command; the label is its output (stripped), got by running
  the init script and then the command in a fresh sandboxed shell (the environment's sandbox,
  :func:`mintrl.env.shell.session.run_script`); ``check`` names the comparison by its script's
  file name (``[null, {"language": "python", "file": "check/integer-match.py"}]`` or
  ``{"file": ...}``): ``integer-match``, ``string-match``, ``size-match``, ``containing`` and
  ``in`` map to the checks of :mod:`mintrl.env.shell.protocol` (implemented in Python; the
  scripts are not run).

``{"file": ...}`` paths are read relative to ``scripts_dir`` (default: the data file's folder).

Differences from AgentBench, which runs each task as root in a Docker container:

- the init script and the agent run as an unprivileged sandbox user in ``~`` = ``/tmp/work``;
  only the private tmpfs folders (``/tmp``, ``/root``, ``/home`` by default) are writable, so a
  row whose init writes elsewhere (``/usr``, ``useradd``) fails its init and is an invalid row;
  every row's init is run once at load time to find out;
- rows with ``start`` (a background program) and check scripts other than the five above (e.g. a
  ``check/0.sh`` that tests a command the agent wrote) are invalid rows: the answer is scored,
  never the final state.
"""

from __future__ import annotations

import os
from typing import Any

from mintrl.data.base import InvalidRow, RowFilter, read_json_rows
from mintrl.env.shell.session import ShellLimits, run_script
from mintrl.env.shell.tasks import reference_action

CHECK_SCRIPTS = {
    "integer-match": "integer",
    "string-match": "exact",
    "size-match": "size",
    "containing": "containing",
    "in": "in",
}


def _code(value: Any, field: str, scripts_dir: str) -> str:
    """The script text of a field: a string, ``{"code": ...}`` or ``{"file": ...}`` (read from
    ``scripts_dir``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("code"), str):
        return value["code"]
    if isinstance(value, dict) and isinstance(value.get("file"), str):
        path = os.path.join(scripts_dir, value["file"])
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except OSError as err:
            raise ValueError(f"field '{field}.file': cannot read {path}: {err.strerror}") from None
    raise ValueError(f"field '{field}': not a string, {{'code': ...}} or {{'file': ...}}")


def _check(value: Any) -> str:
    """The check name of an ``evaluation.check`` value (see the module docstring)."""
    spec = value
    if isinstance(value, list):
        specs = [v for v in value if v is not None]
        if len(specs) != 1:
            raise ValueError("field 'evaluation.check': a list needs exactly one check script")
        spec = specs[0]
    if not isinstance(spec, dict) or not isinstance(spec.get("file"), str):
        raise ValueError("field 'evaluation.check': not {'file': ...} or [null, {'file': ...}]")
    name = os.path.splitext(os.path.basename(spec["file"]))[0]
    if name not in CHECK_SCRIPTS:
        raise ValueError(
            f"field 'evaluation.check': check script {spec['file']!r} is not supported (only {sorted(CHECK_SCRIPTS)})"
        )
    return CHECK_SCRIPTS[name]


def os_task_entry(
    row: dict[str, Any], i: int, name: str, scripts_dir: str, uid: int, limits: ShellLimits, timeout_s: float
) -> dict[str, Any]:
    """One AgentBench OS row as a task entry (:mod:`mintrl.env.shell.tasks`), its init run once in
    the sandbox (and its reference command, for a check row).

    Args:
        row: the row as read from the file; ``i``: its index; ``name``: the file name (for messages).
        scripts_dir: folder of ``{"file": ...}`` scripts. uid, limits: the sandbox's uid and limits.
        timeout_s: time limit of the init and of the reference command (seconds).

    Raises:
        InvalidRow: a missing or empty ``description``, a ``start``, a bad ``create.init``,
            ``evaluation`` without ``match`` or ``check`` + ``example``, an unsupported check, or an
            init or reference command that fails in the sandbox (the field named).
    """
    try:
        question = row.get("description")
        if not isinstance(question, str) or not question.strip():
            raise ValueError("field 'description': missing, empty or not a string")
        if row.get("start") is not None:
            raise ValueError("field 'start': background programs are not supported")
        create = row.get("create")
        if create is not None and not isinstance(create, dict):
            raise ValueError("field 'create': not an object")
        init = _code(create["init"], "create.init", scripts_dir) if create and "init" in create else ""
        evaluation = row.get("evaluation")
        if not isinstance(evaluation, dict):
            raise ValueError("field 'evaluation': missing or not an object")
        if "match" in evaluation:
            if not isinstance(evaluation["match"], str):
                raise ValueError("field 'evaluation.match': not a string")
            reference, label, check = "", evaluation["match"].strip(), "exact"
            run = run_script(init, "true", uid, limits, timeout_s)
        else:
            if "check" not in evaluation or "example" not in evaluation:
                raise ValueError("field 'evaluation': needs 'match', or 'check' and 'example'")
            check = _check(evaluation["check"])
            reference = _code(evaluation["example"], "evaluation.example", scripts_dir).strip()
            run = run_script(init, reference, uid, limits, timeout_s)
            if not run.finished:
                raise ValueError("field 'evaluation.example': the reference command did not come back in the sandbox")
            label = run.output.strip()
    except RuntimeError as err:  # the init script failed in the sandbox
        raise InvalidRow(f"{name} row {i}: field 'create.init': {err}") from None
    except ValueError as err:
        raise InvalidRow(f"{name} row {i}: {err}") from None
    entry = {
        "question": question.strip(),
        "init": init,
        "reference": reference,
        "label": label,
        "check": check,
        "kind": "loaded",
        "source": name,
        "index": i,
    }
    entry["reference_action"] = reference_action(entry)
    return entry


def load_os_tasks(
    path: str,
    rows: RowFilter | None = None,
    scripts_dir: str | None = None,
    uid: int = 64300,
    limits: ShellLimits | None = None,
    timeout_s: float = 10.0,
) -> list[dict[str, Any]]:
    """The task entries of a local AgentBench OS ``.json`` / ``.jsonl`` file, in file order.

    Args:
        rows: what to do with invalid rows (default: raise :class:`InvalidRow`).
        scripts_dir: folder of ``{"file": ...}`` scripts (default: the file's folder).
        uid: the sandbox uid of the load-time runs (used only as root).
        limits: their sandbox limits (default :class:`ShellLimits`).
        timeout_s: time limit of each init and reference command (seconds).

    Raises:
        InvalidRow: a bad row (see :func:`os_task_entry`) unless ``rows`` skips it.
        FileNotFoundError: no such file.
    """
    rows = rows or RowFilter()
    limits = limits or ShellLimits()
    name = os.path.basename(path)
    scripts_dir = scripts_dir or os.path.dirname(os.path.abspath(path))
    entries = [
        rows(lambda i=i, row=row: os_task_entry(row, i, name, scripts_dir, uid, limits, timeout_s))
        for i, row in enumerate(read_json_rows(path))
    ]
    return [e for e in entries if e is not None]
