"""Cross-field checks of a composed config: what no single component can see (relations between
config groups), checked before any model is loaded. Each component checks its own fields with
:mod:`mintrl.core.checks`; the checks here ask a component's class what it declares
(``runs_sharded``, ``runs_pipelined``, ``handles_code``, ``serves_code``, ``multi_turn``, ``finds_errors``,
``needs_first_error``, ``uses_step0_policy``) and never test a class's name; the length checks
(:func:`check_sampler_fits`) read the fields a sampler's config states (``max_model_len``,
``max_kv_gb``).
"""

from __future__ import annotations

import json
from pathlib import Path

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from mintrl.allocation.base import Allocation
from mintrl.build.config import sequence_limits
from mintrl.core.checks import check_int
from mintrl.core.ranks import rank_share
from mintrl.model.kv_cache import check_kv_budget, dtype_bytes


def check_data_parallel_split(cfg: DictConfig) -> None:
    """``data.prompts_per_step`` and ``allocation.budget_per_step`` count one optimizer step on all
    data-parallel ranks together, split evenly over ``trainer.devices x trainer.num_nodes`` ranks;
    checked here for a training run where both are integers (``auto`` or a device list: when
    training starts). Evaluation (``train: false``) rolls out no training batch.

    Raises:
        ValueError: a count that is not a multiple of the ranks (names the field).
    """
    if not cfg.get("train", True):
        return
    trainer = cfg.get("trainer") or {}
    devices, nodes = trainer.get("devices", 1), trainer.get("num_nodes", 1)
    if not (isinstance(devices, int) and isinstance(nodes, int)) or devices < 1 or nodes < 1:
        return
    for field in ("data.prompts_per_step", "allocation.budget_per_step"):
        value = OmegaConf.select(cfg, field, default=None)
        if isinstance(value, int) and value > 0:
            rank_share(value, devices * nodes, field)


def check_config(cfg: DictConfig) -> None:
    """Reject a composed config whose groups do not fit together, before any model is loaded.

    Raises:
        ValueError: ``trainer.max_steps`` not a positive multiple of the optimizer updates per
            rollout batch (``module.epochs x module.minibatches``); ``rollout.top_p < 1`` in a
            training run (see :mod:`mintrl.sampler.vllm`); ``trainer=fsdp`` with a sampler that
            cannot run on sharded weights (``Sampler.runs_sharded``); code problems
            (``PromptSource.serves_code``) scored by a reward without ``Reward.handles_code``, or
            the reverse; a ``module.val_pass_at_k`` above ``data.val_samples_per_prompt`` (pass@k
            needs ``k <= n``); ``env=`` without ``rollout=episodes`` or the reverse (an environment
            is driven only by the multi-turn rollout, which needs one); a LoRA policy under FSDP
            with a self-privileged judge or intervention on the step-0 policy
            (:func:`check_lora_step0_generation`); FSDP with ``cpu_offload``
            (:func:`check_no_cpu_offload`) or ``sampler.score_with=trainer``
            (:func:`check_no_trainer_scoring`); a sampler too short for prompt + response, or an
            HF sampler over its KV budget (:func:`check_sampler_fits`); a per-step count of all
            data-parallel ranks that does not split evenly over them (:func:`check_data_parallel_split`);
            a ``rollout.max_staleness`` that is negative or that the run's layout cannot pipeline
            (:func:`check_max_staleness`).
    """
    top_p = (cfg.get("rollout") or {}).get("top_p", 1.0)
    if cfg.get("train", True) and isinstance(top_p, (int, float)) and top_p < 1:
        raise ValueError(
            f"rollout.top_p={top_p} < 1 is refused for training: engines report log-probs renormalised over "
            "the nucleus (vLLM) while the trainer's are over the full vocabulary, so the objective would "
            "train on mismatched log-probs; sample with top_p=1 (evaluation, mintrl-eval, may use top_p < 1)"
        )
    strategy = (cfg.get("trainer") or {}).get("strategy")
    strategy = str(strategy.get("_target_", "") if isinstance(strategy, DictConfig) else strategy or "")
    sampler = component_class(cfg, "sampler")
    if "fsdp" in strategy.lower() and sampler is not None and not sampler.runs_sharded:
        raise ValueError(
            "trainer=fsdp needs sampler=vllm: Hugging Face generate cannot run on FSDP-sharded weights "
            "outside the training forward"
        )
    if "fsdp" in strategy.lower():
        check_lora_step0_generation(cfg)
        check_no_cpu_offload(cfg)
        check_no_trainer_scoring(cfg)
    module = cfg.get("module") or {}
    updates = int(module.get("epochs", 1) or 1) * int(module.get("minibatches", 1) or 1)
    max_steps = (cfg.get("trainer") or {}).get("max_steps")
    if max_steps is not None:
        check_int("trainer.max_steps", max_steps)
        if max_steps % updates:
            raise ValueError(
                f"trainer.max_steps={max_steps} (optimizer updates) must be a multiple of "
                f"module.epochs x module.minibatches = {updates}"
            )
    ks = list(module.get("val_pass_at_k") or [])
    samples = (cfg.get("data") or {}).get("val_samples_per_prompt")
    if ks and isinstance(samples, int) and max(int(k) for k in ks) > samples:
        raise ValueError(
            f"module.val_pass_at_k={list(ks)} has k={max(int(k) for k in ks)} > data.val_samples_per_prompt={samples}: "
            "pass@k needs k <= n samples per validation prompt"
        )
    check_env_rollout(cfg)
    check_first_error(cfg)
    check_sampler_fits(cfg)
    check_data_parallel_split(cfg)
    check_max_staleness(cfg, strategy, updates)
    prompts, reward = component_class(cfg, "data.prompts"), component_class(cfg, "reward")
    if prompts is not None and reward is not None:
        code_prompts = prompts.serves_code(OmegaConf.select(cfg, "data.prompts"))
        if code_prompts != reward.handles_code:
            raise ValueError(
                f"data.prompts ({prompts.__name__}) and reward ({reward.__name__}) do not match: "
                "code problems need reward=code (e.g. `data=humaneval reward=code`), other tasks another reward"
            )


