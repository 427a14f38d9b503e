# The Docker images and their tests, included by the Makefile.
#
# `make docker-test` packages the module built on this machine
# (docker/Dockerfile --target prebuilt) on three Debian base images that
# docker/build-base.sh makes from Debian's packages, so it needs no registry:
# Redis 8.0 on trixie (the Dockerfile's default), Redis 7.0 on bookworm and
# Valkey 8.1 on trixie (--build-arg SERVER=valkey). It runs
# tests/docker/image.sh and tests/docker/sentinel.sh on each image.
# `make test` runs it through test-docker (skipped without a Docker engine, an
# error then if CI=true).

# The images tested, each <server>-<suite> (`make docker-test
# DOCKER_VARIANTS=valkey-trixie` tests one), and the version each one's server
# must report (INFO's redis_version or valkey_version): a wrong base fails.
DOCKER_VARIANTS ?= redis-trixie redis-bookworm valkey-trixie
DOCKER_VERSION_redis-trixie := 8.0.2
DOCKER_VERSION_redis-bookworm := 7.0.15
DOCKER_VERSION_valkey-trixie := 8.1.1
# The images under test are $(DOCKER_IMAGE)-<variant>: redis-lock:test-redis-trixie…
DOCKER_IMAGE ?= redis-lock:test
# Base images are named after their variant and the recipe,
# redis-lock-base:<server>-<suite>-<hash>: a changed docker/build-base.sh
# builds new ones, existing ones are reused (`docker rmi` them to rebuild).
DOCKER_BASE_RECIPE := $(shell sha256sum docker/build-base.sh | cut -c1-12)
# docker-test runs the variants side by side, each with its own containers,
# volumes and networks (its base image, then image.sh, then sentinel.sh): the
# tests mostly wait, on health checks and on Sentinel. Each variant's output
# goes to a log here, printed when it ends.
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

docker-base: docker-deps ## The base images (Redis on trixie and bookworm, Valkey on trixie), from Debian's packages (reused if present)
	@set -e; for variant in $(DOCKER_VARIANTS); do \
	  docker/build-base.sh $${variant#*-} redis-lock-base:$$variant-$(DOCKER_BASE_RECIPE) $${variant%%-*}; \
	done

docker-test: build docker-deps ## Build the Redis 8.0 (trixie), Redis 7.0 (bookworm) and Valkey 8.1 (trixie) images from the module and test each: the CLI inside, restart, replica, Sentinel failover
	@set -e; started=$$(date +%s); \
	for script in $(DOCKER_SCRIPTS); do bash -n $$script; done; \
	shellcheck -x $(DOCKER_SCRIPTS); \
	mkdir -p $(DOCKER_TEST_LOGS); pids=(); \
	for pair in $(foreach variant,$(DOCKER_VARIANTS),$(variant):$(DOCKER_VERSION_$(variant))); do \
	  variant=$${pair%%:*}; version=$${pair#*:}; server=$${variant%%-*}; suite=$${variant#*-}; \
	  [ -n "$$version" ] || { echo "docker-test: set DOCKER_VERSION_$$variant"; exit 1; }; \
	  base=redis-lock-base:$$variant-$(DOCKER_BASE_RECIPE); \
	  ( set -e; \
	    docker/build-base.sh $$suite $$base $$server; \
	    echo "docker-test: $$variant base ready after $$(($$(date +%s) - started)) s"; \
	    for test in tests/docker/image.sh tests/docker/sentinel.sh; do \
	      echo; echo "=== $$test on $$variant ($$server $$version)"; \
	      DOCKER_IMAGE=$(DOCKER_IMAGE)-$$variant DOCKER_BASE_IMAGE=$$base DOCKER_SERVER=$$server \
	        DOCKER_SUITE=$$suite DOCKER_SERVER_VERSION=$$version \
	        timeout -k 30 $(DOCKER_TEST_TIMEOUT) $$test; \
	    done; \
	    echo "docker-test: $$variant passed after $$(($$(date +%s) - started)) s, its base image included" \
	  ) >$(DOCKER_TEST_LOGS)/$$variant.log 2>&1 & pids+=($$!); \
	  echo "docker-test: $$variant started, its output in $(DOCKER_TEST_LOGS)/$$variant.log"; \
	done; \
	failed=""; i=0; \
	for variant in $(DOCKER_VARIANTS); do \
	  wait $${pids[$$i]} || failed="$$failed $$variant"; i=$$((i + 1)); \
	  echo; echo "##### docker-test on $$variant ($(DOCKER_TEST_LOGS)/$$variant.log)"; cat $(DOCKER_TEST_LOGS)/$$variant.log; \
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
