# The Docker image and its tests, included by the Makefile.
#
# `make docker-test` packages the module built on this machine
# (docker/Dockerfile --target prebuilt) on two Debian base images that
# docker/build-base.sh makes from Debian's packages, so it needs no registry:
# trixie with Redis 8.0 (the Dockerfile's default) and bookworm with Redis 7.0.
# It runs tests/docker/image.sh and tests/docker/sentinel.sh on each image.
# `make test` runs it through test-docker (skipped without a Docker engine, an
# error then if CI=true).

# The suites tested (`make docker-test DOCKER_SUITES=bookworm` tests one), and
# the redis_version each one's server must report: a wrong base fails.
DOCKER_SUITES ?= trixie bookworm
DOCKER_REDIS_VERSION_trixie := 8.0.2
DOCKER_REDIS_VERSION_bookworm := 7.0.15
# The images under test are $(DOCKER_IMAGE)-<suite>: redis-lock:test-trixie…
DOCKER_IMAGE ?= redis-lock:test
# Base images are named after their suite and the recipe,
# redis-lock-base:<suite>-<hash>: a changed docker/build-base.sh builds new
# ones, existing ones are reused (`docker rmi` them to rebuild).
DOCKER_BASE_RECIPE := $(shell sha256sum docker/build-base.sh | cut -c1-12)
# docker-test runs the suites side by side, each with its own containers,
# volumes and networks (its base image, then image.sh, then sentinel.sh): the
# tests mostly wait, on health checks and on Sentinel. Each suite's output goes
# to a log here, printed when it ends.
DOCKER_TEST_LOGS := target/docker-test
# Each test script stops on its own well before this many seconds.
DOCKER_TEST_TIMEOUT := 300
DOCKER_SCRIPTS := docker/build-base.sh docker/entrypoint.sh docker/healthcheck.sh docker/cli.sh \
	tests/docker/lib.sh tests/docker/image.sh tests/docker/sentinel.sh

.PHONY: docker-deps docker-base docker-test test-docker

docker-deps: ## Check for a Docker engine; install mmdebstrap, docker-compose, shellcheck if missing (apt, as root)
	@docker info >/dev/null 2>&1 || { echo "no Docker engine answers 'docker info'"; exit 1; }
	@missing=""; \
	command -v mmdebstrap >/dev/null || missing="$$missing mmdebstrap"; \
	docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || missing="$$missing docker-compose"; \
	command -v shellcheck >/dev/null || missing="$$missing shellcheck"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing:$$missing. Install with: sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

docker-base: docker-deps ## The trixie and bookworm base images with redis-server, from Debian's packages (reused if present)
	@set -e; for suite in $(DOCKER_SUITES); do docker/build-base.sh $$suite redis-lock-base:$$suite-$(DOCKER_BASE_RECIPE); done

docker-test: build docker-deps ## Build the trixie (Redis 8.0) and bookworm (Redis 7.0) images from the module and test each: redis-cli inside, restart, replica, Sentinel failover
	@set -e; started=$$(date +%s); \
	for script in $(DOCKER_SCRIPTS); do bash -n $$script; done; \
	shellcheck -x $(DOCKER_SCRIPTS); \
	mkdir -p $(DOCKER_TEST_LOGS); pids=(); \
	for pair in $(foreach suite,$(DOCKER_SUITES),$(suite):$(DOCKER_REDIS_VERSION_$(suite))); do \
	  suite=$${pair%%:*}; version=$${pair#*:}; \
	  [ -n "$$version" ] || { echo "docker-test: set DOCKER_REDIS_VERSION_$$suite"; exit 1; }; \
	  base=redis-lock-base:$$suite-$(DOCKER_BASE_RECIPE); \
	  ( set -e; \
	    docker/build-base.sh $$suite $$base; \
	    echo "docker-test: $$suite base ready after $$(($$(date +%s) - started)) s"; \
	    for test in tests/docker/image.sh tests/docker/sentinel.sh; do \
	      echo; echo "=== $$test on $$suite (Redis $$version)"; \
	      DOCKER_IMAGE=$(DOCKER_IMAGE)-$$suite DOCKER_BASE_IMAGE=$$base DOCKER_SUITE=$$suite DOCKER_REDIS_VERSION=$$version \
	        timeout -k 30 $(DOCKER_TEST_TIMEOUT) $$test; \
	    done; \
	    echo "docker-test: $$suite passed after $$(($$(date +%s) - started)) s, its base image included" \
	  ) >$(DOCKER_TEST_LOGS)/$$suite.log 2>&1 & pids+=($$!); \
	  echo "docker-test: $$suite started, its output in $(DOCKER_TEST_LOGS)/$$suite.log"; \
	done; \
	failed=""; i=0; \
	for suite in $(DOCKER_SUITES); do \
	  wait $${pids[$$i]} || failed="$$failed $$suite"; i=$$((i + 1)); \
	  echo; echo "##### docker-test on $$suite ($(DOCKER_TEST_LOGS)/$$suite.log)"; cat $(DOCKER_TEST_LOGS)/$$suite.log; \
	done; \
	[ -z "$$failed" ] || { echo; echo "docker-test: FAILED on$$failed"; exit 1; }; \
	echo "docker-test: passed in $$(($$(date +%s) - started)) s, base images included"

test-docker: ## docker-test if a Docker engine answers; without one, skipped (an error if CI=true)
	@if docker info >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory docker-test; \
	elif [ "$${CI:-}" = true ]; then \
	  echo "test-docker: CI=true and no Docker engine answers 'docker info': the Docker tests cannot run"; exit 1; \
	else \
	  echo "test-docker: skipped, no Docker engine answers 'docker info' (with CI=true this is an error)"; \
	fi
