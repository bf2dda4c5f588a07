"""gateway.sh's two open-loop rates, printed as `RATE RATE_LOW`: half of the direct maximum,
and half of the slowest target's maximum.

Usage: gateway_rates.py RESULTS.jsonl
"""
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "unary_max"]
direct = min(r["calls_per_s"] for r in rows if r["target"] == "direct")
print(round(direct / 2), round(min(r["calls_per_s"] for r in rows) / 2))
