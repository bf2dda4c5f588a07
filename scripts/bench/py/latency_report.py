"""latency-at-rate.sh's report: every round of every server with the command, commit and
machine, written to OUT as JSON and printed; a table on stderr.

Usage: latency_report.py WORK OUT COMMAND COMMIT MACHINE ROUNDS SERVER...
"""
import json, sys
work, out, command, commit, machine, rounds, *servers = sys.argv[1:]
runs = {s: [json.load(open(f"{work}/{s}-{r}.json")) for r in range(1, int(rounds) + 1)] for s in servers}
report = {"command": command, "commit": commit, "machine": machine, "runs": runs}
with open(out, "w") as f:
    json.dump(report, f, indent=1)
    f.write("\n")
print(json.dumps(report))
print("| server | round | achieved calls/s | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | failed | server CPU |\n|---|---|---|---|---|---|---|---|---|---|", file=sys.stderr)
for s, rs in runs.items():
    for i, r in enumerate(rs, 1):
        l = r["latency_us"]
        failed = sum(r["outcome"]["errors"].values()) + r["outcome"]["wrong_answers"]
        print(f"| {s} | {i} | {r.get('calls_per_s', 0):,.0f} | {l['p50']:,} | {l['p90']:,} | {l['p99']:,} | {l['p999']:,} | {l['max']:,} | {failed} | {r['server_cpu_share']:.0%} |", file=sys.stderr)
