#!/usr/bin/env bash
# Builds clients/go offline, from Debian's packages: writes vendor/ in a Go
# module directory (default: this one) with symlinks to the sources that
# golang-github-gomodule-redigo-dev and golang-github-mna-redisc-dev install
# under /usr/share/gocode, and to this package for a module that requires it
# (examples/go). `go build`, `go vet` and `go test` then run with no module
# proxy (Go uses vendor/ when vendor/modules.txt is there).
#   clients/go/vendor.sh [module-dir]
# vendor/ is not committed; run this again after a Debian upgrade.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(cd "${1:-$here}" && pwd)
gocode=${GOCODE:-/usr/share/gocode/src}
redigo=$gocode/github.com/gomodule/redigo
redisc=$gocode/github.com/mna/redisc
for src in "$redigo/redis" "$redisc"; do
  [ -d "$src" ] || { echo "vendor.sh: $src is missing: apt-get install golang-github-gomodule-redigo-dev golang-github-mna-redisc-dev"; exit 1; }
done
# The versions Debian ships, as go.mod requires them.
redigo_version=$(sed -n 's/^\tgithub.com\/gomodule\/redigo \(v[^ ]*\)$/\1/p' "$here/go.mod")
redisc_version=$(sed -n 's/^\tgithub.com\/mna\/redisc \(v[^ ]*\)$/\1/p' "$here/go.mod")
rm -rf "$dir/vendor"
mkdir -p "$dir/vendor/github.com/gomodule" "$dir/vendor/github.com/mna"
ln -s "$redigo" "$dir/vendor/github.com/gomodule/redigo"
ln -s "$redisc" "$dir/vendor/github.com/mna/redisc"
{
  echo "# github.com/gomodule/redigo $redigo_version"
  echo "## explicit; go 1.14"
  echo "github.com/gomodule/redigo/redis"
  echo "# github.com/mna/redisc $redisc_version"
  echo "## explicit"
  echo "github.com/mna/redisc"
} > "$dir/vendor/modules.txt"
if [ "$dir" != "$here" ]; then
  # A module that uses this package: require it as v0.0.0, replaced by this directory.
  mkdir -p "$dir/vendor/github.com/redis-lock/redis-lock/clients"
  ln -s "$here" "$dir/vendor/github.com/redis-lock/redis-lock/clients/go"
  {
    echo "# github.com/redis-lock/redis-lock/clients/go v0.0.0 => $(realpath --relative-to="$dir" "$here")"
    echo "## explicit; go 1.19"
    echo "github.com/redis-lock/redis-lock/clients/go"
    echo "github.com/redis-lock/redis-lock/clients/go/cluster"
    echo "# github.com/redis-lock/redis-lock/clients/go => $(realpath --relative-to="$dir" "$here")"
  } >> "$dir/vendor/modules.txt"
fi
echo "vendor.sh: $dir/vendor links Debian's redigo $redigo_version and redisc $redisc_version"
