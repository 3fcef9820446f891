# dankfleet.llm — the two commands that matter: `make lab` and `make test`.
# Every target but `venv` depends on the pinned toolchain in .venv; `venv` needs only Python and
# its venv module (a controller runs `make venv` alone), the lab/test targets add `host-deps`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
PYTHON ?= python3
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
export DANKFLEET_CACHE ?= $(HOME)/.cache/dankfleet
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/collections
export ANSIBLE_ROLES_PATH := $(CURDIR)/roles:$(CURDIR)/tests/lab/roles
export CONTAINERS_CONF := $(CURDIR)/.lab/containers.conf
export PYTHONDONTWRITEBYTECODE := 1
# Scenarios run in this order; every directory under molecule/ with a molecule.yml is one.
MOLECULE_SCENARIOS ?= $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))

# pytest-xdist workers for the unit (and integration) tests; 0 runs them in one process.
PYTEST_WORKERS ?= auto
# Extra ansible-playbook arguments for `make lab` (e.g. LAB_ARGS="--tags serve").
LAB_ARGS ?=
# tests/lab/steps.sh runs each step as its own make and prints the timing table.
STEPS := MAKE="$(MAKE)" tests/lab/steps.sh

.PHONY: help lab-idle host-deps venv controller lint sanity unit units-ansible-test integration molecule test test-fast lab lab-deploy lab-image llama-server models build clean-lab

help:
	@echo "make lab       - deploy frank-medium (lab profile) into the local systemd container"
	@echo "make test      - yamllint, ansible-lint, ansible-test sanity, pytest, every molecule scenario"
	@echo "make test-fast - yamllint, ansible-lint, ansible-test sanity, unit tests (the inner loop)"
	@echo "make clean-lab - remove the lab container and its cached facts (the build cache stays)"
	@echo "make host-deps - install the OS packages (root on Debian/Ubuntu) or say what to install"
	@echo "make venv      - create .venv from requirements.txt; needs only Python and its venv module"
	@echo "make controller - create .venv-controller from requirements-controller.txt: ansible-core alone, to run the content"

# make test's first step: the lab container (make lab) holds the ports the scenarios use.
lab-idle:
	@tests/lab/lab-idle.sh

# The OS packages, listed once in tests/lab/host-deps.sh; fast when all are there.
host-deps:
	@tests/lab/host-deps.sh

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-controller.txt
	@$(PYTHON) -c 'import venv, ensurepip' 2>/dev/null || { \
	  echo "make venv: $(PYTHON) lacks its venv module (Debian/Ubuntu: apt-get install python3-venv)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

# An operator's controller: what the shipped content needs at run time, without the development toolchain.
controller: .venv-controller/.installed

.venv-controller/.installed: requirements-controller.txt
	@$(PYTHON) -c 'import venv, ensurepip' 2>/dev/null || { \
	  echo "make controller: $(PYTHON) lacks its venv module (Debian/Ubuntu: apt-get install python3-venv)" >&2; exit 1; }
	$(PYTHON) -m venv .venv-controller
	.venv-controller/bin/pip install -q --disable-pip-version-check -r requirements-controller.txt
	touch $@

# ansible-lint puts ~/.ansible/collections ahead of ./collections; a stale
# install there (molecule's prerun from another checkout) must not decide what
# resolves, so lint runs with a HOME of its own.
lint: venv
	yamllint -s .
	mkdir -p .lab/lint-home
	HOME=$(CURDIR)/.lab/lint-home ansible-lint

sanity: host-deps venv
	tests/sanity.sh

lab-image: host-deps venv
	tests/lab/build-image.sh

# No venv: the build needs only the OS packages, so `make lab` runs it beside venv, lab-image and models.
llama-server: host-deps
	tests/lab/build-llama-server.sh >/dev/null

models: host-deps venv
	$(BIN)/python tests/lab/gen_models.py --out "$(DANKFLEET_CACHE)/models" >/dev/null
	$(BIN)/python benchmarks/moe_models.py "$(DANKFLEET_CACHE)/models" qwen3moe_s >/dev/null

unit: host-deps venv
	$(BIN)/pytest -q $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS)) tests/unit

# The same unit tests under `ansible-test units` (its pytest config, its collection loader, module tests
# restricted to module-side imports), in a copy at ansible_collections/dankfleet/llm.
units-ansible-test: venv
	tests/units.sh

integration: host-deps venv llama-server models lab-image
	$(BIN)/pytest -q $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile) tests/integration

molecule: host-deps venv lab-image llama-server models
	source tests/lab/podman-env.sh; \
	for s in $(MOLECULE_SCENARIOS); do \
	  echo "=== molecule test -s $$s"; \
	  molecule test -s $$s; \
	done

# Each step timed; the table at the end (also after a failure). Scenarios come
# from MOLECULE_SCENARIOS, so a new molecule/<name>/ gets its own row.
test:
	@$(STEPS) "make test" lab-idle host-deps venv lint sanity unit lab-image llama-server models integration \
	  $(addprefix molecule/,$(MOLECULE_SCENARIOS))

test-fast:
	@$(STEPS) "make test-fast" host-deps venv lint sanity unit

# The prelude runs once, as steps of its own; lab-deploy alone (make lab-deploy) checks it itself.
# The llama-server compile (CPU-bound, most of a cold run) runs in the background beside venv,
# lab-image and models (downloads and unpacking): tests/lab/steps.sh's bg:/wait:.
lab:
	@LAB_PRELUDE_DONE=1 $(STEPS) "make lab" host-deps bg:llama-server venv lab-image models wait:llama-server lab-deploy

lab-deploy: host-deps venv $(if $(LAB_PRELUDE_DONE),,lab-image llama-server models)
	tests/lab/lab.sh $(LAB_ARGS)

build: venv
	ansible-galaxy collection build --force --output-path .lab/dist .

clean-lab:
	source tests/lab/podman-env.sh; podman rm -f dankfleet-lab || true
	rm -rf .lab/fact-cache/dankfleet-lab
