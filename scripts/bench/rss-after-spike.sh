#!/usr/bin/env bash
# RSS after a spike (reliability finding F18): a release skyconf on the example document takes 2,000
# agent connections for 5 s; then it idles for 30 s; then 4 agents poll for 20 s. Prints RSS (KiB)
# before, at the peak, after the idle time and after the light load, as built and with
# MIMALLOC_PURGE_DELAY=0, and the calls/s of 10 s of mixed load for each. Needs nothing beyond the
# repo.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q -p skyconf-cli -p skyconf-bench
bin="$PWD/target/release/skyconf"
bench_bin="$PWD/target/release/skyconf-bench"
# shellcheck source=scripts/bench/lib.sh
. scripts/bench/lib.sh

measure() {
  local label="$1"; shift
  local grpc admin pid
  grpc="$(free_port)" admin="$(free_port)"
  env "$@" "$bin" serve --file examples/agent-configurations.yaml --grpc-addr "127.0.0.1:$grpc" \
    --admin-addr "127.0.0.1:$admin" --agent-expiry 5s 2>/dev/null &
  pid=$!
  for _ in $(seq 100); do curl -fs "127.0.0.1:$admin/readyz" >/dev/null && break; sleep 0.1; done
  local before peak idle after rate
  before="$(rss_kb "$pid")"
  "$bench_bin" agents --addr "127.0.0.1:$grpc" -c 2000 --interval 2s --duration 5s --quiet --json \
    --local-addr 127.0.0.2,127.0.0.3 >/dev/null
  peak="$(rss_kb "$pid")"
  sleep 30
  idle="$(rss_kb "$pid")"
  "$bench_bin" agents --addr "127.0.0.1:$grpc" -c 4 --interval 50ms --duration 20s --quiet --json >/dev/null
  after="$(rss_kb "$pid")"
  rate="$("$bench_bin" --addr "127.0.0.1:$grpc" --service-prefix mall-order-service --scenario mixed --json --quiet |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["calls"]/d["seconds"]))')"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  echo "{\"allocator\": \"$label\", \"rss_kib_before\": $before, \"rss_kib_peak\": $peak, \"rss_kib_after_idle_30s\": $idle, \"rss_kib_after_light_load\": $after, \"mixed_calls_per_s\": $rate}"
}

measure "as built" X=1
measure "MIMALLOC_PURGE_DELAY=0" MIMALLOC_PURGE_DELAY=0
