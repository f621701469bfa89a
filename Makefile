# gangsched: `make test` (sets the project up on first use, as `make demo`). See README.md.
SHELL := /bin/bash
VENV ?= .venv
PY := $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python,python3)
K8S_VERSION := v1.36.3
export GANGSCHED_K8S_BIN ?= $(HOME)/.cache/gangsched/k8s-$(K8S_VERSION)/bin
KUEUE_VERSION := v0.17.0
# hack/build-kueue.sh: bin/kueue and the manifests of its module (gangsched_testing.kueue reads both)
export GANGSCHED_KUEUE_HOME ?= $(HOME)/.cache/gangsched/kueue-$(KUEUE_VERSION)
RAY_OPERATOR_VERSION := v1.5.0
export GANGSCHED_RAY_OPERATOR_BIN ?= $(HOME)/.cache/gangsched/ray-operator-$(RAY_OPERATOR_VERSION)/bin
# Test and demo tooling (gangsched_testing): a source root of its own, never installed.
# pytest finds it through pyproject.toml; bench/ and hack/demo.py put it on sys.path.
TESTING_PATH := PYTHONPATH=testing$${PYTHONPATH:+:$$PYTHONPATH}

.PHONY: setup venv test-random dev-cluster-run control-plane test-tools dra-oracle bare-binder kwok kueue ray-operator test test-kueue lint typecheck unit integration chaos dev-cluster demo demo-run bench bench-e2e clean

setup: venv ## create .venv with gangsched and its test tools, and build the control plane
	$(MAKE) control-plane

venv: # .venv with gangsched and its test tools
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'

# What a newcomer's `make demo` and `make dev-cluster` need, no more (KWOK and KubeRay's
# operator took 98 s + 127 s of a cold `make demo` when they were built here too).
control-plane: ## build kube-apiserver, kube-scheduler, kube-controller-manager and etcd once into $(GANGSCHED_K8S_BIN)
	bash hack/build-control-plane.sh

# What `make test` needs besides the control plane: each built once, when missing.
test-tools: ## the DRA oracle, the bare binder, KWOK and KubeRay's ray-operator, for the tests
	bash hack/dra-oracle/build.sh
	bash hack/bare-binder/build.sh
	bash hack/build-kwok.sh
	bash hack/build-ray-operator.sh

dra-oracle: ## the Go DRA allocator/CEL oracle for differential tests (hack/dra-oracle/README.md)
	bash hack/dra-oracle/build.sh

bare-binder: ## bench-e2e's `bare` contestant: binds pods round-robin, no scheduling (hack/bare-binder/README.md)
	bash hack/bare-binder/build.sh

# About 95 s on 2 cores the first time (module download and build), a no-op once built.
kwok: ## KWOK's kwok v0.8.0 (sigs.k8s.io/kwok) into $(GANGSCHED_K8S_BIN): bench-e2e's `--kubelet kwok` and its test
	bash hack/build-kwok.sh

kueue: ## Kueue $(KUEUE_VERSION) from its Go module, once, into $(GANGSCHED_KUEUE_HOME) (about 4 minutes; for `make test-kueue`)
	bash hack/build-kueue.sh

ray-operator: ## KubeRay's ray-operator $(RAY_OPERATOR_VERSION) into $(GANGSCHED_RAY_OPERATOR_BIN), for the RayCluster integration tests
	bash hack/build-ray-operator.sh

lint:
	$(PY) -m ruff check --no-cache operator testing tests bench hack
	$(PY) -m ruff format --no-cache --check operator testing tests bench hack

typecheck:
	$(PY) -m mypy

unit:
	$(PY) -m pytest tests/unit -q

integration:
	$(PY) -m pytest tests/integration -q

# CHAOS_ARGS="--minutes 10 --seed 1"; the report is build/chaos.json (docs/reliability.md)
chaos: ensure-setup ## the fault-injection suite, then a 10-minute randomized soak
	$(PY) -m pytest tests/chaos -q
	@mkdir -p build
	$(TESTING_PATH) $(PY) -m gangsched_testing.soak $(or $(CHAOS_ARGS),--minutes 10 --seed 1) --json build/chaos.json

# CI is deterministic (every property test derandomized); this one keeps searching: the
# unit tests with a random seed and EXAMPLES_FACTOR (5) times the examples, then a chaos soak
# of SOAK_MINUTES (5) with a random seed. Run it before each stop; what it finds becomes an
# @example of the property test (or a fixed --seed of the soak) that CI runs from then on.
test-random: ensure-setup ## property tests with a random seed and more examples, then a chaos soak with a random seed
	GANGSCHED_HYPOTHESIS_PROFILE=random GANGSCHED_EXAMPLES_FACTOR=$(or $(EXAMPLES_FACTOR),5) $(PY) -m pytest -q tests/unit
	@mkdir -p build
	seed=$$RANDOM; echo "chaos soak seed $$seed"; \
	$(TESTING_PATH) $(PY) -m gangsched_testing.soak --minutes $(or $(SOAK_MINUTES),5) --seed $$seed --json build/chaos-random.json

