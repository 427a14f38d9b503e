#!/usr/bin/env bash
# Where the server's instructions go, per request, for LOCK.ACQUIRE against
# SET NX PX (LOCK.RELEASE and LOCK.EXTEND against the Lua compare-and-delete
# and compare-and-pexpire, LOCK.GUARD … SET against the Lua compare-and-set
# and a plain SET, SEM.ACQUIRE/SEM.RELEASE and LOCK.ACQUIRE … SHARED/RELEASE
# against the Lua semaphore and read lock of bench/src/scripts.rs): each
# workload runs on its own redis-server under callgrind, then the inclusive
# instruction counts of the interesting functions are divided by the number
# of requests. Instruction counts do not depend on the machine's noise, so
# this is the tool for checking a hot-path change. `make bench-profile`.
#
#   bench/profile.sh [requests]     (default 50000; needs valgrind)
#
# Environment: LOCK_MODULE (another build of the module), PROFILE_OUT (where the
# results go), PROFILE_SERVER_ARGS (more server arguments, e.g. "--appendonly
# yes"), WORKLOADS (a space-separated subset of the workloads below).
set -euo pipefail
cd "$(dirname "$0")/.."

requests=${1:-50000}
# Keys drawn from this many (instruction counts hardly depend on it; cache
# misses, which they do not show, do).
keyspace=100000
module=${LOCK_MODULE:-$PWD/target/release/libredis_lock.so}
out=${PROFILE_OUT:-target/bench-profile}
token=0b8e4f53-3c43-4a0e-9f53-1e7d51f4a9c6
acquire_lua="if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {ARGV[1], redis.call('INCR', KEYS[2])} end return false"
release_lua="if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end"
extend_lua="if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end"
guard_lua="if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('SET', KEYS[2], ARGV[2]) else return redis.error_reply('LOST') end"
# The semaphore and read-lock recipes, as in bench/src/scripts.rs (checked
# by its test `profile_sh_sends_the_same_scripts`).
sem_acquire_lua="local now = redis.call('TIME') now = now[1] * 1000 + math.floor(now[2] / 1000) redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1]) return ARGV[1] end return false"
sem_release_lua="return redis.call('ZREM', KEYS[1], ARGV[1])"
read_acquire_lua="local mode = redis.call('HGET', KEYS[1], 'mode') if mode == false then redis.call('HSET', KEYS[1], 'mode', 'read') elseif mode ~= 'read' then return false end local holds = redis.call('HINCRBY', KEYS[1], ARGV[1], 1) redis.call('PEXPIRE', KEYS[1], ARGV[2]) return holds"
read_release_lua="if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end if redis.call('HLEN', KEYS[1]) == 1 then redis.call('DEL', KEYS[1]) end return 1"
# A token of its own per acquire (twelve random digits), as lock-bench's
# SEM and SHARED acquire rows; and their semaphores' limit.
fresh_token=0b8e4f53-3c43-4a0e-9f53-__rand_int__
limit=10
# What the guarded (and the plain) SET writes, over dk: keys set beforehand.
value=v
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install -y valgrind"; exit 1; }
rm -rf "$out" && mkdir -p "$out"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# profile NAME PREP COMMAND...: one server under callgrind, PREP (a shell
# snippet given $port) run first, then redis-benchmark with COMMAND.
profile() {
  local name=$1 prep=$2; shift 2
  [[ " ${workloads[*]} " == *" $name "* ]] || return 0
  local port; port=$(free_port)
  # Instrumentation starts after the preparation (callgrind_control -i on).
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out/$name.cg" \
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$out" --logfile "$name.log" --loadmodule "$module" ${PROFILE_SERVER_ARGS:-} \
    >"$out/$name.valgrind.log" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
  eval "$prep"
  callgrind_control -i on "$pid" >/dev/null
  redis-benchmark -p "$port" -c 50 -P 16 -r "$keyspace" -n "$requests" --csv "$@" | tail -1 >"$out/$name.csv"
  # A LOST (or any error) reply did not do the work being measured.
  redis-cli -p "$port" info stats | tr -d '\r' | sed -n 's/^total_error_replies://p' >"$out/$name.errors"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

# fill PORT PREFIX ARG...: send the command ARG... once for every key
# PREFIX<n> of the range (the names redis-benchmark draws), the key in place
# of the argument KEY, through redis-cli --pipe.
fill() {
  local port=$1 prefix=$2; shift 2
  python3 - "$prefix" "$keyspace" "$@" <<'EOF' | redis-cli -p "$port" --pipe >/dev/null
import sys
prefix, keyspace = sys.argv[1].encode(), int(sys.argv[2])
args = [a.encode() for a in sys.argv[3:]]
out = sys.stdout.buffer
for i in range(keyspace):
    key = b"%s%012d" % (prefix, i)
    parts = [key if a == b"KEY" else a for a in args]
    out.write(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
EOF
}
# Every lk: key held with $token; every sk: key set to $token, as the recipe
# leaves it; every dk: key set to $value, so that each write overwrites.
hold_locks() { fill "$1" lk: LOCK.ACQUIRE KEY 600000 TOKEN "$token"; }
hold_strings() { fill "$1" sk: SET KEY "$token" PX 600000; }
fill_data() { fill "$1" dk: SET KEY "$value"; }
# Two holders per key, $token and $other, as lock-bench's SEM and SHARED
# release rows: semaphores, the recipe's permit sets, read locks and the
# recipe's read hashes (their lease set by the script).
other=5d1c7e8a-9b2f-4c3d-8e4f-a0b1c2d3e4f5
hold_permits() {
  fill "$1" sm: SEM.ACQUIRE KEY "$limit" 600000 TOKEN "$token"
  fill "$1" sm: SEM.ACQUIRE KEY "$limit" 600000 TOKEN "$other"
}
hold_permit_sets() { fill "$1" zs: ZADD KEY 9999999999999 "$token" 9999999999999 "$other"; }
hold_readers() {
  fill "$1" rk: LOCK.ACQUIRE KEY 600000 TOKEN "$token" SHARED
  fill "$1" rk: LOCK.ACQUIRE KEY 600000 TOKEN "$other" SHARED
}
hold_read_hashes() {
  redis-cli -p "$1" script load "$read_acquire_lua" >/dev/null
  fill "$1" hk: EVALSHA "$(sha1 "$read_acquire_lua")" 1 KEY "$token" 600000
  fill "$1" hk: EVALSHA "$(sha1 "$read_acquire_lua")" 1 KEY "$other" 600000
}

sha1() { printf %s "$1" | sha1sum | cut -d' ' -f1; }

all_workloads=(acquire acquire-token set-nx lua-acquire release lua-release extend lua-extend
  guard lua-guard set sem-acquire lua-sem-acquire sem-release lua-sem-release
  shared-acquire lua-read-acquire shared-release lua-read-release)
read -ra workloads <<<"${WORKLOADS:-${all_workloads[*]}}"
echo "profiling $requests requests per workload under callgrind (a few minutes)"
profile acquire ':' LOCK.ACQUIRE 'lk:__rand_int__' 30000
profile acquire-token ':' LOCK.ACQUIRE 'lk:__rand_int__' 30000 TOKEN "$token"
profile set-nx ':' SET 'sk:__rand_int__' "$token" NX PX 30000
profile lua-acquire 'redis-cli -p $port script load "$acquire_lua" >/dev/null' \
  EVALSHA "$(sha1 "$acquire_lua")" 2 'sk:__rand_int__' lock:fence "$token" 30000
profile release 'hold_locks $port' LOCK.RELEASE 'lk:__rand_int__' "$token"
profile lua-release 'hold_strings $port; redis-cli -p $port script load "$release_lua" >/dev/null' \
  EVALSHA "$(sha1 "$release_lua")" 1 'sk:__rand_int__' "$token"
profile extend 'hold_locks $port' LOCK.EXTEND 'lk:__rand_int__' "$token" 600000
profile lua-extend 'hold_strings $port; redis-cli -p $port script load "$extend_lua" >/dev/null' \
  EVALSHA "$(sha1 "$extend_lua")" 1 'sk:__rand_int__' "$token" 600000
# The guarded write: each request's lock and data key are drawn independently
# from the range (every lock held), as in lock-bench's GUARD rows.
profile guard 'hold_locks $port; fill_data $port' \
  LOCK.GUARD 'lk:__rand_int__' "$token" SET 'dk:__rand_int__' "$value"
profile lua-guard 'hold_strings $port; fill_data $port; redis-cli -p $port script load "$guard_lua" >/dev/null' \
  EVALSHA "$(sha1 "$guard_lua")" 2 'sk:__rand_int__' 'dk:__rand_int__' "$token" "$value"
profile set 'fill_data $port' SET 'dk:__rand_int__' "$value"
profile sem-acquire ':' SEM.ACQUIRE 'sm:__rand_int__' "$limit" 30000 TOKEN "$fresh_token"
profile lua-sem-acquire 'redis-cli -p $port script load "$sem_acquire_lua" >/dev/null' \
  EVALSHA "$(sha1 "$sem_acquire_lua")" 1 'zs:__rand_int__' "$fresh_token" "$limit" 30000
profile sem-release 'hold_permits $port' SEM.RELEASE 'sm:__rand_int__' "$token"
profile lua-sem-release 'hold_permit_sets $port; redis-cli -p $port script load "$sem_release_lua" >/dev/null' \
  EVALSHA "$(sha1 "$sem_release_lua")" 1 'zs:__rand_int__' "$token"
profile shared-acquire ':' LOCK.ACQUIRE 'rk:__rand_int__' 30000 TOKEN "$fresh_token" SHARED
profile lua-read-acquire 'redis-cli -p $port script load "$read_acquire_lua" >/dev/null' \
  EVALSHA "$(sha1 "$read_acquire_lua")" 1 'hk:__rand_int__' "$fresh_token" 30000
profile shared-release 'hold_readers $port' LOCK.RELEASE 'rk:__rand_int__' "$token"
profile lua-read-release 'hold_read_hashes $port; redis-cli -p $port script load "$read_release_lua" >/dev/null' \
  EVALSHA "$(sha1 "$read_release_lua")" 1 'hk:__rand_int__' "$token"

# Inclusive instructions per request of FUNCTION in a callgrind file.
per_request() { # $1 file, $2 function
  callgrind_annotate --inclusive=yes "$1" 2>/dev/null |
    awk -v f="$2" -v n="$requests" '
      { name = $NF; sub(/^.*:/, "", name) }
      $0 ~ ("[:]" f " ") || $0 ~ ("[:]" f "$") { gsub(",", "", $1); printf "%.0f", $1 / n; found = 1; exit }
      END { if (!found) printf "-" }'
}

functions=(readQueryFromClient call RedisModuleCommandDispatcher setCommand evalShaCommand
  RM_Replicate lookupCommandByCString moduleCreateArgvFromUserFormat RM_ModuleTypeSetValue
  RM_SetAbsExpire RM_OpenKey RM_ReplyWithArray RM_ReplyWithStringBuffer RM_ReplyWithLongLong
  RM_DeleteKey setKey setExpire dbDelete pexpireCommand
  RM_Call RM_ReplyWithCallReply luaCallFunction setGenericCommand
  zaddGenericCommand zremCommand hincrbyCommand
  redis_module::redismodule::decode_args)
{
  printf "Instructions per request (callgrind; %s requests, pipeline 16, 50 clients, keys over %s)\n\n" "$requests" "$keyspace"
  printf "%-40s" function
  for w in "${workloads[@]}"; do printf "%18s" "$w"; done
  printf "\n"
  for f in "${functions[@]}"; do
    printf "%-40s" "$f"
    for w in "${workloads[@]}"; do
      printf "%18s" "$(per_request "$out/$w.cg" "$f")"
    done
    printf "\n"
  done
  printf "%-40s" "error replies (of all requests)"
  for w in "${workloads[@]}"; do printf "%18s" "$(cat "$out/$w.errors")"; done
  printf "\n"
} | tee "$out/summary.txt"
echo "callgrind files in $out/ (callgrind_annotate --inclusive=yes --tree=calling FILE)"
