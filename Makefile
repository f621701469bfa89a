# gangsched: `make setup` once, then `make test`. See README.md.
SHELL := /bin/bash
VENV ?= .venv
PY := $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python,python3)
K8S_VERSION := v1.36.3
export GANGSCHED_K8S_BIN ?= $(HOME)/.cache/gangsched/k8s-$(K8S_VERSION)/bin

.PHONY: setup control-plane test lint typecheck unit integration dev-cluster bench clean

setup: ## create .venv with gangsched and its test tools, and build the control plane
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	$(MAKE) control-plane

control-plane: ## build kube-apiserver, kube-scheduler and etcd once into $(GANGSCHED_K8S_BIN)
	bash hack/build-control-plane.sh

lint:
	$(PY) -m ruff check operator tests bench
	$(PY) -m ruff format --check operator tests bench

typecheck:
	$(PY) -m mypy

unit:
	$(PY) -m pytest tests/unit -q

integration:
	$(PY) -m pytest tests/integration -q

test: lint typecheck ## ruff, mypy and every test
	$(PY) -m pytest tests -q

dev-cluster: ## a local control plane in the foreground, for people
	$(PY) -m gangsched.devcluster

bench:
	$(PY) bench/engine_bench.py

clean:
	rm -rf build dist .mypy_cache .ruff_cache .pytest_cache
