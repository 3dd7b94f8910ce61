#!/usr/bin/env bash
# The models check (issue 46): two llama-server recipes, `a` and `b`, each the production of
# its own model behind one front door, each planned at 0.6 of the GPU so that one fits and two
# do not. Clients alternate between the two models through the door, in two phases:
#   right    both declare what they hold: each start on demand evicts the other, planned;
#   quarter  b declares a quarter of what it holds (a guess): its first start beside a runs
#            out of GPU memory; the door makes room (evicts a) and tries once more at once,
#            learns what b held, and b's later starts evict first — no second out-of-memory.
# One summary per phase: answered and failed, starts and evictions per model, what requests
# waited for their model's server (x-sparkctl-queued-ms) at p50/p99, the door's log of each
# start (out of memory, room made, served), what `sparkctl memory` learned; then the checks.
#
#   scripts/models-check.sh [--llama-server PATH | --llama-src DIR|TARBALL] [--sparkctl PATH]
#                           [--gguf FILE | --wheels DIR] [--out DIR] [--secs 75] [--clients 4]
#                           [--prepare] [--smoke]
#
# --llama-server: a CUDA llama-server (a CPU one with --smoke). Else one is built from
#   --llama-src (a directory, or a tarball holding one `llama.cpp` directory) for this GPU.
# --gguf: the model both recipes serve. Else a random-weight one is written (python3's gguf
#   and numpy, or --wheels DIR holding them), sized as swap-check.sh sizes it: weights 0.06
#   of the GPU, the KV cache of one long slot the rest of 0.6.
# --secs: how long the clients run in each phase; --clients: how many (each alternates b, a).
# --prepare: build llama-server and write the model, print their paths, and stop (on a lent
#   machine whose calls are short: a later run passes them as --llama-server and --gguf).
# --smoke: on a CPU (no GPU needed): the given --gguf, a 1.5 GB pool declared by
#   SPARKCTL_MEMORY_GB, 1 GB declared right and 0.25 GB as the quarter. A CPU has no real
#   out-of-memory: b's quarter fits beside a and the two run together; the flow and the
#   summary are what it proves.
# Everything it makes goes under --out (default: a new temp dir); it stops what it started.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
out="" sparkctl="" llama_server="" llama_src="" gguf="" wheels="" smoke=0 prepare=0
secs=75 clients=4
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --sparkctl) sparkctl="$2"; shift 2 ;;
    --llama-server) llama_server="$2"; shift 2 ;;
    --llama-src) llama_src="$2"; shift 2 ;;
    --gguf) gguf="$2"; shift 2 ;;
    --wheels) wheels="$2"; shift 2 ;;
    --secs) secs="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --prepare) prepare=1; shift ;;
    --smoke) smoke=1; shift ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "models-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out="$(mktemp -d /tmp/models-check.XXXXXX)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/models-check.log"
: >"$log"
say() { echo "models-check: $*" | tee -a "$log"; }
die() { say "FAILED: $*"; exit 1; }
py="${PYTHON:-python3}"
smi="${SPARKCTL_NVIDIA_SMI:-nvidia-smi}"
# shellcheck source=lib-check.sh
. "$here/lib-check.sh"

if [ -z "$sparkctl" ]; then
  for c in "$repo/target/release/sparkctl" "$repo/target/x86_64-unknown-linux-gnu/release/sparkctl" \
    "$(command -v sparkctl || true)"; do
    [ -n "$c" ] && [ -x "$c" ] && { sparkctl="$c"; break; }
  done
fi
[ "$prepare" = 1 ] || [ -x "$sparkctl" ] \
  || die "no sparkctl binary: build it (cargo build --release) or give --sparkctl PATH"

# --- the size: one fits, two do not -------------------------------------------------
if [ "$smoke" = 1 ]; then
  [ -f "$gguf" ] || die "--smoke needs --gguf FILE (e.g. the suite's test model)"
  [ -x "$llama_server" ] || die "--smoke needs --llama-server PATH (a CPU one)"
  where="CPU (smoke: a 1.5 GB pool declared by SPARKCTL_MEMORY_GB)"
  export SPARKCTL_MEMORY_GB=1.5 SPARKCTL_MEMORY_RESERVE_GB=0
  declared=1 quarter=0.25 ctx=4096 args='-t, "2"'
