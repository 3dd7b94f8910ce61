#!/usr/bin/env bash
# A static release binary of sparkctl for this machine's target (aarch64-unknown-linux-gnu on
# a DGX Spark, x86_64-unknown-linux-gnu on a PC): glibc's crt-static, as .ci/lib.sh builds the
# tests, so the one file runs on any Linux of that architecture and inside a FROM-scratch image.
# Built with Cargo.toml's `dist` profile (fat LTO, one codegen unit), it writes
# dist/sparkctl-VERSION-TRIPLE and its .sha256; prints the binary's path last.
#   bash scripts/release.sh && sudo install -m 755 dist/sparkctl-*-"$(uname -m)"-* /usr/local/bin/sparkctl
# `--profile NAME` builds with another profile and only checks and prints the binary, leaving
# dist/ alone: .ci/demo takes `--profile dev`, the build the tests share (minutes less).
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/lib.sh

profile=dist
if [ $# -gt 0 ]; then
  [ "$1" = --profile ] && [ $# -eq 2 ] || { echo "usage: bash scripts/release.sh [--profile NAME]" >&2; exit 2; }
  profile="$2"
fi
ensure_rust
static_env
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
cargo build --profile "$profile" --locked --target "$HOST_TRIPLE" --bin sparkctl >&2
# Cargo's dev profile builds into debug/; any other into a folder of its name.
built="target/$HOST_TRIPLE/$([ "$profile" = dev ] && echo debug || echo "$profile")/sparkctl"
# A static binary names no program interpreter (readelf comes with the linker cargo needs).
if readelf -l "$built" 2>/dev/null | grep -q 'program interpreter'; then
  echo "$built is not static (it names a program interpreter); see static_env in .ci/lib.sh" >&2
  exit 1
fi
if [ "$profile" != dist ]; then
  "$built" --version >&2
  echo "$PWD/$built"
  exit 0
fi
mkdir -p dist
out="dist/sparkctl-$version-$HOST_TRIPLE"
# Whole or not at all: a copy cut short never carries the final name.
cp "$built" "$out.tmp" && mv -f "$out.tmp" "$out"
(cd dist && sha256sum "$(basename "$out")" > "$(basename "$out").sha256")
"$out" --version >&2
echo "$PWD/$out"
