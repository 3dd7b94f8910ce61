#!/usr/bin/env bash
# The swap check (issue 34): two llama-server recipes that fit the GPU once but not twice,
# switched as a user would — `up a`, `up b`, `rollback`, `rollback --to b`, `rollback` —
# with a client streaming to the production port throughout. One summary: each command's
# exit code and switch mode, the client's answered and failed counts, the longest wait
# (the front door's hold) per switch, what nvidia-smi saw each server hold.
#
#   scripts/swap-check.sh --llama-server PATH [--sparkctl PATH] [--out DIR]
#                         [--gguf FILE | --wheels DIR] [--smoke]
#
# --llama-server: a CUDA llama-server (a CPU one with --smoke).
# --gguf: the model both recipes serve. Else a random-weight one is written (needs python3's
#   gguf and numpy, or --wheels DIR holding them), sized from nvidia-smi's memory.total of
#   GPU 0: each server is planned at 0.6 of it (weights 0.06 of it, the KV cache of one
#   long slot the rest), so one fits and two do not. Small weights because writing them is
#   slow (a 30 GB one took 383 s on a lent H100's disk) and every start reads them again;
#   the KV cache is allocated on the GPU at once.
# --smoke: on a CPU (no GPU needed): the given --gguf, a 1.5 GB pool declared by
#   SPARKCTL_MEMORY_GB and 1 GB declared per server: the same switches, a proof of the
#   script itself.
# Everything it makes goes under --out (default: a new temp dir); it stops what it started.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
out="" sparkctl="" llama_server="" gguf="" wheels="" smoke=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --sparkctl) sparkctl="$2"; shift 2 ;;
    --llama-server) llama_server="$2"; shift 2 ;;
    --gguf) gguf="$2"; shift 2 ;;
    --wheels) wheels="$2"; shift 2 ;;
    --smoke) smoke=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "swap-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out="$(mktemp -d /tmp/swap-check.XXXXXX)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/swap-check.log"
: >"$log"
say() { echo "swap-check: $*" | tee -a "$log"; }
die() { say "FAILED: $*"; exit 1; }

if [ -z "$sparkctl" ]; then
  for c in "$repo/target/release/sparkctl" "$(command -v sparkctl || true)"; do
    [ -n "$c" ] && [ -x "$c" ] && { sparkctl="$c"; break; }
  done
fi
[ -x "$sparkctl" ] || die "no sparkctl binary: build it (cargo build --release) or give --sparkctl PATH"
[ -x "$llama_server" ] || die "no llama-server: give --llama-server PATH"
py="${PYTHON:-python3}"
smi="${SPARKCTL_NVIDIA_SMI:-nvidia-smi}"

# --- the size: one fits, two do not -------------------------------------------------
if [ "$smoke" = 1 ]; then
  [ -f "$gguf" ] || die "--smoke needs --gguf FILE (e.g. the suite's test model)"
  where="CPU (smoke: a 1.5 GB pool declared by SPARKCTL_MEMORY_GB)"
  export SPARKCTL_MEMORY_GB=1.5 SPARKCTL_MEMORY_RESERVE_GB=0
  declared=1 ctx=4096 args='-t, "2"'
