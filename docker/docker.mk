# The Docker image and its tests, included by the Makefile.
#
# `make docker-test` packages the module built on this machine
# (docker/Dockerfile --target prebuilt) on a Debian bookworm base image that
# docker/build-base.sh makes from Debian's packages, so it needs no registry,
# then runs tests/docker/image.sh and tests/docker/sentinel.sh. `make test`
# runs it through test-docker: skipped without a Docker engine, an error then
# if CI=true.

DOCKER_IMAGE ?= redis-lock:test
# Named after the recipe: a changed docker/build-base.sh builds a new base, an
# existing one is reused (`docker rmi` it to rebuild).
DOCKER_BASE_IMAGE ?= redis-lock-base:bookworm-$(shell sha256sum docker/build-base.sh | cut -c1-12)
# Each test script stops on its own well before this many seconds.
DOCKER_TEST_TIMEOUT := 300
DOCKER_SCRIPTS := docker/build-base.sh docker/entrypoint.sh docker/healthcheck.sh docker/redis-cli.sh \
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

docker-base: docker-deps ## The bookworm base image with redis-server, from Debian's packages (reused if present)
	docker/build-base.sh $(DOCKER_BASE_IMAGE)

docker-test: build docker-deps ## Build the image from the module and test it: redis-cli inside, restart, replica, Sentinel failover
	@set -e; started=$$(date +%s); \
	for script in $(DOCKER_SCRIPTS); do bash -n $$script; done; \
	shellcheck -x $(DOCKER_SCRIPTS); \
	docker/build-base.sh $(DOCKER_BASE_IMAGE); \
	for test in tests/docker/image.sh tests/docker/sentinel.sh; do \
	  DOCKER_IMAGE=$(DOCKER_IMAGE) DOCKER_BASE_IMAGE=$(DOCKER_BASE_IMAGE) \
	    timeout -k 30 $(DOCKER_TEST_TIMEOUT) $$test; \
	done; \
	echo "docker-test: passed in $$(($$(date +%s) - started)) s, base image included"

test-docker: ## docker-test if a Docker engine answers; without one, skipped (an error if CI=true)
	@if docker info >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory docker-test; \
	elif [ "$${CI:-}" = true ]; then \
	  echo "test-docker: CI=true and no Docker engine answers 'docker info': the Docker tests cannot run"; exit 1; \
	else \
	  echo "test-docker: skipped, no Docker engine answers 'docker info' (with CI=true this is an error)"; \
	fi
