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
    cargo build --release -q -p skyconf-cli
  fi
  SKY=$TARGET/release/skyconf
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
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
"$SKY" bench document --services "$SERVICES" --keys 6 >"$WORK/seed.yaml"
python3 - "${CLIENT[0]}" "$WORK/seed.yaml" <<'EOF'
import base64, json, sys, urllib.request
port, path = sys.argv[1:]
key = b"/skywalking/configuration-discovery.default.agentConfigurations"
body = json.dumps({"key": base64.b64encode(key).decode(), "value": base64.b64encode(open(path, "rb").read()).decode()})
urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v3/kv/put", body.encode(), method="POST")).read()
EOF
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
python3 - "$SKY" "$STEADY" "$WRITES" "$COMMAND" "$COMMIT" "${GRPC[*]}" "${ADMIN[*]}" \
  "$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs, Linux $(uname -r)" >"$WORK/report.json" <<'EOF'
import datetime, http.client, json, subprocess, sys, threading, time
sky, steady, writes, command, commit, grpc, admin, machine = sys.argv[1:]
writes, grpc, admin = int(writes), grpc.split(), [int(p) for p in admin.split()]
EMPTY = "410bb567794fe14362a2fb5912af7331eba74877614b82f36f3861fe86201c614f53423e896e5036509c0a815c7f444f20aefbc2bbe66545b382200299aced16"

def request(conn, method, path, body=None):
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()

# One agent per replica asks for the steady service in a loop; an EMPTY answer (no keys, or the
# EMPTY digest) is what a replica must never give it.
stop, agent = threading.Event(), [{"answers": 0, "empty": 0, "errors": 0} for _ in grpc]
def poll(i):
    while not stop.is_set():
        run = subprocess.run([sky, "fetch", "--addr", f"127.0.0.1:{grpc[i]}", "--service", steady, "--timeout", "5s"],
                             capture_output=True, text=True)
        if run.returncode != 0:
            agent[i]["errors"] += 1
            continue
        args = [a for c in json.loads(run.stdout)["commands"] for a in c["args"]]
        keys = [k for k, _ in args if k not in ("SerialNumber", "UUID")]
        agent[i]["answers"] += 1
        if not keys or ["UUID", EMPTY] in args:
            agent[i]["empty"] += 1
threads = [threading.Thread(target=poll, args=(i,)) for i in range(len(grpc))]
for t in threads:
    t.start()

conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=10) for p in admin]
served = [[] for _ in admin]  # per replica: ms from sending the write until that replica serves it
served_all, acknowledged, refused, lost = [], [], 0, []
for n in range(writes):
    name = f"bench-{n}"
    body = json.dumps({"config": {"agent.sample_n_per_3_secs": str(n)}})
    start = time.monotonic()
    status, _ = request(conns[n % len(conns)], "PUT", f"/api/v1/services/{name}?wait=0", body)
    if not 200 <= status < 300:
        refused += 1
        continue
    acknowledged.append(name)
    seen = [None] * len(admin)
    give_up = start + 10
    while None in seen and time.monotonic() < give_up:
        for i, conn in enumerate(conns):
            if seen[i] is None:
                status, reply = request(conn, "GET", f"/api/v1/services/{name}")
                if status == 200 and json.loads(reply)["configured"]:
                    seen[i] = (time.monotonic() - start) * 1000
    if None in seen:
        lost.append(name)
        continue
    for i, ms in enumerate(seen):
        served[i].append(ms)
    served_all.append(max(seen))
stop.set()
for t in threads:
    t.join()

# At the end every acknowledged write must be in every replica's table.
for name in acknowledged:
    for conn in conns:
        status, reply = request(conn, "GET", f"/api/v1/services/{name}")
        if (status != 200 or not json.loads(reply)["configured"]) and name not in lost:
            lost.append(name)

def pct(values):
    if not values:
        return None
    values = sorted(values)
    at = lambda q: values[min(len(values) - 1, int(q * len(values)))]
    return {"p50": round(at(0.50), 2), "p99": round(at(0.99), 2), "max": round(values[-1], 2)}

report = {
    "command": command, "commit": commit, "machine": machine,
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "writes": writes, "acknowledged": len(acknowledged), "refused": refused, "lost": len(lost), "lost_names": lost[:20],
    "served_all_ms": pct(served_all), "served_ms": [pct(s) for s in served],
    "agent_answers": sum(a["answers"] for a in agent), "empty_answers": sum(a["empty"] for a in agent),
    "agent_errors": sum(a["errors"] for a in agent),
}
print(json.dumps(report))
EOF
cat "$WORK/report.json"
if [ -n "$OUT" ]; then cp "$WORK/report.json" "$OUT"; fi

python3 - "$WORK/report.json" <<'EOF' >&2
import json, sys
r = json.load(open(sys.argv[1]))
fmt = lambda p: "–" if p is None else f"{p['p50']:.1f} | {p['p99']:.1f} | {p['max']:.1f}"
print("| write → served on | p50 ms | p99 ms | max ms |")
print("|---|---|---|---|")
for i, p in enumerate(r["served_ms"]):
    print(f"| replica {i} | {fmt(p)} |")
print(f"| all three | {fmt(r['served_all_ms'])} |")
print()
print(f"writes {r['writes']}, acknowledged {r['acknowledged']}, refused {r['refused']}, lost {r['lost']}; "
      f"agent answers {r['agent_answers']}, EMPTY {r['empty_answers']}, failed calls {r['agent_errors']}")
EOF
