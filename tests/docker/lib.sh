# shellcheck shell=bash
# Helpers for the Docker tests (tests/docker/image.sh, tests/docker/sentinel.sh).
# Sourced, not run. Everything a test creates is removed on exit, failed or not.
#
# Environment:
#   DOCKER_IMAGE       tag of the image under test (default redis-lock:test)
#   DOCKER_SERVER      the server of the image, the Dockerfile's SERVER build
#                      argument: redis (the default) or valkey
#   DOCKER_BASE_IMAGE  BASE_IMAGE build argument (default: the Dockerfile's,
#                      debian:trixie-slim); `make docker-test` passes the
#                      images docker/build-base.sh made from Debian packages
#   DOCKER_SUITE       the Debian suite the image must be on (default trixie)
#   DOCKER_SERVER_VERSION
#                      the version its server must report, INFO's
#                      redis_version or valkey_version (default trixie's:
#                      8.0.2 for Redis, 8.1.1 for Valkey; bookworm's Redis is
#                      7.0.15)

# doc's templates are single-quoted on purpose (doc expands them), and the
# names below are used by the tests and by those templates.
# shellcheck disable=SC2016,SC2034

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# --- names -------------------------------------------------------------------
# Each run has its own names, so it never touches a user's containers or
# another run's. The README shows the same commands with the names on the
# right of README_VALUE; no variable name is a prefix of another.
RUN_ID=$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
IMAGE=${DOCKER_IMAGE:-redis-lock:test}
# The server, and what differs with it: the Valkey image is built with
# --build-arg SERVER=valkey and documented as redis-lock:valkey, its client is
# valkey-cli, its INFO names the version valkey_version (its redis_version is
# the Redis version it is compatible with, 7.2.4) and the mode server_mode (no
# redis_mode), and its protected mode's message does not name the server.
SERVER=${DOCKER_SERVER:-redis}
case $SERVER in
  redis)
    SERVER_BUILD_ARG=""
    README_IMAGE=redis-lock
    SERVER_TITLE=Redis
    MODE_FIELD=redis_mode
    DENIED="DENIED Redis is running in protected mode because "
    ;;
  valkey)
    SERVER_BUILD_ARG="--build-arg SERVER=valkey"
    README_IMAGE=redis-lock:valkey
    SERVER_TITLE=Valkey
    MODE_FIELD=server_mode
    DENIED="DENIED Running in protected mode because "
    ;;
  *)
    echo "DOCKER_SERVER is redis or valkey, not '$SERVER'" >&2
    exit 1
    ;;
esac
CLI=$SERVER-cli
BUILD_OPTS=$SERVER_BUILD_ARG
if [ -n "${DOCKER_BASE_IMAGE:-}" ]; then
  BUILD_OPTS="$BUILD_OPTS --build-arg BASE_IMAGE=$DOCKER_BASE_IMAGE"
fi
BUILD_OPTS="$BUILD_OPTS --network none"
# What the image must run: a wrong base fails the tests instead of passing them.
SUITE=${DOCKER_SUITE:-trixie}
case $SERVER in
  redis) SERVER_VERSION=${DOCKER_SERVER_VERSION:-8.0.2} ;;
  valkey) SERVER_VERSION=${DOCKER_SERVER_VERSION:-8.1.1} ;;
esac
# The modules the server loads by itself, beside ours: Redis 8 has vector sets
# built in as a module; Redis 7 and Valkey 8 have none.
case $SERVER-$SERVER_VERSION in
  redis-7.* | valkey-*) BUILTIN_MODULES=() ;;
  *) BUILTIN_MODULES=(vectorset) ;;
esac
NET=redis-lock-test-$RUN_ID-net
VOLUME=redis-lock-test-$RUN_ID-data
NAME=redis-lock-test-$RUN_ID
REPLICA=redis-lock-test-$RUN_ID-replica
PROJECT=redis-lock-test-$RUN_ID
PASSWORD=test-$RUN_ID
# The Compose plugin where there is one, else Debian's docker-compose.
if docker compose version >/dev/null 2>&1; then
  COMPOSE_COMMAND=(docker compose)
else
  COMPOSE_COMMAND=(docker-compose)
fi
COMPOSE=${COMPOSE_COMMAND[*]}
declare -A README_VALUE=(
  [IMAGE]=$README_IMAGE [BUILD_OPTS]=$SERVER_BUILD_ARG [CLI]=$CLI [NET]=redis-lock-net
  [VOLUME]=redis-lock-data [NAME]=redis-lock [REPLICA]=redis-lock-replica
  [PROJECT]=redis-lock [PASSWORD]=change-me [COMPOSE]="docker compose"
)