def check_max_staleness(cfg: DictConfig, strategy: str = "", updates: int = 1) -> None:
    """``rollout.max_staleness`` (optimizer steps) is an integer >= 0, and a training run with
    ``s >= 1`` has a layout the rollout pipeline supports (:mod:`mintrl.data.pipeline`): one process
    or data-parallel replicas (DDP; not FSDP, whose weights push would be a collective), each with a
    sampler that samples its own copy of the weights in a thread (``runs_pipelined``:
    ``sampler=hf``), no adaptive stop on several ranks (its collective would run in the producer
    thread), ``s`` at least the optimizer updates of one rollout batch (the batch generated
    during a batch's updates is trained that many steps after its weights), and no judge or
    intervention generating from the step-0 policy of a LoRA policy (the live module with its
    adapter off, which the producer would run while the trainer updates it), and no allocation whose
    branch decisions are logged (:func:`records_decisions` with ``callbacks.allocation_decisions``:
    the trainer's thread would take those of the batch in flight with the batch it trains).

    Args:
        strategy: the trainer's strategy (its ``_target_`` or name). updates: ``module.epochs x
            module.minibatches``.

    Raises:
        ValueError: a refused value or layout; the message names ``rollout.max_staleness`` (and
            ``sampler.own_process=true`` at staleness 0, where no producer runs; ``sampler.own_device``
            without ``sampler.own_process``; ``objective.off_policy_correction`` with
            ``module.recompute_rollout_logprobs=never``, which leaves a stale batch uncorrected).
    """
    value = OmegaConf.select(cfg, "rollout.max_staleness", default=0)
    check_int("rollout.max_staleness", value, 0)
    if value == 0 and OmegaConf.select(cfg, "sampler.own_process", default=False):
        raise ValueError(
            "sampler.own_process=true samples the rollout producer's batches in a worker process, and "
            "rollout.max_staleness=0 runs no producer (every batch comes from the live weights in the trainer's "
            "thread); set rollout.max_staleness >= 1 or sampler.own_process=false"
        )
    own_device = OmegaConf.select(cfg, "sampler.own_device", default=None)
    if own_device is not None and not OmegaConf.select(cfg, "sampler.own_process", default=False):
        raise ValueError(
            f"sampler.own_device={own_device} is the device of the sampler's worker process, and "
            "sampler.own_process=false runs none: set sampler.own_process=true (with rollout.max_staleness >= 1) "
            "or sampler.own_device=null"
        )
    if value == 0 or not cfg.get("train", True):
        return
    field = f"rollout.max_staleness={value}"
    correction = OmegaConf.select(cfg, "objective.off_policy_correction", default="none")
    if correction != "none" and OmegaConf.select(cfg, "module.recompute_rollout_logprobs", default="auto") == "never":
        raise ValueError(
            f"{field} with objective.off_policy_correction={correction} and module.recompute_rollout_logprobs=never: "
            "a stale batch's proximal log-probs would be its behaviour log-probs, every importance weight 1 (no "
            "correction); set module.recompute_rollout_logprobs=auto"
        )
    sampler = component_class(cfg, "sampler")
    if sampler is not None and not sampler.runs_pipelined:
        raise ValueError(
            f"{field} needs sampler=hf: {sampler.__name__} runs on the trainer's devices (colocated) and a sampler "
            "on its own devices is not built; set rollout.max_staleness=0"
        )
    trainer = cfg.get("trainer") or {}
    devices, nodes = trainer.get("devices", 1), trainer.get("num_nodes", 1)
    ranks = devices * nodes if isinstance(devices, int) and isinstance(nodes, int) else None
    if "fsdp" in strategy.lower():
        raise ValueError(
            f"{field} with trainer.strategy={strategy}: the producer's copy of the weights is pushed from the live "
            "ones between its batches, which under FSDP would be a gather (a collective) outside the training step; "
            "use trainer=ddp or rollout.max_staleness=0"
        )
    several = "ddp" in strategy.lower() or ranks is None or ranks > 1
    if several and OmegaConf.select(cfg, "sampler.own_process", default=False) and own_device is not None:
        raise ValueError(
            f"{field} with sampler.own_device={own_device} on several ranks: every rank's sampler worker would take "
            "that one device (a rank's own training device, for one of them); per-rank worker devices are not "
            "built: set sampler.own_device=null (each worker on its rank's device) or use one rank"
        )
    if several and OmegaConf.select(cfg, "rollout.adaptive_stop", default=None) is not None:
        raise ValueError(
            f"{field} with rollout.adaptive_stop on several ranks: the adaptive stop pools the reward gap of every "
            "rank (an all_reduce) inside the rollout, which would run in each rank's producer thread beside the "
            "update's collectives; set rollout.adaptive_stop=null or rollout.max_staleness=0"
        )
    if value < updates:
        raise ValueError(
            f"{field} < module.epochs x module.minibatches = {updates}: a batch generated during the previous "
            f"batch's updates is trained {updates} optimizer steps after its weights; set it to >= {updates} or 0"
        )
    allocation = component_class(cfg, "allocation")
    logged = OmegaConf.select(cfg, "callbacks.allocation_decisions", default=None)
    if allocation is not None and logged is not None and records_decisions(allocation):
        raise ValueError(
            f"{field} with allocation={allocation.__name__}: the branch decisions of the batch in flight would be "
            "logged with the batch being trained (callbacks.allocation_decisions); use allocation=uniform, "
            "callbacks.allocation_decisions=null or rollout.max_staleness=0"
        )
    for key, component in lora_step0_generators(cfg):
        raise ValueError(
            f"{field} with model/lora and {key}={component.__name__} ({key}.teacher=null): the step-0 "
            "policy is the live policy with its adapter off, which the producer thread would run while the "
            f"trainer updates it; use a teacher model ({key}.teacher=embedded or a path) or "
            "rollout.max_staleness=0"
        )


