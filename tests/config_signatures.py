"""Config checks shared by the compose-all test and the config snapshots: every option of every config
group, the preset each option pairs with, composition with run-specific values fixed, and the check of
each ``_target_`` node's keys against the signature of the class or function it names."""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from hydra._internal.utils import _locate
from omegaconf import DictConfig, OmegaConf

import mintrl.build.components  # noqa: F401  (registers the configs' resolvers)
from mintrl.build.config import CONFIG_DIR

OUTPUT_DIR = "<output_dir>"  # paths.output_dir of every composed config (a run's own folder otherwise)

# Groups whose options are whole rows or run settings, not one component: composed by the row tests.
ROW_GROUPS = ("experiment", "method", "preset", "sweep", "hydra")

# Arguments the build passes at instantiation besides the config's keys (mintrl.build.components.
# build_components, mintrl.build.run.run), by the top-level key of the node they are passed to.
RUNTIME_ARGUMENTS: dict[str, frozenset[str]] = {
    "model": frozenset(),
    "sampler": frozenset({"model", "tokenizer"}),
    "judge": frozenset({"context"}),
    "intervention": frozenset({"context"}),
    "guide": frozenset({"tokenizer"}),
    "rollout": frozenset({"sampler", "judge", "intervention", "reward", "tokenizer", "allocation", "guide"}),
    "data": frozenset({"rollout", "tokenizer", "max_staleness"}),
    "train_data": frozenset({"rollout", "tokenizer"}),  # eval.yaml's training task, read not built
    "objective": frozenset({"context"}),
    "module": frozenset({"policy", "objective", "tokenizer", "companion_models"}),
    "trainer": frozenset({"logger", "callbacks"}),
}

# Keys of a node the build takes out before instantiating it (they configure something else), by the
# node's top-level key: rollout.max_staleness is the data module's (mintrl.build.components.split_max_staleness).
BUILD_KEYS: dict[str, frozenset[str]] = {"rollout": frozenset({"max_staleness"})}


def group_options(config_dir: str | Path = CONFIG_DIR) -> list[tuple[str, str]]:
    """Every ``(group, option)`` of the component groups under ``config_dir`` (nested groups such as
    ``model/lora`` included; the row groups of :data:`ROW_GROUPS` left out), sorted."""
    root = Path(config_dir)
    options = []
    for path in root.rglob("*.yaml"):
        rel = path.relative_to(root)
        if len(rel.parts) < 2 or rel.parts[0] in ROW_GROUPS:
            continue
        options.append(("/".join(rel.parts[:-1]), rel.stem))
    return sorted(options)


def row_options(group: str, config_dir: str | Path = CONFIG_DIR) -> list[str]:
    """The options of a row group (``experiment``: ``paper/luffy`` etc., by their path), sorted."""
    root = Path(config_dir) / group
    return sorted(str(p.relative_to(root))[: -len(".yaml")] for p in root.rglob("*.yaml"))


def _preset_defaults(name: str, config_dir: Path) -> list:
    data = yaml.safe_load((config_dir / "preset" / f"{name}.yaml").read_text()) or {}
    return data.get("defaults") or []


@functools.cache
def preset_choices(name: str, config_dir: str | Path = CONFIG_DIR) -> dict[str, str | None]:
    """The group options a preset selects (``override /<group>: <option>``), those of the presets it
    extends included (a later entry wins), read from the YAML without composing."""
    config_dir = Path(config_dir)
    choices: dict[str, str | None] = {}
    for entry in _preset_defaults(name, config_dir):
        if isinstance(entry, str) and entry != "_self_":
            choices.update(preset_choices(entry, str(config_dir)))
        elif isinstance(entry, dict):
            for key, value in entry.items():
                group = key.removeprefix("override ").strip().lstrip("/")
                if group.startswith("preset"):
                    choices.update(preset_choices(value, str(config_dir)) if value else {})
                else:
                    choices[group] = value
    return choices


@functools.cache
def main_job_choices(config_dir: str | Path = CONFIG_DIR) -> dict[str, str | None]:
    """The group options train.yaml's defaults list selects (``{"judge": "rule", ...}``)."""
    data = yaml.safe_load((Path(config_dir) / "train.yaml").read_text()) or {}
    return {k: v for entry in data.get("defaults") or [] if isinstance(entry, dict) for k, v in entry.items()}


