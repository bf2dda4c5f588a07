"""Adds the server's CPU share (ticks used over the run's seconds) to one round's
`skyconf-bench` report, in place.

Usage: latency_round.py REPORT.json TICKS CLK_TCK SECONDS
"""
import json, sys
path, ticks, hz, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
report = json.load(open(path))
report["server_cpu_share"] = round(ticks / hz / seconds, 3)
json.dump(report, open(path, "w"))
