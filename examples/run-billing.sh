#!/usr/bin/env bash
# Runs the billing examples (Rust: clients/rust/examples/billing.rs, Python:
# examples/python/billing.py, Go: examples/go/billing.go, Node:
# examples/node/billing.js) against a fresh redis-server with the module on
# a free loopback port, and stops the server at the end. After each, it
# checks on the server that the day's totals are right and that the stale
# holder's guarded write was refused; after Go and Node, that their waiting
# auditor was handed the lock on release, each night.
#   examples/run-billing.sh [rust] [python] [go] [node]    (default: all four)
#   LOCK_MODULE       the module (default: target/debug/libredis_lock.so)
#   LOCK_TEST_SERVER  the server binary (default: redis-server)
#   EXAMPLES_PYTHON   a python with redis-py and the package installed from its wheel
#                     (make dist-python; pip install target/dist/*.whl) (default: python3)
#   EXAMPLES_RUST     a built Rust billing example to run (make dist-rust builds it
#                     from the package; default: cargo run it here)
# Go and Node use the packages clients/go and clients/node over Debian's
# client libraries, offline: golang-go with golang-github-gomodule-redigo-dev
# and golang-github-mna-redisc-dev (linked into examples/go/vendor/ by
# clients/go/vendor.sh), nodejs with node-redis (/usr/share/nodejs) and
# clients/node linked as target/node_modules/redis-lock-client.
set -euo pipefail
cd "$(dirname "$0")/.."

examples=("$@")
[ ${#examples[@]} -gt 0 ] || examples=(rust python go node)
for example in "${examples[@]}"; do
  case $example in
    rust | python | go | node) ;;
    *) echo "unknown example '$example' (rust, python, go, node)"; exit 2 ;;
  esac
done

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
counter() { redis-cli -p "$port" info lock | tr -d '\r' | sed -n "s/^lock_$1://p"; }
check() {
  local example=$1 output_file=$2 guards_before=$3 lost_before=$4 night total
  for night in 2026-11-28 2026-11-29; do
    total=$(redis-cli -p "$port" get "{billing}:total:$night")
    [ "$total" = 6000 ] || { echo "$example: total of $night is '$total', not 6000"; exit 1; }
  done
  grep -q '^stale guarded write to {billing}:total:2026-11-29: refused, LOST' "$output_file" ||
    { echo "$example: no refused stale guarded write in its output"; exit 1; }
  [ "$(counter guards)" = $((guards_before + 6)) ] ||
    { echo "$example: $(( $(counter guards) - guards_before )) guarded commands ran, not 6"; exit 1; }
  [ "$(counter guards_lost)" = $((lost_before + 1)) ] ||
    { echo "$example: $(( $(counter guards_lost) - lost_before )) guarded commands got LOST, not 1"; exit 1; }
  echo "$example: totals 6000 and 6000, 6 guarded writes, the stale one refused (LOST)"
}
# Go and Node: each night the auditor's WAIT was handed the lock by the job's
# release (the server counts 2 hand-offs on release) and it says so.
check_handoffs() {
  local example=$1 output_file=$2 handoffs_before=$3 said
  [ "$(counter handoffs_on_release)" = $((handoffs_before + 2)) ] ||
    { echo "$example: $(( $(counter handoffs_on_release) - handoffs_before )) hand-offs on release, not 2"; exit 1; }
  said=$(grep -c '^\[2026-11-2[89]\] auditor: handed the lock on release' "$output_file" || true)
  [ "$said" = 2 ] || { echo "$example: $said auditor hand-offs in its output, not 2"; exit 1; }
  echo "$example: the waiting auditor was handed the lock on release, both nights"
}

export REDIS_URL="redis://127.0.0.1:$port/"
for example in "${examples[@]}"; do
  case $example in
    go) bash clients/go/vendor.sh examples/go >/dev/null ;;
    node) mkdir -p target/node_modules && ln -sfn ../../clients/node target/node_modules/redis-lock-client ;;
  esac
done
for example in "${examples[@]}"; do
  case $example in
    rust) if [ -n "${EXAMPLES_RUST:-}" ]; then command=("$EXAMPLES_RUST")
          else command=(cargo run --locked --quiet -p redis-lock-client --example billing); fi ;;
    python) command=("$python" examples/python/billing.py) ;;
    go) command=(env -C examples/go GOFLAGS=-mod=vendor GOPROXY=off go run .) ;;
    node) command=(env NODE_PATH="$PWD/target/node_modules:/usr/share/nodejs" node examples/node/billing.js) ;;
  esac
  echo "--- ${command[*]}"
  guards=$(counter guards) lost=$(counter guards_lost) handoffs=$(counter handoffs_on_release)
  "${command[@]}" | tee "$dir/$example.out"
  check "$example billing" "$dir/$example.out" "$guards" "$lost"
  case $example in
    go | node) check_handoffs "$example billing" "$dir/$example.out" "$handoffs" ;;
  esac
done
