#!/usr/bin/env bash
# Replicas on one store (issue 14): a three-member etcd cluster on loopback and three
# `skyconf serve --store etcd` replicas on it, from the release binary. N per-service writes
# (`PUT /api/v1/services/bench-<i>?wait=0`, one at a time) go through the replicas in turn (write i
# through replica i mod 3, so each write is a compare-and-swap on what another replica wrote); after each, every
# replica's admin API is polled (`GET /api/v1/services/bench-<i>`, the table agents are answered
# from) until it serves the write. Meanwhile one agent per replica (`skyconf fetch`, in a loop)
# asks for a service that never changes and counts EMPTY answers. Reports write → served on each
# replica and on all three (p50/p99/max), lost writes (acknowledged, but missing from a replica's
# table at the end, or never served within 10 s) and EMPTY answers.
#
#   scripts/bench/replicas.sh [OUT.json]     # well under a minute after the release build
#
# Prints one JSON line on stdout (also into OUT.json when given) and a Markdown table on stderr.
# Without an `etcd` binary it says so and exits 0.
# Environment: WRITES (200), SERVICES (100, in the seeded document), CARGO_TARGET_DIR (target/),
# SKIP_BUILD=1 (use the release binary as it is), SKY (a skyconf binary to use instead).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT (with uncommitted changes)"
COMMAND=""
for v in WRITES SERVICES SKIP_BUILD SKY; do
  [ -n "${!v:-}" ] && COMMAND="$COMMAND$v=${!v} "
done
COMMAND="${COMMAND}scripts/bench/replicas.sh${1:+ $1}"
OUT=${1:-}
WRITES=${WRITES:-200}
SERVICES=${SERVICES:-100}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

# shellcheck source=scripts/bench/lib.sh
. "$ROOT/scripts/bench/lib.sh"

ETCD=$(command -v etcd || true)
if [ -z "$ETCD" ]; then
  echo "replicas.sh: no etcd binary (apt-get install etcd-server): nothing measured" >&2
  exit 0
fi
# etcd fsyncs every write: its data in memory where the machine has /dev/shm.
if [ -d /dev/shm ]; then WORK=$(mktemp -d /dev/shm/skyconf-replicas.XXXXXX); else WORK=$(mktemp -d "${TMPDIR:-/tmp}/skyconf-replicas.XXXXXX"); fi
# The processes first (lib.sh's cleanup), then their data: /dev/shm is memory.
trap 'cleanup; rm -rf "$WORK"' EXIT

if [ -z "${SKY:-}" ]; then
  if [ "${SKIP_BUILD:-0}" != 1 ]; then
    log "Build (release)"
    cargo build --release -q -p skyconf-cli -p skyconf-bench
  fi
  SKY=$TARGET/release/skyconf
fi
SKYBENCH=${SKYBENCH:-$(dirname "$SKY")/skyconf-bench}

# wait_http PORT PATH TEXT: until GET 127.0.0.1:PORT/PATH answers a body containing TEXT (30 s).
wait_http() {
  for _ in $(seq 1 300); do
    curl -fs "127.0.0.1:$1$2" 2>/dev/null | grep -q "$3" && return 0
    sleep 0.1
  done
  echo "replicas.sh: 127.0.0.1:$1$2 never answered $3" >&2
  return 1
}

log "etcd: three members"
CLIENT=() PEER=() CLUSTER=""
for i in 0 1 2; do
  CLIENT+=("$(free_port)") PEER+=("$(free_port)")
  CLUSTER="$CLUSTER${CLUSTER:+,}m$i=http://127.0.0.1:${PEER[$i]}"
done
ENDPOINTS=""
for i in 0 1 2; do
  url=http://127.0.0.1:${CLIENT[$i]}
  ENDPOINTS="$ENDPOINTS${ENDPOINTS:+,}$url"
  "$ETCD" --name "m$i" --data-dir "$WORK/etcd-$i" --initial-cluster "$CLUSTER" --initial-cluster-token bench \
    --listen-client-urls "$url" --advertise-client-urls "$url" \
    --listen-peer-urls "http://127.0.0.1:${PEER[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${PEER[$i]}" \
    --log-level warn --logger zap >"$WORK/etcd-$i.log" 2>&1 &
  PIDS+=("$!")
done
for i in 0 1 2; do wait_http "${CLIENT[$i]}" /health '"health":"true"'; done

log "Seed: a document of $SERVICES services"
"$SKYBENCH" document --services "$SERVICES" --keys 6 >"$WORK/seed.yaml"
python3 "$BENCH_PY/etcd_seed.py" "${CLIENT[0]}" "$WORK/seed.yaml"
# The seeded document's first service: the one the agents ask for.
STEADY=$(sed -n 's/^  \([^ :]*\):.*/\1/p' "$WORK/seed.yaml" | head -1)
STEADY=${STEADY//\"/}

log "Replicas: three skyconf serve --store etcd"
GRPC=() ADMIN=()
for i in 0 1 2; do
  GRPC+=("$(free_port)") ADMIN+=("$(free_port)")
  "$SKY" serve --store etcd --store-setting "endpoints=$ENDPOINTS" \
    --grpc-addr "127.0.0.1:${GRPC[$i]}" --admin-addr "127.0.0.1:${ADMIN[$i]}" >"$WORK/serve-$i.log" 2>&1 &
  PIDS+=("$!")
done
for i in 0 1 2; do wait_http "${ADMIN[$i]}" /readyz '"ready":true'; done

log "Measure: $WRITES writes through the replicas in turn, served on all three"
python3 "$BENCH_PY/replicas_run.py" "$SKY" "$STEADY" "$WRITES" "$COMMAND" "$COMMIT" "${GRPC[*]}" "${ADMIN[*]}" \
  "$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs, Linux $(uname -r)" >"$WORK/report.json"
cat "$WORK/report.json"
if [ -n "$OUT" ]; then cp "$WORK/report.json" "$OUT"; fi

python3 "$BENCH_PY/replicas_table.py" "$WORK/report.json" >&2
