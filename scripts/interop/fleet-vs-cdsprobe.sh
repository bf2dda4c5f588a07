#!/usr/bin/env bash
# Fleet status against an independent client: starts `skyconf serve` on ephemeral ports, polls it
# with bench/cdsprobe.py (grpcio, C-core) like a stock agent, changes the document, and checks
# through the admin API that the probe shows `applied` for the new digest within a few polls.
# Then it starts a grpcio client that keeps echoing the old digest (tests/interop/cds_client.py
# poll --stuck) and checks that it shows `stuck`.
#
# bench/ ships in the project's shared folder beside the checkout (../shared), not in the
# repository: where it is absent (a user's clone) this script says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/../.."

SHARED=${SKYCONF_SHARED:-../shared}
PROBE=$SHARED/bench/cdsprobe.py
if [ ! -f "$PROBE" ]; then
  echo "fleet-vs-cdsprobe: skipped: $PROBE not found (bench/ lives beside the checkout, in ../shared)"
  exit 0
fi
if ! python3 -c 'import grpc, grpc_tools' 2>/dev/null; then
  echo "fleet-vs-cdsprobe: skipped: python3 with grpcio and grpcio-tools is not installed (pip install grpcio grpcio-tools)"
  exit 0
fi

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

cargo build -q -p skyconf-cli
BIN=${CARGO_TARGET_DIR:-target}/debug/skyconf
printf 'configurations:\n  probe-svc:\n    agent.sample_n_per_3_secs: 10\n' > "$WORK/agents.yaml"
"$BIN" --log-format json serve --file "$WORK/agents.yaml" --grpc-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
  --stuck-after-polls 3 2> "$WORK/server.log" &
PIDS+=($!)

# The bound addresses are in the start-up log line.
for _ in $(seq 1 200); do
  grep -q '"admin_addr"' "$WORK/server.log" 2>/dev/null && break
  sleep 0.05
done
GRPC=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    try: f = json.loads(l).get("fields", {})
    except ValueError: continue
    if "admin_addr" in f: print(f["grpc_addr"]); break' "$WORK/server.log")
ADMIN=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    try: f = json.loads(l).get("fields", {})
    except ValueError: continue
    if "admin_addr" in f: print(f["admin_addr"]); break' "$WORK/server.log")
[ -n "$GRPC" ] && [ -n "$ADMIN" ] || { echo "fleet-vs-cdsprobe: FAIL: the server did not start"; cat "$WORK/server.log"; exit 1; }

python3 "$PROBE" poll --addr "$GRPC" --service probe-svc --interval 0.2 --seconds 600 > "$WORK/probe.out" &
PIDS+=($!)

# Waits until the admin API's agents for probe-svc satisfy a Python condition on `agents`, `digest`.
wait_for() {
  local what=$1 condition=$2
  for _ in $(seq 1 300); do
    if python3 - "$ADMIN" "$condition" <<'PY'
import json, sys, urllib.request
body = json.load(urllib.request.urlopen(f"http://{sys.argv[1]}/api/v1/services/probe-svc"))
agents, digest = body["agents"], body["digest"]
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
    then return 0; fi
    sleep 0.1
  done
  echo "fleet-vs-cdsprobe: FAIL: $what"
  curl -s "http://$ADMIN/api/v1/services/probe-svc" || true
  exit 1
}

wait_for "cdsprobe never showed applied" 'len(agents) == 1 and agents[0]["state"] == "applied"'
printf 'configurations:\n  probe-svc:\n    agent.sample_n_per_3_secs: 20\n' > "$WORK/agents.yaml.new"
mv "$WORK/agents.yaml.new" "$WORK/agents.yaml"
wait_for "cdsprobe did not apply the change" 'len(agents) == 1 and agents[0]["state"] == "applied" and agents[0]["digest"] == digest and agents[0]["polls"] >= 3'

# A client that keeps echoing the digest it had must show stuck after a change.
python3 tests/interop/cds_client.py poll --addr "$GRPC" --service probe-svc --interval 0.2 --stuck > /dev/null &
PIDS+=($!)
wait_for "the stuck client never showed applied first" 'sum(a["state"] == "applied" for a in agents) == 2'
printf 'configurations:\n  probe-svc:\n    agent.sample_n_per_3_secs: 30\n' > "$WORK/agents.yaml.new"
mv "$WORK/agents.yaml.new" "$WORK/agents.yaml"
wait_for "expected cdsprobe applied and the other client stuck" \
  'sorted(a["state"] for a in agents) == ["applied", "stuck"]'
echo "fleet-vs-cdsprobe: ok: cdsprobe (grpcio) applied every change within a few polls; a client echoing an old digest shows stuck"
