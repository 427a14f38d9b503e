#!/usr/bin/env bash
# Runs both billing examples (Rust: client/examples/billing.rs, Python:
# examples/python/billing.py) against a fresh redis-server with the module on
# a free loopback port, and stops the server at the end. After each, it
# checks on the server that the day's totals are right and that the stale
# holder's guarded write was refused.
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

# What the server saw, checked after each example without trusting its own
# asserts: each night's total is the sum of its invoices (6000 cents), and
# the stale holder's guarded write was refused. LOCK.GUARD ran 6 times (3
# invoices, 2 nights) and answered LOST once, counted by the module's INFO.
guard_count() { redis-cli -p "$port" info lock | tr -d '\r' | sed -n "s/^lock_$1://p"; }
check() {
  local example=$1 output_file=$2 guards_before=$3 lost_before=$4 night total
  for night in 2026-11-28 2026-11-29; do
    total=$(redis-cli -p "$port" get "{billing}:total:$night")
    [ "$total" = 6000 ] || { echo "$example: total of $night is '$total', not 6000"; exit 1; }
  done
  grep -q '^stale guarded write to {billing}:total:2026-11-29: refused, LOST' "$output_file" ||
    { echo "$example: no refused stale guarded write in its output"; exit 1; }
  [ "$(guard_count guards)" = $((guards_before + 6)) ] ||
    { echo "$example: $(( $(guard_count guards) - guards_before )) guarded commands ran, not 6"; exit 1; }
  [ "$(guard_count guards_lost)" = $((lost_before + 1)) ] ||
    { echo "$example: $(( $(guard_count guards_lost) - lost_before )) guarded commands got LOST, not 1"; exit 1; }
  echo "$example: totals 6000 and 6000, 6 guarded writes, the stale one refused (LOST)"
}

export REDIS_URL="redis://127.0.0.1:$port/"
echo "--- cargo run --example billing"
guards=$(guard_count guards) lost=$(guard_count guards_lost)
cargo run --locked --quiet -p redis-lock-client --example billing | tee "$dir/rust.out"
check "rust billing" "$dir/rust.out" "$guards" "$lost"
echo "--- examples/python/billing.py"
guards=$(guard_count guards) lost=$(guard_count guards_lost)
"$python" examples/python/billing.py | tee "$dir/python.out"
check "python billing" "$dir/python.out" "$guards" "$lost"
