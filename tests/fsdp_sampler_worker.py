"""Run by tests/integration/test_fsdp_sampler_sync.py under ``torchrun --nproc_per_node 2`` (gloo,
CPU): the samplers of a policy sharded by :class:`mintrl.training.distributed.FullyShardedStrategy`
(a tiny Llama with a tied head, loaded "from a hub id") as a GPU run meets them:

1. the vLLM sampler (the fake engine of tests/fake_vllm.py) started on the GPU backend
   (``accelerator=gpu``) in the environment Lightning's launcher gives (``LOCAL_RANK``,
   ``NODE_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``; no ``RANK``), from the folder
   each rank writes for itself, and its first push under inference mode (Lightning's validation),
   streamed: one received tensor alive at a time, each sharded tensor gathered once;
2. a ``foreach`` AdamW step (CUDA's default path for DTensors) that moves the weights and leaves
   their version counters, after which the weights generation is advanced as the training module
   does: the full-weight sampling copy and the engine both get the new weights;
3. the Hugging Face export's gather: rank 0 keeps every tensor, once each, rank 1 none.

Each rank writes ``<out>/rank<r>.json``; a part that raises is recorded with its traceback, and a
collective that waits longer than the process group's timeout raises (gloo names the operation)."""

from __future__ import annotations

import datetime
import json
import os
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from conftest import tiny_llama
from fake_vllm import FakeLLM, install_fake_vllm
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

from mintrl.sampler.hf import HFSampler
from mintrl.sampler.vllm import VLLMSampler
from mintrl.sampler.weights import full_state_dict, weights_generation
from mintrl.training.callbacks.export import gather_to_host
from mintrl.training.distributed import FullyShardedStrategy

COLLECTIVE_TIMEOUT_S = 60  # a rank waiting this long in a collective raises (gloo names the op and the peer)
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # not a folder: the engine needs one written per rank


class _Tokenizer:
    pad_token_id = 0

    def save_pretrained(self, folder):
        Path(folder, "tokenizer_config.json").write_text("{}")


class _CountGathers:
    """Counts ``DTensor.full_tensor`` calls (all-gathers) while active."""

    def __enter__(self):
        self.count, self._real = 0, DTensor.full_tensor

        def counting(tensor, *args, **kwargs):
            self.count += 1
            return self._real(tensor, *args, **kwargs)

        DTensor.full_tensor = counting
        return self

    def __exit__(self, *exc):
        DTensor.full_tensor = self._real


def lightning_launcher_env(rank: int) -> None:
    """The variables Lightning's subprocess launcher sets (lightning/fabric/strategies/launchers/
    subprocess_script.py: MASTER_ADDR, MASTER_PORT, NODE_RANK, LOCAL_RANK, WORLD_SIZE), not RANK."""
    os.environ.pop("RANK", None)
    os.environ.update(NODE_RANK="0", LOCAL_RANK=str(rank), WORLD_SIZE="2")


def equal_to(received: dict, gathered: dict) -> bool:
    """Every gathered tensor but the tied head (the embedding's tensor, which loaders re-tie) is in
    ``received``, equal bit for bit."""
    names = set(gathered) - {"lm_head.weight"}
    return names <= set(received) and all(torch.equal(received[k], gathered[k]) for k in names)


def main(out: Path) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    rank = dist.get_rank()
    found: dict = {"rank": rank}
    install_fake_vllm()
    policy = tiny_llama(vocab=96, tie_word_embeddings=True)
    policy.name_or_path = HUB_ID
    mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("data_parallel", "tensor_parallel"))
    strategy = FullyShardedStrategy()
    strategy._device_mesh = mesh
    strategy.shard_policy(policy)
    distinct = sum(1 for _ in policy.parameters())  # the tied head is the embedding's parameter
    found["distinct_params"] = distinct
    found["expected_names"] = sorted(k for k in policy.state_dict() if k != "lm_head.weight")
    gathered = {k: v.clone() for k, v in full_state_dict(policy)}  # a collective: every rank, same order
    hf = HFSampler(policy, _Tokenizer(), dtype="fp32")
    engine = VLLMSampler(policy, _Tokenizer(), accelerator="gpu", enforce_eager=True, seed=3)

    try:  # 1. engine start (launcher env, rank-local folder) and the first push, under inference mode
        lightning_launcher_env(rank)
        with _CountGathers() as gathers, torch.inference_mode():
            engine.sync_weights()
        llm = FakeLLM.started[0]
        found["launcher"] = llm.launcher
        found["backend"] = llm.kwargs.get("distributed_executor_backend")
        found["engine_seed"] = llm.kwargs["seed"]
        found["folder_names"] = sorted(llm.loaded)
        found["folder_exact"] = equal_to(llm.loaded, gathered)
        found["push_in_inference_mode"] = list(llm.pushed_in_inference_mode)
        found["push_exact"] = equal_to(llm.weights, gathered)
        found["push_peak_alive"] = llm.peak_alive
        found["push_names"] = llm.pushed_names[0]
        found["start_and_push_gathers"] = gathers.count  # the folder's gathers + the push's
    except Exception:
        found["engine_error"] = traceback.format_exc()
    dist.barrier()

    try:  # 2. a foreach AdamW step: weights move, versions stay; the generation tells the samplers
        torch.manual_seed(0)
        hf.generate([[5, 6, 7]], max_new_tokens=3, temperature=1.0, top_p=1.0)
        found["copy_refreshes_before"] = hf.copy.refreshes
        optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2, foreach=True)
        ids = torch.randint(3, 96, (2, 8), generator=torch.Generator().manual_seed(rank))
        policy(input_ids=ids, labels=ids).loss.backward()
        versions = [p._version for p in policy.parameters()]
        optimizer.step()
        found["versions_unchanged"] = [p._version for p in policy.parameters()] == versions
        after = {k: v.clone() for k, v in full_state_dict(policy)}
        found["weights_moved"] = any(not torch.equal(after[k], v) for k, v in gathered.items())
        weights_generation(policy).advance()  # what PolicyModule._train_on does after optimizer.step()
        hf.generate([[5, 6, 7]], max_new_tokens=3 + 4 * rank, temperature=1.0, top_p=1.0)
        found["copy_refreshes_after"] = hf.copy.refreshes
        copy = hf.copy.module.state_dict()
        found["copy_exact"] = equal_to(copy, after)
        with _CountGathers() as gathers:
            pushed = engine.sync_weights()
        found["second_push"] = pushed
        found["second_push_exact"] = equal_to(FakeLLM.started[0].weights, after) if FakeLLM.started else False
        found["second_push_gathers"] = gathers.count
    except Exception:
        found["step_error"] = traceback.format_exc()
    dist.barrier()

    try:  # 3. the export's gather: one all-gather per sharded tensor, rank 0 keeps them on the host
        with _CountGathers() as gathers:
            kept = gather_to_host(policy, keep=rank == 0)
        found["export_gathers"] = gathers.count
        found["export_kept"] = None if kept is None else sorted(kept)
        found["export_exact"] = None if kept is None else equal_to(kept, after)
    except Exception:
        found["export_error"] = traceback.format_exc()
    dist.barrier()
    engine.close()
    (out / f"rank{rank}.json").write_text(json.dumps(found))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
