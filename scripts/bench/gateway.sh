#!/usr/bin/env bash
# Gateway mode's forwarding (issue 12) measured side by side with Debian's nginx (grpc_pass) and a
# direct connection, in one run, against the same upstream: `skyconf-bench sink`, an OAP stand-in
# that reads every request stream and answers an empty Commands with grpc-status 0.
#
#   scripts/bench/gateway.sh            # about 12 minutes
#   scripts/bench/gateway.sh --quick    # shorter runs, one round
#
# Three targets, the same sink behind each:
#   direct   client -> sink
#   nginx    client -> nginx (grpc_pass, 1 worker, HTTP/2 keepalive to the sink) -> sink
#   skyconf  client -> skyconf serve --upstream (gateway mode) -> sink
# What is measured:
#   (a) trace-segment streaming: h2load sending client streams of $SEGMENTS framed SegmentObjects
#       (about 1.3 KB each) to TraceSegmentReportService/collect: segments/s and MB/s;
#   (b) added latency of a forwarded unary call (JVMMetricReportService/collect) at half of the
#       direct maximum rate and at half of the slowest target's, open loop (`skyconf-bench --path
#       --rate`): p50/p99, proxy minus direct, in $LAT_ROUNDS paired rounds of $LAT_SECONDS s (at
#       most 9 at the direct basis);
#   (c) RSS per proxied agent connection: $AGENTS connections, each one forwarded call, held open;
#   (d) CDS throughput of skyconf with and without --upstream (answered locally either way).
# Honesty: every target is first called with `skyconf-bench --path`, which checks grpc-status and
# that the answer is an empty Commands (h2load counts HTTP 200 only, and a forwarded error is HTTP
# 200 too); every h2load run must see a message per answer; and the sink's own counters must show
# every segment h2load sent through a target (a proxy that loses or cuts a message fails the run).
#
# The sink and the proxy run on CPU $SERVER_CPU (default 0), every load generator on CPU $LOAD_CPU
# (default 1), pinned with taskset: a proxy's figure is what one core does, forwarding included,
# with the sink on the same core (direct: the sink alone on it).
#
# Until skyconf has gateway mode (`skyconf serve --upstream`), skyconf is left out and the report
# says "skyconf gateway not available in this build".
#
# Environment: DURATION (seconds per h2load run, 5), ROUNDS (5), WARMUP (1), LAT_ROUNDS (latency
# rounds, 15), LAT_SECONDS (seconds per latency run, 3), SEGMENTS (segments per call, 100), AGENTS
# (2000), SERVER_CPU, LOAD_CPU, CARGO_TARGET_DIR, SKY (a built skyconf: no build), BENCH_OUT
# (BENCHMARKS.md; its "Gateway" section is replaced), BENCH_NOTE.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT (with uncommitted changes)"
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
COMMAND=""
for v in DURATION ROUNDS WARMUP LAT_ROUNDS LAT_SECONDS SEGMENTS AGENTS SERVER_CPU LOAD_CPU; do
  [ -n "${!v:-}" ] && COMMAND="$COMMAND$v=${!v} "
done
COMMAND="${COMMAND}scripts/bench/gateway.sh${1:+ $1}"
DURATION=${DURATION:-$([ $QUICK = 1 ] && echo 3 || echo 5)}
ROUNDS=${ROUNDS:-$([ $QUICK = 1 ] && echo 1 || echo 5)}
WARMUP=${WARMUP:-1}
LAT_ROUNDS=${LAT_ROUNDS:-$([ $QUICK = 1 ] && echo 3 || echo 15)}
LAT_SECONDS=${LAT_SECONDS:-3}
SEGMENTS=${SEGMENTS:-100}
AGENTS=${AGENTS:-2000}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
BENCH_OUT=${BENCH_OUT:-$ROOT/BENCHMARKS.md}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/skyconf-gateway.XXXXXX")
RESULTS=$WORK/gateway.jsonl
: >"$RESULTS"

