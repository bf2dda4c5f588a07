"""System calls per forwarded call, from an `strace -c -f` summary and the number of calls, as
JSON.

Usage: strace_counts.py STRACE_OUTPUT CALLS
"""
import json, re, sys
counts = {}
for line in open(sys.argv[1]):
    m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
    if m and m.group(2) != "total":
        counts[m.group(2)] = int(m.group(1))
n = int(sys.argv[2])
per = {k: round(v / n, 2) for k, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v / n >= 0.05}
print(json.dumps({"calls": n, "per_call": per, "total_per_call": round(sum(counts.values()) / n, 2)}))
