#!/usr/bin/env bash
# Sentinel failover with docker/compose.yml: a master, a replica and three
# Sentinels. A client finds the master through a Sentinel and takes locks; the
# master container is killed; once Sentinel has promoted the replica, the same
# token releases the lock there, and the next fence is larger than every fence
# granted before the failover.
#
# Run by `make docker-test` after tests/docker/image.sh (it builds the image,
# from the Docker build cache); see tests/docker/lib.sh for the environment.

# doc's templates are single-quoted on purpose: doc expands them.
# shellcheck disable=SC2016
# shellcheck source=tests/docker/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Container ids by service, once the services are up.
declare -A container
ip_of() { docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1"; }
# What a Sentinel says about mymaster: a field of SENTINEL MASTER.
sentinel_master_field() { cli "${container[$1]}" -p 26379 SENTINEL MASTER mymaster | field "$2"; }
sentinels_see_everyone() {
  local n
  for n in 1 2 3; do
    [ "$(sentinel_master_field "sentinel-$n" num-other-sentinels)" = 2 ] || return 1
    [ "$(sentinel_master_field "sentinel-$n" num-slaves)" = 1 ] || return 1
  done
}
# The client's view: sets master_ip and master_port from what sentinel-1 says.
ask_sentinel() {
  doc '$COMPOSE -f docker/compose.yml -p $PROJECT exec -T sentinel-1 $CLI -p 26379 SENTINEL get-master-addr-by-name mymaster' >"$WORK/master"
  read -r master_ip master_port < <(tr -d '\r' <"$WORK/master" | paste -sd ' ')
}
replica_is_master() {
  ask_sentinel && [ "$master_ip $master_port" = "$replica_ip 6379" ] &&
    [ "$(cli "$client" -h "$replica_ip" ROLE | head -1)" = master ]
}
# A client in sentinel-1's container, talking to the master over the network.
on_master() { cli "$client" -h "$master_ip" -p "$master_port" "$@"; }

step "build the image ($IMAGE)"
build_image

step "bring up a master, a replica and three Sentinels"
doc 'export REDIS_LOCK_IMAGE=$IMAGE'
doc 'export REDIS_PASSWORD=$PASSWORD'
PROJECTS+=("$PROJECT")
doc '$COMPOSE -f docker/compose.yml -p $PROJECT up -d' >"$WORK/up.log" 2>&1 ||
  fail "compose up: $(tail -20 "$WORK/up.log")"
for service in master replica sentinel-1 sentinel-2 sentinel-3; do
  container[$service]=$(timeout 60 "${COMPOSE_COMMAND[@]}" -f docker/compose.yml -p "$PROJECT" ps -q "$service")
  wait_healthy "${container[$service]}"
done
until_ok 60 "each Sentinel knowing the two others and the replica" sentinels_see_everyone
client=${container[sentinel-1]}
replica_ip=$(ip_of "${container[replica]}")
expect_eq "the servers' ${SERVER}_version" "$(info "${container[master]}" "${SERVER}_version")" "$SERVER_VERSION"
cli "$client" -p 26379 INFO server >"$WORK/sentinel-info"
expect_eq "sentinel-1's $MODE_FIELD" "$(sed -n "s/^$MODE_FIELD://p" "$WORK/sentinel-info")" sentinel
expect_eq "sentinel-1's ${SERVER}_version" "$(sed -n "s/^${SERVER}_version://p" "$WORK/sentinel-info")" "$SERVER_VERSION"

step "find the master through Sentinel and take locks"
ask_sentinel
expect_eq "the master Sentinel names" "$master_ip" "$(ip_of "${container[master]}")"
expect_eq "the master's role" "$(on_master ROLE | head -1)" master
fences=()
for key in reports-1 reports-2 reports-3; do
  fences+=("$(on_master LOCK.ACQUIRE "$key" 60000 | sed -n 2p)")
done
acquired=$(on_master LOCK.ACQUIRE failover-test 60000 TOKEN client-1)
expect_eq "failover-test's holder" "$(sed -n 1p <<<"$acquired")" client-1
fences+=("$(sed -n 2p <<<"$acquired")")
# WAIT 1: the replica has acknowledged every grant above before the master dies.
expect_eq "replicas that acknowledged the grants" "$(on_master WAIT 1 5000)" 1
expect_eq "failover-test's fence on the replica" \
  "$(cli "$client" -h "$replica_ip" LOCK.INFO failover-test | field fence)" "${fences[3]}"
highest=0
for fence in "${fences[@]}"; do
  expect_gt "a fence granted before the failover" "$fence" 0
  if ((fence > highest)); then highest=$fence; fi
done
echo "fences granted before the failover: ${fences[*]}"

step "kill the master; wait for Sentinel to promote the replica"
failover_started=$SECONDS
doc '$COMPOSE -f docker/compose.yml -p $PROJECT kill master' >/dev/null 2>&1
until_ok 90 "Sentinel promoting the replica ($replica_ip)" replica_is_master
echo "Sentinel names the replica as master $((SECONDS - failover_started)) s after the kill"
ask_sentinel

step "on the new master: the same token releases the lock, and fences keep growing"
expect_eq "failover-test's fence on the new master" "$(on_master LOCK.INFO failover-test | field fence)" "${fences[3]}"
expect_eq "release by client-1's token" "$(on_master LOCK.RELEASE failover-test client-1)" 1
expect_eq "failover-test after the release" "$(on_master LOCK.INFO failover-test)" ""
next=$(on_master LOCK.ACQUIRE failover-test 60000 TOKEN client-2 | sed -n 2p)
expect_gt "the first fence after the failover, over every earlier one" "$next" "$highest"
echo "first fence after the failover: $next (highest before: $highest)"

step "take it down as docs/sentinel.md does"
doc '$COMPOSE -f docker/compose.yml -p $PROJECT down -v' >/dev/null 2>&1

check_readme docs/sentinel.md
