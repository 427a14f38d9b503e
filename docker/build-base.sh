#!/usr/bin/env bash
# Builds the Debian bookworm base image that `make docker-test` builds the
# runtime stage of docker/Dockerfile on, for machines that cannot pull
# `debian:bookworm-slim` from a registry: mmdebstrap installs Debian's
# redis-server and redis-tools into a root file system, and `docker import`
# turns it into an image. No container runs and no Docker network is used.
#
#   docker/build-base.sh IMAGE
#
# An image that already exists under IMAGE is reused as it is. Make names IMAGE
# after a hash of this file, so changing the recipe builds a new one; a fresh
# machine (CI) always builds it from scratch. `docker rmi IMAGE` forces a
# rebuild, for instance to pick up Debian's security updates.
# DEBIAN_MIRROR (optional) is passed to mmdebstrap as its mirror; without it,
# mmdebstrap uses Debian's default mirror with bookworm-updates and
# bookworm-security.
set -euo pipefail

image=${1:?usage: docker/build-base.sh IMAGE}

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
# minbase is what debian:bookworm-slim is made of. Documentation, manual pages
# and translations are left out, as in the slim image; copyright files stay.
mmdebstrap --quiet --variant=minbase --include=redis-server,redis-tools \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --aptopt='Acquire::Languages "none"' \
  bookworm "$workdir/rootfs.tar" "${mirrors[@]}"

docker import --change 'CMD ["bash"]' \
  --message "redis-lock test base: Debian bookworm minbase with redis-server, by docker/build-base.sh" \
  "$workdir/rootfs.tar" "$image" >/dev/null

# Base images of earlier recipes are dead weight; drop those no container uses.
repository=${image%:*}
docker image ls --format '{{.Repository}}:{{.Tag}}' "$repository" | while read -r old; do
  [ "$old" = "$image" ] || docker rmi "$old" >/dev/null 2>&1 || true
done

echo "base image $image: built in $((SECONDS - started)) s ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}'))"