def lora_step0_generators(cfg: DictConfig) -> list[tuple[str, type]]:
    """Under ``model.lora``, the judge and intervention that generate with the step-0 policy (the live policy
    with its adapter off: ``generates_with_step0_policy``, self-privileged with ``teacher: null``), as
    ``(config key, class)`` pairs; empty without LoRA."""
    if OmegaConf.select(cfg, "model.lora") is None:
        return []
    found = []
    for key in ("judge", "intervention"):
        component = component_class(cfg, key)
        if component is not None and component.generates_with_step0_policy(OmegaConf.select(cfg, key)):
            found.append((key, component))
    return found


def records_decisions(allocation: type) -> bool:
    """Whether an allocation class keeps the branch decisions it executes for
    ``callbacks.allocation_decisions`` (it overrides ``take_decisions``: RAIL, entropy)."""
    return getattr(allocation, "take_decisions", None) is not Allocation.take_decisions


def check_sampler_fits(cfg: DictConfig) -> None:
    """The sampler holds a whole row: prompt + response (Presets that fit, docs/operations.md).

    - A sampler that states ``max_model_len`` (vLLM: the engine's context, tokens) must hold
      ``data.prompts.max_prompt_tokens + rollout.max_response_tokens``
      (:func:`mintrl.build.config.sequence_limits`; in episodes the response budget holds the
      actions, corrections and observation turns): a shorter context would cut rollouts silently.
    - A sampler that states ``max_kv_gb`` (HF: GB of KV cache for one batch of
      ``max_batch_size`` rows of prompt + response tokens) must fit it, checked here when
      ``model.path`` is a local folder with ``config.json`` (no weights are read); otherwise
      :class:`mintrl.sampler.hf.HFSampler` checks it when it is built, before any generation.
      ``sampler.dtype`` ``bf16`` caches 2 bytes per element, else the policy's ``model.dtype``
      (``auto`` may pick bf16 at the first call: the check counts the larger).

    Raises:
        ValueError: ``sampler.max_model_len`` below prompt + response, or an HF batch's KV cache
            above ``sampler.max_kv_gb`` (:func:`mintrl.model.kv_cache.check_kv_budget`); the
            message names the fields and what to change.
    """
    sampler = OmegaConf.select(cfg, "sampler")
    limits = sequence_limits(cfg)
    if not isinstance(sampler, DictConfig) or limits is None:
        return
    need = sum(limits.values())
    length = sampler.get("max_model_len")
    if isinstance(length, int) and length < need:
        fields = " + ".join(f"{k}={v}" for k, v in limits.items())
        raise ValueError(
            f"sampler.max_model_len={length} < {fields} = {need} tokens: the engine would cut rollouts at "
            f"{length} tokens; raise sampler.max_model_len to at least {need} "
            "(sampler.max_model_len='${prompt_plus_response:}' sets exactly that) or lower rollout.max_response_tokens"
        )
    budget = sampler.get("max_kv_gb")
    path = OmegaConf.select(cfg, "model.path", default=None)
    config = Path(str(path)) / "config.json" if path is not None else None
    if budget is None or config is None or not config.is_file():
        return
    width = 2 if sampler.get("dtype") == "bf16" else dtype_bytes(OmegaConf.select(cfg, "model.dtype") or "float32")
    check_kv_budget(
        json.loads(config.read_text()),
        rows=int(sampler.get("max_batch_size", 1)),
        tokens=need,
        dtype_bytes=width,
        max_kv_gb=float(budget),
    )


