#!/usr/bin/env bash
# A GPU check anyone can run on an NVIDIA machine (a DGX Spark, a lent H100, ...): builds (or
# finds) a CUDA llama-server, writes a random-weight GGUF of a given size, and runs sparkctl
# as a user would: doctor, start, status, bench (suite, a concurrency sweep, context depth),
# up and rollback with a client on the production port, and a recipe that does not fit. It
# prints one summary whose last lines say whether each check held.
#
#   scripts/gpu-check.sh [--size-gb 2] [--out DIR] [--sparkctl PATH]
#                        [--llama-server PATH | --llama-src DIR|TARBALL] [--wheels DIR] [--quick]
#
# --llama-server: a CUDA llama-server already built. Else it is built from --llama-src (the
#   llama.cpp sources: a directory, or a tarball holding one `llama.cpp` directory), else
#   from the llama-cpp-python sdist .ci/lib.sh pins (downloaded: needs the network), with
#   CUDA for this GPU's compute capability.
# --wheels: a folder of wheels (the `gguf` writer) installed when python3 lacks them.
# --quick: short answers and few requests (a smoke run of the script itself, e.g. on a CPU).
# Everything it makes goes under --out (default: a new temp dir); it stops what it started.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
size_gb=2
out=""
sparkctl=""
llama_server=""
llama_src=""
wheels=""
runs=10 tokens=256 requests=48 depths=0,1024,2048,8192 decode_gate=10
while [ $# -gt 0 ]; do
  case "$1" in
    --size-gb) size_gb="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --sparkctl) sparkctl="$2"; shift 2 ;;
    --llama-server) llama_server="$2"; shift 2 ;;
    --llama-src) llama_src="$2"; shift 2 ;;
    --wheels) wheels="$2"; shift 2 ;;
    --quick) runs=5 tokens=24 requests=12 depths=0,512,8192 decode_gate=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out="$(mktemp -d /tmp/gpu-check.XXXXXX)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/gpu-check.log"
: >"$log"

say() { echo "gpu-check: $*" | tee -a "$log"; }
die() { say "FAILED: $*"; exit 1; }

# --- what runs ----------------------------------------------------------------------
if [ -z "$sparkctl" ]; then
  for c in "$repo/target/release/sparkctl" "$(command -v sparkctl || true)"; do
    [ -n "$c" ] && [ -x "$c" ] && { sparkctl="$c"; break; }
  done
fi
[ -x "$sparkctl" ] || die "no sparkctl binary: build it (cargo build --release) or give --sparkctl PATH"
command -v nvidia-smi >/dev/null 2>&1 || [ -n "${SPARKCTL_NVIDIA_SMI:-}" ] \
  || die "nvidia-smi is not on PATH: this check needs an NVIDIA GPU and its driver"
smi="${SPARKCTL_NVIDIA_SMI:-nvidia-smi}"
gpu_csv="$("$smi" --query-gpu=name,memory.total,compute_cap --format=csv,noheader)" \
  || die "nvidia-smi failed"
printf '%s\n' "$gpu_csv" >"$out/query-gpu.csv"
"$smi" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
  >"$out/query-compute-apps.csv" 2>&1 || true
gpu_name="$(printf '%s\n' "$gpu_csv" | head -n1 | cut -d, -f1 | sed 's/ *$//')"
cap="$(printf '%s\n' "$gpu_csv" | head -n1 | awk -F', *' '{print $NF}')"
arch="${cap//./}"
say "GPU: $gpu_csv"

build_llama() {
  local src="$1" build="$out/llama-build"
  command -v cmake >/dev/null || die "cmake is needed to build llama-server"
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || die "nvcc (CUDA) is needed to build llama-server"
  command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  say "building a CUDA llama-server for compute capability $cap (sm_$arch) from $src"
  local began=$SECONDS
  cmake -S "$src" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    "-DCMAKE_CUDA_ARCHITECTURES=$arch" -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$out/llama-cmake.log" 2>&1 \
    || { tail -n 30 "$out/llama-cmake.log" | tee -a "$log"; die "cmake failed"; }
  cmake --build "$build" --target llama-server -j "$(nproc)" >"$out/llama-build.log" 2>&1 \
    || { tail -n 30 "$out/llama-build.log" | tee -a "$log"; die "the llama-server build failed"; }
  build_s=$((SECONDS - began))
  llama_server="$build/bin/llama-server"
  say "llama-server built in ${build_s} s"
}

