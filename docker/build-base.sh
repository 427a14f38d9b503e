#!/usr/bin/env bash
# Builds a Debian base image that `make docker-test` builds the stages of
# docker/Dockerfile on, for machines that cannot pull `debian:<suite>-slim` from
# a registry: mmdebstrap installs the suite's server and its client
# (redis-server and redis-tools, or valkey-server and valkey-tools) into a root
# file system, and `docker import` turns it into an image. No container runs
# and no Docker network is used.
#
#   docker/build-base.sh SUITE IMAGE [SERVER]
#
# SUITE is a Debian suite: trixie (Debian 13: Redis 8.0, Valkey 8.1) or
# bookworm (Debian 12: Redis 7.0, and no Valkey). SERVER is redis (the default)
# or valkey, as the Dockerfile's SERVER build argument; make docker-test builds
# Redis on both suites and Valkey on trixie. An image that already exists under
# IMAGE is reused as it is. Make names IMAGE after the server, the suite and a
# hash of this file (redis-lock-base:redis-trixie-<hash>), so changing the
# recipe builds new ones; a fresh machine (CI) always builds them from scratch.
# `docker rmi IMAGE` forces a rebuild, for instance to pick up Debian's
# security updates.
# DEBIAN_MIRROR (optional) is passed to mmdebstrap as its mirror; without it,
# mmdebstrap uses Debian's default mirror with SUITE-updates and
# SUITE-security.
set -euo pipefail

usage="usage: docker/build-base.sh SUITE IMAGE [SERVER]"
suite=${1:?$usage}
image=${2:?$usage}
server=${3:-redis}
case $server in
  redis | valkey) ;;
  *)
    echo "docker/build-base.sh: SERVER is redis or valkey, not '$server'" >&2
    exit 1
    ;;
esac

if docker image inspect "$image" >/dev/null 2>&1; then
  echo "base image $image: exists, reused"
  exit 0
fi
command -v mmdebstrap >/dev/null || {
  echo "docker/build-base.sh: mmdebstrap is missing. Install it with: apt-get install -y mmdebstrap" >&2
  exit 1
}

workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT

started=$SECONDS
mirrors=()
if [ -n "${DEBIAN_MIRROR:-}" ]; then mirrors=("$DEBIAN_MIRROR"); fi
# minbase is what debian:<suite>-slim is made of. Documentation, manual pages
# and translations are left out, as in the slim images; copyright files stay.
mmdebstrap --quiet --variant=minbase --include="$server-server,$server-tools" \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --aptopt='Acquire::Languages "none"' \
  "$suite" "$workdir/rootfs.tar" "${mirrors[@]}"

docker import --change 'CMD ["bash"]' \
  --message "redis-lock test base: Debian $suite minbase with $server-server, by docker/build-base.sh" \
  "$workdir/rootfs.tar" "$image" >/dev/null

# Base images of this server and suite from earlier recipes are dead weight;
# drop those no container uses (the other bases stay). Before Valkey, the
# Redis bases were named <suite>-<hash>: those go too.
repository=${image%:*}
docker image ls --format '{{.Repository}}:{{.Tag}}' "$repository" | while read -r old; do
  case $old in
    "$image") ;;
    "$repository:$server-$suite-"*) docker rmi "$old" >/dev/null 2>&1 || true ;;
    "$repository:$suite-"*) if [ "$server" = redis ]; then docker rmi "$old" >/dev/null 2>&1 || true; fi ;;
  esac
done

echo "base image $image: built in $((SECONDS - started)) s ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}'))"
