#!/usr/bin/env bash
# Measures skyconf side by side with the OAP-equivalent server (javaref, grpc-java + netty) and the
# gRPC stack's ceiling (nullserver, tonic answering without a lookup), in one run, with the same
# load, and writes BENCHMARKS.md and docs/benchmarks/throughput-vs-connections.svg.
#
#   scripts/bench.sh            # the full run (about 15 minutes on 2 cores)
#   scripts/bench.sh --quick    # shorter runs, one round, no profile (a few minutes)
#
# Servers run on CPU $SERVER_CPU (default 0) and every load generator on CPU $LOAD_CPU (default 1),
# pinned with taskset. Load: h2load (Debian nghttp2-client, 1 thread, 32 connections x 16 streams)
# for raw calls/s, and `skyconf-bench`, which checks every grpc-status and every answer, for the
# mixed scenario and for latency at a fixed rate (half of each server's own maximum). Each
# throughput figure is the best of $ROUNDS interleaved rounds, so a neighbour's burst on a shared
# machine hurts every server alike.
#
# The references come from ../shared/bench next to this checkout. Where it is absent (a user's
# clone), skyconf is measured alone and BENCHMARKS.md says so.
#
# Held polls at 10,000 agents are measured by scripts/bench/held.sh, a run of its own (about 8
# minutes); the "Held polls" section it feeds is kept when this script rewrites BENCHMARKS.md.
#
# Environment: ROUNDS (3), DURATION (seconds per h2load run, 8), SERVER_CPU, LOAD_CPU,
# CARGO_TARGET_DIR (target/), BENCH_OUT (BENCHMARKS.md), SHARED_BENCH (../shared/bench), BENCH_NOTE (a
# sentence for the top of BENCHMARKS.md),
# SKIP_PROFILE=1, SKIP_SCALE=1, SKIP_GATEWAY=1 (no scripts/bench/gateway.sh at the end: gateway mode's
# forwarding against nginx and a direct connection; it can also run alone).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

# The commit measured, read before this run rewrites BENCHMARKS.md and docs/benchmarks/.
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT (with uncommitted changes)"
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
# The exact command, with the settings that were overridden from the environment.
COMMAND=""
for v in ROUNDS DURATION WARMUP SERVER_CPU LOAD_CPU SKIP_PROFILE SKIP_SCALE SKIP_GATEWAY; do
  [ -n "${!v:-}" ] && COMMAND="$COMMAND$v=${!v} "
done
COMMAND="${COMMAND}scripts/bench.sh${1:+ $1}"
ROUNDS=${ROUNDS:-$([ $QUICK = 1 ] && echo 1 || echo 3)}
DURATION=${DURATION:-$([ $QUICK = 1 ] && echo 3 || echo 8)}
WARMUP=${WARMUP:-2}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
BENCH_OUT=${BENCH_OUT:-$ROOT/BENCHMARKS.md}
PLOT_DIR=$ROOT/docs/benchmarks
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
SHARED=${SHARED_BENCH:-$(cd "$ROOT/.." && pwd)/shared/bench}
TMP=${TMPDIR:-/tmp}
WORK=$(mktemp -d "$TMP/skyconf-bench.XXXXXX")
RESULTS=$WORK/results.jsonl
: >"$RESULTS"

# Ports on loopback only.
P_SKY=19180 P_SKY_ADMIN=19181 P_NULL=19182 P_JAVA=19183 P_SCALE=19184 P_SCALE_ADMIN=19185
PATH_FETCH=/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations

# shellcheck source=scripts/bench/lib.sh
. "$ROOT/scripts/bench/lib.sh"

# ---------------------------------------------------------------------------------------------
log "Tools"
need_apt=()
command -v h2load >/dev/null || need_apt+=(nghttp2-client)
command -v taskset >/dev/null || need_apt+=(util-linux)
command -v python3 >/dev/null || need_apt+=(python3)
HAVE_REFS=0
if [ -d "$SHARED" ]; then
  HAVE_REFS=1
  # The Debian packages javaref/build.sh lists at its top.
  # shellcheck disable=SC1003 # tr deletes the backslashes of continued lines
  JAVA_PKGS=$(sed -n 's/^#   apt-get install -y //p; s/^#     //p' "$SHARED/javaref/build.sh" | tr -d '\\' | tr ' ' '\n' | grep -v '^$' || true)
  for p in $JAVA_PKGS; do
    dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
  done
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "bench.sh: installing ${need_apt[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
command -v valgrind >/dev/null || SKIP_PROFILE=1
[ $QUICK = 1 ] && SKIP_PROFILE=1

