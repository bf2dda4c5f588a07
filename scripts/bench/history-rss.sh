#!/usr/bin/env bash
# Memory of the release history (issue 16): the server's RSS serving a 10,000-service document
# with one release in its history, then with RELEASES (200, the default retention) after that many
# file edits, each changing one service (replaced by rename, as editors save), each waited for
# until it is served. Without a data directory (the history in memory, the default) and with
# --data-dir (memory keeps a summary per release), one server at a time, in one run.
#
#   scripts/bench/history-rss.sh [OUT.json]       # about 3 minutes on 2 cores, after the release build
#
# BEFORE=PATH measures another skyconf binary the same way in the same run (an older build, to
# compare). Prints one JSON object per server and mode on stdout and into OUT.json (default
# docs/benchmarks/history-rss.json), and a Markdown table on stderr.
# Environment: SERVICES (10000), KEYS (6), RELEASES (200), SERVER_CPU (0), BEFORE,
# CARGO_TARGET_DIR (target/), SKIP_BUILD=1 (use the release binary as it is).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

# shellcheck source=scripts/bench/lib.sh
. "$ROOT/scripts/bench/lib.sh"
COMMIT=$(bench_commit)
COMMAND=$(bench_command scripts/bench/history-rss.sh "${1:-}" SERVICES KEYS RELEASES SERVER_CPU BEFORE SKIP_BUILD)
OUT=${1:-$ROOT/docs/benchmarks/history-rss.json}
SERVICES=${SERVICES:-10000}
KEYS=${KEYS:-6}
RELEASES=${RELEASES:-200}
SERVER_CPU=${SERVER_CPU:-0}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/skyconf-history.XXXXXX")

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  log "Build (release)"
  cargo build --release -q -p skyconf-cli
fi
SKY=$TARGET/release/skyconf

# run NAME BINARY [SERVE FLAGS...]: one server, RELEASES - 1 edits; its report in $WORK/NAME.json.
run() {
  local name=$1 binary=$2 grpc admin pid doc
  shift 2
  grpc=$(free_port) admin=$(free_port)
  doc=$WORK/$name.yaml
  "$SKY" bench document --services "$SERVICES" --keys "$KEYS" >"$doc"
  log "$name: $binary serve $* ($SERVICES services, $RELEASES releases)"
  taskset -c "$SERVER_CPU" "$binary" serve --file "$doc" --grpc-addr "127.0.0.1:$grpc" \
    --admin-addr "127.0.0.1:$admin" "$@" >"$WORK/$name-serve.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  python3 - "$name" "$pid" "$admin" "$doc" "$RELEASES" "$SERVICES" >"$WORK/$name.json" <<'EOF' || { cat "$WORK/$name-serve.log" >&2; exit 1; }
import json, os, re, sys, time, urllib.request
name, pid, admin, doc, releases, services = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])

def get(path):
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}{path}", timeout=10) as reply:
        return json.load(reply)

def version():
    try:
        return get("/readyz").get("version") or 0
    except OSError:
        return 0

def rss_kb():
    with open(f"/proc/{pid}/status") as status:
        return int(re.search(r"^VmRSS:\s+(\d+)", status.read(), re.M).group(1))

def settled_rss():
    # RSS once it stopped moving: the persister and the allocator settle after the last edit.
    time.sleep(3)
    last = rss_kb()
    for _ in range(20):
        time.sleep(1)
        now = rss_kb()
        if abs(now - last) <= 64:
            return now
        last = now
    return last

deadline = time.time() + 60
while version() == 0:
    if time.time() > deadline:
        sys.exit(f"{name}: not ready within 60 s")
    time.sleep(0.1)
one = settled_rss()
text = open(doc).read()
edits_ms = []
for edit in range(1, releases):
    # One service's sample rate changes: `bench-svc-<i>:` then its first key.
    i = (edit * 7919) % services
    text, n = re.subn(rf"(\n  bench-svc-{i}:\n    agent\.sample_n_per_3_secs: )\d+", rf"\g<1>{100_000 + edit}", text, count=1)
    if n != 1:
        sys.exit(f"{name}: edit {edit} found no service {i}")
    before = version()
    started = time.time()
    with open(doc + ".tmp", "w") as f:
        f.write(text)
    os.replace(doc + ".tmp", doc)
    while version() <= before:
        if time.time() - started > 30:
            sys.exit(f"{name}: edit {edit} not served within 30 s")
        time.sleep(0.005)
    edits_ms.append((time.time() - started) * 1000)
kept = get("/api/v1/releases?limit=1")["total"]
many = settled_rss()
edits_ms.sort()
print(json.dumps({"name": name, "rss_one_release_kb": one, "rss_many_releases_kb": many, "ratio": round(many / one, 3),
                  "releases_kept": kept, "edits": len(edits_ms),
                  "edit_served_ms_p50": round(edits_ms[len(edits_ms) // 2], 1), "document_bytes": len(text)}))
EOF
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  PIDS=()
}

NAMES=()
run memory "$SKY"; NAMES+=(memory)
run data-dir "$SKY" --data-dir "$WORK/data"; NAMES+=(data-dir)
if [ -n "${BEFORE:-}" ]; then
  run before-memory "$BEFORE"; NAMES+=(before-memory)
  run before-data-dir "$BEFORE" --data-dir "$WORK/before-data"; NAMES+=(before-data-dir)
fi

log "Report"
mkdir -p "$(dirname "$OUT")"
python3 - "$WORK" "$OUT" "$COMMAND" "$COMMIT" \
  "$(machine)" \
  "${NAMES[@]}" <<'EOF'
import datetime, json, sys
work, out, command, commit, machine, *names = sys.argv[1:]
runs = [json.load(open(f"{work}/{n}.json")) for n in names]
report = {"command": command, "commit": commit, "machine": machine,
          "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "runs": runs}
with open(out, "w") as f:
    json.dump(report, f, indent=1)
    f.write("\n")
print(json.dumps(report))
print("| server | RSS, 1 release | RSS, releases kept | × | edit → served p50 |\n|---|---|---|---|---|", file=sys.stderr)
for r in runs:
    print(f"| {r['name']} | {r['rss_one_release_kb'] / 1024:.1f} MB | {r['rss_many_releases_kb'] / 1024:.1f} MB ({r['releases_kept']}) "
          f"| {r['ratio']:.2f}× | {r['edit_served_ms_p50']:.0f} ms |", file=sys.stderr)
EOF
echo "history-rss.sh: wrote $OUT (work files: $WORK)" >&2
