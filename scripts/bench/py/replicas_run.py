"""replicas.sh's measurement: WRITES writes through the replicas' admin APIs, each timed until
every replica serves it, as one JSON report on stdout.

Usage: replicas_run.py SKYCONF STEADY WRITES COMMAND COMMIT 'GRPC_ADDR...' 'ADMIN_PORT...' MACHINE
"""
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