log "Build (release)"
cargo build --release -q -p skyconf-cli -p skyconf-bench
SKY=$TARGET/release/skyconf
SKYBENCH=$TARGET/release/skyconf-bench
# callgrind's profiles want line tables, which the release binary no longer carries: the same
# code built with them (Cargo.toml's `profiling` profile), for the profile section only.
PROF_SKY=$SKY
PROF_SKYBENCH=$SKYBENCH
if [ "${SKIP_PROFILE:-0}" != 1 ]; then
  log "Build (profiling: release with line tables)"
  cargo build --profile profiling -q -p skyconf-cli -p skyconf-bench
  PROF_SKY=$TARGET/profiling/skyconf
  PROF_SKYBENCH=$TARGET/profiling/skyconf-bench
fi
if [ $HAVE_REFS = 1 ]; then
  CARGO_TARGET_DIR=$TMP/nullserver cargo build --release -q --manifest-path "$SHARED/nullserver/Cargo.toml"
  NULL=$TMP/nullserver/release/nullserver
  CP=$(JAVAREF_OUT=$TMP/skyconf-javaref sh "$SHARED/javaref/build.sh")
fi

# ---------------------------------------------------------------------------------------------
log "Documents and request bodies"
DOC=$WORK/doc-1k.yaml
DOC10K=$WORK/doc-10k.yaml
"$SKYBENCH" document --services 1000 --keys 6 >"$DOC"
"$SKYBENCH" document --services 10000 --keys 6 >"$DOC10K"
DIGEST=$("$SKY" digest "$DOC" | python3 -c 'import json,sys; print(json.load(sys.stdin)["bench-svc-0"]["uuid"])')
# The bodies h2load sends: an agent that holds the digest, and one that holds none.
python3 "$BENCH_PY/cds_request.py" "$WORK/unchanged.bin" bench-svc-0 "$DIGEST"
python3 "$BENCH_PY/cds_request.py" "$WORK/changed.bin" bench-svc-0

# ---------------------------------------------------------------------------------------------
log "Servers on CPU $SERVER_CPU, load on CPU $LOAD_CPU"
taskset -c "$SERVER_CPU" "$SKY" serve --file "$DOC" --grpc-addr 127.0.0.1:$P_SKY --admin-addr 127.0.0.1:$P_SKY_ADMIN \
  >"$WORK/skyconf.log" 2>&1 &
PIDS+=($!)
SKY_PID=$!
SERVERS=(skyconf)
declare -A PORT=([skyconf]=$P_SKY)
declare -A CHECK=([skyconf]=full)
if [ $HAVE_REFS = 1 ]; then
  taskset -c "$SERVER_CPU" "$NULL" $P_NULL >"$WORK/nullserver.log" 2>&1 &
  PIDS+=($!)
  NULL_PID=$!
  taskset -c "$SERVER_CPU" java -cp "$(cat "$CP")" RefServer $P_JAVA "$DOC" >"$WORK/javaref.log" 2>&1 &
  PIDS+=($!)
  JAVA_PID=$!
  SERVERS=(skyconf javaref nullserver)
  PORT[javaref]=$P_JAVA PORT[nullserver]=$P_NULL
  CHECK[javaref]=full CHECK[nullserver]=status
fi
for s in "${SERVERS[@]}"; do wait_port "${PORT[$s]}"; done
sleep 1
record "{\"kind\": \"rss_idle_loaded\", \"server\": \"skyconf\", \"kb\": $(rss_kb $SKY_PID)}"
if [ $HAVE_REFS = 1 ]; then
  record "{\"kind\": \"rss_idle_loaded\", \"server\": \"javaref\", \"kb\": $(rss_kb "$JAVA_PID")}"
  record "{\"kind\": \"rss_idle_loaded\", \"server\": \"nullserver\", \"kb\": $(rss_kb "$NULL_PID")}"
  # Same document, same digest: the comparison is like for like.
  JDIGEST=$("$SKY" fetch --addr 127.0.0.1:$P_JAVA --service bench-svc-0 | python3 -c \
    'import json,sys; a=dict(json.load(sys.stdin)["commands"][0]["args"]); print(a["UUID"])')
  [ "$JDIGEST" = "$DIGEST" ] || { echo "bench.sh: javaref serves digest $JDIGEST, skyconf $DIGEST" >&2; exit 1; }
fi

