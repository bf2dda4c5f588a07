"""Reads h2load's output: prints {"req_s", "done"} as JSON, or with FIELD only that figure as
h2load wrote it; exits 1 when a call failed.

h2load sees HTTP 200 only. A gRPC error comes as a trailers-only answer with no DATA frame, while
every real answer carries at least a 5-byte message frame: fewer data bytes than that means errors.

Usage: h2load.py OUTPUT [req_s|done]
"""
import json
import re
import sys

if __name__ == "__main__":
    out = sys.argv[1]
    m = re.search(r"finished in [\d.]+s, ([\d.]+) req/s", out)
    r = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", out)
    d = re.search(r"traffic: .*\((\d+)\) data", out)
    if not m or not r or not d or int(r.group(4)) or int(r.group(5)) or int(r.group(3)) == 0:
        sys.exit("h2load failed:\n" + out[-2000:])
    if int(d.group(1)) < 5 * int(r.group(3)):
        sys.exit("h2load: answers without a message (grpc errors):\n" + out[-2000:])
    if len(sys.argv) > 2:
        print({"req_s": m.group(1), "done": r.group(3)}[sys.argv[2]])
    else:
        print(json.dumps({"req_s": float(m.group(1)), "done": int(r.group(3))}))
