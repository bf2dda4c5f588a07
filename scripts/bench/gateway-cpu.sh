#!/usr/bin/env bash
# CPU time per forwarded trace-segment call: nginx (grpc_pass) and one or more skyconf builds,
# side by side, rounds interleaved, a fixed number of calls each. Where gateway.sh measures
# throughput (which moves with whatever else the host runs), this counts what each call costs the
# proxy's core and the upstream's, so two builds of the gateway (or two settings) can be told
# apart by a few percent on a noisy machine.
#
#   scripts/bench/gateway-cpu.sh                          # nginx and this tree's release build
#   scripts/bench/gateway-cpu.sh old=/tmp/skyconf-old new=target/release/skyconf
#   scripts/bench/gateway-cpu.sh base=target/release/skyconf two=target/release/skyconf:two.yaml
#
# Each argument is NAME=BINARY[:CONFIG] (CONFIG: a skyconf.yaml passed as --config, for
# settings such as `skyconf.gateway.connectionsPerUpstream`). nginx is always measured too.
# The upstream (`skyconf-bench sink`, the same binary for every target) and the proxy share CPU
# $SERVER_CPU; h2load sends CALLS client streams of 100 framed SegmentObjects (32 connections x
# 2 streams) from CPU $LOAD_CPU. A proxy's CPU time is read from /proc before and after (nginx:
# its worker). Every target starts fresh each round.
#
# Output: a table (median over rounds of proxy and upstream microseconds per call, and the proxy's
# ratio to nginx's, round by round) on stderr, and one JSON line per measurement on stdout.
# Environment: ROUNDS (4), CALLS (20000), SERVER_CPU (0), LOAD_CPU (1), SINK (the skyconf-bench
# that runs the sink; default this checkout's release build).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
ROUNDS=${ROUNDS:-4}
CALLS=${CALLS:-20000}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/skyconf-gateway-cpu.XXXXXX")
RESULTS=$WORK/cpu.jsonl
# shellcheck source=scripts/bench/lib.sh
. "$ROOT/scripts/bench/lib.sh"

command -v h2load >/dev/null || fail "needs h2load (Debian: nghttp2-client)"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || fail "needs nginx (Debian: nginx)"

NAMES=(nginx)
declare -A BIN CONFIG
if [ $# = 0 ]; then
  cargo build --release -q -p skyconf-cli -p skyconf-bench
  set -- "skyconf=${CARGO_TARGET_DIR:-$ROOT/target}/release/skyconf"
fi
for spec in "$@"; do
  name=${spec%%=*}
  rest=${spec#*=}
  [ "$name" != "$spec" ] && [ "$name" != nginx ] || fail "expected NAME=BINARY[:CONFIG], got $spec"
  BIN[$name]=${rest%%:*}
  CONFIG[$name]=$([ "$rest" != "${rest#*:}" ] && echo "${rest#*:}" || true)
  [ -x "${BIN[$name]}" ] || fail "$name: ${BIN[$name]} is not an executable"
  NAMES+=("$name")
done
if [ -z "${SINK:-}" ]; then
  cargo build --release -q -p skyconf-bench
fi
SINK_BIN=${SINK:-${CARGO_TARGET_DIR:-$ROOT/target}/release/skyconf-bench}

python3 "$BENCH_PY/gateway_bodies.py" "$WORK" 100 >/dev/null
P_SINK=$(free_port) P_PROXY=$(free_port) P_ADMIN=$(free_port)
PATH_SEGMENTS=/skywalking.v3.TraceSegmentReportService/collect
# The same nginx as gateway.sh's.
nginx_grpc_conf "$WORK/nginx" "$P_PROXY" "$P_SINK"

us_per_call() { python3 -c "import os; print(round(($2 - $1) * 1e6 / os.sysconf('SC_CLK_TCK') / $CALLS, 1))"; }
h2() {
  taskset -c "$LOAD_CPU" h2load -n "$1" -c 32 -m 2 -t 1 -H 'content-type: application/grpc' -H 'te: trailers' \
    -d "$WORK/segments.bin" "http://127.0.0.1:$P_PROXY$PATH_SEGMENTS" 2>&1
}

for round in $(seq 1 "$ROUNDS"); do
  for name in "${NAMES[@]}"; do
    taskset -c "$SERVER_CPU" "$SINK_BIN" sink --addr 127.0.0.1:$P_SINK --json >/dev/null 2>"$WORK/sink.err" &
    sink=$!
    wait_port "$P_SINK"
    if [ "$name" = nginx ]; then
      taskset -c "$SERVER_CPU" "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" >"$WORK/nginx.log" 2>&1 &
      proxy=$!
      wait_port "$P_PROXY"
      measured=$(pgrep -P "$proxy" | head -1)
    else
      args=(serve --file examples/agent-configurations.yaml --grpc-addr 127.0.0.1:$P_PROXY
        --admin-addr 127.0.0.1:$P_ADMIN --upstream 127.0.0.1:$P_SINK)
      [ -n "${CONFIG[$name]}" ] && args+=(--config "${CONFIG[$name]}")
      taskset -c "$SERVER_CPU" "${BIN[$name]}" "${args[@]}" >"$WORK/$name.log" 2>&1 &
      proxy=$!
      measured=$proxy
      wait_port "$P_PROXY"
    fi
    # Warm-up: connections, buffers and the allocator reach their steady state.
    h2 $((CALLS / 10)) >/dev/null
    p0=$(cpu_ticks "$measured") s0=$(cpu_ticks "$sink")
    out=$(h2 "$CALLS")
    p1=$(cpu_ticks "$measured") s1=$(cpu_ticks "$sink")
    grep -q "$CALLS succeeded, 0 failed, 0 errored" <<<"$out" || fail "h2load through $name: $(tail -20 <<<"$out")"
    kill "$proxy" "$sink"
    wait "$proxy" "$sink" 2>/dev/null || true
    line="{\"round\": $round, \"target\": \"$name\", \"calls\": $CALLS, \"proxy_us_per_call\": $(us_per_call "$p0" "$p1"), \"upstream_us_per_call\": $(us_per_call "$s0" "$s1")}"
    echo "$line" >&2
    record "$line"
  done
done

python3 "$BENCH_PY/gateway_cpu_table.py" "$RESULTS"
cat "$RESULTS"
