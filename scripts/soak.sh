#!/usr/bin/env bash
# The soak: MINUTES (default 30) of steady agent load on a release build of skyconf in gateway
# mode (in front of `skyconf-bench sink`, an OAP stand-in) serving from a real etcd, while
#   - `skyconf-bench soak` writes a document through the admin API every 2 s (one in four is a
#     document the server must refuse) and checks every answer and every acknowledged write;
#   - 100 held agents (30 s deadlines, instance names and keepAlive, as the Java agent) poll, and
#     one of them is killed during its held poll and replaced every 5 s;
#   - 8 connections send trace-segment streams through the gateway, every one of which must end OK;
#   - this script makes etcd flap every 90 s (killed and restarted on its data, or frozen with
#     SIGSTOP), and every 20 s puts a refused document, or one that would empty the fleet, straight
#     into etcd (the server must keep the last good table; the emptying one is held);
#   - the server's RSS and open descriptors are sampled.
# It fails if any agent was answered EMPTY or with a status that drops a Java agent's channel, a
# held poll outlived its deadline, a forwarded stream failed, an acknowledged write was lost, RSS
# or descriptors kept growing, the fleet view at the end disagreed with the live fleet, or the
# server logged a panic.
# The JSON report goes to stdout and to $SOAK_OUT (default target/soak/report.json).
#
# Not part of CI's run: it takes half an hour. Usage: scripts/soak.sh [MINUTES]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:-30}"
out_dir="target/soak"
mkdir -p "$out_dir"
report="${SOAK_OUT:-$out_dir/report.json}"

source scripts/deps/00-lib.sh
# shellcheck source=scripts/bench/lib.sh
source scripts/bench/lib.sh
apt_install etcd-server curl python3
cargo build --release -q -p skyconf-cli -p skyconf-bench
bin="$PWD/target/release/skyconf"
bench_bin="$PWD/target/release/skyconf-bench"

work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

etcd_port="$(free_port)" peer_port="$(free_port)" grpc_port="$(free_port)" admin_port="$(free_port)"
sink_port="$(free_port)"
etcd_url="http://127.0.0.1:$etcd_port"
key="/skywalking/configuration-discovery.default.agentConfigurations"

start_etcd() {
  etcd --name soak --data-dir "$work/etcd" \
    --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "soak=http://127.0.0.1:$peer_port" >>"$work/etcd.log" 2>&1 &
  etcd_pid=$!
  for _ in $(seq 100); do curl -fs "$etcd_url/health" >/dev/null && return 0; sleep 0.1; done
  echo "soak: etcd did not start" >&2; cat "$work/etcd.log" >&2; exit 1
}

# Puts TEXT at the agent-configurations key through etcd's JSON gateway (no etcdctl needed).
etcd_put() {
  local k v
  k="$(printf %s "$key" | base64 -w0)" v="$(printf %s "$1" | base64 -w0)"
  curl -fs -X POST "$etcd_url/v3/kv/put" -d "{\"key\":\"$k\",\"value\":\"$v\"}" >/dev/null || true
}

start_etcd
etcd_put "$("$bench_bin" document --services 20 --service-prefix soak-svc-)"

# The OAP stand-in: answers every forwarded call (management calls, segment streams) with OK.
"$bench_bin" sink --addr "127.0.0.1:$sink_port" --json >"$work/sink.jsonl" 2>"$work/sink.log" &
sink_pid=$!
pids+=("$sink_pid")

"$bin" serve --store etcd --store-setting "endpoints=$etcd_url" \
  --grpc-addr "127.0.0.1:$grpc_port" --admin-addr "127.0.0.1:$admin_port" \
  --upstream "127.0.0.1:$sink_port" \
  --data-dir "$work/data" 2>"$work/server.log" &
server_pid=$!
pids+=("$server_pid")
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$admin_port/readyz" >/dev/null && break; sleep 0.1; done

"$bench_bin" soak --addr "127.0.0.1:$grpc_port" --admin "http://127.0.0.1:$admin_port" \
  --services 20 --service-prefix soak-svc- --agents 200 --interval 1s --write-every 2s \
  --held-agents 100 --held-interval 20s --churn-every 5s \
  --stream-clients 8 --stream-every 100ms --stream-messages 5 \
  --duration "${minutes}m" --pid "$server_pid" --json --quiet >"$report" &
soak_pid=$!

# Store-side churn and flaps until the soak ends.
refused=(
  $'configurations:\n  soak-svc-0: [unclosed\n'
  $'configurations:\n  soak-svc-0:\n    k:\n'
  $'configurations: {}\n'
  $'configuration:\n  soak-svc-0: {k: v}\n'
)
flaps=0 churns=0 tick=0
while kill -0 "$soak_pid" 2>/dev/null; do
  sleep 1
  tick=$((tick + 1))
  if ((tick % 20 == 0)); then
    etcd_put "${refused[churns % ${#refused[@]}]}"
    churns=$((churns + 1))
  fi
  if ((tick % 90 == 0)); then
    if ((flaps % 2 == 0)); then
      kill -9 "$etcd_pid"; wait "$etcd_pid" 2>/dev/null || true
      sleep 15; start_etcd
    else
      kill -STOP "$etcd_pid"; sleep 15; kill -CONT "$etcd_pid"
    fi
    flaps=$((flaps + 1))
  fi
done
pids+=("$etcd_pid")
soak_status=0
wait "$soak_pid" || soak_status=$?

panics="$(grep -c 'panicked' "$work/server.log" || true)"
kill "$sink_pid" 2>/dev/null || true
wait "$sink_pid" 2>/dev/null || true
python3 "$BENCH_PY/soak_verdict.py" "$report" "$flaps" "$churns" "$panics" "$work/sink.jsonl"
if [ "$soak_status" -ne 0 ] || [ "$panics" -ne 0 ]; then
  echo "soak: FAILED (see $report; server log kept in $out_dir/server.log)" >&2
  cp "$work/server.log" "$out_dir/server.log"
  exit 1
fi
echo "soak: passed ($minutes min; report in $report)" >&2
