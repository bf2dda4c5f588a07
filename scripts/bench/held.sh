#!/usr/bin/env bash
# Held polls at fleet scale (issue 13): N agents (default 10,000), each on its own HTTP/2
# connection and timed like the Java agent (a 30 s deadline per call, a fixed rate of 20 s), first
# against `skyconf serve` (which holds unchanged polls), then against `skyconf serve
# --no-hold-polls` (the same agents then simply poll every 20 s), one server at a time, in one run.
# For each, `skyconf-bench held` reports: a file write (a new file renamed over the served one,
# every service changed) until all N hold the new digest, p50/p99/max over the writes; the
# server's VmRSS before the agents connect and with all N connected (held, or polled once), per
# agent; the server's CPU (utime + stime) while nothing changes.
#
#   scripts/bench/held.sh [OUT.json]     # about 8 minutes on 2 cores, after the release build
#
# Prints one JSON object ({"held": ..., "plain": ...}, with the command and the machine) on stdout
# and into OUT.json (default docs/benchmarks/held.json), and a Markdown summary on stderr.
# The server runs on CPU $SERVER_CPU (0) and the agents on CPU $LOAD_CPU (1), pinned with taskset.
# Environment: AGENTS (10000), SERVICES (1000), WRITES (5), IDLE (30s), SERVER_CPU, LOAD_CPU,
# CARGO_TARGET_DIR (target/), SKIP_BUILD=1 (use the release binary as it is), SMAPS_DIR (copy the
# server's /proc/PID/smaps before, at steady state and after the idle window into SMAPS_DIR/MODE/;
# the report has its smaps_rollup at those moments either way), SERVE_ENV (VAR=value ... set for
# the server only, e.g. MIMALLOC_PURGE_DELAY=0), SERVER=floor (`skyconf-bench floor`, a
# measurement-only CDS server on a minimal HTTP/2 path of its own, instead of `skyconf serve`),
# PATIENCE (90s: how long the agents may take to get the first document, or to be held, on a
# machine others share).
# The agents connect from 127.0.0.2-5 so ports never run short. Descriptors (the script raises
# its soft limit to the hard one, and checks both sides before starting): the load generator needs
# N + 200, and the server accepts at most its soft limit less 384 connections (256 admin, 128
# reserved), so N must be at most that. Where a process may hold 20,000 descriptors (issue 16),
# AGENTS=19000 fits both: one generator process then holds 19,000 connections and the server
# 19,000 of its 19,616.
#
# Issue 16's run (about 10 minutes: with the Java agent's timing each held write waits up to 20 s
# for every agent to poll again):
#
#   AGENTS=19000 WRITES=10 scripts/bench/held.sh docs/benchmarks/scale.json
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

# shellcheck source=scripts/bench/lib.sh
. "$ROOT/scripts/bench/lib.sh"
COMMIT=$(bench_commit)
COMMAND=$(bench_command scripts/bench/held.sh "${1:-}" AGENTS SERVICES WRITES IDLE SERVER_CPU LOAD_CPU SKIP_BUILD SERVE_ENV SERVER PATIENCE)
OUT=${1:-$ROOT/docs/benchmarks/held.json}
AGENTS=${AGENTS:-10000}
SERVICES=${SERVICES:-1000}
WRITES=${WRITES:-5}
IDLE=${IDLE:-30s}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/skyconf-held.XXXXXX")

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  log "Build (release)"
  cargo build --release -q -p skyconf-cli -p skyconf-bench
fi
SKY=$TARGET/release/skyconf
SKYBENCH=$TARGET/release/skyconf-bench
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[ "$(ulimit -n)" -ge $((AGENTS + 200)) ] || { echo "held.sh: $AGENTS agents need at least $((AGENTS + 200)) descriptors in the load generator (ulimit -n is $(ulimit -n))" >&2; exit 1; }
[ "$(ulimit -n)" -ge $((AGENTS + 384 + 16)) ] || { echo "held.sh: the server accepts at most $(( $(ulimit -n) - 384 )) agent connections under ulimit -n $(ulimit -n); $AGENTS agents need $((AGENTS + 400))" >&2; exit 1; }

# run MODE [SERVE FLAGS...]: one server, the agents against it; the report in $WORK/MODE.json.
run() {
  local mode=$1 grpc admin pid doc
  shift
  grpc=$(free_port) admin=$(free_port)
  doc=$WORK/$mode.yaml
  [ -z "${SMAPS_DIR:-}" ] || mkdir -p "$SMAPS_DIR/$mode"
  "$SKYBENCH" document --services "$SERVICES" --keys 6 >"$doc"
  log "$mode: skyconf serve $* on CPU $SERVER_CPU, $AGENTS agents on CPU $LOAD_CPU"
  if [ "${SERVER:-skyconf}" = floor ]; then
    # shellcheck disable=SC2086,SC2046 # SERVE_ENV is a list of assignments; --no-hold a word
    env ${SERVE_ENV:-} taskset -c "$SERVER_CPU" "$SKYBENCH" floor --file "$doc" --addr "127.0.0.1:$grpc" \
      --admin-addr "127.0.0.1:$admin" $([ "$mode" = held ] || echo --no-hold) >"$WORK/$mode-serve.log" 2>&1 &
  else
    # shellcheck disable=SC2086 # SERVE_ENV is a list of assignments
    env ${SERVE_ENV:-} taskset -c "$SERVER_CPU" "$SKY" serve --file "$doc" --grpc-addr "127.0.0.1:$grpc" \
      --admin-addr "127.0.0.1:$admin" "$@" >"$WORK/$mode-serve.log" 2>&1 &
  fi
  pid=$!
  PIDS+=("$pid")
  wait_ready "$admin"
  taskset -c "$LOAD_CPU" "$SKYBENCH" held --mode "$mode" --addr "127.0.0.1:$grpc" --admin-addr "127.0.0.1:$admin" \
    --server-pid "$pid" --file "$doc" -c "$AGENTS" --services "$SERVICES" --keys 6 --writes "$WRITES" --idle "$IDLE" \
    --patience "${PATIENCE:-90s}" --local-addr 127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5 ${SMAPS_DIR:+--smaps-dir "$SMAPS_DIR/$mode"} \
    --json --quiet >"$WORK/$mode.json" \
    || { cat "$WORK/$mode.json" "$WORK/$mode-serve.log" >&2; echo "held.sh: the $mode run failed" >&2; exit 1; }
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  PIDS=()
}

run held
run plain --no-hold-polls

log "Report"
mkdir -p "$(dirname "$OUT")"
python3 "$BENCH_PY/held_report.py" "$WORK" "$OUT" "$COMMAND" "$COMMIT" \
  "$(machine)" \
  "$SERVER_CPU" "$LOAD_CPU"
echo "held.sh: wrote $OUT (work files: $WORK)" >&2