# h2load SERVER SCENARIO CONNECTIONS STREAMS SECONDS -> prints calls/s, or fails if any call failed.
h2() {
  local server=$1 scenario=$2 c=$3 m=$4 secs=$5 out
  out=$(taskset -c "$LOAD_CPU" h2load -D "$secs" --warm-up-time "$WARMUP" -c "$c" -m "$m" -t 1 \
    -H 'content-type: application/grpc' -H 'te: trailers' -d "$WORK/$scenario.bin" \
    "http://127.0.0.1:${PORT[$server]}$PATH_FETCH" 2>&1)
  echo "$out" >>"$WORK/h2load-$server-$scenario.txt"
  python3 "$BENCH_PY/h2load.py" "$out" req_s
}

# skyconf-bench against SERVER; extra arguments follow; prints its JSON.
load() {
  local server=$1
  shift
  taskset -c "$LOAD_CPU" "$SKYBENCH" --addr 127.0.0.1:"${PORT[$server]}" --check "${CHECK[$server]}" \
    --json --quiet "$@"
}

# ---------------------------------------------------------------------------------------------
log "Warm-up (the JVM compiles its hot path)"
for s in "${SERVERS[@]}"; do
  for scenario in unchanged changed; do h2 "$s" "$scenario" 32 16 "$DURATION" >/dev/null; done
done

log "Throughput: h2load, 32 connections x 16 streams, $ROUNDS round(s) of ${DURATION}s"
for round in $(seq 1 "$ROUNDS"); do
  for scenario in unchanged changed; do
    for s in "${SERVERS[@]}"; do
      rate=$(h2 "$s" "$scenario" 32 16 "$DURATION")
      echo "round $round $scenario $s: $rate calls/s" >&2
      record "{\"kind\": \"h2load\", \"server\": \"$s\", \"scenario\": \"$scenario\", \"round\": $round, \"calls_per_s\": $rate}"
    done
  done
done

log "Every answer checked: skyconf-bench (unchanged, changed, mixed over 1000 services)"
for s in "${SERVERS[@]}"; do
  for scenario in unchanged changed mixed; do
    [ "$s" = nullserver ] && [ "$scenario" != unchanged ] && continue
    services=1
    [ "$scenario" = mixed ] && services=1000
    json=$(load "$s" --scenario "$scenario" --services "$services" -c 32 -m 16 --duration "${DURATION}s" --warmup 1s)
    echo "$s $scenario: $json" >&2
    record "{\"kind\": \"skyconf_bench\", \"server\": \"$s\", \"result\": $json}"
  done
done

log "Latency at half of each server's maximum (open loop, skyconf-bench --rate; the lower of the h2load and skyconf-bench maxima)"
for s in "${SERVERS[@]}"; do
  for scenario in unchanged changed; do
    [ "$s" = nullserver ] && [ "$scenario" = changed ] && continue
    max=$(python3 "$BENCH_PY/half_rate.py" "$RESULTS" "$s" "$scenario")
    rate=$(python3 -c "print(round($max / 2))")
    json=$(load "$s" --scenario "$scenario" -c 32 -m 16 --rate "$rate" --duration "$((DURATION + 2))s" --warmup 1s)
    echo "$s $scenario at $rate/s: $json" >&2
    record "{\"kind\": \"latency\", \"server\": \"$s\", \"scenario\": \"$scenario\", \"rate\": $rate, \"result\": $json}"
  done
done

log "Throughput against concurrent connections (h2load, 16 streams each)"
SWEEP=(1 4 16 64 256 1024)
[ $QUICK = 1 ] && SWEEP=(1 16 256)
for c in "${SWEEP[@]}"; do
  for s in "${SERVERS[@]}"; do
    rate=$(h2 "$s" unchanged "$c" 16 "$(( DURATION < 4 ? DURATION : 4 ))")
    echo "$c connections, $s: $rate calls/s" >&2
    record "{\"kind\": \"sweep\", \"server\": \"$s\", \"connections\": $c, \"calls_per_s\": $rate}"
  done
done

record "{\"kind\": \"rss_after_load\", \"server\": \"skyconf\", \"kb\": $(rss_kb $SKY_PID)}"
for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
wait 2>/dev/null || true
PIDS=()

