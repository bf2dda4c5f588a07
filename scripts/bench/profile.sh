#!/usr/bin/env bash
# Counts the instructions a CDS server spends per call with valgrind's callgrind (repeatable where
# wall-clock time on a shared 2-core machine is not), and keeps the profile that explains them.
#
#   scripts/bench/profile.sh OUT_DIR NAME PORT BODY CALLS -- SERVER_COMMAND...
#
# Runs SERVER_COMMAND under callgrind twice: once with a few calls, once with CALLS more, each sent
# with h2load (32 connections x 16 streams, framed request BODY). The difference of the two totals
# divided by CALLS is the cost of one call, start-up and document loading excluded. Prints one JSON
# line {"name", "calls", "instructions", "per_call"}; OUT_DIR/NAME.callgrind keeps the larger run's
# profile, OUT_DIR/NAME.top.txt its hottest functions (self and inclusive), and
# OUT_DIR/NAME.per-call.txt each function's instructions per call (the two runs' difference divided
# by CALLS, start-up excluded: where a call's instructions go). Give it a binary
# with line tables (`cargo build --profile profiling`: target/profiling/skyconf), as bench.sh does;
# the release binary has its function names but no file and line. KEEP_BASE=1 keeps the smaller
# run's profile too (OUT_DIR/NAME.base.callgrind), for a closer look at a difference. HEADER='name:
# value' adds a header to every call (`HEADER='grpc-timeout: 30S'`: the Java agent's deadline, so
# every call may be held, as a stock agent's poll may).
set -euo pipefail
out=$1 name=$2 port=$3 body=$4 calls=$5
shift 5
[ "$1" = "--" ] && shift
mkdir -p "$out"
base=1000
server=("$@")

# shellcheck source=scripts/bench/lib.sh
. "$(dirname "$0")/lib.sh"

# run N FILE: instructions of a server run that answered N calls.
run() {
  local n=$1 file=$2
  if (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
    echo "profile.sh: port $port is already in use" >&2
    return 1
  fi
  valgrind --tool=callgrind --callgrind-out-file="$file" "${server[@]}" >"$file.log" 2>&1 &
  local vg=$!
  # Under valgrind a server takes a while to listen.
  wait_port "$port" 120
  local extra=()
  [ -n "${HEADER:-}" ] && extra=(-H "$HEADER")
  h2load -n "$n" -c 32 -m 16 -t 1 -H 'content-type: application/grpc' -H 'te: trailers' "${extra[@]}" -d "$body" \
    "http://127.0.0.1:$port/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations" >"$file.h2load.txt"
  grep -q "$n succeeded" "$file.h2load.txt" || { echo "profile.sh: calls failed, see $file.h2load.txt" >&2; kill "$vg"; return 1; }
  # SIGTERM: background jobs of a script ignore SIGINT, and callgrind writes its file on SIGTERM.
  kill -TERM "$vg"
  wait "$vg" 2>/dev/null || true
  grep -m1 '^totals:\|^summary:' "$file" | awk '{print $2}'
}

small=$(run "$base" "$out/$name.base.callgrind")
large=$(run $((base + calls)) "$out/$name.callgrind")
python3 "$BENCH_PY/callgrind_per_call.py" "$out/$name.base.callgrind" "$out/$name.callgrind" "$calls" 80 \
  | cut -c1-240 >"$out/$name.per-call.txt"
[ "${KEEP_BASE:-0}" = 1 ] || rm -f "$out/$name.base.callgrind"*
per_call=$(( (large - small) / calls ))
{
  echo "== $name: $((base + calls)) calls, $large instructions in all (start-up included);"
  echo "== $per_call instructions per call (difference with a run of $base calls, divided by $calls)"
  echo
  echo "== self cost, top 30"
  callgrind_annotate "$out/$name.callgrind" 2>/dev/null | sed -n '/^Ir/,$p' | sed -n 4,33p
  echo
  echo "== inclusive cost, top 60"
  callgrind_annotate --inclusive=yes "$out/$name.callgrind" 2>/dev/null | sed -n '/^Ir/,$p' | sed -n 4,63p
} | cut -c1-240 >"$out/$name.top.txt"
echo "{\"name\": \"$name\", \"calls\": $calls, \"instructions\": $((large - small)), \"per_call\": $per_call}"
