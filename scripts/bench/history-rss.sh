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
  cargo build --release -q -p skyconf-cli -p skyconf-bench
fi
SKY=$TARGET/release/skyconf
SKYBENCH=$TARGET/release/skyconf-bench

# run NAME BINARY [SERVE FLAGS...]: one server, RELEASES - 1 edits; its report in $WORK/NAME.json.
run() {
  local name=$1 binary=$2 grpc admin pid doc
  shift 2
  grpc=$(free_port) admin=$(free_port)
  doc=$WORK/$name.yaml
  "$SKYBENCH" document --services "$SERVICES" --keys "$KEYS" >"$doc"
  log "$name: $binary serve $* ($SERVICES services, $RELEASES releases)"
  taskset -c "$SERVER_CPU" "$binary" serve --file "$doc" --grpc-addr "127.0.0.1:$grpc" \
    --admin-addr "127.0.0.1:$admin" "$@" >"$WORK/$name-serve.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  python3 "$BENCH_PY/history_rss_run.py" "$name" "$pid" "$admin" "$doc" "$RELEASES" "$SERVICES" >"$WORK/$name.json" || { cat "$WORK/$name-serve.log" >&2; exit 1; }
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
python3 "$BENCH_PY/history_rss_report.py" "$WORK" "$OUT" "$COMMAND" "$COMMIT" \
  "$(machine)" \
  "${NAMES[@]}"
echo "history-rss.sh: wrote $OUT (work files: $WORK)" >&2
