#!/usr/bin/env python3
"""A recording stand-in for an OAP, on grpcio (C-core), for skyconf's gateway tests.

    upstream.py --record FILE [--port 0] [--name NAME] [--scenario FILE] [--max-streams N]

Answers ANY method path with one generic handler that takes raw bytes (no deserializer), so what
arrives is recorded byte for byte. Prints `LISTENING <port>` once it listens (port 0: an
ephemeral one). Every event is one JSON line in FILE, flushed as it happens:

    {"event": "call", "call": N, "path", "metadata": [[k, v]], "time_remaining": s|null, "peer"}
    {"event": "message", "call": N, "index": i, "data": base64}     each request message
    {"event": "half_close", "call": N, "messages": n}                the client ended its stream
    {"event": "reply", "call": N, "data": base64}                    each response message sent
    {"event": "status", "call": N, "code", "details", "trailers"}    the status the handler set
    {"event": "terminated", "call": N, "cancelled": bool}            the call ended; cancelled:
                                                                     before the handler finished

Binary (`-bin`) metadata values are base64. What each path does comes from the scenario, a JSON
object from path (or "*" for any other) to:

    {"mode": "reply"|"echo"|"stall",       reply (default): read every request, then answer;
                                           echo: answer each request with its own bytes;
                                           stall: never read, never answer, until cancelled
     "responses": [{"b64": ...} | {"commands": [{"command", "args": [[k, v]]}]}],
     "repeat": 1,                          send the responses this many times (server streaming)
     "initial_metadata": [[k, v]], "trailers": [[k, v]],
     "code": "OK", "details": ""}

--max-streams N advertises SETTINGS_MAX_CONCURRENT_STREAMS N on every connection (Satellite's
default is 32). Without a scenario entry a call is answered with one Commands message holding
`UpstreamAck(upstream=NAME, path=PATH, messages=N)`, so a client sees which upstream answered.
"""
import argparse
import base64
import itertools
import json
import signal
import sys
import threading
import time
from concurrent import futures

import grpc

import protos


class Recorder:
    def __init__(self, path):
        self._file = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, **event):
        event["t"] = time.time()
        line = json.dumps(event)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


class Handler(grpc.GenericRpcHandler):
    def __init__(self, name, scenario, recorder, messages):
        self._name = name
        self._scenario = scenario
        self._record = recorder.write
        self._m = messages
        self._ids = itertools.count(1)

    def service(self, handler_call_details):
        path = handler_call_details.method
        # Every gRPC call is the same on the wire: one stream-stream handler serves unary,
        # client-, server- and bidi-streaming calls alike.
        return grpc.stream_stream_rpc_method_handler(
            lambda requests, context: self._call(path, requests, context))

    def _behaviour(self, path):
        return self._scenario.get(path) or self._scenario.get("*") or {}

    def _encode(self, response):
        if "b64" in response:
            return base64.b64decode(response["b64"])
        commands = self._m.common.Commands()
        for c in response.get("commands", []):
            cmd = commands.commands.add(command=c["command"])
            for k, v in c.get("args", []):
                cmd.args.add(key=k, value=v)
        return commands.SerializeToString()

    def _ack(self, path, count):
        commands = self._m.common.Commands()
        cmd = commands.commands.add(command="UpstreamAck")
        for k, v in (("upstream", self._name), ("path", path), ("messages", str(count))):
            cmd.args.add(key=k, value=v)
        return commands.SerializeToString()

    def _call(self, path, requests, context):
        call = next(self._ids)
        finished = threading.Event()
        terminated = threading.Event()

        def on_termination():
            self._record(event="terminated", call=call, cancelled=not finished.is_set())
            terminated.set()

        context.add_callback(on_termination)
        remaining = context.time_remaining()
        if remaining is not None and remaining > 1e9:
            remaining = None  # grpcio's "no deadline"
        self._record(event="call", call=call, path=path, metadata=protos.metadata_json(context.invocation_metadata()),
                     time_remaining=remaining, peer=context.peer())
        behaviour = self._behaviour(path)
        mode = behaviour.get("mode", "reply")
        if mode == "stall":
            terminated.wait()
            return
        count = 0
        try:
            for data in requests:
                self._record(event="message", call=call, index=count, data=protos.b64(data))
                count += 1
                if mode == "echo":
                    self._record(event="reply", call=call, data=protos.b64(data))
                    yield data
        except grpc.RpcError:
            return  # the client went away: `terminated` records it
        if not context.is_active():
            return  # cancelled: grpcio may end the request stream as if half-closed
        self._record(event="half_close", call=call, messages=count)
        if behaviour.get("initial_metadata"):
            context.send_initial_metadata(protos.metadata_from_json(behaviour["initial_metadata"]))
        if mode == "reply":
            if "responses" in behaviour:
                replies = [self._encode(r) for r in behaviour["responses"]] * int(behaviour.get("repeat", 1))
            else:
                replies = [self._ack(path, count)]
            for data in replies:
                self._record(event="reply", call=call, data=protos.b64(data))
                yield data
        trailers = protos.metadata_from_json(behaviour.get("trailers"))
        code = behaviour.get("code", "OK")
        details = behaviour.get("details", "")
        if trailers:
            context.set_trailing_metadata(trailers)
        if code != "OK":
            context.set_code(grpc.StatusCode[code])
        if details:
            context.set_details(details)
        self._record(event="status", call=call, code=code, details=details, trailers=behaviour.get("trailers") or [])
        finished.set()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--record", required=True, help="JSON lines of every call event")
    ap.add_argument("--name", default="upstream", help="named in the default reply")
    ap.add_argument("--scenario", help="JSON file: path -> behaviour")
    ap.add_argument("--max-streams", type=int, help="streams allowed at once per connection")
    a = ap.parse_args()
    scenario = {}
    if a.scenario:
        with open(a.scenario, encoding="utf-8") as f:
            scenario = json.load(f)
    messages = protos.load()
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1),
               ("grpc.so_reuseport", 0)]
    if a.max_streams:
        options.append(("grpc.max_concurrent_streams", a.max_streams))
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=64),
        handlers=[Handler(a.name, scenario, Recorder(a.record), messages)],
        options=options)
    port = server.add_insecure_port(f"127.0.0.1:{a.port}")
    server.start()
    signal.signal(signal.SIGTERM, lambda *_: server.stop(0))
    print(f"LISTENING {port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    sys.exit(main())