def check_lora_step0_generation(cfg: DictConfig) -> None:
    """Under FSDP, a LoRA policy's step-0 model is the sharded policy itself (adapter off), which
    Hugging Face ``generate`` cannot run: a self-privileged judge or intervention without a
    ``teacher`` would fail at its first call. (Full fine-tuning keeps an unsharded step-0 copy.)

    Raises:
        ValueError: ``model.lora`` set, and ``judge`` or ``intervention`` generates with the
            step-0 policy (``generates_with_step0_policy``: self-privileged with ``teacher: null``).
    """
    for key, component in lora_step0_generators(cfg):
        raise ValueError(
            f"{key}={component.__name__} with {key}.teacher=null generates from the step-0 policy, which under "
            "model/lora and trainer=fsdp is the sharded policy itself: use a teacher model "
            f"({key}.teacher=embedded or a path), an API judge, or trainer=gpu / ddp"
        )


def check_no_cpu_offload(cfg: DictConfig) -> None:
    """``trainer.strategy.cpu_offload=true`` is refused: it cannot run on a GPU as built.

    Lightning's ``ModelParallelStrategy.setup`` moves the whole module to the GPU right after
    ``configure_model`` sharded it (``model_to_device``), so the offloaded shards leave host memory
    and FSDP2 refuses them at its lazy init ("FSDP parameters should be materialized on CPU when
    enabling CPU offloading"); and the NCCL process group cannot reduce host-memory shards (the
    global gradient norm, the samplers' and the export's gathers). Neither can be run on the CPU
    machines the tests use (there every shard is in host memory already).

    Raises:
        ValueError: ``trainer.strategy.cpu_offload`` is true.
    """
    if OmegaConf.select(cfg, "trainer.strategy.cpu_offload", default=False):
        raise ValueError(
            "trainer.strategy.cpu_offload=true is refused: Lightning moves the sharded policy to the GPU after "
            "sharding (FSDP2 then refuses offloaded parameters off the CPU) and the NCCL group cannot reduce "
            "host-memory shards; shrink the GPU memory instead with more ranks (trainer.devices), "
            "model/lora=default, module.gradient_checkpointing=true or a smaller module.micro_batch_rows"
        )