# ---------------------------------------------------------------------------------------------
if [ "${SKIP_SCALE:-0}" != 1 ]; then
  log "Memory and scale (skyconf)"
  # Idle with the README's example document.
  taskset -c "$SERVER_CPU" "$SKY" serve --file examples/agent-configurations.yaml \
    --grpc-addr 127.0.0.1:$P_SCALE --admin-addr 127.0.0.1:$P_SCALE_ADMIN >"$WORK/scale-idle.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_port $P_SCALE
  sleep 2
  record "{\"kind\": \"rss_idle\", \"server\": \"skyconf\", \"kb\": $(rss_kb $pid)}"
  kill $pid
  wait $pid 2>/dev/null || true
  PIDS=()

  # 10,000 services, then 10,000 agents polling every 20 s over their own connections.
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  SCALE_DOC=$WORK/scale.yaml
  cp "$DOC10K" "$SCALE_DOC"
  taskset -c "$SERVER_CPU" "$SKY" serve --file "$SCALE_DOC" \
    --grpc-addr 127.0.0.1:$P_SCALE --admin-addr 127.0.0.1:$P_SCALE_ADMIN >"$WORK/scale.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_port $P_SCALE
  sleep 2
  record "{\"kind\": \"rss_10k_services\", \"server\": \"skyconf\", \"kb\": $(rss_kb $pid)}"
  json=$(taskset -c "$LOAD_CPU" "$SKYBENCH" --addr 127.0.0.1:$P_SCALE --scenario mixed --services 10000 \
    -c 32 -m 16 --duration 5s --warmup 1s --json --quiet)
  record "{\"kind\": \"skyconf_bench_10k\", \"server\": \"skyconf\", \"result\": $json}"
  record "{\"kind\": \"rss_10k_services_after_load\", \"server\": \"skyconf\", \"kb\": $(rss_kb $pid)}"

  AGENTS=10000
  AGENT_SECONDS=$([ $QUICK = 1 ] && echo 25 || echo 50)
  before=$(rss_kb $pid)
  taskset -c "$LOAD_CPU" "$SKYBENCH" agents --addr 127.0.0.1:$P_SCALE -c $AGENTS --services 10000 \
    --interval 20s --duration "${AGENT_SECONDS}s" --local-addr 127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5 \
    --json --quiet >"$WORK/agents.out" 2>"$WORK/agents.err" &
  agents=$!
  for _ in $(seq 1 600); do
    grep -q '"steady"' "$WORK/agents.out" 2>/dev/null && break
    kill -0 $agents 2>/dev/null || break
    sleep 0.5
  done
  steady=$(rss_kb $pid)
  conns=$(find "/proc/$pid/fd" -mindepth 1 | wc -l)
  wait $agents || { cat "$WORK/agents.err" >&2; echo "bench.sh: the agents run failed" >&2; exit 1; }
  record "{\"kind\": \"agents\", \"server\": \"skyconf\", \"agents\": $AGENTS, \"rss_before_kb\": $before, \"rss_steady_kb\": $steady, \"fds\": $conns, \"result\": $(tail -1 "$WORK/agents.out")}"

  # Edit -> new digest served, on the 10,000-service document (each edit changes one service).
  json=$(taskset -c "$LOAD_CPU" "$SKYBENCH" propagation --addr 127.0.0.1:$P_SCALE --file "$SCALE_DOC" \
    --services 10000 --keys 6 --edits "$([ $QUICK = 1 ] && echo 10 || echo 40)" --pause 300ms --json --quiet)
  record "{\"kind\": \"propagation\", \"server\": \"skyconf\", \"result\": $json}"
  kill $pid
  wait $pid 2>/dev/null || true
  PIDS=()

  # The same on the 1,000-service document: the watcher and install path with a smaller parse.
  cp "$DOC" "$SCALE_DOC"
  taskset -c "$SERVER_CPU" "$SKY" serve --file "$SCALE_DOC" \
    --grpc-addr 127.0.0.1:$P_SCALE --admin-addr 127.0.0.1:$P_SCALE_ADMIN >"$WORK/scale-1k.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_port $P_SCALE
  json=$(taskset -c "$LOAD_CPU" "$SKYBENCH" propagation --addr 127.0.0.1:$P_SCALE --file "$SCALE_DOC" \
    --services 1000 --keys 6 --edits "$([ $QUICK = 1 ] && echo 10 || echo 40)" --pause 300ms --json --quiet)
  record "{\"kind\": \"propagation\", \"server\": \"skyconf\", \"result\": $json}"
  kill $pid
  wait $pid 2>/dev/null || true
  PIDS=()

  json=$(taskset -c "$SERVER_CPU" "$SKYBENCH" reload --services 10000 --keys 6 --repeat 10 --json --quiet)
  record "{\"kind\": \"reload\", \"server\": \"skyconf\", \"result\": $json}"