WORK=$(mktemp -d)
STARTED=$SECONDS
# The test's standard error, for doc's trace and the clean-up's report,
# whatever the current command's output is redirected to.
exec 3>&2

# --- reporting ---------------------------------------------------------------
step() { printf '\n== [%3d s] %s\n' $((SECONDS - STARTED)) "$*"; }
fail() {
  echo "FAIL: $*" >&3
  exit 1
}
expect_eq() { # what actual expected
  [ "$2" = "$3" ] || fail "$1: expected '$3', got '$2'"
}
expect_gt() { # what actual bound
  if ! [[ $2 =~ ^[0-9]+$ ]] || (($2 <= $3)); then
    fail "$1: expected a number above $3, got '$2'"
  fi
}

# --- clean-up ----------------------------------------------------------------
# Resources are registered before they are created, so a half-made one goes too.
CONTAINERS=()
VOLUMES=()
NETWORKS=()
PROJECTS=()
cleanup() {
  local status=$? container project
  trap - EXIT INT TERM
  # A signal can arrive while a command's output goes to a file: report on
  # the test's own standard error.
  exec 1>&3 2>&3
  if ((status != 0)); then
    for container in "${CONTAINERS[@]}"; do
      echo "--- last log lines of $container" >&2
      timeout 20 docker logs --tail 25 "$container" >&2 2>&1 || true
    done
    for project in "${PROJECTS[@]}"; do
      echo "--- last log lines of compose project $project" >&2
      timeout 20 "${COMPOSE_COMMAND[@]}" -f docker/compose.yml -p "$project" logs --no-color --tail 25 >&2 2>&1 || true
    done
  fi
  for project in "${PROJECTS[@]}"; do
    timeout 60 "${COMPOSE_COMMAND[@]}" -f docker/compose.yml -p "$project" down -v -t 1 --remove-orphans >/dev/null 2>&1 || true
  done
  ((${#CONTAINERS[@]} == 0)) || timeout 60 docker rm -f -v "${CONTAINERS[@]}" >/dev/null 2>&1 || true
  ((${#VOLUMES[@]} == 0)) || timeout 60 docker volume rm "${VOLUMES[@]}" >/dev/null 2>&1 || true
  ((${#NETWORKS[@]} == 0)) || timeout 60 docker network rm "${NETWORKS[@]}" >/dev/null 2>&1 || true
  rm -rf "$WORK"
  if ((status == 0)); then
    echo "$(basename "$0"): passed in $((SECONDS - STARTED)) s"
  else
    echo "$(basename "$0"): FAILED after $((SECONDS - STARTED)) s (exit $status)" >&2
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- the README's commands ---------------------------------------------------
# doc TEMPLATE runs a command of the Docker guide: TEMPLATE uses $IMAGE,
# $NAME… and runs with this run's values; the same line with the guide's
# values must be in the page that documents it (check_readme PAGE:
# docker/README.md for the image, docs/sentinel.md for Sentinel).
DOC_LINES=()
render() { # TEMPLATE readme|run: the line with the README's or this run's values
  local line=$1 var value
  for var in "${!README_VALUE[@]}"; do
    if [ "$2" = readme ]; then value=${README_VALUE[$var]}; else value=${!var}; fi
    line=${line//"\$$var"/"$value"}
  done
  tr -s ' ' <<<"$line" | sed 's/ $//'
}
doc() {
  DOC_LINES+=("$(render "$1" readme)")
  echo "+ $(render "$1" run)" >&3
  eval "$1"
}
check_readme() { # PAGE
  local page=$1 line missing=0
  for line in "${DOC_LINES[@]}"; do
    grep -qxF -- "$line" "$page" || {
      echo "$page has no line: $line" >&2
      missing=1
    }
  done
  ((missing == 0)) || fail "the commands in $page are not the ones this test runs"
}

# --- Docker ------------------------------------------------------------------
build_image() {
  local previous
  previous=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
  doc 'docker build -f docker/Dockerfile --target prebuilt $BUILD_OPTS -t $IMAGE .' >"$WORK/build.log" 2>&1 || {
    tail -40 "$WORK/build.log" >&2
    fail "docker build failed"
  }
  # The image this tag had before, and the layers only it used, are dead weight.
  if [ -n "$previous" ] && [ "$previous" != "$(docker image inspect -f '{{.Id}}' "$IMAGE")" ]; then
    docker rmi "$previous" >/dev/null 2>&1 || true
  fi
  echo "image $IMAGE: $(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1 / 1e6}')"
}

wait_healthy() { # container [limit-seconds]
  local container=$1 limit=${2:-60} state
  local deadline=$((SECONDS + limit))
  while :; do
    state=$(docker inspect -f '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}' "$container")
    case $state in
      "running healthy") return 0 ;;
      running*) ;;
      *) fail "$container is $state" ;;
    esac
    ((SECONDS < deadline)) || fail "$container is not healthy after $limit s: $state"
    sleep 0.5
  done
}

# until LIMIT DESCRIPTION COMMAND…: runs COMMAND every half second until it
# succeeds, for at most LIMIT seconds.
until_ok() {
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1 3>&1; do
    ((SECONDS < deadline)) || fail "$what: not after $limit s"
    sleep 0.5
  done
}

# cli CONTAINER ARGS…: one redis-cli (valkey-cli) command inside the container
# (the client there logs in with the container's REDIS_PASSWORD). Replies are
# raw, one value a line, as the client prints them when its output is not a
# terminal.
cli() {
  local container=$1
  shift
  timeout 30 docker exec "$container" "$CLI" "$@" | tr -d '\r'
}

# info CONTAINER FIELD: one field of INFO.
info() {
  cli "$1" INFO all | sed -n "s/^$2://p"
}

# field NAME: the value after NAME in a raw name/value reply on stdin (LOCK.INFO).
field() {
  awk -v name="$1" 'found { print; exit } $0 == name { found = 1 }'
}

# module_args MODULE: the arguments of MODULE in a raw MODULE LIST reply on
# stdin, one a line.
module_args() {
  awk -v module="$1" '
    next_is_name { current = $0; next_is_name = 0; in_args = 0; next }
    $0 == "name" { next_is_name = 1; next }
    in_args && current == module && $0 != "" { print }
    $0 == "args" { in_args = 1 }'
}

# module_list_reply [MODULE…]: a redis-cli (valkey-cli) --no-raw reply to MODULE LIST on
# stdin (fewer than ten modules), its entries sorted by module name and
# numbered again; given MODULEs, only theirs. Redis lists modules in the order
# of a hash table, which changes from one start to the next, and Redis 8 lists
# its built-in vectorset beside ours.
module_list_reply() {
  awk -v keep="$*" '
    BEGIN { kept = split(keep, names, " "); for (i = 1; i <= kept; i++) wanted["\"" names[i] "\""] = 1 }
    function flush(   name) {
      if (entry == "") return
      name = entry; sub(/^[^\037]*\037 *2\) /, "", name); sub(/\037.*/, "", name)
      if (kept == 0 || name in wanted) print entry
    }
    /^[0-9]+\) / { flush(); sub(/^[0-9]+\) /, ""); entry = $0; next }
    { entry = entry "\037" $0 }
    END { flush() }' |
    LC_ALL=C sort | awk '{ gsub(/\037/, "\n"); print NR ") " $0 }'
}

# --- transcripts -------------------------------------------------------------
# check_transcript TRANSCRIPT OUTPUT: OUTPUT ($CLI --no-raw) against a
# transcript of "redis> command" lines, each followed by its reply. <uuid>,
# <fence> and <ms> stand for any such value; the values of <fence> and <ms> are
# appended to FENCES and MILLIS, in order.
FENCES=()
MILLIS=()
UUID_RE='[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}'
FENCE_RE='([0-9]{16})'
MS_RE='(-?[0-9]+)'
line_pattern() {
  local re
  re=$(sed -E 's/[][\\.*^$+?(){}|]/\\&/g' <<<"$1")
  re=${re//<uuid>/"$UUID_RE"}
  re=${re//<fence>/"$FENCE_RE"}
  re=${re//<ms>/"$MS_RE"}
  printf '^%s$' "$re"
}
check_transcript() {
  local transcript=$1 output=$2 i pattern
  local -a want got
  mapfile -t want < <(grep -v '^redis> ' "$transcript")
  mapfile -t got < <(tr -d '\r' <"$output")
  for i in "${!want[@]}"; do
    pattern=$(line_pattern "${want[$i]}")
    [[ ${got[$i]-} =~ $pattern ]] || fail "transcript line $((i + 1)): expected '${want[$i]}', got '${got[$i]-}'
$(cat "$output")"
    case ${want[$i]} in
      *'<fence>'*) FENCES+=("${BASH_REMATCH[1]}") ;;
      *'<ms>'*) MILLIS+=("${BASH_REMATCH[1]}") ;;
    esac
  done
  ((${#got[@]} == ${#want[@]})) || fail "$CLI printed ${#got[@]} lines, the transcript has ${#want[@]}:
$(cat "$output")"
}
