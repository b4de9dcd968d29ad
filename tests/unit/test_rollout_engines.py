"""The rollout engines' constructors and what they share (mintrl.rollout.engine): each engine takes
exactly the arguments it uses (the episode engine refuses ``chunk_size``, the single-turn engine the
environment's fields), every argument it takes changes the engine, every configured ``rollout`` field
(and every field of the prompt sources and environments that pass fields on with ``**``) is one its
class takes; the step's rollout layout, the allocation counts and the guarded judge and reward."""

from __future__ import annotations

import copy
import inspect
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf
from transformers import AutoTokenizer

from mintrl.build.config import CONFIG_DIR
from mintrl.data.base import PromptItem
from mintrl.env.base import Environment, StepResult
from mintrl.judge.always_keep import AlwaysKeepJudge
from mintrl.model.loading import embedded_smollm2_folder
from mintrl.reward.reasoning_gym import ReasoningGymReward
from mintrl.rollout.engine import RolloutEngine
from mintrl.rollout.episodes import EpisodeRollout
from mintrl.rollout.guards import Guarded, GuardedJudge, GuardedReward
from mintrl.rollout.schedule import InterventionSchedule
from mintrl.rollout.single_turn import SingleTurnRollout
from mintrl.rollout.stats import rollout_counts

SHARED = {
    "sampler",
    "judge",
    "intervention",
    "tokenizer",
    "n_control",
    "n_semi",
    "max_reviews",
    "continuation_len",
    "max_response_tokens",
    "temperature",
    "top_p",
    "intervention_steps",
    "adaptive_stop",
    "step_delimiters",
    "progress",
    "allocation",
    "judge_timeout_s",
    "min_kept_tokens",
}
SINGLE_TURN = {"reward", "chunk_size", "reward_timeout_s", "guide", "mark_first_error"}
EPISODES = {"env", "reward", "max_turns", "max_action_tokens", "max_observation_tokens", "env_workers"}


class _Sampler:
    """What an engine's constructor reads of a sampler."""

    pad_token_id = 0
    eos_token_ids = (2,)


class _Intervention:
    white_box = True


class _Environment(Environment):
    def reset(self, items):
        return [""] * len(items)

    def step(self, episodes, actions):
        return StepResult([""] * len(episodes), [0.0] * len(episodes), [True] * len(episodes), [], [], [])


