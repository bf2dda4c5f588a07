"""Completes the soak's report in place: the store's flaps and churns, the server's panics (any
fails the soak) and the sink's last counts; prints it.

Usage: soak_verdict.py REPORT.json FLAPS CHURNS PANICS SINK.jsonl
"""
import json, sys
path, flaps, churns, panics, sink = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
report = json.load(open(path))
report["store"] = {"etcd_flaps": flaps, "refused_documents_put_in_etcd": churns}
report["server_panics"] = panics
lines = [json.loads(l) for l in open(sink) if l.strip()]
report["upstream"] = next((l for l in reversed(lines) if l.get("event") == "stopped"), None)
if panics:
    report["passed"] = False
json.dump(report, open(path, "w"), indent=1)
print(json.dumps(report, indent=1))