# Loopback only; fixed, so nginx's generated configuration can name them.
P_SINK=19280 P_NGINX=19281 P_GW=19282 P_GW_ADMIN=19283 P_PLAIN=19284 P_PLAIN_ADMIN=19285
PATH_SEGMENTS=/skywalking.v3.TraceSegmentReportService/collect
PATH_JVM=/skywalking.v3.JVMMetricReportService/collect
PATH_UNKNOWN=/skyconf.bench.NoSuchService/Anything
PATH_FETCH=/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations

# shellcheck source=scripts/bench/lib.sh
. "$ROOT/scripts/bench/lib.sh"


# Percent of all CPUs busy over 2 s, whoever uses them (run while our servers are idle: the
# neighbours' share of the machine).
busy_pct() {
  local a b
  a=$(awk '/^cpu / {print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat)
  sleep 2
  b=$(awk '/^cpu / {print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat)
  python3 -c "a=[int(x) for x in '$a'.split()]; b=[int(x) for x in '$b'.split()]; u=b[0]-a[0]; i=b[1]-a[1]; print(round(100*u/max(1,u+i)))"
}

# ---------------------------------------------------------------------------------------------
log "Tools"
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
need_apt=()
command -v h2load >/dev/null || need_apt+=(nghttp2-client)
command -v taskset >/dev/null || need_apt+=(util-linux)
command -v python3 >/dev/null || need_apt+=(python3)
NGINX=$(command -v nginx || true)
[ -z "$NGINX" ] && [ -x /usr/sbin/nginx ] && NGINX=/usr/sbin/nginx
# Debian's nginx (bookworm: `nginx`; `nginx-light` there is nginx plus the echo module). Installed
# as a binary only: the package's service is not started (policy-rc.d or no init in containers),
# and this script runs its own instance from a temporary prefix.
[ -z "$NGINX" ] && need_apt+=(nginx)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "gateway.sh: installing ${need_apt[*]}" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  NGINX=$(command -v nginx || echo /usr/sbin/nginx)
fi
NGINX_VERSION=$("$NGINX" -v 2>&1 | sed 's/^nginx version: //')
"$NGINX" -V 2>&1 | grep -q -- '--with-http_v2_module' || fail "$NGINX has no HTTP/2 module"

log "Build (release)"
if [ -z "${SKY:-}" ]; then
  cargo build --release -q -p skyconf-cli -p skyconf-bench
  SKY=$TARGET/release/skyconf
fi
# The load and the sink: skyconf-bench, beside $SKY unless SKYBENCH says where.
SKYBENCH=${SKYBENCH:-$(dirname "$SKY")/skyconf-bench}
GATEWAY=0
if "$SKY" serve --help 2>/dev/null | grep -q -- '--upstream'; then
  GATEWAY=1
else
  echo "gateway.sh: skyconf gateway not available in this build ($SKY serve has no --upstream): measuring direct and nginx only" >&2
fi

# ---------------------------------------------------------------------------------------------
log "Request bodies"
BODIES=$(python3 "$BENCH_PY/gateway_bodies.py" "$WORK" "$SEGMENTS")
echo "$BODIES" >&2
record "{\"kind\": \"bodies\", \"result\": $BODIES}"
SEG_BYTES=$(stat -c %s "$WORK/segments.bin")
# CDS, for (d): an agent echoing the digest of the README example's first service.
DOC=examples/agent-configurations.yaml
CDS_SERVICE=mall-order-service
DIGEST=$("$SKY" digest "$DOC" | python3 -c "import json,sys; print(json.load(sys.stdin)['$CDS_SERVICE']['uuid'])")
python3 "$BENCH_PY/cds_request.py" "$WORK/cds.bin" "$CDS_SERVICE" "$DIGEST"

log "Machine"
BUSY_START=$(busy_pct)
echo "CPUs busy before the run (neighbours): $BUSY_START %" >&2
record "{\"kind\": \"machine\", \"when\": \"start\", \"busy_pct\": $BUSY_START, \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"

# ---------------------------------------------------------------------------------------------
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

start_sink() {
  taskset -c "$SERVER_CPU" "$SKYBENCH" sink --addr 127.0.0.1:$P_SINK --json >"$WORK/sink.out" 2>"$WORK/sink.err" &
  SINK_PID=$!
  PIDS+=("$SINK_PID")
  wait_port $P_SINK
}

# The sink's counters now (it prints them on SIGUSR1).
sink_counters() {
  local before
  before=$(wc -l <"$WORK/sink.out")
  kill -USR1 "$SINK_PID"
  for _ in $(seq 1 100); do
    [ "$(wc -l <"$WORK/sink.out")" -gt "$before" ] && break
    sleep 0.05
  done
  tail -1 "$WORK/sink.out"
}

start_nginx() {
  local prefix=$WORK/nginx
  nginx_grpc_conf "$prefix" "$P_NGINX" "$P_SINK"
  taskset -c "$SERVER_CPU" "$NGINX" -p "$prefix" -c "$prefix/nginx.conf" >"$WORK/nginx.log" 2>&1 &
  NGINX_PID=$!
  PIDS+=("$NGINX_PID")
  wait_port $P_NGINX || { cat "$prefix/logs/error.log" >&2; return 1; }
  # The worker does the forwarding: its RSS is the one that grows with connections.
  NGINX_WORKER=$(ps -o pid= --ppid "$NGINX_PID" | tr -d ' ' | head -1)
  [ -n "$NGINX_WORKER" ] || fail "nginx has no worker (see $prefix/logs/error.log)"
}

start_gateway() {
  taskset -c "$SERVER_CPU" "$SKY" serve --file "$DOC" --grpc-addr 127.0.0.1:$P_GW --admin-addr 127.0.0.1:$P_GW_ADMIN \
    --upstream 127.0.0.1:$P_SINK >"$WORK/skyconf.log" 2>&1 &
  GW_PID=$!
  PIDS+=("$GW_PID")
  wait_port $P_GW
}

stop() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

log "Servers on CPU $SERVER_CPU, load on CPU $LOAD_CPU"
start_sink
start_nginx
TARGETS=(direct nginx)
declare -A PORT=([direct]=$P_SINK [nginx]=$P_NGINX)
if [ $GATEWAY = 1 ]; then
  start_gateway
  TARGETS+=(skyconf)
  PORT[skyconf]=$P_GW
fi
sleep 1

# rotated ROUND: the targets, each once, starting one further along each round. Every comparison
# below is between targets measured back to back in one round, so none always runs first or last.
rotated() {
  local n=${#TARGETS[@]} i
  for i in $(seq 0 $((n - 1))); do echo "${TARGETS[$(((i + $1) % n))]}"; done
}

# skyconf-bench TARGET ARGS...: the checked load on a forwarded path; prints its JSON.
load() {
  local t=$1
  shift
  taskset -c "$LOAD_CPU" "$SKYBENCH" --addr "127.0.0.1:${PORT[$t]}" --json --quiet "$@"
}

# h2load TARGET PATH BODY CONNECTIONS STREAMS SECONDS -> prints {"req_s", "done"}; fails when a
# call failed or an answer carried no message (a trailers-only gRPC error).
h2() {
  local t=$1 path=$2 body=$3 c=$4 m=$5 secs=$6 out
  out=$(taskset -c "$LOAD_CPU" h2load -D "$secs" --warm-up-time "$WARMUP" -c "$c" -m "$m" -t 1 \
    -H 'content-type: application/grpc' -H 'te: trailers' -d "$body" "http://127.0.0.1:${PORT[$t]}$path" 2>&1) ||
    fail "h2load against $t failed: $out"
  echo "$out" >>"$WORK/h2load-$t.txt"
  [ "$t" = nginx ] && grep -v setrlimit "$WORK/nginx/logs/error.log" >&2 && : >"$WORK/nginx/logs/error.log"
  python3 "$BENCH_PY/h2load.py" "$out"
}

# ---------------------------------------------------------------------------------------------
log "Every target answers every kind of call with grpc-status 0 and an empty Commands"
for t in "${TARGETS[@]}"; do
  before=$(sink_counters)
  for spec in "$PATH_JVM jvm.bin 200" "$PATH_UNKNOWN jvm.bin 50" "$PATH_SEGMENTS segments.bin 20"; do
    read -r path body n <<<"$spec"
    json=$(load "$t" --path "$path" --body-file "$WORK/$body" -n "$n" -c 2 -m 2 --warmup 0s) ||
      fail "calls through $t to $path failed: $json"
    record "{\"kind\": \"check\", \"target\": \"$t\", \"path\": \"$path\", \"result\": $json}"
  done
  after=$(sink_counters)
  # 200 + 50 unary calls and 20 streams of $SEGMENTS messages, all of them at the sink.
  python3 "$BENCH_PY/sink_received.py" "$before" "$after" "$t" "$SEGMENTS" || fail "the sink did not receive what was sent through $t"
done
if [ $GATEWAY = 1 ]; then
  # CDS is answered by skyconf itself, not forwarded: the command, then an empty answer.
  "$SKY" fetch --addr 127.0.0.1:$P_GW --service "$CDS_SERVICE" | grep -q "$DIGEST" || fail "the gateway did not answer CDS"
  before=$(sink_counters)
  "$SKY" fetch --addr 127.0.0.1:$P_GW --service "$CDS_SERVICE" --uuid "$DIGEST" >/dev/null
  after=$(sink_counters)
  [ "$(echo "$before" | python3 -c 'import json,sys; print(json.load(sys.stdin)["calls"])')" = \
    "$(echo "$after" | python3 -c 'import json,sys; print(json.load(sys.stdin)["calls"])')" ] ||
    fail "the gateway forwarded a CDS call"
fi

# ---------------------------------------------------------------------------------------------
log "(a) Trace-segment streaming: h2load, 32 connections x 2 streams, $SEGMENTS segments a call, $ROUNDS round(s) of ${DURATION}s"
for round in $(seq 1 "$ROUNDS"); do
  for t in $(rotated "$round"); do
    before=$(sink_counters)
    json=$(h2 "$t" $PATH_SEGMENTS "$WORK/segments.bin" 32 2 "$DURATION")
    after=$(sink_counters)
    # Every call h2load counts (and those of its warm-up) reached the sink whole, every segment in
    # it; none was cut inside a message. (Calls in flight when h2load's time is up are reset: the
    # sink counts them apart, and their segments not at all.)
    python3 "$BENCH_PY/segments_whole.py" "$before" "$after" "$json" "$SEGMENTS" "$t" || fail "segments lost through $t"
    rate=$(python3 -c "import json; print(json.loads('$json')['req_s'])")
    echo "round $round $t: $rate calls/s ($(python3 -c "print(round($rate * $SEGMENTS))") segments/s)" >&2
    record "{\"kind\": \"segments\", \"target\": \"$t\", \"round\": $round, \"segments_per_call\": $SEGMENTS, \"body_bytes\": $SEG_BYTES, \"calls_per_s\": $rate}"
  done
done

# ---------------------------------------------------------------------------------------------
log "(b) Forwarded unary calls: maximum (h2load, 32 x 16), then latency at half of the direct maximum"
for t in "${TARGETS[@]}"; do
  json=$(h2 "$t" $PATH_JVM "$WORK/jvm.bin" 32 16 "$DURATION")
  echo "$t: $json" >&2
  record "{\"kind\": \"unary_max\", \"target\": \"$t\", \"tool\": \"h2load\", \"calls_per_s\": $(python3 -c "import json; print(json.loads('$json')['req_s'])")}"
done
# The checked tonic client costs more per call than h2load: where it cannot drive the sink to
# h2load's maximum, half of what it can drive keeps its own queue out of the latency measured.
json=$(load direct --path $PATH_JVM --body-file "$WORK/jvm.bin" -c 32 -m 16 --duration "${DURATION}s" --warmup 1s)
record "{\"kind\": \"unary_max\", \"target\": \"direct\", \"tool\": \"skyconf-bench\", \"calls_per_s\": $(echo "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["calls_per_s"])')}"
# Two rates: half of the direct maximum (what issue 12 asks), where a proxy slower than half of
# the sink's rate is past its own capacity; and half of the slowest target's maximum, where every
# target runs at half of its capacity or less and the difference is the forwarding's own latency.
rates=$(python3 "$BENCH_PY/gateway_rates.py" "$RESULTS")
read -r RATE RATE_LOW <<<"$rates"
# Paired rounds: the latency of one target is only compared with the direct one measured right
# before or after it. This VM stalls for milliseconds a few times a second, which moves a p99
# measured seconds apart by more than the forwarding costs; many short rounds, the targets' order
# rotated every round, give per-round differences whose median the report takes.
# At half of the direct maximum both proxies are past their own maximum (a queue of seconds): nine
# rounds, the fewest with a 95 % interval, show that.
for basis in direct slowest; do
  rate=$([ $basis = direct ] && echo "$RATE" || echo "$RATE_LOW")
  rounds=$([ $basis = direct ] && [ "$LAT_ROUNDS" -gt 9 ] && echo 9 || echo "$LAT_ROUNDS")
  for round in $(seq 1 "$rounds"); do
    for t in $(rotated "$round"); do
      json=$(load "$t" --path $PATH_JVM --body-file "$WORK/jvm.bin" -c 32 -m 16 --rate "$rate" --duration "${LAT_SECONDS}s" --warmup 1s) ||
        fail "the latency run through $t failed: $json"
      echo "round $round $t at $rate/s: $(echo "$json" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["calls_per_s"], "calls/s", r["latency_us"])')" >&2
      record "{\"kind\": \"latency\", \"basis\": \"$basis\", \"target\": \"$t\", \"round\": $round, \"rate\": $rate, \"result\": $json}"
    done
  done
done

# ---------------------------------------------------------------------------------------------
log "(c) RSS per proxied agent connection: $AGENTS connections, one forwarded call each, held open"
# Fresh proxies: memory a previous load left in the allocator would hide the connections' cost.
stop "$NGINX_PID"
start_nginx
RSS_TARGETS=(nginx)
declare -A RSS_PID=([nginx]=$NGINX_WORKER)
if [ $GATEWAY = 1 ]; then
  stop "$GW_PID"
  start_gateway
  RSS_TARGETS+=(skyconf)
  RSS_PID[skyconf]=$GW_PID
fi
sleep 1
for t in "${RSS_TARGETS[@]}"; do
  pid=${RSS_PID[$t]}
  before=$(rss_kb "$pid")
  fds_before=$(find "/proc/$pid/fd" -mindepth 1 | wc -l)
  taskset -c "$LOAD_CPU" "$SKYBENCH" agents --addr "127.0.0.1:${PORT[$t]}" --path $PATH_JVM --body-file "$WORK/jvm.bin" \
    -c "$AGENTS" --interval 4s --duration 7s --local-addr 127.0.0.2,127.0.0.3 --json --quiet \
    >"$WORK/agents-$t.out" 2>"$WORK/agents-$t.err" &
  agents=$!
  for _ in $(seq 1 600); do
    grep -q '"steady"' "$WORK/agents-$t.out" 2>/dev/null && break
    kill -0 $agents 2>/dev/null || break
    sleep 0.2
  done
  sleep 0.5
  steady=$(rss_kb "$pid")
  fds=$(find "/proc/$pid/fd" -mindepth 1 | wc -l)
  wait $agents || fail "the agents run through $t failed: $(cat "$WORK/agents-$t.err")"
  echo "$t: RSS $before KB -> $steady KB with $AGENTS connections ($fds_before -> $fds descriptors)" >&2
  record "{\"kind\": \"rss\", \"target\": \"$t\", \"agents\": $AGENTS, \"rss_before_kb\": $before, \"rss_steady_kb\": $steady, \"fds_before\": $fds_before, \"fds\": $fds, \"result\": $(tail -1 "$WORK/agents-$t.out")}"
done

# ---------------------------------------------------------------------------------------------
if [ $GATEWAY = 1 ]; then
  log "(d) CDS throughput: skyconf with and without --upstream (h2load, 32 x 16, unchanged answer)"
  taskset -c "$SERVER_CPU" "$SKY" serve --file "$DOC" --grpc-addr 127.0.0.1:$P_PLAIN --admin-addr 127.0.0.1:$P_PLAIN_ADMIN \
    >"$WORK/skyconf-plain.log" 2>&1 &
  PIDS+=($!)
  wait_port $P_PLAIN
  PORT[plain]=$P_PLAIN
  "$SKY" fetch --addr 127.0.0.1:$P_PLAIN --service "$CDS_SERVICE" | grep -q "$DIGEST" || fail "skyconf (no upstream) did not answer CDS"
  for round in $(seq 1 "$ROUNDS"); do
    # Alternating, as (a) and (b) rotate.
    for t in $([ $((round % 2)) = 1 ] && echo skyconf plain || echo plain skyconf); do
      json=$(h2 "$t" $PATH_FETCH "$WORK/cds.bin" 32 16 "$DURATION")
      echo "round $round $t: $json" >&2
      record "{\"kind\": \"cds\", \"target\": \"$([ $t = plain ] && echo skyconf-no-upstream || echo skyconf-gateway)\", \"round\": $round, \"calls_per_s\": $(python3 -c "import json; print(json.loads('$json')['req_s'])")}"
    done
  done
fi

# ---------------------------------------------------------------------------------------------
if [ $GATEWAY = 1 ] && command -v strace >/dev/null; then
  log "Syscalls per forwarded call (strace -c on each proxy; a count, not a time: strace slows the proxy)"
  declare -A TRACE_PID=([nginx]=$NGINX_WORKER [skyconf]=$GW_PID)
  for t in nginx skyconf; do
    for spec in "segments $PATH_SEGMENTS segments.bin 1000 2" "unary $PATH_JVM jvm.bin 10000 16"; do
      read -r workload path body n m <<<"$spec"
      strace -c -f -o "$WORK/strace-$t-$workload.txt" -p "${TRACE_PID[$t]}" 2>/dev/null &
      tracer=$!
      sleep 1
      taskset -c "$LOAD_CPU" h2load -n "$n" -c 32 -m "$m" -t 1 -H 'content-type: application/grpc' -H 'te: trailers' \
        -d "$WORK/$body" "http://127.0.0.1:${PORT[$t]}$path" >"$WORK/h2load-strace-$t-$workload.txt" 2>&1
      kill -INT "$tracer"
      wait "$tracer" 2>/dev/null || true
      json=$(python3 "$BENCH_PY/strace_counts.py" "$WORK/strace-$t-$workload.txt" "$n")
      echo "$t $workload: $json" >&2
      record "{\"kind\": \"syscalls\", \"target\": \"$t\", \"workload\": \"$workload\", \"result\": $json}"
    done
  done
fi

# ---------------------------------------------------------------------------------------------
cleanup
PIDS=()
BUSY_END=$(busy_pct)
echo "CPUs busy after the run (neighbours): $BUSY_END %" >&2
record "{\"kind\": \"machine\", \"when\": \"end\", \"busy_pct\": $BUSY_END, \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"

log "Report"
python3 "$BENCH_PY/gateway_report.py" "$RESULTS" "$BENCH_OUT" --command "$COMMAND" --commit "$COMMIT" \
  --gateway "$GATEWAY" --note "${BENCH_NOTE:-}" --duration "$DURATION" --rounds "$ROUNDS" \
  --server-cpu "$SERVER_CPU" --load-cpu "$LOAD_CPU" --agents "$AGENTS" \
  --machine "$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2}') GiB, Linux $(uname -r)" \
  --tools "$(h2load --version | head -1); nginx $NGINX_VERSION (Debian, $NGINX)"
mkdir -p docs/benchmarks
cp "$RESULTS" docs/benchmarks/gateway.jsonl
echo "gateway.sh: wrote the Gateway section of $BENCH_OUT (raw results: docs/benchmarks/gateway.jsonl, work files: $WORK)" >&2