else
  check_gpu
  where="$gpu_name ($total_gb GB by nvidia-smi)"
  declared="$(awk -v t="$total_gb" 'BEGIN{printf "%.0f", 0.6*t}')"
  quarter="$(awk -v d="$declared" 'BEGIN{printf "%.1f", d/4}')"
  free_disk_gb="$(df -P "$out" | awk 'NR==2{printf "%.0f", $4*1024/1e9}')"
  weights_gb="$(awk -v t="$total_gb" -v d="$free_disk_gb" 'BEGIN{w=0.06*t; if (w > d-5) w=d-5; printf "%.1f", w}')"
  awk -v w="$weights_gb" 'BEGIN{exit !(w >= 1)}' || die "not enough disk under $out for a model (${free_disk_gb} GB free)"
  # random_gguf.py's layers: 94.4 MB of F16 each; its KV cache: 4096 bytes per token per
  # layer (2 x 8 KV heads x 128 x F16). The rest of the server's share is one slot's KV.
  layers="$(awk -v w="$weights_gb" 'BEGIN{l=int(w*1e9/94371840+0.5); if (l<1) l=1; print l}')"
  ctx="$(awk -v t="$declared" -v w="$weights_gb" -v l="$layers" \
    'BEGIN{kv=(t-w-3)*1e9; c=int(kv/(4096*l)/256)*256; if (c<4096) c=4096; print c}')"
  # --fit off: this llama.cpp fits unset arguments to the free memory by default; every one
  # that matters is set here, and a server that shrank itself would hide the out-of-memory.
  args='-ngl, "999", --fit, "off"'
  gguf_pid=""
  if [ -z "$gguf" ]; then
    check_python_gguf "$wheels"
    gguf="$out/random-${weights_gb}g-${ctx}.gguf"
    if [ ! -s "$gguf" ]; then
      # Written while llama-server builds (if it does): the two take minutes each.
      ( began=$SECONDS
        "$py" "$here/random_gguf.py" "$gguf.part" "$weights_gb" "$ctx" >>"$log" 2>&1 \
          && mv "$gguf.part" "$gguf" && echo "$((SECONDS - began))" >"$out/gguf-seconds" ) &
      gguf_pid=$!
    fi
  fi
  build_s="-"
  if [ -z "$llama_server" ]; then
    [ -n "$llama_src" ] || die "no llama-server: give --llama-server PATH or --llama-src DIR|TARBALL"
    check_build_llama "$llama_src"
  fi
  if [ -n "$gguf_pid" ]; then
    wait "$gguf_pid"
    [ -s "$gguf" ] || die "writing the GGUF failed (see $log)"
    say "model: $gguf written in $(cat "$out/gguf-seconds") s"
  fi
fi
[ -x "$llama_server" ] || die "no llama-server at $llama_server"
if [ "$prepare" = 1 ]; then
  say "prepared: --llama-server $llama_server --gguf $gguf"
  exit 0
fi
bytes="$(stat -L -c %s "$gguf")"
say "on $where: recipes a and b, each planned at $declared GB (b at $quarter GB in the second phase), serving $(basename "$gguf") ($bytes bytes), -c $ctx"

# --- sparkctl's world ---------------------------------------------------------------
export SPARKCTL_STATE_DIR="$out/state" SPARKCTL_RECIPES="$out/recipes" NO_COLOR=1
export SPARKCTL_WARM_GRACE=0s
SPARKCTL_PRODUCTION_PORT="$(check_free_port)"
export SPARKCTL_PRODUCTION_PORT
door="http://127.0.0.1:$SPARKCTL_PRODUCTION_PORT"
mkdir -p "$SPARKCTL_RECIPES"
port_a="$(check_free_port)" port_b="$(check_free_port)"
recipe() { # name port memory_gb
  cat >"$SPARKCTL_RECIPES/$1.yaml" <<EOF
name: $1
description: 'models-check - llama-server serving $(basename "$gguf") as model $1; $3 GB declared on $where'
engine: llama-server
runtime: process
binary: $llama_server
model:
  path: $gguf
  served_name: $1
server:
  port: $2
  args: [$args, -c, "$ctx", -np, "1"]
  memory_gb: $3
health:
  timeout: 10m
EOF
}
recipe a "$port_a" "$declared"
recipe b "$port_b" "$declared"