build_s="-"
if [ -z "$llama_server" ]; then
  src="$llama_src"
  if [ -z "$src" ]; then
    # shellcheck source=/dev/null
    . "$repo/.ci/lib.sh"
    curl -sSfL -o "$out/sdist.tar.gz" "$LLAMA_SDIST_URL" || die "cannot download the llama-cpp-python sdist"
    echo "$LLAMA_SDIST_SHA256  $out/sdist.tar.gz" | sha256sum -c --quiet || die "the sdist's sha256 differs"
    src="$out/sdist.tar.gz"
  fi
  if [ -f "$src" ]; then
    mkdir -p "$out/src" && tar -xf "$src" -C "$out/src" || die "cannot unpack $src"
    src="$(find "$out/src" -maxdepth 4 -type d -name llama.cpp | head -n1)"
  fi
  [ -f "$src/CMakeLists.txt" ] || die "no llama.cpp sources at ${src:-?}"
  build_llama "$src"
fi
[ -x "$llama_server" ] || die "no llama-server at $llama_server"

# --- the model ----------------------------------------------------------------------
py="${PYTHON:-python3}"
if ! "$py" -c 'import gguf, numpy' 2>/dev/null; then
  [ -n "$wheels" ] || die "python3 lacks gguf/numpy: pip install gguf numpy, or give --wheels DIR"
  "$py" -m pip install -q --no-index --no-deps --target "$out/site" "$wheels"/*.whl >>"$log" 2>&1 \
    || die "cannot install the wheels in $wheels"
  export PYTHONPATH="$out/site${PYTHONPATH:+:$PYTHONPATH}"
fi
model="$out/random-${size_gb}g.gguf"
began=$SECONDS
"$py" "$here/random_gguf.py" "$model" "$size_gb" >>"$log" 2>&1 || die "writing the GGUF failed"
bytes="$(stat -c %s "$model")"
say "model: $model, $bytes bytes (random weights, F16), written in $((SECONDS - began)) s"

# --- sparkctl's world: recipes, state, ports ----------------------------------------
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export SPARKCTL_STATE_DIR="$out/state" SPARKCTL_RECIPES="$out/recipes"
SPARKCTL_PRODUCTION_PORT="$(free_port)"
export SPARKCTL_PRODUCTION_PORT
export NO_COLOR=1
mkdir -p "$SPARKCTL_RECIPES/suites"
gpu_gb="$(printf '%s\n' "$gpu_csv" | head -n1 | awk -F', *' '{m=$2; sub(/ MiB/,"",m); if (m ~ /^[0-9]+$/) printf "%.0f", m*1048576/1e9; else print ""}')"
model_gb="$(awk -v b="$bytes" 'BEGIN{printf "%.1f", b/1e9 + 3}')"
cat >"$SPARKCTL_RECIPES/suites/gpu-check.yaml" <<EOF
name: gpu-check
description: Random weights answer gibberish; what counts is how fast and that every request ends
warmup: 1
runs: $runs
cases:
  - name: short
    cache: cold
    turns: ["Tell me a short story about the fast model server."]
    max_tokens: $tokens
    checks: [non_empty]
  - name: chat
    turns: ["hello there", "tell me more about that"]
    max_tokens: $((tokens / 2))
    checks: [non_empty]
EOF
recipe() { # name port extra-args memory_gb
  cat >"$SPARKCTL_RECIPES/$1.yaml" <<EOF
name: $1
description: gpu-check - CUDA llama-server, every layer on the GPU, random ${size_gb} GB GGUF
engine: llama-server
runtime: process
binary: $llama_server
model:
  path: $model
  served_name: gpu-check
  weights: "$bytes"
server:
  port: $2
  args: [-ngl, "999", -c, "16384", -np, "4", --metrics$3]
  memory_gb: $4
health:
  timeout: 5m
bench:
  suite: gpu-check
  gates:
    non_empty: ">= 80%"
    decode_tps_p50: ">= $decode_gate"
EOF
}
recipe gpu "$(free_port)" "" "$model_gb"
recipe gpu-b "$(free_port)" ", --seed, \"7\"" "$model_gb"
too_big_gb=$(( ${gpu_gb:-128} + 20 ))
recipe too-big "$(free_port)" "" "$too_big_gb"

# What this run started and still runs: a sparkctl (the front door) or a llama-server whose
# environment names this run's state dir (each inherits it from the script). Pid, command.
own_processes() {
  local p pid exe
  local ours=("$(readlink -f "$sparkctl")" "$(readlink -f "$llama_server")")
  for p in /proc/[0-9]*; do
    pid="${p#/proc/}"
    exe="$(readlink "$p/exe" 2>/dev/null)" || continue
    [ "$exe" = "${ours[0]}" ] || [ "$exe" = "${ours[1]}" ] || continue
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qxF "SPARKCTL_STATE_DIR=$SPARKCTL_STATE_DIR" \
      || continue
    echo "$pid $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)"
  done
}

# Stops everything the run started, once: at the end before the summary (which says what it
# found), and at any exit before that (a failure, Ctrl-C). Production too (`--force`): a
# `down` without it is refused for production, and its server stayed on the GPU.
cleaned=""
cleanup() {
  [ -n "$cleaned" ] && return 0
  cleaned=1
  [ -n "${client_pid:-}" ] && kill "$client_pid" 2>/dev/null
  for n in gpu gpu-b too-big; do "$sparkctl" down "$n" --force >>"$log" 2>&1; done
  "$sparkctl" frontdoor stop >>"$log" 2>&1
  # What sparkctl's own stops left: said in the summary, then stopped here.
  own_processes >"$out/left-after-stops.txt"
  local pid _ tries=0
  while read -r pid _; do kill "$pid" 2>/dev/null; done <"$out/left-after-stops.txt"
  while [ -n "$(own_processes)" ] && [ $tries -lt 20 ]; do sleep 0.5; tries=$((tries + 1)); done
  own_processes | while read -r pid _; do kill -KILL "$pid" 2>/dev/null; done
  sleep 0.5
  own_processes >"$out/left-running.txt"
  "$smi" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
    >"$out/apps-after-cleanup.csv" 2>&1 || true
  [ -s "$out/left-running.txt" ] && say "still running after the cleanup: $(cat "$out/left-running.txt")"
  return 0
}
trap cleanup EXIT
# A signal ends the script through its EXIT trap, which stops what it started.
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

run() { # tag, then the command: stdout in $out/TAG.txt, stderr in TAG.err, exit code in TAG.rc
  local tag="$1"; shift
  "$sparkctl" "$@" >"$out/$tag.txt" 2>"$out/$tag.err"
  local rc=$?
  echo "$rc" >"$out/$tag.rc"
  say "sparkctl $* -> exit $rc"
  return 0
}

# --- the checks ---------------------------------------------------------------------
# The last depth is beyond a slot's context (-c 16384 over -np 4 slots: 4096 tokens), on
# purpose: the server refuses those requests, and a refused request is never a pass.
run doctor doctor
run start start gpu
run status --json status
run bench-suite bench gpu --out "$out/bench-suite.json"
run bench-load bench gpu --runs 5 --concurrency 1,4,16 --requests "$requests" --out "$out/bench-load.json"
run bench-depth bench gpu --runs 5 --depth "$depths" --out "$out/bench-depth.json"
run down-gpu down gpu

# up and rollback with a client on the production port all along.
"$py" - "$SPARKCTL_PRODUCTION_PORT" "$out/client.json" >>"$log" 2>&1 <<'EOF' &
import json, signal, sys, threading, time, urllib.request
port, path = sys.argv[1], sys.argv[2]
stats = {"sent": 0, "ok": 0, "failed": 0, "errors": [], "before_first_answer": 0}
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
body = json.dumps({"model": "gpu-check", "max_tokens": 16,
                   "messages": [{"role": "user", "content": "hello there"}]}).encode()
answered = False
while not stop.is_set():
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            ok = r.status == 200 and json.load(r)["choices"][0]["message"] is not None
    except Exception as e:  # noqa: BLE001 - every failure is counted and kept
        ok, err = False, repr(e)
    if not answered and not ok:
        # Before `up` has made a production, the front door has nothing to send to.
        stats["before_first_answer"] += 1
        time.sleep(0.1)
        continue
    answered = True
    stats["sent"] += 1
    if ok:
        stats["ok"] += 1
    else:
        stats["failed"] += 1
        stats["errors"].append(err[:300])
    time.sleep(0.05)
json.dump(stats, open(path, "w"))
EOF
client_pid=$!
run up-gpu up gpu
run up-gpu-b up gpu-b
run rollback rollback
sleep 2
kill "$client_pid" 2>/dev/null; wait "$client_pid" 2>/dev/null; client_pid=""
run status-after --json status

# A recipe declaring more than the GPU has: refused before anything starts.
run too-big-dry start too-big --dry-run
run too-big start too-big
"$smi" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits >"$out/apps-after-too-big.csv" 2>&1 || true
run status-too-big --json status

# --- nothing left -------------------------------------------------------------------
cleanup

# --- the summary --------------------------------------------------------------------
"$py" - "$out" "$gpu_name" "$build_s" "$bytes" "$too_big_gb" <<'EOF' | tee "$out/summary.txt"
import json, os, statistics, sys
out, gpu, build_s, size, too_big = sys.argv[1:6]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception:
        return None
def rc(tag):
    try:
        return int(open(os.path.join(out, f"{tag}.rc")).read())
    except Exception:
        return None
def text(tag, parts=("txt", "err")):
    said = ""
    for part in parts:
        try:
            said += open(os.path.join(out, f"{tag}.{part}")).read()
        except Exception:
            pass
    return said
def ms(stats, key="p50"):
    v = (stats or {}).get(key)
    return "-" if v is None else f"{v:.1f}"
suite, load_r, depth = load("bench-suite.json"), load("bench-load.json"), load("bench-depth.json")
results = [r for r in (suite, load_r, depth) if r]
checks = []
def check(what, ok, detail):
    checks.append((what, ok))
    print(f"  [{'ok' if ok else 'FAIL'}] {what}: {detail}")
print(f"sparkctl gpu-check on {gpu}: random {int(size)/1e9:.2f} GB F16 GGUF, "
      f"CUDA llama-server built in {build_s} s")
doctor = [l.strip() for l in text("doctor").splitlines()
          if l.split()[1:2] in (["gpu"], ["memory"])]
for l in doctor:
    print(f"  doctor: {l}")
st = text("status", ("txt",))
try:
    rows = json.loads(st)
except Exception:
    rows = []
for r in rows:
    m = r.get("memory") or {}
    g = (m.get("gpu") or {}).get("bytes")
    print(f"  status: {r['name']} holds GPU {g} bytes "
          f"({(m.get('gpu') or {}).get('how', '-')}), declared {m.get('declared_gb')} GB")
if suite:
    roof = suite.get("roofline") or {}
    samples = [s for s in suite["samples"] if not s.get("warmup")]
    server = [s["server_timings"]["predicted_per_second"] for s in samples
              if s.get("decode_tps") and (s.get("server_timings") or {}).get("predicted_per_second")]
    server_p50 = statistics.median(server) if server else None
    client_p50 = suite.get("decode_tps_p50")
    ttft = suite.get("ttft_p50_ms")
    print(f"  bench (suite): verdict {suite['verdict']} ({suite['verdict_reason']}); "
          f"TTFT p50 {ttft:.1f} ms; decode p50 {client_p50 or 0:.1f} tok/s; "
          f"llama-server's own predicted_per_second p50 {server_p50 or 0:.1f} tok/s")
    print(f"  roofline: bound {roof.get('bound_tps', 0):.0f} tok/s = {roof.get('bandwidth_gb_per_s')} GB/s "
          f"({roof.get('bandwidth_from')}) over {roof.get('bytes_per_token', 0):.0f} bytes/token; "
          f"share {100 * (suite.get('roofline_share') or 0):.1f}%")
    for g in suite.get("gates", []):
        print(f"  gate {g['gate']} {g['rule']}: value {g.get('value')} -> {g['outcome']}")
if load_r:
    for l in load_r.get("load", []):
        p = l["profile"]
        tp = (l.get("tpot_ms") or {}).get("p50")
        ttft99 = (l.get("ttft_ms") or {}).get("p99")
        print(f"  load concurrency {p.get('streams')}: {l['completed']}/{l['requests']} ok, "
              f"{l['output_tps']:.0f} tok/s out, TPOT p50 {tp or 0:.2f} ms, TTFT p99 {ttft99 or 0:.1f} ms, "
              f"connections opened first {l.get('connections_opened')}")
if depth:
    for p in depth.get("depth", []):
        print(f"  depth {p['depth']} {p['cache']}: TTFT p50 {ms(p.get('ttft_ms'))} ms, "
              f"decode p50 {ms(p.get('decode_tps'))} tok/s; {p['verdict'][:160]}")
    print(f"  bench (depth): verdict {depth['verdict']} ({depth['verdict_reason'][:240]})")
client = load("client.json") or {}
print(f"  up/rollback: client sent {client.get('sent')} requests through the front door, "
      f"{client.get('failed')} failed; up gpu exit {rc('up-gpu')}, up gpu-b exit {rc('up-gpu-b')}, rollback exit {rc('rollback')}")
apps = [l.strip() for l in text("apps-after-cleanup", ("csv",)).splitlines() if l.strip()]
print(f"  after the cleanup, nvidia-smi's compute processes (pid, MiB): {'; '.join(apps) or 'none'}")
refusal = text("too-big-dry").strip().splitlines()
print(f"  too-big ({too_big} GB declared): start --dry-run exit {rc('too-big-dry')}: {refusal[-1] if refusal else ''}")
print("must show:")
impossible = sum(1 for r in results for s in r.get("samples", []) if s.get("impossible"))
check("0 samples marked impossible", bool(results) and impossible == 0,
      f"{impossible} of {sum(len(r.get('samples', [])) for r in results)}")
if suite:
    off = None if not (server_p50 and client_p50) else 100 * (client_p50 - server_p50) / server_p50
    check("decode p50 within 3% of llama-server's predicted_per_second", off is not None and abs(off) <= 3,
          f"{client_p50 or 0:.1f} vs {server_p50 or 0:.1f} tok/s ({off if off is not None else float('nan'):+.2f}%)")
    share = suite.get("roofline_share")
    check("roofline share shown and below 100%", share is not None and share < 1,
          f"{100 * share:.1f}% of {roof.get('bound_tps', 0):.0f} tok/s" if share is not None else "no share")
    dg = [g for g in suite.get("gates", []) if g["gate"].startswith("decode_tps")]
    check("a decode gate decides", bool(dg) and all(g["outcome"] in ("pass", "fail") for g in dg),
          ", ".join(f"{g['gate']} {g['rule']} -> {g['outcome']}" for g in dg) or "none")
else:
    check("bench ran", False, text("bench-suite")[-300:])
if depth:
    deepest = max(p["depth"] for p in depth.get("depth", [])) if depth.get("depth") else None
    check("failed depth requests make the verdict error, with the server's words",
          depth["verdict"] == "error" and f"first at depth {deepest}" in depth["verdict_reason"]
          and "context" in depth["verdict_reason"] and rc("bench-depth") == 1,
          f"verdict {depth['verdict']}, {len(depth.get('problems', []))} problems")
st_big = text("status-too-big", ("txt",))
try:
    big_rows = [r for r in json.loads(st_big) if r["name"] == "too-big"]
except Exception:
    big_rows = []
check("a recipe declaring more than the GPU memory is refused before anything starts",
      rc("too-big-dry") == 1 and rc("too-big") == 1 and "does not fit in memory" in text("too-big")
      and not big_rows, f"dry run exit {rc('too-big-dry')}, start exit {rc('too-big')}, deployments of it: {len(big_rows)}")
def lines(name):
    try:
        return [l.strip() for l in open(os.path.join(out, name)) if l.strip()]
    except Exception:
        return None
left, still = lines("left-after-stops.txt"), lines("left-running.txt")
check("nothing the run started runs at its end (sparkctl down --force, frontdoor stop)",
      left == [] and still == [],
      "none left" if left == [] and still == [] else
      f"left by sparkctl's stops: {left}; still running after the cleanup: {still}")
check("0 failed client requests through up and rollback",
      client.get("sent", 0) > 0 and client.get("failed") == 0 and rc("up-gpu") == 0
      and rc("up-gpu-b") == 0 and rc("rollback") == 0,
      f"{client.get('ok')} ok of {client.get('sent')}")
print("gpu-check: " + ("every check held" if all(ok for _, ok in checks)
                       else "FAILED: " + ", ".join(w for w, ok in checks if not ok)))
sys.exit(0 if all(ok for _, ok in checks) else 1)
EOF
