#!/usr/bin/env bash
# Makes a workspace in which the Rust crates' tests run from their packaged
# artefacts (`make dist-rust`: target/dist/*.crate), not from the source
# tree: `make test-client` runs `cargo test --workspace` in it.
#   scripts/rust-package-tests.sh PACKAGE_DIR WORKSPACE_DIR
# Each .crate in PACKAGE_DIR is unpacked into WORKSPACE_DIR as it would be
# downloaded, with one addition to its manifest: the dev-dependency that
# `cargo package` strips because it is not published, testsupport (it starts
# the real servers the tests run against), pointed back at this repository.
# redis-lock-cli's dependency on redis-lock-client (a registry dependency
# once packaged) is patched to the unpacked client, and the repository's
# Cargo.lock seeds the workspace's, so the versions are the ones CI tests.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
package_dir=${1:?the directory of the .crate files}
workspace=${2:?the directory to make the workspace in}

crates=("$package_dir"/*.crate)
[ -e "${crates[0]}" ] || { echo "no .crate in $package_dir: run make dist-rust"; exit 1; }
rm -rf "$workspace"
mkdir -p "$workspace"
members=()
for crate in "${crates[@]}"; do
  tar -xzf "$crate" -C "$workspace"
  name=$(basename "$crate" .crate)
  members+=("\"$name\"")
  cat >> "$workspace/$name/Cargo.toml" <<EOF

# Added by scripts/rust-package-tests.sh: the test servers (not published).
[dev-dependencies.redis-lock-testsupport]
path = "$repo/testsupport"
EOF
done
client=$(cd "$workspace" && ls -d redis-lock-client-*/)
members_list=$(IFS=,; echo "${members[*]}")
cat > "$workspace/Cargo.toml" <<EOF
# Made by scripts/rust-package-tests.sh from $package_dir: the packaged crates.
[workspace]
members = [$members_list]
resolver = "2"

[patch.crates-io]
redis-lock-client = { path = "${client%/}" }
EOF
cp Cargo.lock "$workspace/Cargo.lock"
echo "$workspace: ${members[*]}"
