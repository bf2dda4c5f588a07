#!/usr/bin/env bash
# Latency at a realistic load (issue 16): 100,000 agents polling every 20 s make 5,000 calls/s.
# `skyconf-bench` sends RATE calls/s (default 5,000) as a fixed-rate open loop (calls evenly
# spaced, latency counted from each call's send time, so a stalled server cannot hide its queue),
# spread over CONNECTIONS connections (default 1,000) with one call in flight each, in the fleet's mix (80 %
# unchanged, 15 % changed, 5 % unknown services) over a 10,000-service document, and checks every
# answer. The method that keeps the load generator's own scheduling out of the figure: the server
# is pinned to CPU $SERVER_CPU and the generator to CPU $LOAD_CPU (taskset), so they never share a
# core, and at 5,000 calls/s the generator's core is mostly idle (its CPU time is reported).
#
# Side by side, in one run, one server at a time: skyconf and, where ../shared/bench is present
# (not in a user's clone: the script says so and measures skyconf alone), the null server (tonic
# answering every call with an empty Commands without a lookup: the gRPC stack's own latency).
#
#   scripts/bench/latency-at-rate.sh [OUT.json]   # about 3 minutes after the release build
#
# Environment: RATE (5000), CONNECTIONS (1000), DURATION (seconds, 30), ROUNDS (2), SERVER_CPU (0),
# LOAD_CPU (1), SHARED_BENCH (../shared/bench), CARGO_TARGET_DIR (target/), SKIP_BUILD=1.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

# shellcheck source=scripts/bench/lib.sh
. "$ROOT/scripts/bench/lib.sh"
COMMIT=$(bench_commit)
COMMAND=$(bench_command scripts/bench/latency-at-rate.sh "${1:-}" RATE CONNECTIONS DURATION ROUNDS SERVER_CPU LOAD_CPU SKIP_BUILD)
MACHINE_BEFORE=$(machine)
OUT=${1:-$ROOT/docs/benchmarks/latency-at-rate.json}
RATE=${RATE:-5000}
CONNECTIONS=${CONNECTIONS:-1000}
DURATION=${DURATION:-30}
ROUNDS=${ROUNDS:-2}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
SHARED=${SHARED_BENCH:-$(cd "$ROOT/.." && pwd)/shared/bench}
TMP=${TMPDIR:-/tmp}
WORK=$(mktemp -d "$TMP/skyconf-latency.XXXXXX")

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  log "Build (release)"
  cargo build --release -q -p skyconf-cli -p skyconf-bench
fi
SKY=$TARGET/release/skyconf
SKYBENCH=$TARGET/release/skyconf-bench
SERVERS=(skyconf)
if [ -d "$SHARED/nullserver" ]; then
  CARGO_TARGET_DIR=$TMP/nullserver cargo build --release -q --manifest-path "$SHARED/nullserver/Cargo.toml"
  NULL=$TMP/nullserver/release/nullserver
  SERVERS+=(nullserver)
else
  echo "latency-at-rate.sh: no $SHARED: skyconf is measured alone, without the null server beside it" >&2
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
DOC=$WORK/doc-10k.yaml
"$SKYBENCH" document --services 10000 --keys 6 >"$DOC"

# measure SERVER ROUND: one server, one load run; the report in $WORK/SERVER-ROUND.json.
measure() {
  local server=$1 round=$2 port admin pid check=full before after
  port=$(free_port) admin=$(free_port)
  if [ "$server" = skyconf ]; then
    taskset -c "$SERVER_CPU" "$SKY" serve --file "$DOC" --grpc-addr "127.0.0.1:$port" --admin-addr "127.0.0.1:$admin" \
      >"$WORK/$server.log" 2>&1 &
  else
    check=status
    taskset -c "$SERVER_CPU" "$NULL" "$port" >"$WORK/$server.log" 2>&1 &
  fi
  pid=$!
  PIDS+=("$pid")
  wait_port "$port"
  log "$server, round $round: $RATE calls/s on $CONNECTIONS connections for $DURATION s"
  before=$(cpu_ticks "$pid")
  taskset -c "$LOAD_CPU" "$SKYBENCH" --addr "127.0.0.1:$port" --services 10000 --scenario mixed --check "$check" \
    -c "$CONNECTIONS" -m 1 --rate "$RATE" --duration "${DURATION}s" --warmup 2s --json --quiet \
    >"$WORK/$server-$round.json" || { cat "$WORK/$server-$round.json" "$WORK/$server.log" >&2; exit 1; }
  after=$(cpu_ticks "$pid")
  python3 "$BENCH_PY/latency_round.py" "$WORK/$server-$round.json" "$((after - before))" "$(getconf CLK_TCK)" "$((DURATION + 2))"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  PIDS=()
}

for round in $(seq 1 "$ROUNDS"); do
  for server in "${SERVERS[@]}"; do
    measure "$server" "$round"
  done
done

log "Report"
mkdir -p "$(dirname "$OUT")"
python3 "$BENCH_PY/latency_report.py" "$WORK" "$OUT" "$COMMAND" "$COMMIT" \
  "$MACHINE_BEFORE (before the run)" \
  "$ROUNDS" "${SERVERS[@]}"
echo "latency-at-rate.sh: wrote $OUT (work files: $WORK)" >&2
