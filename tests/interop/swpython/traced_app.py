"""A tiny program instrumented by the SkyWalking Python agent (PyPI `apache-skywalking`), for
skyconf's interop test (crates/skyconf-cli/tests/it/interop.rs).

    SW_AGENT_COLLECTOR_BACKEND_SERVICES=HOST:PORT SW_AGENT_NAME=... SW_AGENT_INSTANCE_NAME=... \
        .venv/bin/python traced_app.py

The agent is configured only by its own SW_AGENT_* variables, with its defaults otherwise (gRPC,
a heartbeat every 30 s that starts with `reportInstanceProperties`, then `keepAlive`). The program
starts the agent, prints one JSON line `{"started": true, "pid": N}`, then serves a pretend
request every 100 ms: an entry span `GET /interop/work` with a local span inside, so the agent
reports trace segments. It runs until it is killed."""
import json
import os
import sys
import time

from skywalking import agent, config
from skywalking.trace.context import get_context
from skywalking.trace.tags import TagHttpMethod


def serve_one(n):
    context = get_context()
    with context.new_entry_span(op="GET /interop/work") as entry:
        entry.tag(TagHttpMethod("GET"))
        with context.new_local_span(op="interop.compute") as local:
            local.tag(TagHttpMethod("GET"))
            sum(range(n % 100))


def main():
    config.init()
    agent.start()
    print(json.dumps({"started": True, "pid": os.getpid()}), flush=True)
    n = 0
    while True:
        serve_one(n)
        n += 1
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
