"""Whether every call h2load counted through a target reached the sink whole, every segment in
it, none cut inside a message; exits non-zero with the counts otherwise.

Usage: segments_whole.py SINK_BEFORE_JSON SINK_AFTER_JSON H2LOAD_JSON SEGMENTS TARGET
"""
import json, sys
a, b, h, seg, t = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
msgs, cut = b["messages"] - a["messages"], b["truncated_calls"] - a["truncated_calls"]
if cut or msgs < h["done"] * seg or msgs % seg:
    sys.exit(f"{t}: h2load counted {h['done']} calls of {seg} segments, the sink saw {msgs} segments in whole calls, {cut} cut calls")
