"""replicas.sh's table (markdown), from its JSON report.

Usage: replicas_table.py REPORT.json
"""
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
