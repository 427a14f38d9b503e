#!/usr/bin/env bash
# Runs both billing examples (Rust: client/examples/billing.rs, Python:
# examples/python/billing.py) against a fresh redis-server with the module on
# a free loopback port, and stops the server at the end.
#   LOCK_MODULE       the module (default: target/debug/libredis_lock.so)
#   LOCK_TEST_SERVER  the server binary (default: redis-server)
#   EXAMPLES_PYTHON   a python with redis-py and the package clients/python (default: python3)
set -euo pipefail
cd "$(dirname "$0")/.."

module=${LOCK_MODULE:-$PWD/target/debug/libredis_lock.so}
server=${LOCK_TEST_SERVER:-redis-server}
python=${EXAMPLES_PYTHON:-python3}
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)

"$server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  --logfile server.log --loadmodule "$module" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT

for _ in $(seq 200); do
  [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
  sleep 0.05
done
[ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] || { echo "redis-server did not start"; cat "$dir/server.log"; exit 1; }

export REDIS_URL="redis://127.0.0.1:$port/"
echo "--- cargo run --example billing"
cargo run --locked --quiet -p redis-lock-client --example billing
echo "--- examples/python/billing.py"
"$python" examples/python/billing.py
