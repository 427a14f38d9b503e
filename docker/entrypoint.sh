#!/bin/bash
# The redis-lock image's entrypoint, in the Redis image and in the Valkey one
# (REDIS_LOCK_SERVER, set by the image: redis or valkey).
#
#   docker run redis-lock [redis-server options…]   redis-server with the module
#   docker run redis-lock sentinel [options…]       a Sentinel (REDIS_SENTINEL_MONITOR)
#   docker run redis-lock <command> [args…]         runs the command (redis-cli, bash…)
#
# The Valkey image runs valkey-server instead, with the same options.
#
# Environment:
#   REDIS_PASSWORD          requirepass and masterauth of the server; for a
#                           Sentinel, its requirepass and the password it uses
#                           for the master, the replicas and the other Sentinels
#   REDIS_LOCK_MODULE_ARGS  arguments for the module, after --loadmodule's path
#   REDIS_SENTINEL_MONITOR  "<master-name> <host> <port> <quorum>"
#   REDIS_SENTINEL_DOWN_AFTER_MS, REDIS_SENTINEL_FAILOVER_TIMEOUT_MS
set -euo pipefail

readonly SERVER=${REDIS_LOCK_SERVER:-redis}-server
readonly MODULE=/usr/lib/redis/modules/libredis_lock.so
readonly CONFIG=/etc/redis-lock/redis.conf
readonly SENTINEL_CONFIG=/data/sentinel.conf

log() { echo "redis-lock-entrypoint: $*" >&2; }

# A value for a Redis (or Valkey) config file, each byte hex-escaped inside
# double quotes, so that no password can break the line.
config_quote() {
  printf '"'
  printf '%s' "$1" | od -An -v -tx1 | tr -d ' \n' | sed 's/../\\x&/g'
  printf '"'
}

start_server() {
  if [ ! -f "$MODULE" ]; then
    log "$MODULE is missing: build the module (cargo build --release --locked) before docker build --target prebuilt"
    exit 1
  fi
  local module_args=()
  if [ -n "${REDIS_LOCK_MODULE_ARGS:-}" ]; then
    read -ra module_args <<<"$REDIS_LOCK_MODULE_ARGS"
  fi
  local auth=()
  if [ -n "${REDIS_PASSWORD:-}" ]; then
    auth=(--requirepass "$REDIS_PASSWORD" --masterauth "$REDIS_PASSWORD")
  elif ! grep -q -- '--protected-mode' <<<"$*"; then
    log "no REDIS_PASSWORD: protected mode lets in only clients inside this container (docker exec)." \
      "Set REDIS_PASSWORD, or pass --protected-mode no on a network you trust."
  fi
  local command=("$SERVER" "$CONFIG" --loadmodule "$MODULE" "${module_args[@]}" "${auth[@]}" "$@")
  log "${command[*]//"${REDIS_PASSWORD:-}"/***}"
  # The server replaces its command line with its title ("redis-server
  # 0.0.0.0:6379"), so the password does not show in ps either.
  exec "${command[@]}"
}

# Sentinel rewrites its configuration file as it learns and fails over, so it is
# written once, into the volume, and kept across restarts.
start_sentinel() {
  if [ ! -f "$SENTINEL_CONFIG" ]; then
    local monitor
    read -ra monitor <<<"${REDIS_SENTINEL_MONITOR:-}"
    if [ "${#monitor[@]}" -ne 4 ]; then
      log "sentinel: set REDIS_SENTINEL_MONITOR to \"<master-name> <host> <port> <quorum>\""
      exit 1
    fi
    local name=${monitor[0]}
    {
      echo "# Written by redis-lock-entrypoint on first start; Sentinel keeps it up to date."
      echo "port 26379"
      echo "bind 0.0.0.0 -::*"
      echo "protected-mode yes"
      echo "unixsocket /run/redis-lock/redis.sock"
      echo "unixsocketperm 700"
      echo "dir /data"
      echo 'logfile ""'
      echo "sentinel resolve-hostnames yes"
      echo "sentinel monitor ${monitor[*]}"
      echo "sentinel down-after-milliseconds $name ${REDIS_SENTINEL_DOWN_AFTER_MS:-5000}"
      echo "sentinel failover-timeout $name ${REDIS_SENTINEL_FAILOVER_TIMEOUT_MS:-60000}"
      echo "sentinel parallel-syncs $name 1"
      if [ -n "${REDIS_PASSWORD:-}" ]; then
        echo "requirepass $(config_quote "$REDIS_PASSWORD")"
        echo "sentinel auth-pass $name $(config_quote "$REDIS_PASSWORD")"
        echo "sentinel sentinel-pass $(config_quote "$REDIS_PASSWORD")"
      fi
    } >"$SENTINEL_CONFIG"
    chmod 600 "$SENTINEL_CONFIG"
  fi
  # No module loads in Sentinel mode: a Sentinel only watches.
  log "$SERVER $SENTINEL_CONFIG --sentinel $*"
  exec "$SERVER" "$SENTINEL_CONFIG" --sentinel "$@"
}

case "${1:-}" in
  "" | -*) start_server "$@" ;;
  sentinel) shift; start_sentinel "$@" ;;
  *) exec "$@" ;;
esac
