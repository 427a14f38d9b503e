#!/usr/bin/env bash
# The Docker image (Redis or Valkey), tested through redis-cli (valkey-cli)
# inside its containers: build, the health check, a session with the client,
# the configuration, a restart on the same volume with the AOF, and a replica
# on a user-defined network.
#
# Run by `make docker-test` (which builds the module and the base image first);
# see tests/docker/lib.sh for the environment. The commands given to `doc` are
# docker/README.md's, which check_readme holds to them.

# doc's templates are single-quoted on purpose: doc expands them.
# shellcheck disable=SC2016
# shellcheck source=tests/docker/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

replica_link_is_up() { [ "$(info "$REPLICA" master_link_status)" = up ]; }
replica_has_no_billing() { [ -z "$(cli "$REPLICA" LOCK.INFO billing)" ]; }

step "build the image ($IMAGE)"
[ -f target/release/libredis_lock.so ] || fail "build the module first: cargo build --release --locked"
build_image
expect_eq "image user" "$(docker image inspect -f '{{.Config.User}}' "$IMAGE")" "999:999"
expect_eq "image volumes" "$(docker image inspect -f '{{json .Config.Volumes}}' "$IMAGE")" '{"/data":{}}'
expect_eq "image health check" "$(docker image inspect -f '{{json .Config.Healthcheck.Test}}' "$IMAGE")" \
  '["CMD","redis-lock-healthcheck"]'

step "run a container on a network of its own, with a volume and a password, and wait for the health check"
NETWORKS+=("$NET")
doc 'docker network create $NET' >/dev/null
VOLUMES+=("$VOLUME")
doc 'docker volume create $VOLUME' >/dev/null
doc 'export REDIS_PASSWORD=$PASSWORD'
CONTAINERS+=("$NAME")
doc 'docker run -d --name $NAME --network $NET -v $VOLUME:/data -e REDIS_PASSWORD $IMAGE' >/dev/null
wait_healthy "$NAME"

step "the image's Debian suite and $SERVER_TITLE version: $SUITE, $SERVER_VERSION"
expect_eq "Debian suite" "$(docker exec "$NAME" sh -c '. /etc/os-release && echo "$VERSION_CODENAME"')" "$SUITE"
expect_eq "${SERVER}_version" "$(info "$NAME" "${SERVER}_version")" "$SERVER_VERSION"
expect_eq "$CLI's version" "$(docker exec "$NAME" "$CLI" --version)" "$CLI $SERVER_VERSION"

step "a $CLI session inside the container (docker/README.md transcript)"
sed -n 's/^redis> //p' tests/docker/transcript.txt >"$WORK/session"
doc 'docker exec -i $NAME $CLI --no-raw' <"$WORK/session" >"$WORK/session.out"
# The transcript is Redis 8.0's, and every reply of Valkey's is the same.
# MODULE LIST, its last command, is compared in module name order (the
# server's order changes from one start to the next), and holds this server's
# built-in modules only: vectorset on Redis 8, none on Redis 7 and Valkey 8.
tr -d '\r' <"$WORK/session.out" >"$WORK/session.txt"
replies_before=$(sed '/^redis> MODULE LIST$/,$d' tests/docker/transcript.txt | grep -vc '^redis> ')
{
  sed '/^redis> MODULE LIST$/q' tests/docker/transcript.txt
  sed '1,/^redis> MODULE LIST$/d' tests/docker/transcript.txt | module_list_reply lock "${BUILTIN_MODULES[@]}"
} >"$WORK/transcript"
{
  head -n "$replies_before" "$WORK/session.txt"
  tail -n +"$((replies_before + 1))" "$WORK/session.txt" | module_list_reply
} >"$WORK/session.sorted"
check_transcript "$WORK/transcript" "$WORK/session.sorted"
# FENCES: the anonymous grant, worker-1's grant, LOCK.INFO's fence.
# MILLIS: LOCK.INFO's ttl, deadline and grant time.
expect_gt "worker-1's fence over the first grant's" "${FENCES[1]}" "${FENCES[0]}"
expect_eq "LOCK.INFO's fence" "${FENCES[2]}" "${FENCES[1]}"
expect_gt "ttl after LOCK.EXTEND to 120000 ms" "${MILLIS[0]}" 30000
expect_gt "deadline (unix ms)" "${MILLIS[1]}" 1700000000000
expect_gt "deadline after the grant" "${MILLIS[1]}" "${MILLIS[2]}"
[[ $(<docker/README.md) == *"$(<tests/docker/transcript.txt)"* ]] ||
  fail "docker/README.md must contain tests/docker/transcript.txt verbatim"

