"""The maximum rate of SERVER in SCENARIO that bench.sh halves for its open-loop run: the lower
of its h2load and skyconf-bench closed-loop figures.

Usage: half_rate.py RESULTS.jsonl SERVER SCENARIO
"""
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
server, scenario = sys.argv[2], sys.argv[3]
h2 = max(r["calls_per_s"] for r in rows if r["kind"] == "h2load" and r["server"] == server and r["scenario"] == scenario)
# The checked tonic client costs more per call than h2load: when it cannot drive the server to
# its h2load maximum, half of what it can drive is the highest rate where its own queue stays short.
own = [r["result"]["calls_per_s"] for r in rows if r["kind"] == "skyconf_bench" and r["server"] == server
       and r["result"]["scenario"] == scenario]
print(min([h2] + own))
