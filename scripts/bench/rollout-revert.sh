#!/usr/bin/env bash
# Rollout revert (issue 15): how soon a rollout's failed gate reaches the agents it had reached.
# N agents (default 1,000), each on its own HTTP/2 connection, each reporting its instance name on
# that connection and timed like the Java agent (a 30 s deadline per call, a fixed rate of 20 s),
# first against `skyconf serve` (which holds unchanged polls), then against `skyconf serve
# --no-hold-polls` (the same agents then simply poll every 20 s), one server at a time, in one run.
# For each, `skyconf-bench revert` runs ROUNDS rollouts of a candidate that changes every service,
# one wave of 100 % gated on a Prometheus query (a stand-in inside the tool, so the failure's
# moment is exact), turns the query's answer bad once every agent holds the candidate, and times:
# the failure → the server's `reverted` event, that event → every agent holding its old digest.
#
#   scripts/bench/rollout-revert.sh [OUT.json]   # about 6 minutes on 2 cores, after the release build
#
# Prints one JSON object ({"held": ..., "plain": ...}, with the command and the machine) on stdout
# and into OUT.json (default docs/benchmarks/rollout-revert.json), and a Markdown table on stderr.
# The server runs on CPU $SERVER_CPU (0) and the agents on CPU $LOAD_CPU (1), pinned with taskset.
# Environment: AGENTS (1000), SERVICES (100), ROUNDS (5), SERVER_CPU, LOAD_CPU,
# CARGO_TARGET_DIR (target/), SKIP_BUILD=1 (use the release binary as it is).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

# shellcheck source=scripts/bench/lib.sh
. "$ROOT/scripts/bench/lib.sh"
COMMIT=$(bench_commit)
COMMAND=$(bench_command scripts/bench/rollout-revert.sh "${1:-}" AGENTS SERVICES ROUNDS SERVER_CPU LOAD_CPU SKIP_BUILD)
OUT=${1:-$ROOT/docs/benchmarks/rollout-revert.json}
AGENTS=${AGENTS:-1000}
SERVICES=${SERVICES:-100}
ROUNDS=${ROUNDS:-5}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/skyconf-revert.XXXXXX")

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  log "Build (release)"
  cargo build --release -q -p skyconf-cli -p skyconf-bench
fi
SKY=$TARGET/release/skyconf
SKYBENCH=$TARGET/release/skyconf-bench
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[ "$(ulimit -n)" -ge $((AGENTS + 200)) ] || { echo "rollout-revert.sh: $AGENTS agents need at least $((AGENTS + 200)) descriptors (ulimit -n is $(ulimit -n))" >&2; exit 1; }

# run MODE [SERVE FLAGS...]: one server, the agents and rollouts against it; the report in $WORK/MODE.json.
run() {
  local mode=$1 grpc admin pid doc
  shift
  grpc=$(free_port) admin=$(free_port)
  doc=$WORK/$mode.yaml
  "$SKYBENCH" document --services "$SERVICES" --keys 6 >"$doc"
  log "$mode: skyconf serve $* on CPU $SERVER_CPU, $AGENTS agents on CPU $LOAD_CPU, $ROUNDS rollouts"
  taskset -c "$SERVER_CPU" "$SKY" serve --file "$doc" --data-dir "$WORK/$mode-data" \
    --grpc-addr "127.0.0.1:$grpc" --admin-addr "127.0.0.1:$admin" "$@" >"$WORK/$mode-serve.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_ready "$admin"
  taskset -c "$LOAD_CPU" "$SKYBENCH" revert --addr "127.0.0.1:$grpc" --admin-addr "127.0.0.1:$admin" \
    --file "$doc" -c "$AGENTS" --services "$SERVICES" --keys 6 --rounds "$ROUNDS" \
    --local-addr 127.0.0.2,127.0.0.3 --json --quiet >"$WORK/$mode.json" \
    || { cat "$WORK/$mode.json" "$WORK/$mode-serve.log" >&2; echo "rollout-revert.sh: the $mode run failed" >&2; exit 1; }
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  PIDS=()
}

run held
run plain --no-hold-polls

log "Report"
mkdir -p "$(dirname "$OUT")"
python3 "$BENCH_PY/revert_report.py" "$WORK" "$OUT" "$COMMAND" "$COMMIT" \
  "$(machine)" \
  "$SERVER_CPU" "$LOAD_CPU"
echo "rollout-revert.sh: wrote $OUT (work files: $WORK)" >&2
