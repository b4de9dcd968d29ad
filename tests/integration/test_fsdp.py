"""FSDP2 on CPU (2 processes, gloo) through the real entry point (``trainer=fsdp``): the policy is
sharded (each rank holds half of every weight), each rank samples its own prompts from a gathered
full-weight copy, and one clipped SGD step (of the supervised NLL) equals the single-process step on the union of the two
ranks' batches; the gathered weights and the Hugging Face export are the unsharded tensors bit for bit."""

from __future__ import annotations

import pytest
import torch
from ddp_recorder import KEYS
from distributed_helpers import distributed_run, single_process_step
from safetensors.torch import load_file

from mintrl.model.loading import embedded_smollm2

# The supervised NLL of the sampled responses: a gradient that does not vanish when every reward of
# a 16-token rollout is 0 (the RL objectives' gradient would then be float noise of the log-ratio)
OBJECTIVE = "objective=sft"
CLIP = 0.5  # max gradient L2 norm: under the step's norm, so clipping acts


@pytest.mark.slow  # 2 training processes + the single-process step: ~3 min on 2 cores (test_fsdp_units.py: 20 s)
def test_fsdp_clipped_step_equals_the_single_process_step_and_gathers_exactly(tmp_path):
    record = distributed_run(
        tmp_path,
        "fsdp",
        OBJECTIVE,
        f"module.max_grad_norm={CLIP}",
        "trainer.strategy.state_dict_type=full",
        "+callbacks.record.gathered=true",
    )
    batches = [torch.load(record / f"batch_rank{r}_step0.pt", weights_only=False) for r in (0, 1)]
    finals = [torch.load(record / f"final_rank{r}.pt", weights_only=False) for r in (0, 1)]
    gathered = [torch.load(record / f"gathered_rank{r}.pt", weights_only=False) for r in (0, 1)]
    assert [f["world_size"] for f in finals] == [2, 2]
    questions = [{p.question for p in b.prompts} for b in batches]
    assert len(questions[0]) == len(questions[1]) == 2 and not questions[0] & questions[1]
    # both ranks log the rewards and counts of both ranks' rollouts (by hand from the two batches)
    rewards = torch.cat([b.rewards for b in batches]).double()
    scored = ~torch.isnan(rewards)
    expected = {
        "reward/all": float(rewards[scored].mean()),
        "rollout/truncated": float(sum(int((~b.finished).sum()) for b in batches)),
    }
    for f in finals:
        assert {k: f["history"][0][k] for k in expected} == {k: pytest.approx(v) for k, v in expected.items()}

    # sharding then gathering is lossless: every tensor equals the loaded model's, bit for bit
    loaded = embedded_smollm2(dtype="float32").model.state_dict()
    assert set(gathered[0]) == set(loaded)
    for name, tensor in loaded.items():
        assert torch.equal(gathered[0][name], tensor) and torch.equal(gathered[1][name], tensor), name

    # the single-process step on the union, clipped the same way
    policy, initial, norm = single_process_step(tmp_path, batches, CLIP, OBJECTIVE)
    assert norm > 2 * CLIP, f"the step's gradient norm {norm:.2e} is not clipped by {CLIP}: the check would be vacuous"
    state = policy.state_dict()
    for k in KEYS:
        assert torch.equal(finals[0]["weights"][k], finals[1]["weights"][k]), k
        moved = (state[k] - initial[k]).abs().max().item()
        assert moved > 1e-5, f"{k} did not move: the comparison would be vacuous"
        diff = (finals[0]["weights"][k] - state[k]).abs().max().item()
        assert diff < 1e-5 * max(1.0, moved * 100), f"{k}: FSDP vs single-process update differ by {diff:.2e}"

    # the Hugging Face export (gathered on both ranks, written by rank 0) is the trained weights exactly
    exported = load_file(tmp_path / "run" / "hf_policy" / "model.safetensors")
    for k in KEYS:
        assert torch.equal(exported[k], finals[0]["weights"][k]), k
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
