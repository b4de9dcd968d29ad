"""Tasks from a local AgentBench OS-interaction file (``data/os_interaction/data/**/*.json`` of
THUDM/AgentBench): a JSON list of rows (or one row), or a ``.jsonl`` file of rows, read as
AgentBench's ``OSInteraction._load_configs`` reads them.

A *script* is a string (bash), ``{"code": ...}`` or ``{"file": ...}`` (read from ``scripts_dir``,
default the data file's folder), with an optional ``"language"``: ``bash`` (the default) or
``python`` (run as ``python3 -c`` in the sandbox). A row holds

- ``description``: the question;
- ``create``: an object whose ``init`` is a script or a list of scripts, each run in a process of
  its own (``bash -c`` / ``python3 -c``), in order, each of which must exit 0 (``local``, the Docker
  image, is ignored; a ``create`` that is not an object has no init, as in AgentBench);
- ``start``: a script (bash) run in the agent's shell after the init (a background program, a
  variable): the entry's ``start``, run by :mod:`mintrl.env.shell.environment` at each shell's
  start; its programs end with the shell (the sandbox's PID namespace);
- ``evaluation``: ``match`` or ``check``:

  - ``"match": "text"``: the stripped answer equals the text (check ``exact``, which also folds
    whitespace runs and one pair of quotes); ``{"answer": ..., "strip": true}`` the same;
    ``{"answer": ..., "strip": false}`` (or no ``strip``): check ``literal``; ``{"regex": ...}``:
    check ``regex`` (``re.search`` on the host; the pattern must compile at load time). An
    ``example`` (a script) next to a match is the reference command;
  - ``"check"``: a script or a list of scripts, ``null`` meaning the ``example`` script; in
    AgentBench each runs in the agent's final container as ``bash -c script -- *params`` /
    ``python3 -c script *params`` with ``params`` = the answer, then the stdout of each earlier
    script, and all must exit 0. Here the chain ``[null, <comparisons>...]`` is supported, where
    each comparison is a ``{"file": ...}`` whose name is one of :data:`CHECK_SCRIPTS`
    (``integer-match``, ``string-match``, ``size-match``, ``containing``, ``in``, compared on the
    host by :func:`mintrl.env.shell.protocol.answers_match`; each gets the answer and the example's
    output, so several join with ``+``); the example's stdout (stripped; AgentBench passes stdout) is the
    label, computed once at load time in a fresh sandbox from the init state (init, start, then
    the example). Any other chain tests the agent's *final state* (``check/0.sh``-style scripts
    running a ``calc`` or ``count`` command the agent was to write, ``runuser``/``sudo`` checks, a
    Python assertion on the answer, a chain without ``null``): with a writable root (``root_uids``)
    it is the entry's ``state_check`` (``[[language, text], ...]``, ``null`` as the example) with
    check ``state``, run as AgentBench runs it on the episode's final state at its end
    (:meth:`mintrl.env.shell.session.ShellSession.run_checks`: every process of the agent killed
    first, the host's programs, libraries and loader files bound over the agent's); the row loads
    only where the example, run on the init state, leaves a state that passes it with its stdout
    as the answer (which is then the label); without a writable root it is an invalid row
    (:data:`STATE_CHECK`).

Differences from AgentBench, which runs each task as root in a Docker container:

- the label of a check row comes from the example run on the *initial* state at load time, not on
  the agent's *final* state at the end: running the example in the agent's sandbox would let the
  agent change what it prints (delete the files it counts, then answer 0), since the agent controls
  that sandbox. For a question about the initial state both give the same label.
- a state check sees the host's programs in ``/usr/bin``, ``/usr/sbin`` and the library folders,
  whatever the agent (or the init) changed there: a program the agent writes counts in
  ``/usr/local/bin`` (or another folder the host lacks), not as a new name in ``/usr/bin``; a row
  whose init changes a host program (``chmod u+s /usr/bin/find``) would pass its check unsolved, so
  a state row whose chain passes on the initial state is invalid; the check runs as the namespace's root in ``~`` =
  ``/tmp/work`` with ``HOME`` there, without ``/proc``;
- without a writable root, a state check is an invalid row (:data:`STATE_CHECK`);
- the init, start and agent run as an unprivileged sandbox user in ``~`` = ``/tmp/work``; only the
  private tmpfs folders (``/tmp``, ``/root``, ``/home`` by default) are writable, so a row whose
  init or start writes elsewhere (``/usr``, ``/etc``, ``useradd``) fails there and is an invalid
  row; every row's init (and start) is run once at load time to find out;
- the answer is stripped by the action protocol before any check, so ``"strip": false`` cannot
  see surrounding whitespace.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shlex
from typing import Any

from mintrl.data.base import InvalidRow, RowFilter, read_json_rows
from mintrl.env.shell.session import CommandResult, ShellLimits, ShellSession, check_init
from mintrl.env.shell.tasks import reference_action

CHECK_SCRIPTS = {
    "integer-match": "integer",
    "string-match": "exact",
    "size-match": "size",
    "containing": "containing",
    "in": "in",
}
LANGUAGES = {"bash": "bash", "python": "python3"}  # a script's language -> the program that runs it (-c)
STATE_CHECK = "a state check needs a writable root (the loader's root_uids, env.writable_root)"
STATE_CHECKS_OFF = (
    "state checks are off (data.prompts.state_checks=false): a check script that runs what the agent wrote "
    "trusts what it prints, e.g. AgentBench's dev check/0.sh passes a constant calc printing '0)<1 or (True'"
)
LOAD_LIMITS = ShellLimits(open_files=1024)  # the load-time runs' limits (the environment's defaults)


def _script(value: Any, field: str, scripts_dir: str) -> tuple[str, str]:
    """``(language, text)`` of a script field: a string (bash), ``{"code": ...}`` or
    ``{"file": ...}`` (read from ``scripts_dir``), with an optional ``"language"``.

    Raises:
        ValueError: another form, an unknown language or an unreadable file (the field named).
    """
    if isinstance(value, str):
        return "bash", value
    if not isinstance(value, dict):
        raise ValueError(f"field '{field}': not a string, {{'code': ...}} or {{'file': ...}}")
    language = value.get("language", "bash")
    if language not in LANGUAGES:
        raise ValueError(f"field '{field}.language': {language!r} is not supported (only {sorted(LANGUAGES)})")
    if isinstance(value.get("file"), str):
        path = os.path.join(scripts_dir, value["file"])
        try:
            with open(path, encoding="utf-8") as f:
                return language, f.read()
        except OSError as err:
            raise ValueError(f"field '{field}.file': cannot read {path}: {err.strerror}") from None
    if isinstance(value.get("code"), str):
        return language, value["code"]
    raise ValueError(f"field '{field}': not a string, {{'code': ...}} or {{'file': ...}}")


def _code(value: Any, field: str, scripts_dir: str) -> str:
    """The text of a script field that must be bash (a command the agent's shell runs).

    Raises:
        ValueError: not a bash script (see :func:`_script`).
    """
    language, text = _script(value, field, scripts_dir)
    if language != "bash":
        raise ValueError(f"field '{field}': runs in the agent's shell, so it must be bash, not {language}")
    return text


def init_script(value: Any, scripts_dir: str) -> str:
    """The bash text of ``create.init`` (a script or a list of scripts, see the module docstring):
    one bash script as it is (the environment runs it in a process of its own); otherwise each
    script as ``bash -c`` / ``python3 -c`` in turn, stopping with the first non-zero exit status.

    Raises:
        ValueError: a bad script (the field and list index named).
    """
    if not isinstance(value, list):
        language, text = _script(value, "create.init", scripts_dir)
        if language == "bash":
            return seeded(text)
        value = [value]
    lines = []
    for k, script in enumerate(value):
        language, text = _script(script, f"create.init[{k}]", scripts_dir)
        text = seeded(text) if language == "bash" else text
        lines.append(f"{LANGUAGES[language]} -c {shlex.quote(text)} || exit $?")
    return "\n".join(lines)


def seeded(script: str) -> str:
    """A bash script with ``$RANDOM`` seeded from its own text (``RANDOM=<seed>`` first): the same
    task lays out the same files in its load-time run, in every episode and in the judge's runs, so
    that a label computed at load time is the episode's answer (AgentBench draws anew in each
    container and computes the expected output there). Randomness from ``/dev/urandom``, ``date``
    or Python stays unseeded."""
    seed = int(hashlib.sha256(script.encode("utf-8")).hexdigest()[:8], 16) % 32768
    return f"RANDOM={seed}\n{script}"


def _match(value: Any) -> tuple[str, str]:
    """``(label, check)`` of an ``evaluation.match`` (see the module docstring).

    Raises:
        ValueError: another form, or a regular expression that does not compile.
    """
    if isinstance(value, str):
        return value.strip(), "exact"
    if isinstance(value, dict) and isinstance(value.get("answer"), str):
        return (value["answer"], "exact") if value.get("strip") else (value["answer"], "literal")
    if isinstance(value, dict) and isinstance(value.get("regex"), str):
        try:
            re.compile(value["regex"])
        except re.error as err:
            raise ValueError(f"field 'evaluation.match.regex': not a regular expression: {err}") from None
        return value["regex"], "regex"
    raise ValueError("field 'evaluation.match': not a string, {'answer': ...} or {'regex': ...}")


def check_chain(value: Any) -> str:
    """The check (names joined with ``+``) of an ``evaluation.check`` chain ``[null, <comparison
    scripts>...]`` (see the module docstring).

    Raises:
        ValueError: a script other than ``null`` and the comparisons of :data:`CHECK_SCRIPTS`
            (:data:`STATE_CHECK`), or a comparison before any ``null``.
    """
    chain = value if isinstance(value, list) else [value]
    names: list[str] = []
    seen_example = False
    for k, spec in enumerate(chain):
        if spec is None:
            seen_example = True
            continue
        stem = os.path.splitext(os.path.basename(spec["file"]))[0] if _is_file(spec) else None
        if stem not in CHECK_SCRIPTS or spec.get("language", "bash") != "python":
            what = repr(spec["file"]) if _is_file(spec) else "a code script"
            raise ValueError(f"field 'evaluation.check[{k}]': {what} is not a comparison script: {STATE_CHECK}")
        if not seen_example:
            raise ValueError(f"field 'evaluation.check[{k}]': a comparison before the example's output (null)")
        names.append(CHECK_SCRIPTS[stem])
    if not names:
        raise ValueError(f"field 'evaluation.check': no comparison script: {STATE_CHECK}")
    return "+".join(dict.fromkeys(names))


def state_scripts(value: Any, example: str, scripts_dir: str) -> list[list[str]]:
    """The ``[language, text]`` of each script of an ``evaluation.check`` chain that tests the final
    state (run by :meth:`~mintrl.env.shell.session.ShellSession.run_checks`), ``null`` as the
    ``example`` script (bash), as AgentBench's ``_evaluate_by_check_scripts`` runs them.

    Raises:
        ValueError: a bad script, or a ``null`` without an example (the field named).
    """
    chain = value if isinstance(value, list) else [value]
    scripts = []
    for k, spec in enumerate(chain):
        if spec is None:
            if not example:
                raise ValueError(f"field 'evaluation.check[{k}]': null (the example) without an example script")
            scripts.append(["bash", example])
        else:
            scripts.append(list(_script(spec, f"evaluation.check[{k}]", scripts_dir)))
    return scripts


def check_state(
    init: str,
    start: str,
    example: str,
    scripts: list[list[str]],
    uid: int,
    limits: ShellLimits,
    timeout_s: float,
    root_uids: int,
) -> str:
    """Run a state-check row's example in a fresh sandbox as the agent would (init, start, then the
    example in the shell) and its check chain on the final state with the example's stdout as the
    answer (stripped, as the action protocol strips an answer), which must pass; then the chain on
    the initial state (init and start only) with an empty answer, which must fail (else the reward
    would not depend on the agent's work: e.g. an init that changes a host program, which the check
    sees as the host has it). Returns the example's answer (the row's label).

    Raises:
        RuntimeError: the init or the start failed (named).
        ValueError: the example did not come back, or the chain did not pass (the failing script, its
            exit code): the row cannot be solved in this sandbox (a missing program, no network); or
            the chain passes on the initial state.
    """
    answer = None
    for solved in (True, False):
        with ShellSession(uid, limits, 65536, init=init, init_timeout_s=timeout_s, root_uids=root_uids) as session:
            check_init(session.init_result, "the init script")
            if start.strip():
                check_init(session.run(f"{{\n{start}\n}} >/dev/null 2>&1", timeout_s), "the start command")
            if solved:
                run = session.run(f"{{\n{example}\n}} 2>/dev/null", timeout_s)
                if not run.finished:
                    raise ValueError(
                        "field 'evaluation.example': the reference command did not come back in the sandbox"
                    )
                answer = run.output.strip()
            results = session.run_checks([(language, text) for language, text in scripts], answer or "", timeout_s)
        failed = next((k for k, r in enumerate(results) if r.exit_code != 0), len(results))
        if solved and failed < len(scripts):
            why = "did not run" if failed == len(results) else f"exit code {results[failed].exit_code}"
            raise ValueError(f"field 'evaluation.check[{failed}]': the example's final state fails it here ({why})")
        if not solved and failed == len(scripts):
            raise ValueError(
                "field 'evaluation.check': the initial state passes it with an empty answer (nothing to do)"
            )
    return answer


def _is_file(spec: Any) -> bool:
    return isinstance(spec, dict) and isinstance(spec.get("file"), str)


def run_task(
    init: str,
    start: str,
    command: str,
    uid: int,
    limits: ShellLimits,
    timeout_s: float,
    root_uids: int | None = None,
) -> CommandResult | None:
    """Run a task's init, then its start command (its output, and its background programs', sent
    to ``/dev/null``) and ``command`` in the shell of one fresh sandbox (as the environment does),
    and close it (its background programs end with it).

    Args:
        init, start: the entry's fields ("" for none). command: "" to run none.
        timeout_s: time limit of each of the three (seconds).
        root_uids: with ``limits.writable_root``, the sandbox's host uid range
            (:class:`~mintrl.env.shell.session.ShellSession`).

    Returns:
        ``command``'s result, or None when there is none.

    Raises:
        RuntimeError: the init or the start failed or did not come back (named, with its output's end).
    """
    with ShellSession(uid, limits, 65536, init=init, init_timeout_s=timeout_s, root_uids=root_uids) as session:
        check_init(session.init_result, "the init script")
        if start.strip():
            check_init(session.run(f"{{\n{start}\n}} >/dev/null 2>&1", timeout_s), "the start command")
        return session.run(command, timeout_s) if command.strip() else None


def _description(row: dict[str, Any]) -> str:
    question = row.get("description")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("field 'description': missing, empty or not a string")
    return question.strip()


def _init(row: dict[str, Any], scripts_dir: str) -> str:
    create = row.get("create")
    return init_script(create["init"], scripts_dir) if isinstance(create, dict) and "init" in create else ""


def os_task_entry(
    row: dict[str, Any],
    i: int,
    name: str,
    scripts_dir: str,
    uid: int,
    limits: ShellLimits,
    timeout_s: float,
    root_uids: int | None = None,
    state_checks: bool = False,
) -> dict[str, Any]:
    """One AgentBench OS row as a task entry (:mod:`mintrl.env.shell.tasks`, with ``start``), its
    init and start run once in the sandbox (then its reference command, for a check row).

    Args:
        row: the row as read from the file; ``i``: its index; ``name``: the file name (for messages).
        scripts_dir: folder of ``{"file": ...}`` scripts. uid, limits: the sandbox's uid and limits.
        timeout_s: time limit of the init, the start and the reference command (seconds).
        root_uids: with ``limits.writable_root``, the load-time sandbox's host uid range.
        state_checks: load a row whose check tests the final state (with ``root_uids``); False:
            it is an invalid row (:data:`STATE_CHECKS_OFF`).

    Raises:
        InvalidRow: a missing or empty ``description``, a bad script, ``evaluation`` without
            ``match`` or ``check`` + ``example``, a check chain that tests the final state, or an
            init, start or reference command that fails in the sandbox (the field named).
    """
    try:
        question = _description(row)
        init = _init(row, scripts_dir)
        start = _code(row["start"], "start", scripts_dir) if row.get("start") is not None else ""
        evaluation = row.get("evaluation")
        if not isinstance(evaluation, dict):
            raise ValueError("field 'evaluation': missing or not an object")
        example = evaluation.get("example")
        reference = _code(example, "evaluation.example", scripts_dir).strip() if example is not None else ""
        if "match" in evaluation:
            label, check = _match(evaluation["match"])
            run_task(init, start, "", uid, limits, timeout_s, root_uids)
        else:
            if "check" not in evaluation:
                raise ValueError("field 'evaluation': needs 'match', or 'check' and 'example'")
            try:
                check = check_chain(evaluation["check"])
            except ValueError as err:
                if root_uids is None:
                    raise
                if not state_checks:
                    raise ValueError(f"{err.args[0].split(': a state check')[0]}: {STATE_CHECKS_OFF}") from None
                check = "state"  # a chain that tests the final state: run at the episode's end
            if not reference:
                raise ValueError("field 'evaluation.example': a check chain needs the example script")
            if check == "state":
                state = state_scripts(evaluation["check"], reference, scripts_dir)
                label = check_state(init, start, reference, state, uid, limits, timeout_s, root_uids)
            else:
                run = run_task(init, start, f"{{\n{reference}\n}} 2>/dev/null", uid, limits, timeout_s, root_uids)
                if not run.finished:
                    raise ValueError(
                        "field 'evaluation.example': the reference command did not come back in the sandbox"
                    )
                label = run.output.strip()
    except RuntimeError as err:  # the init or the start failed in the sandbox
        where = "start" if "start command" in str(err) else "create.init"
        raise InvalidRow(f"{name} row {i}: field '{where}': {err}") from None
    except ValueError as err:
        raise InvalidRow(f"{name} row {i}: {err}") from None
    entry = {
        "question": question,
        "init": init,
        "start": start,
        "reference": reference,
        "label": label,
        "check": check,
        **({"state_check": state} if check == "state" else {}),
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
    root_uids: int | None = None,
    state_checks: bool = False,
) -> list[dict[str, Any]]:
    """The task entries of a local AgentBench OS ``.json`` / ``.jsonl`` file, in file order.

    Args:
        rows: what to do with invalid rows (default: raise :class:`InvalidRow`).
        scripts_dir: folder of ``{"file": ...}`` scripts (default: the file's folder).
        uid: the sandbox uid of the load-time runs (used only as root).
        limits: their sandbox limits (default :data:`LOAD_LIMITS`).
        timeout_s: time limit of each init, start and reference command (seconds).
        root_uids: None: the rows run as an unprivileged uid on the read-only system folders;
            else on a writable root (as AgentBench's container: ``useradd``, writes to ``/usr``),
            as root of a user namespace mapped to the host uids ``root_uids .. root_uids + 65535``.
        state_checks: with ``root_uids``, load rows whose check tests the final state (run at the
            episode's end, :meth:`~mintrl.env.shell.session.ShellSession.run_checks`); False: they
            are invalid rows (:data:`STATE_CHECKS_OFF`).

    Raises:
        InvalidRow: a bad row (see :func:`os_task_entry`) unless ``rows`` skips it.
        FileNotFoundError: no such file.
    """
    rows = rows or RowFilter()
    limits = limits or LOAD_LIMITS
    if root_uids is not None:
        limits = dataclasses.replace(limits, writable_root=True)
    name = os.path.basename(path)
    scripts_dir = scripts_dir or os.path.dirname(os.path.abspath(path))
    entries = [
        rows(
            lambda i=i, row=row: os_task_entry(
                row, i, name, scripts_dir, uid, limits, timeout_s, root_uids, state_checks
            )
        )
        for i, row in enumerate(read_json_rows(path))
    ]
    return [e for e in entries if e is not None]