cleaned=""
cleanup() {
  [ -n "$cleaned" ] && return 0
  cleaned=1
  [ -n "${client_pid:-}" ] && kill "$client_pid" 2>/dev/null
  [ -n "${smi_pid:-}" ] && kill "$smi_pid" 2>/dev/null
  for n in a b; do "$sparkctl" down "$n" --force >>"$log" 2>&1; done
  "$sparkctl" frontdoor stop >>"$log" 2>&1
  check_stop_the_rest
  [ "$smoke" = 1 ] || "$smi" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
    >"$out/apps-after-cleanup.csv" 2>&1 || true
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

sc() { # tag, then sparkctl's arguments: output under $out/TAG.{txt,err,rc}
  local tag="$1"; shift
  "$sparkctl" "$@" >"$out/$tag.txt" 2>"$out/$tag.err"
  local rc=$?
  echo "$rc" >"$out/$tag.rc"
  say "sparkctl $* -> exit $rc"
  return $rc
}

# The door's log, as files and sizes now; later, what was written after that mark.
door_logs="$SPARKCTL_STATE_DIR/logs/frontdoor"
log_mark() { mkdir -p "$door_logs"; (cd "$door_logs" && for f in *; do [ -f "$f" ] && echo "$f $(stat -c %s "$f")"; done) >"$1"; }
log_since() { # mark file -> the door's log written since
  (cd "$door_logs" && for f in *; do
    [ -f "$f" ] || continue
    was="$(awk -v f="$f" '$1==f{print $2}' "$1")"
    tail -c +"$(( ${was:-0} + 1 ))" "$f"
  done)
}

# --- both models in production, neither running -------------------------------------
# As benches/turns.rs does it, one at a time: `rollback` never evicts, and the two do not fit
# together (the smoke's pool holds one as well).
sc setup-a rollback --to a || die "rollback --to a failed: $(tail -n 5 "$out/setup-a.err")"
sc setup-stop-1 frontdoor stop
sc setup-down-a down a --force
sc setup-b rollback --to b --add-model || die "rollback --to b --add-model failed: $(tail -n 5 "$out/setup-b.err")"
sc setup-stop-2 frontdoor stop
sc setup-down-b down b --force

# --- the clients --------------------------------------------------------------------
client() { # tag, seconds, clients ("prime": one request for a)
  "$py" - "$SPARKCTL_PRODUCTION_PORT" "$out/$1.client.jsonl" "$2" "$3" <<'EOF'
import http.client, json, sys, threading, time
port, path, secs, n = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
lock = threading.Lock()
f = open(path, "w")
def one(client, model):
    body = json.dumps({"model": model, "max_tokens": 8,
                       "messages": [{"role": "user", "content": "What is the capital of Japan?"}]})
    t0, ok, status, queued, err = time.time(), False, None, None, ""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
        c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        text = r.read().decode("utf-8", "replace")
        status, queued = r.status, r.getheader("x-sparkctl-queued-ms")
        ok = r.status == 200 and json.loads(text)["choices"][0]["message"] is not None
        err = "" if ok else f"HTTP {r.status}: {text[:300]}"
        c.close()
    except Exception as e:  # noqa: BLE001 - every failure is counted and kept
        err = repr(e)[:300]
    row = {"client": client, "model": model, "t0": t0, "t1": time.time(), "ok": ok,
           "status": status, "queued_ms": None if queued is None else float(queued), "err": err}
    with lock:
        f.write(json.dumps(row) + "\n")
        f.flush()
    return ok
if n == "prime":
    sys.exit(0 if one(0, "a") else 1)
end = time.time() + secs
def loop(i):
    k = 0
    while time.time() < end:
        one(i, "ba"[k % 2])
        k += 1
ts = [threading.Thread(target=loop, args=(i,)) for i in range(int(n))]
for t in ts:
    t.start()
for t in ts:
    t.join()
EOF
}

# --- one phase: the door started afresh, a first, then the clients ---------------------
phase() { # tag, b's memory_gb
  local tag="$1"
  recipe b "$port_b" "$2"
  say "phase $tag: a declares $declared GB, b $2 GB; $clients clients alternating b, a for $secs s"
  log_mark "$out/$tag.mark"
  date -u +%Y%m%d-%H%M%S%3N >"$out/$tag.window"
  sc "$tag-door-start" frontdoor start || die "the front door did not start"
  if [ "$smoke" != 1 ]; then
    "$smi" --query-gpu=timestamp,memory.used --format=csv,noheader,nounits -lms 500 \
      >"$out/$tag.gpu-used.csv" 2>/dev/null &
    smi_pid=$!
  fi
  local began=$SECONDS
  client "$tag-prime" 0 prime >>"$log" 2>&1 || say "phase $tag: the first request (a) failed"
  say "phase $tag: a answered its first request after $((SECONDS - began)) s"
  "$sparkctl" --json status >"$out/$tag.status-after-prime.json" 2>/dev/null
  client "$tag" "$secs" "$clients" >>"$log" 2>&1 &
  client_pid=$!
  wait "$client_pid"; client_pid=""
  sc "$tag-frontdoor-status" --json frontdoor status
  sc "$tag-status" --json status
  curl -s "$door/metrics" >"$out/$tag.metrics.txt" || true
  sc "$tag-memory" --json memory
  "$sparkctl" memory >"$out/$tag.memory-table.txt" 2>&1
  if [ -n "${smi_pid:-}" ]; then kill "$smi_pid" 2>/dev/null; wait "$smi_pid" 2>/dev/null; smi_pid=""; fi
  sc "$tag-door-stop" frontdoor stop
  for n in a b; do sc "$tag-down-$n" down "$n" --force; done
  log_since "$out/$tag.mark" >"$out/$tag.door.log"
  date -u +%Y%m%d-%H%M%S%3N >>"$out/$tag.window"
  return 0
}

phase 1-right "$declared"
phase 2-quarter "$quarter"

# --- nothing left -------------------------------------------------------------------
cleanup

# --- the summary --------------------------------------------------------------------
"$py" - "$out" "$where" "$declared" "$quarter" "$smoke" "$secs" "$clients" <<'EOF' | tee "$out/summary.txt"
import json, os, re, sys
out, where, declared, quarter, smoke, secs, nclients = sys.argv[1:8]
smoke = smoke == "1"
checks = []
def check(what, ok, detail=""):
    checks.append((what, ok))
    print(f"  [{'ok' if ok else 'FAIL'}] {what}{': ' + detail if detail else ''}")
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception:
        return None
def text(name):
    try:
        return open(os.path.join(out, name)).read()
    except Exception:
        return ""
def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[round(p / 100 * (len(xs) - 1))]
def metric(page, name, **labels):
    total = 0.0
    for l in page.splitlines():
        if not l.startswith(name) or l.startswith("#"):
            continue
        if all(f'{k}="{v}"' in l for k, v in labels.items()):
            try:
                total += float(l.split()[-1])
            except ValueError:
                pass
    return total

print(f"models-check on {where}: models a and b, each planned at {declared} GB "
      f"(one fits, two do not); {nclients} clients alternating b, a for {secs} s per phase")
if smoke:
    print("  (smoke: a CPU has no real out-of-memory; b's quarter fits beside a, so phase 2 "
          "shows the flow, not the retry)")

START = re.compile(r"model (\w+): starting (\S+) for (\d+) waiting")
prev_learned = {}
for tag, b_gb in (("1-right", declared), ("2-quarter", quarter)):
    print(f"phase {tag}: a declares {declared} GB, b {b_gb} GB")
    rows = [json.loads(l) for l in text(f"{tag}.client.jsonl").splitlines() if l.strip()]
    prime = [json.loads(l) for l in text(f"{tag}-prime.client.jsonl").splitlines() if l.strip()]
    if prime:
        p = prime[0]
        print(f"  first request (a, nothing running): {'answered' if p['ok'] else 'FAILED'} "
              f"after {p['t1'] - p['t0']:.1f} s{'' if p['ok'] else ': ' + p['err']}")
    ok = [r for r in rows if r["ok"]]
    bad = [r for r in rows if not r["ok"]]
    status = load(f"{tag}-frontdoor-status.txt") or {}
    models = {m.get("name"): m for m in status.get("models", [])}
    page = text(f"{tag}.metrics.txt")
    for m in ("a", "b"):
        mine = [r for r in rows if r["model"] == m]
        waits = [r["queued_ms"] or 0.0 for r in mine if r["ok"]]
        st = models.get(m, {})
        loads = st.get("loads")
        evicted = metric(page, "sparkctl_frontdoor_model_unloads", model=m, why="evicted")
        print(f"  model {m}: {sum(r['ok'] for r in mine)} answered, {sum(not r['ok'] for r in mine)} failed; "
              f"starts on demand {loads}, evicted {evicted:.0f}; wait p50 {pct(waits, 50):.0f} ms, "
              f"p99 {pct(waits, 99):.0f} ms, max {max(waits, default=0):.0f} ms")
    waits = [r["queued_ms"] or 0.0 for r in ok]
    print(f"  all: {len(ok)} answered, {len(bad)} failed; wait p50 {pct(waits, 50):.0f} ms, "
          f"p99 {pct(waits, 99):.0f} ms, max {max(waits, default=0):.0f} ms")
    for r in bad[:5]:
        print(f"    failed ({r['model']}): {r['err']}")
    # The door's log, start by start: what each start met on its way. The door makes room
    # before it says `starting` (`room from the idle`, `X unloaded (evicted for Y, …)`): those
    # wait for Y's next start; an eviction after an out-of-memory comes after it. A start that
    # found the model in the way busy (within its turn) says `starting` again at each look.
    starts, cur, pending = [], None, {}
    for line in text(f"{tag}.door.log").splitlines():
        s = START.search(line)
        if s:
            if cur and cur["model"] == s.group(1) and cur["end"] == "?" and not (cur["room"] or cur["oom"]):
                cur["looks"] += 1
                continue
            room = pending.pop(s.group(1), {"room": False, "evicted": []})
            cur = {"model": s.group(1), "room": room["room"], "oom": 0, "end": "?",
                   "evicted": room["evicted"], "looks": 1}
            starts.append(cur)
            continue
        made = re.search(r"model (\w+): room from the idle", line)
        gone = re.search(r"model (\w+): \S+ unloaded \((evicted for (\w+)[^)]*)\)", line)
        if made:
            pending.setdefault(made.group(1), {"room": False, "evicted": []})["room"] = True
            continue
        if gone:
            pending.setdefault(gone.group(3), {"room": False, "evicted": []})["evicted"].append(
                f"{gone.group(1)} ({gone.group(2)})")
            continue
        if cur is None:
            continue
        if f"model {cur['model']}:" in line and "ran out of memory as it started: making room" in line:
            cur["oom"] += 1
        elif "unloaded (" in line:
            m = re.search(r"model (\w+): \S+ unloaded \((.*)\)", line)
            if m and m.group(1) != cur["model"]:
                cur["evicted"].append(f"{m.group(1)} ({m.group(2)})")
        elif f"model {cur['model']}:" in line and "serves after" in line:
            cur["end"] = "served after " + line.split("serves after")[1].strip()
        elif f"model {cur['model']}:" in line and ("did not start" in line or "cannot start" in line):
            cur["end"] = "FAILED: " + line.split(": ", 2)[-1][:200]
    print(f"  the door's log: {len(starts)} starts on demand")
    for i, s in enumerate(starts):
        how = ("out of memory, room made, tried once more" if s["oom"]
               else "room made first" if s["room"] or s["evicted"] else "fitted as planned")
        ev = "; evicted " + ", ".join(s["evicted"]) if s["evicted"] else ""
        looks = f" (waited for room: {s['looks']} looks)" if s["looks"] > 1 else ""
        print(f"    {i + 1:>2}. {s['model']}: {how}{ev}{looks}; {s['end']}")
    # The engine's own words: each start's log (STATE/logs/NAME/TIME.log) within the phase.
    window = text(f"{tag}.window").split()
    for m in ("a", "b"):
        d = os.path.join(out, "state", "logs", m)
        names = sorted(n for n in (os.listdir(d) if os.path.isdir(d) else [])
                       if len(window) == 2 and window[0] <= n[:18] <= window[1])
        for n in names:
            said = [l.strip() for l in open(os.path.join(d, n), errors="replace")
                    if "out of memory" in l.lower() or "cudamalloc failed" in l.lower()]
            if said:
                print(f"    {m}'s start log {n}: {said[0][:240]}")
    used = []
    for l in text(f"{tag}.gpu-used.csv").splitlines():
        try:
            used.append(float(l.split(",")[-1]))
        except ValueError:
            pass
    if used:
        print(f"  GPU memory used (nvidia-smi every 0.5 s): peak {max(used) * 1048576 / 1e9:.1f} GB")
    # What the door learned (STATE/memory/learned.json, the most per recipe hash): a figure
    # of a recipe hash the phase before did not know is this phase's recipe (b's quarter).
    learned = load(f"{tag}-memory.txt") or {}
    known = {(r, f.get("key", {}).get("recipe_hash")) for r, figs in prev_learned.items() for f in figs}
    new_gb = {}
    for recipe, figs in sorted(learned.items()):
        for f in figs:
            new = (recipe, f.get("key", {}).get("recipe_hash")) not in known
            if new:
                new_gb[recipe] = max(new_gb.get(recipe, 0), f.get("gb", 0))
            print(f"  memory learned: {recipe}: {f.get('gb', 0):.2f} GB, {f.get('what', '-')} "
                  f"(at {f.get('at', '-')}{'' if new else '; a recipe hash known in the phase before'})")
    prev_learned = learned
    table = text(f"{tag}.memory-table.txt").strip()
    if table:
        print("  sparkctl memory:\n    " + "\n    ".join(table.splitlines()))
    # Checks.
    check(f"{tag}: 0 failed requests", not bad and len(ok) > 0, f"{len(ok)} answered, {len(bad)} failed")
    check(f"{tag}: both models answered", all(any(r["ok"] and r["model"] == m for r in rows) for m in "ab"))
    b_starts = [s for s in starts if s["model"] == "b"]
    if smoke:
        continue
    check(f"{tag}: every start on demand served",
          bool(starts) and all(s["end"].startswith("served") for s in starts),
          ", ".join(f"{s['model']} {s['end']}" for s in starts if not s["end"].startswith("served")) or "")
    if tag == "1-right":
        check(f"{tag}: no start ran out of memory", not any(s["oom"] for s in starts),
              f"{sum(s['oom'] for s in starts)} out-of-memory starts")
        check(f"{tag}: each start beside the other model made room first",
              all(s["room"] or s["evicted"] for s in starts[1:]),
              f"{sum(1 for s in starts[1:] if s['room'] or s['evicted'])} of {len(starts[1:])} after the first")
    else:
        ooms = [i for i, s in enumerate(b_starts) if s["oom"]]
        check(f"{tag}: b's first start ran out of memory, was given room and served",
              bool(b_starts) and ooms[:1] == [0] and b_starts[0]["end"].startswith("served"),
              f"b's starts with an out-of-memory: {[i + 1 for i in ooms]} of {len(b_starts)}")
        check(f"{tag}: b's later starts evicted first, no second out-of-memory",
              len(b_starts) >= 2 and all(not s["oom"] and (s["room"] or s["evicted"]) for s in b_starts[1:]),
              f"{len(b_starts) - 1} later starts of b")
        b_learned = new_gb.get("b", 0)
        check(f"{tag}: the door learned what b held, more than its {quarter} GB",
              b_learned > float(quarter), f"{b_learned:.2f} GB learned")
left = text("left-running.txt").strip()
check("nothing the run started runs at its end", left == "", left or "none left")
print("models-check: " + ("every check held" if all(ok for _, ok in checks)
                          else "FAILED: " + ", ".join(w for w, ok in checks if not ok)))
sys.exit(0 if all(ok for _, ok in checks) else 1)
EOF