def _env_of_data_option(option: str, config_dir: Path) -> str | None:
    """The environment a data option's tasks belong to: ``mintrl.env.<name>`` in its prompts' ``_target_``."""
    data = yaml.safe_load((config_dir / "data" / f"{option}.yaml").read_text()) or {}
    target = str((data.get("prompts") or {}).get("_target_", ""))
    parts = target.split(".")
    return parts[2] if target.startswith("mintrl.env.") and len(parts) > 2 else None


def pairing_preset(
    group: str, option: str, config_dir: str | Path = CONFIG_DIR, skip: frozenset[str] = frozenset()
) -> str | None:
    """The preset an option is composed with (None: the main job's defaults).

    Rules: none for an option the main job (train.yaml) selects; a preset that selects the option itself (the ``cpu_*`` presets first, then by fewest
    selections, then by name); else, for a data option whose prompts come from ``mintrl.env.<name>``,
    the preset that selects ``env=<name>`` by the same order; else none. Presets in ``skip`` (those
    that do not compose alone) are never chosen.
    """
    config_dir = Path(config_dir)
    if main_job_choices(str(config_dir)).get(group) == option:
        return None
    presets = [p for p in row_options("preset", config_dir) if p not in skip]
    choices = {p: preset_choices(p, str(config_dir)) for p in presets}
    ranked = sorted(presets, key=lambda p: (not p.startswith("cpu_"), len(choices[p]), p))
    for preset in ranked:
        if choices[preset].get(group) == option:
            return preset
    if group == "data":
        env = _env_of_data_option(option, config_dir)
        for preset in ranked:
            if env is not None and choices[preset].get("env") == env:
                return preset
    return None


@contextmanager
def machine_independent_resolvers() -> Iterator[None]:
    """Within the block ``${cpu_precision:}`` resolves to the text ``<cpu_precision>`` (not this CPU's
    precision), so that a resolved config is the same on every machine."""
    from mintrl.core.precision import cpu_trainer_precision

    OmegaConf.register_new_resolver("cpu_precision", lambda: "<cpu_precision>", replace=True)
    try:
        yield
    finally:
        OmegaConf.register_new_resolver("cpu_precision", cpu_trainer_precision, replace=True)


def compose_config(
    overrides: list[str], root: str = "train", config_dir: str | Path = CONFIG_DIR, hydra_config: bool = False
) -> DictConfig:
    """The config Hydra composes from ``root`` with ``overrides`` (``paths.output_dir`` fixed to
    :data:`OUTPUT_DIR`; ``hydra_config``: keep the ``hydra`` node, e.g. a sweep's parameters)."""
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return compose(
            root, overrides=[f"paths.output_dir='{OUTPUT_DIR}'", *overrides], return_hydra_config=hydra_config
        )


@functools.cache
def _signature(target: str) -> inspect.Signature:
    return inspect.signature(_locate(target))


OPEN = None  # accepted_keywords' answer for a callable that takes any keyword


