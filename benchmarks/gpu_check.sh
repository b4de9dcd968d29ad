#!/usr/bin/env bash
# The offline single-GPU check (LoRA issue): on a machine with one NVIDIA GPU and torch, transformers,
# lightning, peft, torchmetrics and tensorboard installed, no network, and only this repository plus
# .gpu-wheels/ (about 30 MiB, made by `make gpu-wheels` on a machine with network) carried along:
#   1. installs the main job's remaining small dependencies from .gpu-wheels/ (pip --no-index), after
#      checking that they were fetched for this machine's Python (.gpu-wheels/python-version, written
#      by `make gpu-wheels GPU_PYTHON=<major.minor>`): otherwise it stops before installing anything;
#   2. builds randomly initialised models of the embedded model's architecture (SmolLM2-135M) and of
#      Qwen3-1.7B's from their configs (no weights are downloaded);
#   3. runs trainer=gpu bf16 main-job steps with the HF sampler, full weights and LoRA, one FSDP
#      update of a LoRA policy (+ its merged export), and full-weight steps on rollouts one step ahead
#      from a sampler worker process on the same GPU (`stale`, last), printing per part the step time split into
#      generation and update, peak GPU memory, generated tokens/s and the update's MFU (from the FLOPs
#      the update does, gpu_check.py's update_flops); each part on its own (one failing leaves the rest).
# Under 8 minutes in all (each part is bounded; the whole python part by `timeout 420`).
#   bash benchmarks/gpu_check.sh                      # PYTHON=/path/to/python to pick the interpreter
#                                                     # (GPU_WHEELS=<folder>: the wheels elsewhere)
#   bash benchmarks/gpu_check.sh --archs smollm2_135m --parts lora   # any gpu_check.py arguments
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=${GPU_WHEELS:-.gpu-wheels}
start=$(date +%s)
if ! "$PY" -c "import hydra, omegaconf, reasoning_gym, rich" 2>/dev/null; then
  if [ ! -f "$WHEELS/requirements.txt" ]; then
    echo "missing $WHEELS/requirements.txt: run 'make gpu-wheels' on a machine with network first" >&2
    exit 2
  fi
  # compiled wheels only install into the Python they were fetched for (make gpu-wheels GPU_PYTHON=...)
  have=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  fetched=$(cat "$WHEELS/python-version" 2>/dev/null || echo "an unrecorded version")
  if [ "$have" != "$fetched" ]; then
    echo "$WHEELS holds wheels fetched for Python $fetched, but $PY is Python $have: nothing was installed." >&2
    echo "On a machine with network run 'make gpu-wheels GPU_PYTHON=$have' and carry $WHEELS over again." >&2
    exit 2
  fi
  echo "== installing $(wc -l < "$WHEELS/requirements.txt") packages from $WHEELS (offline)"
  "$PY" -m pip install -q --no-index --no-deps --find-links "$WHEELS" -r "$WHEELS/requirements.txt"
fi
"$PY" - <<'PY'
import torch, transformers, lightning, peft
print("torch", torch.__version__, "| transformers", transformers.__version__, "| lightning", lightning.__version__,
      "| peft", peft.__version__, "|", torch.cuda.get_device_name() if torch.cuda.is_available() else "NO GPU")
PY
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" MINTRL_CONFIG_DIR="$PWD/configs" TOKENIZERS_PARALLELISM=false
export MINTRL_CACHE="${MINTRL_CACHE:-$(mktemp -d)}"
# exit status: 0 all parts ran, 1 some part failed (the others' results are still in the JSON),
# 2 a package below the pyproject.toml floor or no GPU (nothing run), 124 the timeout
rc=0
timeout 420 "$PY" benchmarks/gpu_check.py --device cuda --steps 3 --tokenizer "$WHEELS/tokenizer" \
  --json "${OUT:-/tmp}/gpu_check.json" "$@" || rc=$?
echo "== done in $(( $(date +%s) - start )) s (exit $rc)"
exit $rc