step "INFO and the configuration"
expect_eq "$MODE_FIELD" "$(info "$NAME" "$MODE_FIELD")" standalone
expect_eq "config_file" "$(info "$NAME" config_file)" /etc/redis-lock/redis.conf
expect_eq "role" "$(info "$NAME" role)" master
expect_eq "aof_enabled" "$(info "$NAME" aof_enabled)" 1
expect_eq "maxmemory_policy" "$(info "$NAME" maxmemory_policy)" noeviction
expect_eq "INFO modules" "$(info "$NAME" module | cut -d, -f1 | sort | paste -sd ' ')" \
  "$(printf 'name=%s\n' lock "${BUILTIN_MODULES[@]}" | sort | paste -sd ' ')"
# The module's version, as the root Cargo.toml gives it (major·10000 +
# minor·100 + patch): 0.4.0 is 400.
IFS=. read -r v_major v_minor v_patch < <(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
expect_eq "INFO modules, ours" "$(info "$NAME" module | grep '^name=lock,' | cut -d, -f1-2)" \
  "name=lock,ver=$((v_major * 10000 + v_minor * 100 + v_patch))"
expect_eq "keys in db0" "$(info "$NAME" db0 | cut -d, -f1)" "keys=1"
expect_eq "bind" "$(cli "$NAME" CONFIG GET bind | sed -n 2p)" "0.0.0.0 -::*"
expect_eq "protected-mode" "$(cli "$NAME" CONFIG GET protected-mode | sed -n 2p)" yes
expect_eq "server's uid" "$(docker exec "$NAME" awk '/^Uid:/ { print $2 }' /proc/1/status)" 999
# From another address than loopback: the password is needed, and enough.
expect_eq "PING over the network with the password" "$(cli "$NAME" -h "$NAME" PING)" PONG
expect_eq "PING over the network without it" \
  "$(timeout 30 docker exec "$NAME" "/usr/bin/$CLI" -h "$NAME" PING | tr -d '\r')" \
  "NOAUTH Authentication required."

step "without a password, protected mode lets in only the container itself; module arguments"
OPEN=$NAME-open
CONTAINERS+=("$OPEN")
docker run -d --name "$OPEN" --network "$NET" -e REDIS_LOCK_MODULE_ARGS="max-ttl-ms 60000" "$IMAGE" >/dev/null
wait_healthy "$OPEN"
expect_eq "PING from another container" \
  "$(timeout 30 docker exec "$NAME" "/usr/bin/$CLI" -h "$OPEN" PING | tr -d '\r' | cut -c1-${#DENIED})" "$DENIED"
expect_eq "module arguments in MODULE LIST" "$(cli "$OPEN" MODULE LIST | module_args lock | paste -sd ' ')" "max-ttl-ms 60000"
expect_eq "lock.max-ttl-ms set by them" "$(cli "$OPEN" CONFIG GET lock.max-ttl-ms | sed -n 2p)" 60000
docker rm -f -v "$OPEN" >/dev/null

step "restart on the same volume: the lock, its lease and its fence come back from the AOF"
doc 'docker exec $NAME $CLI LOCK.ACQUIRE nightly 120000 TOKEN worker-1' >"$WORK/acquire"
expect_eq "nightly's holder" "$(sed -n 1p "$WORK/acquire")" worker-1
fence=$(sed -n 2p "$WORK/acquire")
expect_gt "nightly's fence over the session's" "$fence" "${FENCES[1]}"
deadline=$(cli "$NAME" LOCK.INFO nightly | field deadline)
doc 'docker stop $NAME' >/dev/null
doc 'docker rm $NAME' >/dev/null
doc 'docker run -d --name $NAME --network $NET -v $VOLUME:/data -e REDIS_PASSWORD $IMAGE' >/dev/null
wait_healthy "$NAME"
# Not `docker logs | grep -q`: under pipefail, grep quitting at the first match
# can fail the pipeline with SIGPIPE.
grep -q "DB loaded from incr file appendonly.aof" <<<"$(docker logs "$NAME" 2>&1)" ||
  fail "the new container did not load the AOF: $(docker logs "$NAME" 2>&1 | tail -5)"
doc 'docker exec $NAME $CLI LOCK.INFO nightly' >"$WORK/info"
expect_eq "nightly's fence after the restart" "$(field fence <"$WORK/info")" "$fence"
expect_eq "nightly's deadline after the restart" "$(field deadline <"$WORK/info")" "$deadline"
ttl=$(field ttl <"$WORK/info")
expect_gt "nightly's ttl after the restart" "$ttl" 0
expect_gt "nightly's ttl left of 120000 ms" 120000 "$ttl"
expect_gt "nightly's PTTL" "$(cli "$NAME" PTTL nightly)" 0
expect_eq "release by the same token" "$(cli "$NAME" LOCK.RELEASE nightly worker-1)" 1
expect_gt "the next fence after the restart" "$(cli "$NAME" LOCK.ACQUIRE nightly 1000 | sed -n 2p)" "$fence"

step "a replica on the same network has the same lock"
CONTAINERS+=("$REPLICA")
doc 'docker run -d --name $REPLICA --network $NET -e REDIS_PASSWORD $IMAGE --replicaof $NAME 6379' >/dev/null
wait_healthy "$REPLICA"
until_ok 30 "the replica's link to its master" replica_link_is_up
doc 'docker exec $NAME $CLI LOCK.ACQUIRE billing 60000 TOKEN worker-1' >"$WORK/acquire"
expect_eq "billing's holder" "$(sed -n 1p "$WORK/acquire")" worker-1
fence=$(sed -n 2p "$WORK/acquire")
doc 'docker exec $NAME $CLI WAIT 1 5000' >"$WORK/wait"
expect_eq "replicas that acknowledged the grant" "$(tr -d '\r' <"$WORK/wait")" 1
doc 'docker exec $REPLICA $CLI LOCK.INFO billing' >"$WORK/info"
expect_eq "billing's fence on the replica" "$(field fence <"$WORK/info")" "$fence"
expect_eq "billing's deadline on the replica" "$(field deadline <"$WORK/info")" \
  "$(cli "$NAME" LOCK.INFO billing | field deadline)"
expect_gt "billing's ttl on the replica" "$(field ttl <"$WORK/info")" 0
expect_eq "role of the replica" "$(info "$REPLICA" role)" slave
expect_eq "ACQUIRE on the replica" "$(cli "$REPLICA" LOCK.ACQUIRE billing 60000 TOKEN worker-2)" \
  "READONLY You can't write against a read only replica."
expect_eq "release on the master" "$(cli "$NAME" LOCK.RELEASE billing worker-1)" 1
until_ok 10 "the release reaching the replica" replica_has_no_billing

step "clean up as docker/README.md does"
doc 'docker rm -f -v $REPLICA $NAME' >/dev/null
doc 'docker volume rm $VOLUME' >/dev/null
doc 'docker network rm $NET' >/dev/null

check_readme docker/README.md