def _forwarding_callees(cls: type, varkw: str) -> list | None:
    """The callables ``cls.__init__`` passes its ``**varkw`` to (``super().__init__`` as the next
    ``__init__`` of the MRO, or a name of its module); None where the source cannot be read or the
    dict goes anywhere else."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    except (OSError, TypeError, SyntaxError):
        return None
    callees, uses = [], 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == varkw:
            uses += 1
        if not isinstance(node, ast.Call):
            continue
        if not any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == varkw for k in node.keywords):
            continue
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "__init__"
            and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name)
            and func.value.func.id == "super"
        ):
            owner = next((c for c in cls.__mro__ if "__init__" in c.__dict__), cls)
            following = cls.__mro__[cls.__mro__.index(owner) + 1 :]
            callees.append(next(c for c in following if "__init__" in c.__dict__))
        elif isinstance(func, ast.Name) and func.id in vars(inspect.getmodule(cls)):
            callees.append(vars(inspect.getmodule(cls))[func.id])
        else:
            return None
    return callees if callees and uses == len(callees) else None


@functools.cache
def accepted_keywords(target) -> frozenset[str] | None:
    """The keyword arguments a class or function accepts, following a ``**kwargs`` that a project
    class's ``__init__`` only forwards (to ``super().__init__`` or to a callable of its module), or
    :data:`OPEN` (None) where it takes any keyword (a ``**kwargs`` that goes elsewhere, or a class
    outside ``mintrl``)."""
    obj = _locate(target) if isinstance(target, str) else target
    params = inspect.signature(obj).parameters
    named = frozenset(n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))
    varkw = next((n for n, p in params.items() if p.kind is p.VAR_KEYWORD), None)
    if varkw is None:
        return named
    if not (isinstance(obj, type) and obj.__module__.startswith("mintrl.")):
        return OPEN
    callees = _forwarding_callees(obj, varkw)
    if callees is None:
        return OPEN
    accepted = set(named)
    for callee in callees:
        keys = accepted_keywords(callee if callee is not object else object)
        if keys is OPEN:
            return OPEN
        accepted |= keys
    return frozenset(accepted)


def target_errors(node, path: str = "", runtime: Mapping[str, frozenset[str]] = RUNTIME_ARGUMENTS) -> list[str]:
    """What is wrong with each ``_target_`` node of an unresolved config container, recursively.

    Args:
        node: ``OmegaConf.to_container(cfg, resolve=False)`` or any part of it.
        path: the dotted key of ``node`` in the whole config ("" at the root).
        runtime: arguments the build passes besides the config's keys, by the node's top-level key.

    Returns:
        One line per defect: a ``_target_`` that does not import, a key the target does not accept
        (it has no ``**kwargs``), or a required parameter neither in the node (a value, ``???`` or an
        interpolation) nor passed by the build (a ``_partial_`` node may leave any out).
    """
    errors: list[str] = []
    if isinstance(node, dict):
        target = node.get("_target_")
        if isinstance(target, str) and "${" not in target:
            errors += _node_errors(node, target, path, runtime)
        for key, value in node.items():
            errors += target_errors(value, f"{path}.{key}" if path else str(key), runtime)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            errors += target_errors(value, f"{path}[{i}]", runtime)
    return errors


def _node_errors(node: dict, target: str, path: str, runtime: Mapping[str, frozenset[str]]) -> list[str]:
    try:
        params = _signature(target).parameters
    except (ImportError, AttributeError, ValueError, TypeError) as err:
        return [f"{path}: _target_ {target} does not import or has no signature ({err})"]
    keys = {str(k) for k in node if not str(k).startswith("_")} - BUILD_KEYS.get(path, frozenset())
    accepted = accepted_keywords(target)
    errors = []
    if accepted is not OPEN:
        errors += [f"{path}.{k}: {target} takes no argument {k!r}" for k in sorted(keys - accepted)]
    if node.get("_partial_") or node.get("_args_"):
        return errors
    passed = runtime.get(path, frozenset())
    for name, p in params.items():
        required = p.default is inspect.Parameter.empty and p.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
        if required and name not in keys and name not in passed:
            errors.append(f"{path}: {target} needs {name!r}, which the config does not set")
    return errors


def config_errors(cfg: DictConfig) -> list[str]:
    """:func:`target_errors` of a composed config, plus interpolations that do not resolve (values
    left at ``???`` are fine: the user gives them)."""
    errors = target_errors(OmegaConf.to_container(cfg, resolve=False))
    try:
        with machine_independent_resolvers():
            OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except Exception as err:  # noqa: BLE001  (any resolver or interpolation failure is a defect to report)
        errors.append(f"interpolation: {type(err).__name__}: {err}".splitlines()[0])
    return errors


def sweep_rows(name: str, config_dir: str | Path = CONFIG_DIR) -> list[list[str]]:
    """The jobs of ``mintrl-train -m +sweep=<name>`` as override lists, one per combination of the
    sweep's ``hydra.sweeper.params`` (comma lists) in the order Hydra's basic sweeper runs them, with
    only the first value of ``seed`` (the rows, not their seeds)."""
    params = compose_config([f"+sweep={name}"], config_dir=config_dir, hydra_config=True).hydra.sweeper.params
    axes = []
    for key, value in params.items():
        values = [v.strip() for v in str(value).split(",")]
        axes.append([f"{key}={v}" for v in (values[:1] if key == "seed" else values)])
    return [[f"+sweep={name}", *combo] for combo in itertools.product(*axes)]
