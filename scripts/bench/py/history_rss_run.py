"""One history-rss.sh run against a running server: RELEASES edits through the admin API, each
waited for until served; its RSS with one release and with every release kept, as JSON on
stdout. Exits non-zero (with the reason) when the server is not ready or an edit is not served.

Usage: history_rss_run.py NAME PID ADMIN_PORT DOCUMENT RELEASES SERVICES
"""
import json, os, re, sys, time, urllib.request
name, pid, admin, doc, releases, services = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])

def get(path):
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}{path}", timeout=10) as reply:
        return json.load(reply)

def version():
    try:
        return get("/readyz").get("version") or 0
    except OSError:
        return 0

def rss_kb():
    with open(f"/proc/{pid}/status") as status:
        return int(re.search(r"^VmRSS:\s+(\d+)", status.read(), re.M).group(1))

def settled_rss():
    # RSS once it stopped moving: the persister and the allocator settle after the last edit.
    time.sleep(3)
    last = rss_kb()
    for _ in range(20):
        time.sleep(1)
        now = rss_kb()
        if abs(now - last) <= 64:
            return now
        last = now
    return last

deadline = time.time() + 60
while version() == 0:
    if time.time() > deadline:
        sys.exit(f"{name}: not ready within 60 s")
    time.sleep(0.1)
one = settled_rss()
text = open(doc).read()
edits_ms = []
for edit in range(1, releases):
    # One service's sample rate changes: `bench-svc-<i>:` then its first key.
    i = (edit * 7919) % services
    text, n = re.subn(rf"(\n  bench-svc-{i}:\n    agent\.sample_n_per_3_secs: )\d+", rf"\g<1>{100_000 + edit}", text, count=1)
    if n != 1:
        sys.exit(f"{name}: edit {edit} found no service {i}")
    before = version()
    started = time.time()
    with open(doc + ".tmp", "w") as f:
        f.write(text)
    os.replace(doc + ".tmp", doc)
    while version() <= before:
        if time.time() - started > 30:
            sys.exit(f"{name}: edit {edit} not served within 30 s")
        time.sleep(0.005)
    edits_ms.append((time.time() - started) * 1000)
kept = get("/api/v1/releases?limit=1")["total"]
many = settled_rss()
edits_ms.sort()
print(json.dumps({"name": name, "rss_one_release_kb": one, "rss_many_releases_kb": many, "ratio": round(many / one, 3),
                  "releases_kept": kept, "edits": len(edits_ms),
                  "edit_served_ms_p50": round(edits_ms[len(edits_ms) // 2], 1), "document_bytes": len(text)}))
