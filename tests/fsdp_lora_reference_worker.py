"""Run by tests/integration/test_fsdp_lora_reference.py under ``torchrun --nproc_per_node 2`` (gloo,
CPU): a LoRA policy (a tiny Llama, adapters with ``B != 0``) sharded by
:class:`mintrl.training.distributed.FullyShardedStrategy`, whose step-0 model is the policy itself
with its adapter off (:class:`mintrl.model.lora.AdapterOff`: GRPO's KL reference, OPD's
self-teacher). Each rank runs ``GRPO(kl_coef > 0).prepare`` through ``PolicyModule.frozen_logprobs``
(the path ``training_step`` takes), then a training forward and backward, and writes
``<out>/rank<r>.json``. Started by :func:`hang_guard.run_ranks`: a collective no peer joins raises
after the process group's timeout, and the test names each rank's last collective."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from conftest import tiny_llama
from hang_guard import init_gloo
from peft import LoraConfig, get_peft_model
from torch.distributed.device_mesh import init_device_mesh

from mintrl.core.batch import RolloutBatch
from mintrl.model.logprobs import token_logprobs
from mintrl.model.lora import AdapterOff, frozen_step0
from mintrl.objective import GRPO
from mintrl.training.distributed import FullyShardedStrategy
from mintrl.training.module import PolicyModule

COLLECTIVE_TIMEOUT_S = 60  # a rank waiting this long in a collective raises


def lora_policy():
    """A tiny Llama with LoRA r 4 on every linear layer, adapters drawn at seed 2 (``B != 0``, so the
    adapter-off base differs from the adapted policy)."""
    model = get_peft_model(tiny_llama(vocab=96), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    torch.manual_seed(2)
    for _, p in model.named_parameters():
        if p.requires_grad:
            p.data = torch.randn(p.shape) * 0.1
    return model


def batch_of(ids: torch.Tensor) -> RolloutBatch:
    """``ids`` ``[n, 12]`` as rollouts of one group: 4 prompt tokens, 8 response tokens."""
    n, length = ids.shape
    resp = torch.zeros(n, length, dtype=torch.bool)
    resp[:, 4:] = True
    return RolloutBatch(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        response_mask=resp,
        intervention_mask=torch.zeros_like(resp),
        rollout_logprobs=-torch.ones(n, length) * resp,
        rewards=torch.tensor([1.0, 0.0] * (n // 2)),
        group_index=torch.zeros(n, dtype=torch.long),
        is_control=torch.ones(n, dtype=torch.bool),
        num_groups=1,
        finished=torch.ones(n, dtype=torch.bool),
        behaviour_logprobs=torch.zeros(n, length),
        temperature=1.0,
        step=0,
    )


def main(out: Path) -> None:
    rank = init_gloo(COLLECTIVE_TIMEOUT_S)
    found: dict = {"rank": rank}
    ids = torch.randint(3, 96, (4, 12), generator=torch.Generator().manual_seed(1))
    mine = ids[2 * rank : 2 * rank + 2]
    batch = batch_of(mine)
    # the expected reference: the unsharded policy with its adapter off
    reference = lora_policy()
    with torch.no_grad():
        expected, _ = token_logprobs(AdapterOff(reference), mine, torch.ones_like(mine), batch.response_mask)
        adapted, _ = token_logprobs(reference, mine, torch.ones_like(mine), batch.response_mask)
    found["adapter_changes_logprobs"] = bool((expected - adapted).abs().max() > 1e-3)

    policy = lora_policy()
    strategy = FullyShardedStrategy()
    strategy._device_mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("data_parallel", "tensor_parallel"))
    strategy.shard_policy(policy)
    objective = GRPO(kl_coef=0.1)
    objective.setup(policy)
    found["reference_is_adapter_off"] = isinstance(objective.reference, AdapterOff)
    module = PolicyModule(policy, objective, functools.partial(torch.optim.SGD, lr=0.1), micro_batch_rows=1)
    objective.prepare(batch, module.frozen_logprobs)  # the KL reference's log-probs (no grad)
    found["ref_max_diff"] = (batch.extras["ref_logprobs"] - expected).abs().max().item()
    # the self-teacher path (grad enabled, as a caller outside no_grad would): same numbers
    teacher = frozen_step0(policy)
    lp, _ = token_logprobs(teacher, mine, torch.ones_like(mine), batch.response_mask)
    found["teacher_max_diff"] = (lp.detach() - expected).abs().max().item()
    found["teacher_requires_grad"] = lp.requires_grad  # the adapter is off: no trainable weight in it
    # the adapter is back on, and the policy still trains after the adapter-off forwards
    lp, _ = token_logprobs(policy, mine, torch.ones_like(mine), batch.response_mask)
    found["adapted_max_diff"] = (lp.detach() - adapted).abs().max().item()
    (-(lp * batch.response_mask).sum()).backward()
    found["adapter_grads"] = all(p.grad is not None for p in policy.parameters() if p.requires_grad)
    dist.barrier()
    (out / f"rank{rank}.json").write_text(json.dumps(found))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