def accepted(cls) -> set[str]:
    """The keywords ``cls``'s constructor takes, following ``**`` into its base classes' constructors."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters.values()
        plain = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
        names |= {p.name for p in params if p.name != "self" and p.kind not in plain}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            break
    return names


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(embedded_smollm2_folder()))


def single_turn(tokenizer, **kwargs) -> SingleTurnRollout:
    return SingleTurnRollout(_Sampler(), AlwaysKeepJudge(), _Intervention(), ReasoningGymReward(), tokenizer, **kwargs)


def episodes(tokenizer, **kwargs) -> EpisodeRollout:
    return EpisodeRollout(_Environment(), _Sampler(), AlwaysKeepJudge(), _Intervention(), tokenizer, **kwargs)


def test_each_engine_takes_the_shared_arguments_and_its_own():
    assert accepted(RolloutEngine) == SHARED
    assert accepted(SingleTurnRollout) == SHARED | SINGLE_TURN
    assert accepted(EpisodeRollout) == SHARED | EPISODES
    assert SingleTurnRollout.multi_turn is False and EpisodeRollout.multi_turn is True
    assert "multi_turn" in vars(SingleTurnRollout) and "multi_turn" in vars(EpisodeRollout)  # each declares it


@pytest.mark.parametrize(
    "field,value", [("chunk_size", 8), ("reward_timeout_s", 1.0), ("guide", object()), ("mark_first_error", True)]
)
def test_the_episode_engine_refuses_what_only_single_turn_rollouts_use(tokenizer, field, value):
    with pytest.raises(TypeError, match=field):
        episodes(tokenizer, **{field: value})


def test_the_episode_engine_refuses_a_reward_component(tokenizer):
    assert episodes(tokenizer, reward=None).env is not None  # the run passes reward=None under reward=null
    with pytest.raises(ValueError, match="reward must be null"):
        episodes(tokenizer, reward=ReasoningGymReward())


@pytest.mark.parametrize(
    "field,value",
    [
        ("env", _Environment()),
        ("max_turns", 2),
        ("max_action_tokens", 8),
        ("max_observation_tokens", 8),
        ("env_workers", 1),
    ],
)
def test_the_single_turn_engine_refuses_what_only_episodes_use(tokenizer, field, value):
    with pytest.raises(TypeError, match=field):
        single_turn(tokenizer, **{field: value})


def _value(v):
    """An attribute as compared by :func:`_state`: the schedule and the guards by their fields, other
    objects by identity."""
    if isinstance(v, (InterventionSchedule, GuardedJudge, GuardedReward)):
        return {k: _value(x) for k, x in vars(v).items()}
    if v is None or isinstance(v, (bool, int, float, str, tuple, list, dict)):
        return repr(v)
    return id(v)


def _state(engine) -> dict:
    return {k: _value(v) for k, v in vars(engine).items()}


def _alternatives(tokenizer) -> dict:
    """A value other than the default for every argument an engine takes (``reward`` of the
    episode engine takes only None)."""
    return {
        "sampler": _Sampler(),
        "judge": AlwaysKeepJudge(),
        "intervention": _Intervention(),
        "tokenizer": copy.copy(tokenizer),
        "n_control": 3,
        "n_semi": 1,
        "max_reviews": 3,
        "continuation_len": 5,
        "max_response_tokens": 99,
        "temperature": 0.5,
        "top_p": 0.9,
        "intervention_steps": 7,
        "adaptive_stop": {"patience": 5},
        "step_delimiters": ["blank_line"],
        "progress": False,
        "allocation": object(),
        "judge_timeout_s": 5.0,
        "min_kept_tokens": 1,
        "reward": ReasoningGymReward(),
        "chunk_size": 4,
        "reward_timeout_s": 3.0,
        "guide": object(),
        "mark_first_error": True,
        "env": _Environment(),
        "max_turns": 2,
        "max_action_tokens": 9,
        "max_observation_tokens": 11,
        "env_workers": 1,
    }


def _build(cls, tok, **overrides):
    base = {"sampler": _Sampler(), "judge": AlwaysKeepJudge(), "intervention": _Intervention(), "tokenizer": tok}
    base |= {"reward": ReasoningGymReward()} if cls is SingleTurnRollout else {"env": _Environment()}
    return cls(**{**base, **overrides})


@pytest.mark.parametrize("cls", [SingleTurnRollout, EpisodeRollout])
def test_every_argument_an_engine_takes_changes_it(tokenizer, cls):
    alternatives = _alternatives(tokenizer)
    names = accepted(cls) - ({"reward"} if cls is EpisodeRollout else set())
    assert names <= set(alternatives)
    default = _state(_build(cls, tokenizer))
    unchanged = [
        name for name in sorted(names) if _state(_build(cls, tokenizer, **{name: alternatives[name]})) == default
    ]
    assert unchanged == []


# -- the configs ---------------------------------------------------------------------------------

# every preset on a method (paper_agent is the scale the paper_<env> presets put under an environment's)
PRESETS = sorted(p.stem for p in (Path(CONFIG_DIR) / "preset").glob("*.yaml") if p.stem != "paper_agent")
EXPERIMENTS = sorted(
    str(p.relative_to(Path(CONFIG_DIR) / "experiment"))[:-5] for p in (Path(CONFIG_DIR) / "experiment").rglob("*.yaml")
)
BENCHMARKS = sorted(p.stem for p in (Path(CONFIG_DIR) / "benchmark").glob("*.yaml"))
ROWS = (
    [("train", f"method=mintrl_const preset={p}") for p in PRESETS]
    + [("train", f"experiment={e}") for e in EXPERIMENTS]
    + [("eval", f"benchmark={b}") for b in BENCHMARKS]
)
PASSED_ON = ("mintrl.rollout.", "mintrl.env.", "mintrl.data.")  # targets whose fields these packages own


def _nodes(node, path=""):
    """``(path, node)`` of every config node with a ``_target_`` (recursively)."""
    if isinstance(node, dict):
        if isinstance(node.get("_target_"), str):
            yield path, node
        for key, value in node.items():
            yield from _nodes(value, f"{path}.{key}" if path else key)


# keys of the rollout group that the build hands to the data module, not the engine
# (mintrl.build.components.split_max_staleness)
DATA_MODULE_KEYS = {"rollout": {"max_staleness"}}


@pytest.mark.parametrize("config,spelling", ROWS, ids=[s for _, s in ROWS])
def test_every_configured_field_is_an_argument_of_its_class(config, spelling):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config, overrides=["paths.output_dir=/tmp/mintrl-test", *spelling.split()])
    assert isinstance(cfg, DictConfig)
    tree = OmegaConf.to_container(cfg, resolve=False)
    unknown = []
    for path, node in _nodes(tree):
        if node["_target_"].startswith(PASSED_ON):
            takes = accepted(get_class(node["_target_"]))
            passed_on = DATA_MODULE_KEYS.get(path.lstrip("."), set())
            unknown += [f"{path}.{k}" for k in node if not k.startswith("_") and k not in takes | passed_on]
    assert unknown == []


def test_the_rollout_configs_name_every_field_their_engine_reads_from_the_config():
    """Every argument but the components the run passes (and ``reward``, passed by the run) is set
    in the engine's config file."""
    passed = {"sampler", "judge", "intervention", "tokenizer", "reward", "allocation", "guide"}
    for name, cls in (("single_turn", SingleTurnRollout), ("episodes", EpisodeRollout)):
        fields = set(OmegaConf.load(Path(CONFIG_DIR) / "rollout" / f"{name}.yaml")) - {"_target_"}
        assert DATA_MODULE_KEYS["rollout"] <= fields, name  # the data module's keys are set there too
        fields -= DATA_MODULE_KEYS["rollout"]
        assert fields == accepted(cls) - passed, name


