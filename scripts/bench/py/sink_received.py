"""Whether the sink received every call and message gateway.sh sent through a target (250
unary calls and 20 streams of SEGMENTS messages); exits non-zero with the counts otherwise.

Usage: sink_received.py SINK_BEFORE_JSON SINK_AFTER_JSON TARGET SEGMENTS
"""
import json, sys
a, b, t, seg = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
calls, msgs = b["calls"] - a["calls"], b["messages"] - a["messages"]
failed = b["truncated_calls"] + b["reset_calls"] - a["truncated_calls"] - a["reset_calls"]
if calls != 270 or msgs != 250 + 20 * seg or failed:
    sys.exit(f"{t}: the sink saw {calls} calls, {msgs} messages, {failed} failed; expected 270, {250 + 20 * seg}, 0")
print(f"{t}: checked, the sink saw all 270 calls and {msgs} messages", file=sys.stderr)