else
  gpu_csv="$("$smi" --query-gpu=name,memory.total --format=csv,noheader,nounits)" \
    || die "nvidia-smi failed: this check needs an NVIDIA GPU (or --smoke)"
  printf '%s\n' "$gpu_csv" >"$out/query-gpu.csv"
  gpu_name="$(printf '%s\n' "$gpu_csv" | head -n1 | cut -d, -f1)"
  total_mib="$(printf '%s\n' "$gpu_csv" | head -n1 | awk -F', *' '{print $2}')"
  [[ "$total_mib" =~ ^[0-9]+$ ]] || die "nvidia-smi gives no memory.total ($total_mib): a GPU with memory of its own is needed"
  total_gb="$(awk -v m="$total_mib" 'BEGIN{printf "%.1f", m*1048576/1e9}')"
  where="$gpu_name ($total_gb GB by nvidia-smi)"
  declared="$(awk -v t="$total_gb" 'BEGIN{printf "%.0f", 0.6*t}')"
  free_disk_gb="$(df -P "$out" | awk 'NR==2{printf "%.0f", $4*1024/1e9}')"
  weights_gb="$(awk -v t="$total_gb" -v d="$free_disk_gb" 'BEGIN{w=0.06*t; if (w > d-5) w=d-5; printf "%.1f", w}')"
  awk -v w="$weights_gb" 'BEGIN{exit !(w >= 1)}' || die "not enough disk under $out for a model (${free_disk_gb} GB free)"
  # random_gguf.py's layers: 94.4 MB of F16 each; its KV cache: 4096 bytes per token per
  # layer (2 x 8 KV heads x 128 x F16). The rest of the server's share is one slot's KV.
  layers="$(awk -v w="$weights_gb" 'BEGIN{l=int(w*1e9/94371840+0.5); if (l<1) l=1; print l}')"
  ctx="$(awk -v t="$declared" -v w="$weights_gb" -v l="$layers" \
    'BEGIN{kv=(t-w-3)*1e9; c=int(kv/(4096*l)/256)*256; if (c<4096) c=4096; print c}')"
  args='-ngl, "999"'
  if [ -z "$gguf" ]; then
    if ! "$py" -c 'import gguf, numpy' 2>/dev/null; then
      [ -n "$wheels" ] || die "python3 lacks gguf/numpy: pip install gguf numpy, give --wheels DIR, or --gguf FILE"
      "$py" -m pip install -q --no-index --no-deps --target "$out/site" "$wheels"/*.whl >>"$log" 2>&1 \
        || die "cannot install the wheels in $wheels"
      export PYTHONPATH="$out/site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    gguf="$out/random-${weights_gb}g.gguf"
    began=$SECONDS
    "$py" "$here/random_gguf.py" "$gguf" "$weights_gb" "$ctx" >>"$log" 2>&1 || die "writing the GGUF failed"
    say "model: $gguf written in $((SECONDS - began)) s"
  fi
fi
bytes="$(stat -c %s "$gguf")"
say "on $where: two recipes of $declared GB declared each, serving $gguf ($bytes bytes), -c $ctx"

# --- sparkctl's world ---------------------------------------------------------------
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export SPARKCTL_STATE_DIR="$out/state" SPARKCTL_RECIPES="$out/recipes" NO_COLOR=1
SPARKCTL_PRODUCTION_PORT="$(free_port)"
export SPARKCTL_PRODUCTION_PORT
mkdir -p "$SPARKCTL_RECIPES/suites"
cat >"$SPARKCTL_RECIPES/suites/swap-check.yaml" <<EOF
name: swap-check
description: Random weights answer gibberish; what counts is that every request ends
warmup: 1
runs: 5
cases:
  - name: short
    turns: ["Tell me a short story about the fast model server."]
    max_tokens: 16
    checks: [non_empty]
EOF
for n in a b; do
  cat >"$SPARKCTL_RECIPES/$n.yaml" <<EOF
name: $n
description: 'swap-check - llama-server serving $(basename "$gguf"); $declared GB of $where'
engine: llama-server
runtime: process
binary: $llama_server
model:
  path: $gguf
  served_name: swap-check
server:
  port: $(free_port)
  args: [$args, -c, "$ctx", -np, "1"]
  memory_gb: $declared
health:
  timeout: 10m
bench:
  suite: swap-check
  gates:
    non_empty: ">= 80%"
EOF
done

cleanup() {
  [ -n "${client_pid:-}" ] && kill "$client_pid" 2>/dev/null
  for n in a b; do "$sparkctl" down "$n" --force >/dev/null 2>&1; done
  "$sparkctl" frontdoor stop >/dev/null 2>&1
}
trap cleanup EXIT

# --- the client: one streamed request after another, each one's start, end and result --
"$py" - "$SPARKCTL_PRODUCTION_PORT" "$out/client.jsonl" >>"$log" 2>&1 <<'EOF' &
import http.client, json, signal, sys, threading, time
port, path = int(sys.argv[1]), sys.argv[2]
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
body = json.dumps({"model": "swap-check", "max_tokens": 8, "stream": True,
                   "messages": [{"role": "user", "content": "hello there"}]})
with open(path, "w") as f:
    while not stop.is_set():
        t0, ok, err = time.time(), False, ""
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            text = r.read().decode("utf-8", "replace")
            ok = r.status == 200 and "[DONE]" in text
            err = "" if ok else f"HTTP {r.status}: {text[:200]}"
            c.close()
        except Exception as e:  # noqa: BLE001 - every failure is counted and kept
            err = repr(e)[:300]
        f.write(json.dumps({"t0": t0, "t1": time.time(), "ok": ok, "err": err}) + "\n")
        f.flush()
        time.sleep(0.05)
EOF
client_pid=$!

step() { # tag, then sparkctl's arguments: its window, exit code and output under $out
  local tag="$1"; shift
  local t0; t0="$(date +%s.%N)"
  say "$(date -u +%H:%M:%S) sparkctl $* ..."
  "$sparkctl" "$@" >"$out/$tag.txt" 2>"$out/$tag.err"
  local rc=$?
  echo "$rc $t0 $(date +%s.%N)" >"$out/$tag.window"
  "$smi" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits >"$out/$tag.apps" 2>&1 || true
  "$sparkctl" --json status >"$out/$tag.status" 2>/dev/null
  say "sparkctl $* -> exit $rc"
}

# `up` stops production for a swap only when confirmed (--yes); rollback does not ask.
step 1-up-a up a --yes
step 2-up-b up b --yes
step 3-rollback rollback
step 4-rollback-to-b rollback --to b
step 5-rollback rollback
sleep 2
kill "$client_pid" 2>/dev/null; wait "$client_pid" 2>/dev/null; client_pid=""

# --- the summary ----------------------------------------------------------------------
"$py" - "$out" "$where" "$declared" <<'EOF' | tee "$out/summary.txt"
import glob, json, os, sys
out, where, declared = sys.argv[1], sys.argv[2], sys.argv[3]
reqs = [json.loads(l) for l in open(os.path.join(out, "client.jsonl")) if l.strip()]
# Before the first production there is nothing to answer: those are not counted.
first_ok = next((i for i, r in enumerate(reqs) if r["ok"]), len(reqs))
reqs = reqs[first_ok:]
print(f"swap-check on {where}: two servers of {declared} GB declared, one fits, two do not")
checks, windows = [], []
for w in sorted(glob.glob(os.path.join(out, "*.window"))):
    tag = os.path.basename(w)[:-len(".window")]
    rc, t0, t1 = open(w).read().split()
    rc, t0, t1 = int(rc), float(t0), float(t1)
    err = open(os.path.join(out, f"{tag}.err")).read()
    mode = ("swap" if "(swap" in err else "blue/green" if "(blue/green)" in err
            else "first production" if "no production yet" in err else "?")
    # A request the switch held was sent while it ran; one in flight when it began was
    # drained on the old server and counts for the time before.
    during = [r for r in reqs if t0 <= r["t0"] <= t1]
    windows.append((t0, t1))
    longest = max((r["t1"] - r["t0"] for r in during), default=0.0)
    failed = sum(1 for r in during if not r["ok"])
    try:
        rows = json.load(open(os.path.join(out, f"{tag}.status")))
    except Exception:
        rows = []
    prod = next((r["name"] for r in rows if r.get("role") == "production"), "-")
    def holds(r):
        m = r.get("memory") or {}
        gpu = (m.get("gpu") or {}).get("bytes")
        gpu = "-" if gpu is None else f"{gpu / 1e9:.1f} GB"
        counted = m.get("counted_gb")
        counted = "-" if counted is None else f"{counted:.1f} GB"
        return f"{r['name']} (GPU {gpu}, holds {counted}, declared {m.get('declared_gb')} GB)"
    held = ", ".join(holds(r) for r in rows if r.get("state") == "running")
    print(f"  {tag:<18} exit {rc}  {mode:<16} {t1 - t0:6.1f} s  longest wait {longest:6.2f} s  "
          f"{len(during)} requests, {failed} failed; production {prod}; running: {held or '-'}")
    checks.append((f"{tag} exit 0", rc == 0))
    if tag != "1-up-a":
        checks.append((f"{tag} is a swap", mode == "swap"))
    if rc != 0:
        print("    " + "\n    ".join(err.strip().splitlines()[-6:]))
ok = sum(1 for r in reqs if r["ok"])
bad = [r for r in reqs if not r["ok"]]
outside = [r["t1"] - r["t0"] for r in reqs if not any(a <= r["t0"] <= b for a, b in windows)]
if outside:
    outside.sort()
    print(f"  between switches (the reference): {len(outside)} requests, median wait "
          f"{outside[len(outside) // 2]:.2f} s, longest {outside[-1]:.2f} s")
print(f"  client: {ok} answered, {len(bad)} failed of {len(reqs)} sent after the first answer")
for r in bad[:5]:
    print(f"    failed: {r['err']}")
checks.append(("0 failed client requests", not bad and ok > 0))
for what, good in checks:
    print(f"  [{'ok' if good else 'FAIL'}] {what}")
print("swap-check: " + ("every check held" if all(g for _, g in checks)
                        else "FAILED: " + ", ".join(w for w, g in checks if not g)))
sys.exit(0 if all(g for _, g in checks) else 1)
EOF