def check_no_trainer_scoring(cfg: DictConfig) -> None:
    """Under FSDP, ``sampler.score_with=trainer`` is refused: the sampler would score each rank's
    intervention tokens with forwards of the sharded policy (each a gather of its weights, a
    collective), as many as that rank has interventions to score, outside the training step, so
    ranks with different interventions wait on each other forever. ``auto`` scores with the engine
    under FSDP (no collective).

    Raises:
        ValueError: ``sampler.score_with`` is ``trainer``.
    """
    if OmegaConf.select(cfg, "sampler.score_with", default=None) == "trainer":
        raise ValueError(
            "sampler.score_with=trainer is refused under trainer=fsdp: scoring intervention tokens would run a "
            "per-rank number of forwards of the sharded policy (each gathers its weights, a collective every rank "
            "must join), so ranks with different interventions deadlock; use score_with=auto (the engine under "
            "FSDP) or engine"
        )


def check_env_rollout(cfg: DictConfig) -> None:
    """``env=`` and ``rollout=episodes`` come together (the rollout engine declares
    ``multi_turn``).

    Raises:
        ValueError: an environment with a single-turn rollout engine, or the episode engine without
            an environment.
    """
    has_env = OmegaConf.select(cfg, "env") is not None
    rollout = component_class(cfg, "rollout")
    if rollout is None:
        return
    if has_env and not rollout.multi_turn:
        raise ValueError(f"env= is set but rollout={rollout.__name__} is single-turn: add rollout=episodes")
    if rollout.multi_turn and not has_env:
        raise ValueError("rollout=episodes needs an environment: add env=<name> (e.g. env=sql)")


def check_first_error(cfg: DictConfig) -> None:
    """An objective that reads the judge's first wrong step (``needs_first_error``) needs a judge
    that can find one (``Judge.finds_errors``) and the single-turn rollout engine, which marks it.

    Raises:
        ValueError: ``objective=first_error`` with ``judge=always_keep``, with ``rollout=episodes`` or with a
            guide that adds rollouts (``guide=prefix``, ``guide=demonstration``).
    """
    objective = component_class(cfg, "objective")
    if objective is None or not objective.needs_first_error:
        return
    judge = component_class(cfg, "judge")
    if judge is not None and not judge.finds_errors:
        raise ValueError(
            f"objective={objective.__name__} credits tokens by the judge's first wrong step, but "
            f"judge={judge.__name__} never finds one: choose a judge (e.g. judge=rule)"
        )
    rollout = component_class(cfg, "rollout")
    if rollout is not None and rollout.multi_turn:
        raise ValueError(f"objective={objective.__name__} needs the single-turn rollout (rollout=single_turn)")
    guide = component_class(cfg, "guide")
    if guide is not None and guide.adds_rollouts:
        raise ValueError(
            f"objective={objective.__name__} places the judge's first error that many tokens after a rollout's "
            "guide tokens, but the rollout engine counts it from the start of the response, guide tokens "
            f"included: with guide={guide.__name__} the credit would fall on the wrong tokens; use guide=none"
        )


def component_class(cfg: DictConfig, key: str) -> type | None:
    """The class a config node's ``_target_`` names (imported, not instantiated), so that a check
    can ask it what it declares (``runs_sharded``, ``handles_code``, ``serves_code``); None when
    the node or its ``_target_`` is absent."""
    node = OmegaConf.select(cfg, key)
    target = node.get("_target_") if isinstance(node, DictConfig) else None
    return get_class(str(target)) if target else None