# `make test` sets the project up on first use, as `make demo` does: `make setup` when $(PY) cannot
# import the test tools (a fresh clone), else `make control-plane` (a no-op once built). The
# checks run in a new make, which sees the .venv setup may just have created.
# PYTEST_ARGS="tests/unit/test_cli.py -x" runs part of the suite.
PYTEST_ARGS ?= tests
.PHONY: ensure-setup test-run

test: ## ruff, mypy and every test (after `make setup` when it was never run)
	@$(MAKE) --no-print-directory ensure-setup
	@$(MAKE) --no-print-directory test-run

test-run: lint typecheck
	$(PY) -m pytest -q $(PYTEST_ARGS)

# Not part of `make test`: building Kueue takes minutes on a fresh machine (pyproject's
# norecursedirs keeps tests/integration/kueue out of `pytest tests`). A missing Kueue fails here.
test-kueue: ## Kueue in front of gangsched: its quota admits one of two GPU Jobs, gangsched places each whole (docs/install.md)
	@$(MAKE) --no-print-directory ensure-setup
	@$(MAKE) --no-print-directory kueue
	$(PY) -m pytest -q tests/integration/kueue $(KUEUE_PYTEST_ARGS)

ensure-setup: # .venv, the control plane and the test tools, whichever is missing
	@if $(TESTING_PATH) $(PY) -c 'import gangsched.runtime, gangsched_testing.devcluster, kopf, pytest, mypy, ruff' 2>/dev/null; \
	then $(MAKE) --no-print-directory control-plane; \
	else echo "make: first use, no $(VENV) with gangsched's test tools: make setup"; $(MAKE) --no-print-directory setup; fi
	@$(MAKE) --no-print-directory test-tools

dev-cluster: ## a local control plane with the CRD and 32 GPU nodes, in the foreground (DEV_CLUSTER_ARGS="--nodes count=4,gpu=8 --workload-with-job")
	@$(TESTING_PATH) $(PY) -c 'import gangsched_testing.devcluster, kopf' 2>/dev/null || $(MAKE) --no-print-directory venv
	@$(MAKE) --no-print-directory control-plane
	@$(MAKE) --no-print-directory dev-cluster-run

dev-cluster-run: # re-read PY: `make venv` may just have created .venv
	$(TESTING_PATH) $(PY) -m gangsched_testing.devcluster $(DEV_CLUSTER_ARGS)

demo: ## the story in under a minute: control plane, 32 GPU nodes, gangsched, four gangs, then a DRA gang, live view
	@$(TESTING_PATH) $(PY) -c 'import gangsched_testing.devcluster, kopf' 2>/dev/null || $(MAKE) --no-print-directory venv
	@$(MAKE) --no-print-directory control-plane
	@$(MAKE) --no-print-directory demo-run

demo-run: # re-read PY: `make setup` may just have created .venv
	$(PY) hack/demo.py $(DEMO_ARGS)

.PHONY: image image-test image-test-run kind-e2e
IMAGE ?= gangsched:dev

# PYTHON_IMAGE=... builds on another base; without it, python:3.11-slim, or where that cannot
# be pulled gangsched-base:bookworm from Debian packages (hack/image-base.sh). docs/install.md.
image: ## the container image $(IMAGE) (docker; started, or installed as root with apt, when missing)
	IMAGE=$(IMAGE) bash hack/image.sh

image-test: ## build the image and run it as the Deployment does against the dev control plane: a gang bound, /metrics, /healthz
	@$(MAKE) --no-print-directory ensure-setup
	@$(MAKE) --no-print-directory image-test-run

image-test-run:
	IMAGE=$(IMAGE) PY=$(PY) bash hack/image-test.sh

kind-e2e: ## build, install into a fresh kind cluster, run examples/training-job.yaml, check placement
	IMAGE=$(IMAGE) bash hack/kind-e2e.sh

bench:
	$(PY) bench/engine_bench.py

# BENCH_E2E_ARGS="--nodes 100" (or 5000, --repeat 3, --profile DIR, --workload dra or preemption,
# --contestants gangsched,native,bare, --kubelet kwok, --help); results in build/bench-e2e
bench-e2e: control-plane bare-binder kwok ## gangsched vs kube-scheduler v1.36.3 on one control plane, 1,000 GPU nodes (docs/benchmarks.md)
	@$(PY) -c 'import matplotlib' 2>/dev/null || $(PY) -m pip install -q -e '.[bench]'
	$(PY) -m bench.e2e $(BENCH_E2E_ARGS)

clean:
	rm -rf build dist .mypy_cache .ruff_cache .pytest_cache
