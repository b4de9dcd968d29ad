"""Run by tests/integration/test_fsdp.py under ``torchrun --nproc_per_node 2`` (gloo, CPU): a tiny
Llama sharded by :class:`mintrl.training.distributed.FullyShardedStrategy`, checked against an
unsharded copy of itself. Each rank writes ``<out>/rank<r>.json`` with what it found; the test
asserts on it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from conftest import tiny_llama
from peft import LoraConfig, get_peft_model
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule
from transformers import AutoTokenizer, LlamaForCausalLM

from mintrl.model.logprobs import token_logprobs
from mintrl.sampler.hf import HFSampler
from mintrl.sampler.weights import full_state_dict, hf_state_dict, is_sharded
from mintrl.training.distributed import FullyShardedStrategy
from mintrl.training.module import global_grad_norm

CLIP = 0.05  # max gradient L2 norm of the step (the unclipped norm is ~1: clipping acts)
LR = 0.5


def tiny(tied: bool = True) -> LlamaForCausalLM:
    """A 2-layer random Llama with a 96-token vocabulary (tests/conftest.py's ``tiny_llama``, seed 0)."""
    return tiny_llama(vocab=96, tie_word_embeddings=tied)


def strategy() -> FullyShardedStrategy:
    s = FullyShardedStrategy()
    s._device_mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("data_parallel", "tensor_parallel"))
    return s


def rows():
    """``[4, 12]`` token ids (rank r trains on rows 2r, 2r+1) and the target mask (the last 8 positions)."""
    ids = torch.randint(3, 96, (4, 12), generator=torch.Generator().manual_seed(1))
    target = torch.zeros_like(ids, dtype=torch.bool)
    target[:, 4:] = True
    return ids, target


def loss_of(model, ids, target, total_tokens: int) -> torch.Tensor:
    """Token-mean NLL over ``total_tokens`` (the whole step's count, as mintrl's aggregation)."""
    lp, _ = token_logprobs(model, ids, torch.ones_like(ids), target)
    return -(lp * target).sum() / total_tokens


def step(model, ids, target, world: int) -> float:
    """One clipped SGD step; returns the unclipped global gradient norm."""
    params = [p for p in model.parameters() if p.requires_grad]
    (loss_of(model, ids, target, int(rows()[1].sum())) * world).backward()  # FSDP averages over ranks
    norm = global_grad_norm(params)
    torch.nn.utils.clip_grad_norm_(params, CLIP)
    torch.optim.SGD(params, lr=LR).step()
    return norm


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    found: dict = {}
    ids, target = rows()
    mine = slice(2 * rank, 2 * rank + 2)

    # 1. units, lossless gathers, and a clipped step equal to the single-process one
    reference, policy = tiny(), tiny()
    strategy().shard_policy(policy)
    found["units"] = sum(isinstance(m, FSDPModule) for m in policy.modules())  # 2 layers + root (tied head)
    found["sharded"] = is_sharded(policy) and not is_sharded(reference)
    gathered = dict(full_state_dict(policy))
    found["gather_exact"] = sorted(gathered) == sorted(reference.state_dict()) and all(
        torch.equal(gathered[k], v) for k, v in reference.state_dict().items()
    )
    norm = step(policy, ids[mine], target[mine], world=2)
    ref_norm = step(reference, ids, target, world=1)
    found["norm"], found["ref_norm"] = norm, ref_norm
    after = dict(full_state_dict(policy))
    found["step_max_diff"] = max((after[k] - v).abs().max().item() for k, v in reference.state_dict().items())
    found["step_max_move"] = max(
        (v - tiny().state_dict()[k]).abs().max().item() for k, v in reference.state_dict().items()
    )

    # 2. an untied model: embedding and head are units of their own
    untied = tiny(tied=False)
    strategy().shard_policy(untied)
    found["untied_units"] = sum(isinstance(m, FSDPModule) for m in untied.modules())  # 2 layers + embed + head + root

    # 3. bf16 autocast on the sharded fp32 policy: gradients and buffers stay fp32
    mixed = tiny()
    strategy().shard_policy(mixed)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_of(mixed, ids[mine], target[mine], 32)
    loss.backward()
    found["mixed_grad_dtypes"] = sorted({str(p.grad.dtype) for p in mixed.parameters()})
    found["mixed_buffer_dtypes"] = sorted({str(b.dtype) for b in mixed.buffers()})

    # 4. LoRA: a bf16 base with fp32 adapters shards (FSDP1 refused mixed dtypes) and its merged weights
    def lora_model():
        base = tiny().to(torch.bfloat16)
        model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
        torch.manual_seed(2)
        for name, p in model.named_parameters():
            if p.requires_grad:
                p.data = torch.randn(p.shape) * 0.1  # fp32 adapters with B != 0, so merging changes W
        return model

    lora_ref, lora = lora_model(), lora_model()
    strategy().shard_policy(lora)
    loss_of(lora, ids[mine], target[mine], 32).backward()
    found["lora_trains"] = all(p.grad is not None for p in lora.parameters() if p.requires_grad)
    merged, merged_ref = hf_state_dict(lora), hf_state_dict(lora_ref)
    found["lora_merge_exact"] = sorted(merged) == sorted(merged_ref) and all(
        torch.equal(merged[k], v) for k, v in merged_ref.items()
    )
    base_q = lora_ref.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight
    found["lora_merged_moved"] = not torch.equal(merged_ref["model.layers.0.self_attn.q_proj.weight"], base_q)

    # 5. sampling a sharded policy: the ranks decode different numbers of rows and tokens (no collective
    # inside decoding), from a full-weight copy equal to the gathered weights
    tokenizer = AutoTokenizer.from_pretrained(sys.argv[2])
    sampler = HFSampler(policy, tokenizer, dtype="fp32")
    prompts = [[5, 6, 7]] * (1 + rank)
    torch.manual_seed(rank)
    gen = sampler.generate(prompts, max_new_tokens=4 + 5 * rank, temperature=1.0, top_p=1.0)
    found["generated_rows"] = len(gen.token_ids)
    copy = sampler.copy.module.state_dict()
    found["copy_exact"] = all(torch.equal(copy[k], v) for k, v in after.items() if k in copy)
    found["exact_logprobs"] = sampler.exact_logprobs
    dist.barrier()
    (out / f"rank{rank}.json").write_text(json.dumps(found))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
