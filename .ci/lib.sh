# Shared by .ci/demo and .ci/test: install what is missing, start what is not running.
# Sourced, not run. Installs use Debian's packages; nothing else is fetched.

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

apt_updated=""
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ -z "$apt_updated" ]; then
    $SUDO apt-get update -qq
    apt_updated=1
  fi
  echo "installing: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

ensure_rust() {
  if command -v cargo >/dev/null 2>&1; then return 0; fi
  [ -x "$HOME/.cargo/bin/cargo" ] && { export PATH="$HOME/.cargo/bin:$PATH"; return 0; }
  echo "cargo not found: installing the stable toolchain with rustup"
  apt_install curl ca-certificates
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component rustfmt,clippy
  export PATH="$HOME/.cargo/bin:$PATH"
}

# A Docker Engine must answer: the suite's Docker tests never skip.
ensure_docker() {
  if docker info >/dev/null 2>&1; then return 0; fi
  apt_install docker.io
  if ! docker info >/dev/null 2>&1; then
    echo "no Docker Engine answers: starting dockerd (log: /tmp/sparkctl-dockerd.log)"
    $SUDO sh -c 'nohup dockerd >/tmp/sparkctl-dockerd.log 2>&1 &'
    for _ in $(seq 1 60); do
      docker info >/dev/null 2>&1 && break
      sleep 1
    done
  fi
  if ! docker info >/dev/null 2>&1; then
    echo "dockerd did not come up within 60 s; its last lines:" >&2
    tail -n 20 /tmp/sparkctl-dockerd.log >&2 || true
    return 1
  fi
}

host_triple() {
  rustc -vV | sed -n 's/^host: //p'
}

# Everything is built with glibc's crt-static for the host triple: the same sparkctl
# binary then runs on the host and inside a FROM-scratch image. Naming --target keeps
# build scripts and proc-macros (which cannot be static) out of RUSTFLAGS' reach.
static_env() {
  export RUSTFLAGS="-C target-feature=+crt-static"
  HOST_TRIPLE="$(host_triple)"
  export HOST_TRIPLE
}
