# SR3 for Python. `make help` lists the targets; each says whether CI runs it.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
export PYTHONWARNINGS ?= ignore::DeprecationWarning
export PYSPARK_PYTHON := $(abspath $(PY))
# Bytecode caches on, even where the environment turns them off (these machines set
# PYTHONDONTWRITEBYTECODE=1): the suite starts thousands of Python processes (tasks, ring
# nodes, CLI runs) and each would recompile the project's modules, about 0.25 s of CPU
# per stateful task (measured: 0.96 s -> 0.60 s per task start in test_exactly_once)
export PYTHONDONTWRITEBYTECODE :=
# pytest workers for `make test` (CI too): 2 use xdist, every test of a shared JVM
# service (Storm, Spark, the netns lab) in one group on one worker (tests/conftest.py),
# the rest on whichever is free: 27 min 40 s against 41 min serially (CONTRIBUTING);
# TEST_WORKERS=1 runs serially
TEST_WORKERS ?= 2
XDIST = $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup,)

.DEFAULT_GOAL := help
.PHONY: help setup demo test test-soak test-all ci lint format typecheck imports test-fast chaos test-unit test-integration bench-ring bench-recovery bench-storm bench-spark clean

help:  ## List the targets (not in CI)
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

setup:  ## Install Debian's ZooKeeper when missing and the venv in .venv (CI: yes, via test)
	@scripts/bootstrap.sh

demo: setup  ## Run the main job on embedded defaults (not in CI)
	$(BIN)/sr3 demo

test: setup lint typecheck imports  ## Everything CI runs: lint, types, layers, all tests but the soak tier (CI: yes)
	$(BIN)/pytest -q $(XDIST) -m "not soak" --durations=30 tests

test-soak: setup  ## The soak tier: chaos campaigns on Storm and Spark clusters, repeated schedules (not in CI; about 16 min)
	$(BIN)/pytest -q -m soak --durations=30 tests

test-all: setup lint typecheck imports  ## make test and the soak tier in one session (not in CI; about 65 min)
	$(BIN)/pytest -q $(XDIST) --durations=30 tests

ci: test  ## Exactly what .ci/run runs (CI: yes)

lint: setup  ## ruff lint and format check (CI: yes)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup  ## Apply ruff fixes and formatting (not in CI)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: setup  ## mypy --strict on the packages (CI: yes)
	$(BIN)/mypy

imports: setup  ## import-linter layer contracts (CI: yes)
	$(BIN)/lint-imports

test-fast: setup  ## Edit loop, a few minutes: unit tests and the quick ZooKeeper/ring integration tests (not in CI on its own)
	$(BIN)/pytest -q -m "not slow and not spark and not apache_storm" tests/unit tests/integration/zk tests/integration/backend tests/integration/sr3

chaos: setup  ## Randomized failure campaign: 100 seeded schedules on word count, ENGINE=storm|spark|both|apache-storm (the last with SR3_LAB of a `sr3 lab up --storm` lab; not in CI; the suite runs a small one)
	$(BIN)/sr3 chaos --schedules $${SCHEDULES:-100} --seed $${SEED:-1} --engine $${ENGINE:-storm}

test-unit: setup  ## Unit tests only: no JVM, no sockets (not in CI on its own)
	$(BIN)/pytest -q tests/unit

test-integration: setup  ## Integration tests with real ZooKeeper and ring nodes (not in CI on its own)
	$(BIN)/pytest -q tests/integration

bench-ring: setup  ## Ring write/read throughput against raw loopback TCP (not in CI)
	$(PY) bench/ring_throughput.py

bench-recovery: setup  ## Star/line/tree recovery vs raw, Redis, Spark; netns when root (not in CI)
	$(PY) bench/recovery.py

bench-storm: setup  ## Checkpoint overhead (JSON, msgpack) and killed-task recovery per mechanism (not in CI)
	$(PY) bench/storm_checkpoint.py
	$(PY) bench/storm_recovery.py

bench-spark: setup  ## Spark engine vs Storm local cluster records/s, batch latency, SR3 share (not in CI)
	$(PY) bench/spark_engine.py

clean:  ## Remove the venv and caches (not in CI)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