# -- what the engines share ------------------------------------------------------------------------


def _items(n: int) -> list[PromptItem]:
    return [PromptItem(i, f"q{i}", "1", [5, 6 + i], {}, "t") for i in range(n)]


def test_the_step_lays_out_groups_control_first_and_numbers_rows(tokenizer):
    engine = single_turn(tokenizer, n_control=2, n_semi=1, intervention_steps=3)
    rollouts, intervene = engine._new_rollouts(_items(2), step=0, n_control=None, n_semi=None)
    assert intervene
    assert [(r.group, r.is_control, r.row) for r in rollouts] == [
        (0, True, 0),
        (0, True, 1),
        (0, False, 2),
        (1, True, 3),
        (1, True, 4),
        (1, False, 5),
    ]
    assert [r.prompt_ids for r in rollouts[::3]] == [[5, 6], [5, 7]]
    late, intervene = engine._new_rollouts(_items(1), step=3, n_control=None, n_semi=None)  # past the phase
    assert not intervene and [r.is_control for r in late] == [True, True, True]
    val, _ = engine._new_rollouts(_items(1), step=0, n_control=4, n_semi=0)  # validation's sizes
    assert [r.is_control for r in val] == [True] * 4


def test_rollout_counts_by_hand():
    assert rollout_counts(kept=12, generated=16, prompts=4) == {
        "allocation/rollouts_per_prompt": 3.0,
        "allocation/budget_used": 16.0,
        "allocation/generated_per_prompt": 4.0,
    }
    assert rollout_counts(0, 0, 0)["allocation/rollouts_per_prompt"] == 0.0  # no prompts: no division by zero


def test_the_judge_and_the_reward_stay_guarded_when_swapped(tokenizer):
    engine = single_turn(tokenizer, judge_timeout_s=5.0, reward_timeout_s=3.0)
    assert isinstance(engine.judge, GuardedJudge) and engine.judge.timeout_s == 5.0
    assert isinstance(engine.reward, GuardedReward) and engine.reward.timeout_s == 3.0
    judge = AlwaysKeepJudge()
    engine.judge = judge
    assert isinstance(engine.judge, GuardedJudge) and engine.judge.inner is judge and engine.judge.timeout_s == 5.0
    guarded = GuardedJudge(AlwaysKeepJudge(), 1.0)
    engine.judge = guarded
    assert engine.judge is guarded  # an already guarded judge is kept as it is
    assert isinstance(vars(RolloutEngine)["judge"], Guarded) and isinstance(vars(SingleTurnRollout)["reward"], Guarded)