fi

# ---------------------------------------------------------------------------------------------
if [ "${SKIP_PROFILE:-0}" != 1 ]; then
  log "Instructions per call (callgrind)"
  PROFILE_DIR=$WORK/profile
  for scenario in unchanged changed; do
    json=$(scripts/bench/profile.sh "$PROFILE_DIR" "skyconf-$scenario" $P_SKY "$WORK/$scenario.bin" 10000 -- \
      "$PROF_SKY" serve --file "$DOC" --grpc-addr 127.0.0.1:$P_SKY --admin-addr 127.0.0.1:$P_SKY_ADMIN)
    record "{\"kind\": \"profile\", \"server\": \"skyconf\", \"scenario\": \"$scenario\", \"result\": $json}"
  done
  if [ $HAVE_REFS = 1 ]; then
    json=$(scripts/bench/profile.sh "$PROFILE_DIR" nullserver-unchanged $P_NULL "$WORK/unchanged.bin" 10000 -- "$NULL" $P_NULL)
    record "{\"kind\": \"profile\", \"server\": \"nullserver\", \"scenario\": \"unchanged\", \"result\": $json}"
  fi
  # Where a reload's time goes: one in-process reload of 10,000 services x 6 keys.
  valgrind --tool=callgrind --callgrind-out-file="$PROFILE_DIR/reload.callgrind" \
    "$PROF_SKYBENCH" reload --mode full --services 10000 --keys 6 --repeat 1 --json --quiet >"$PROFILE_DIR/reload.json" 2>"$PROFILE_DIR/reload.log"
  total=$(grep -m1 '^totals:\|^summary:' "$PROFILE_DIR/reload.callgrind" | awk '{print $2}')
  {
    echo "== one reload of 10,000 services x 6 keys (skyconf-bench reload --repeat 1): $total instructions in all,"
    echo "== the synthetic document's generation included (skyconf::commands::bench::document)"
    echo
    echo "== inclusive cost, skyconf functions"
    callgrind_annotate --inclusive=yes "$PROFILE_DIR/reload.callgrind" 2>/dev/null | grep -E 'skyconf|saphyr|sha2' | head -40
    echo
    echo "== self cost, top 30"
    callgrind_annotate "$PROFILE_DIR/reload.callgrind" 2>/dev/null | sed -n '/^Ir/,$p' | sed -n 4,33p
  } | cut -c1-240 >"$PROFILE_DIR/reload.top.txt" || true # head closes the pipe early
  record "{\"kind\": \"profile_reload\", \"server\": \"skyconf\", \"instructions\": $total}"
  mkdir -p "$PLOT_DIR"
  cp "$PROFILE_DIR"/*.top.txt "$PLOT_DIR/" 2>/dev/null || true
fi

# ---------------------------------------------------------------------------------------------
log "Report"
python3 "$BENCH_PY/report.py" "$RESULTS" "$BENCH_OUT" "$PLOT_DIR" \
  --command "$COMMAND" --commit "$COMMIT" --have-refs "$HAVE_REFS" --note "${BENCH_NOTE:-}" \
  --rounds "$ROUNDS" --duration "$DURATION" --server-cpu "$SERVER_CPU" --load-cpu "$LOAD_CPU" \
  --machine "$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2}') GiB, Linux $(uname -r)" \
  --tools "$(rustc --version); $(h2load --version | head -1); $( [ $HAVE_REFS = 1 ] && java -version 2>&1 | head -1 || echo 'no java')"
cp "$RESULTS" "$PLOT_DIR/results.jsonl"
echo "bench.sh: wrote $BENCH_OUT (raw results: $PLOT_DIR/results.jsonl, work files: $WORK)" >&2

# ---------------------------------------------------------------------------------------------
if [ "${SKIP_GATEWAY:-0}" != 1 ]; then
  log "Gateway: forwarding against nginx and a direct connection (scripts/bench/gateway.sh)"
  # Its own servers and ports; it replaces the Gateway section of BENCH_OUT that report.py kept.
  SKY="$SKY" SKYBENCH="$SKYBENCH" BENCH_OUT="$BENCH_OUT" SERVER_CPU="$SERVER_CPU" LOAD_CPU="$LOAD_CPU" WARMUP="$WARMUP" \
    scripts/bench/gateway.sh ${1:+"$1"}
fi
