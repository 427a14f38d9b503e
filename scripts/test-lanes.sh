#!/usr/bin/env bash
# `make test`: run the parts of the test suite, first some in order (those
# that build: cargo takes one lock per target directory, so builds never
# overlap), then the rest in lanes side by side (each lane's parts in
# order), since most of them wait on servers rather than compute. Each part
# writes its output to <logs>/<part>.log; this prints a line as each part
# starts and ends, the end of the log of any part that failed, each part's
# time (also in target/test-times.txt), and a closing count of the tests run.
#
#   scripts/test-lanes.sh LOGDIR "first parts" "last parts" "lane 1 parts" "lane 2 parts" ...
#
# A failed part fails `make test`, after every lane has finished (so that a
# failure in one lane shows what the others found too). MAKE names the make
# to run each part with (`make --no-print-directory <part>`).
set -uo pipefail

logs=$1
first=$2
last=$3
shift 3
make=${MAKE:-make}
times=target/test-times.txt
mkdir -p "$logs" target
rm -f "$logs"/*.log "$logs"/*.status "$times"
started=$(date +%s)

# run_part PART: run it, its output to its log; record its time and status.
run_part() {
  local part=$1 part_started rc
  part_started=$(date +%s)
  echo "[$(date +%T)] $part: started (log $logs/$part.log)"
  "$make" --no-print-directory "$part" >"$logs/$part.log" 2>&1
  rc=$?
  local took=$(($(date +%s) - part_started))
  echo "$part: $took s" >>"$times"
  echo "$rc $took" >"$logs/$part.status"
  if [ "$rc" = 0 ]; then
    echo "[$(date +%T)] $part: passed in $took s"
  else
    echo "[$(date +%T)] $part: FAILED in $took s (exit $rc); the end of its log:"
    tail -n 60 "$logs/$part.log" | sed "s/^/  $part| /"
  fi
  return "$rc"
}

# The parts that build, in order; the first failure stops here.
for part in $first; do
  run_part "$part" || { echo "make test: $part failed"; exit 1; }
done

# The lanes, side by side; a lane stops at its first failure.
pids=()
for lane in "$@"; do
  (
    for part in $lane; do
      run_part "$part" || exit 1
    done
  ) &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done

# The last parts, alone, in order (after a failed lane too).
for part in $last; do
  run_part "$part" || failed=1
done

echo "total: $(($(date +%s) - started)) s" >>"$times"
echo "== time per part (lanes ran side by side):"
cat "$times"

# The tests each runner reported, over every part's log: cargo's `test
# result` lines, pytest's summary, node's (go test prints no count).
count() {
  local what=$1
  cat "$logs"/*.log 2>/dev/null | grep -aoE "$what" | grep -oE '[0-9]+' | awk '{n += $1} END {print n + 0}'
}
passed=$(($(count 'test result: [a-zA-Z]+\. [0-9]+ passed') + $(count '^[=]* ?[0-9]+ passed') + $(count '^ℹ pass [0-9]+')))
failures=$(cat "$logs"/*.log 2>/dev/null | grep -aoE 'test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed' |
  grep -oE '[0-9]+ failed' | awk '{n += $1} END {print n + 0}')
failures=$((failures + $(count '^[=]* ?[0-9]+ failed') + $(count '^ℹ fail [0-9]+')))
for status in "$logs"/*.status; do
  read -r rc _ <"$status"
  [ "$rc" = 0 ] || failed=1
done
if [ "$failed" != 0 ]; then
  echo "make test: FAILED: $(grep -lv '^0 ' "$logs"/*.status | xargs -n1 basename | sed 's/\.status$//' | tr '\n' ' ')"
  [ "$failures" -gt 0 ] || failures=1
  echo "tests: $passed passed, $failures failed"
  exit 1
fi
echo "== make test passed"
echo "tests: $passed passed, 0 failed"
