"""gateway-cpu.sh's table on stderr: per target, the median over rounds of proxy and upstream
microseconds per call, and its ratio to nginx's, round by round.

Usage: gateway_cpu_table.py RESULTS.jsonl
"""
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = list(dict.fromkeys(r["target"] for r in rows))
nginx = {r["round"]: r["proxy_us_per_call"] for r in rows if r["target"] == "nginx"}
print("\n| target | proxy µs/call (median) | upstream µs/call (median) | proxy / nginx, round by round | median |", file=sys.stderr)
print("|---|---|---|---|---|", file=sys.stderr)
for n in names:
    mine = [r for r in rows if r["target"] == n]
    ratios = [r["proxy_us_per_call"] / nginx[r["round"]] for r in mine]
    print(f"| {n} | {statistics.median(r['proxy_us_per_call'] for r in mine)} "
          f"| {statistics.median(r['upstream_us_per_call'] for r in mine)} "
          f"| {', '.join(f'{x:.2f}×' for x in ratios)} | {statistics.median(ratios):.2f}× |", file=sys.stderr)
