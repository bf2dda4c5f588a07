#!/usr/bin/env python3
"""An agent-like grpcio (C-core) client for skyconf's gateway tests.

    client.py --addr HOST:PORT [--metadata K=V ...] [--timeout S] [--user-agent UA] [--hold] COMMAND

    segments [--count N] [--size BYTES]      TraceSegmentReportService.collect, a client stream
    flood --total BYTES [--chunk BYTES]      the same, BYTES of segments; progress lines as it goes
    jvm                                      JVMMetricReportService.collect
    properties --service S --instance I [--prop K=V ...]   ManagementService.reportInstanceProperties
    keepalive --service S --instance I       ManagementService.keepAlive
    cds --service S [--uuid U]               ConfigurationDiscoveryService.fetchConfigurations
    raw --path P --kind unary|client_stream|server_stream|bidi [--message BASE64 ...]
    hold --streams N                         N TraceSegmentReportService.collect streams at once

Messages are built with the stubs compiled from proto/ and sent as raw bytes, so what was sent
and what came back can be compared byte for byte with what the upstream recorded. Prints one JSON
line at the end:

    {"code": "OK", "details", "initial_metadata": [[k, v]], "trailing_metadata": [[k, v]],
     "responses": [base64], "commands": [parsed Commands or null], "requests": [base64],
     "metadata": [[k, v]] (what was sent)}

`-bin` metadata values are base64, on the command line and in the output. With --hold a
streaming call sends its messages, prints {"event": "sent", "messages": n}, and then waits on
stdin: `close` (or end of input) ends the stream, `cancel` cancels the call. With --hold a unary
properties, keepalive or cds call prints its result and keeps its connection open until `close`
(or end of input), as an agent's channel outlives its calls. flood prints
{"event": "progress", "bytes": n, "messages": m} each time another MiB has been taken by grpcio.
hold opens N streams on the one connection, each sending one segment, prints {"event": "sent",
"streams": N} once grpcio has taken every one, and waits likewise (`close` or `cancel` applies to
all); its result is {"code": the one code of all of them (or MIXED), "codes": {code: count}}.
"""
import argparse
import json
import sys
import threading

import grpc

import protos

_print_lock = threading.Lock()


def emit(obj):
    with _print_lock:
        print(json.dumps(obj), flush=True)


def kv(pairs):
    out = []
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {pair!r}")
        out.append([key, value])
    return out


def segment(m, i, pad=0):
    t = m.tracing
    span = t.SpanObject(spanId=0, parentSpanId=-1, startTime=1700000000000 + i, endTime=1700000000042 + i,
                        operationName=f"/order/{i}", peer="db.internal:5432", componentId=1, isError=(i % 2 == 1))
    span.tags.add(key="http.method", value="GET")
    if pad:
        span.tags.add(key="padding", value="x" * pad)
    return t.SegmentObject(traceId=f"trace-{i:06d}", traceSegmentId=f"segment-{i:06d}", spans=[span],
                           service="mall-order-service", serviceInstance="order-1@10.0.0.7")


class Feed:
    """The request stream: the messages, then (with hold) a wait for `close` on stdin or for the
    call to end. `progress` reports every MiB the transport has taken."""

    def __init__(self, messages, hold, progress=False):
        self.messages = messages
        self.hold = hold
        self.progress = progress
        self.release = threading.Event()

    def __iter__(self):
        sent = count = reported = 0
        for data in self.messages:
            yield data
            sent += len(data)
            count += 1
            if self.progress and sent - reported >= 1 << 20:
                reported = sent
                emit({"event": "progress", "bytes": sent, "messages": count})
        if self.hold:
            emit({"event": "sent", "messages": count, "bytes": sent})
            self.release.wait()


def watch_stdin(feed, call):
    def run():
        for line in sys.stdin:
            word = line.strip()
            if word == "cancel":
                call.cancel()
                return
            if word == "close":
                break
        feed.release.set()
    threading.Thread(target=run, daemon=True).start()


def result(call, responses, requests, metadata, m):
    return {
        "code": call.code().name,
        "details": call.details() or "",
        "initial_metadata": protos.metadata_json(call.initial_metadata()),
        "trailing_metadata": protos.metadata_json(call.trailing_metadata()),
        "responses": [protos.b64(r) for r in responses],
        "commands": [protos.commands_json(m, r) for r in responses],
        "requests": [protos.b64(r) for r in requests],
        "metadata": protos.metadata_json(metadata),
    }


def unary(channel, path, request, metadata, timeout, m):
    method = channel.unary_unary(path)
    try:
        response, call = method.with_call(request, metadata=metadata, timeout=timeout)
        responses = [response]
    except grpc.RpcError as e:
        call, responses = e, []
    return result(call, responses, [request], metadata, m)


def client_stream(channel, path, requests, metadata, timeout, hold, m, progress=False):
    feed = Feed(requests if progress else list(requests), hold, progress)
    future = channel.stream_unary(path).future(iter(feed), metadata=metadata, timeout=timeout)
    future.add_done_callback(lambda _: feed.release.set())
    if hold:
        watch_stdin(feed, future)
    try:
        responses = [future.result()]
    except (grpc.RpcError, grpc.FutureCancelledError):
        responses = []
    return result(future, responses, [] if progress else feed.messages, metadata, m)


def hold_many(channel, streams, metadata, timeout, m):
    taken = threading.Semaphore(0)
    release = threading.Event()

    def feed():
        yield segment(m, 0).SerializeToString()
        taken.release()
        release.wait()

    calls = [channel.stream_unary(protos.TRACE_COLLECT).future(feed(), metadata=metadata, timeout=timeout)
             for _ in range(streams)]
    for _ in range(streams):
        taken.acquire()
    emit({"event": "sent", "streams": streams})
    for line in sys.stdin:
        if line.strip() == "cancel":
            for call in calls:
                call.cancel()
            break
        if line.strip() == "close":
            break
    release.set()
    codes = {}
    for call in calls:
        try:
            call.result()
            code = "OK"
        except grpc.RpcError as e:
            code = e.code().name
        except grpc.FutureCancelledError:
            code = "CANCELLED"
        codes[code] = codes.get(code, 0) + 1
    return {"code": next(iter(codes)) if len(codes) == 1 else "MIXED", "codes": codes}


def streaming_response(call_iter, requests, metadata, m):
    responses = []
    try:
        for r in call_iter:
            responses.append(r)
    except grpc.RpcError:
        pass
    return result(call_iter, responses, requests, metadata, m)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--addr", required=True)
    ap.add_argument("--metadata", action="append", default=[], help="KEY=VALUE (base64 value for -bin keys)")
    ap.add_argument("--timeout", type=float, default=None, help="the call's deadline, seconds")
    ap.add_argument("--user-agent", default="skyconf-gateway-test/1", help="put before grpc-python's own")
    ap.add_argument("--hold", action="store_true", help="streams: wait for close/cancel on stdin")
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("segments")
    s.add_argument("--count", type=int, default=5)
    s.add_argument("--size", type=int, default=0, help="pad each segment by about this many bytes")
    f = sub.add_parser("flood")
    f.add_argument("--total", type=int, required=True)
    f.add_argument("--chunk", type=int, default=64 * 1024)
    sub.add_parser("jvm")
    p = sub.add_parser("properties")
    p.add_argument("--service", required=True)
    p.add_argument("--instance", required=True)
    p.add_argument("--prop", action="append", default=[], help="KEY=VALUE, in order")
    k = sub.add_parser("keepalive")
    k.add_argument("--service", required=True)
    k.add_argument("--instance", required=True)
    c = sub.add_parser("cds")
    c.add_argument("--service", required=True)
    c.add_argument("--uuid", default="")
    r = sub.add_parser("raw")
    r.add_argument("--path", required=True)
    r.add_argument("--kind", choices=["unary", "client_stream", "server_stream", "bidi"], required=True)
    r.add_argument("--message", action="append", default=[], help="base64 bytes of one request message")
    h = sub.add_parser("hold")
    h.add_argument("--streams", type=int, required=True)
    a = ap.parse_args()

    m = protos.load()
    metadata = protos.metadata_from_json(kv(a.metadata))
    channel = grpc.insecure_channel(a.addr, options=[
        ("grpc.primary_user_agent", a.user_agent), ("grpc.max_receive_message_length", -1),
        # One connection per client process, never shared with another channel.
        ("grpc.use_local_subchannel_pool", 1)])

    if a.command == "segments":
        msgs = [segment(m, i, a.size).SerializeToString() for i in range(a.count)]
        out = client_stream(channel, protos.TRACE_COLLECT, msgs, metadata, a.timeout, a.hold, m)
    elif a.command == "flood":
        one = len(segment(m, 0, a.chunk).SerializeToString())
        msgs = (segment(m, i, a.chunk).SerializeToString() for i in range(max(1, a.total // one)))
        out = client_stream(channel, protos.TRACE_COLLECT, msgs, metadata, a.timeout, a.hold, m, progress=True)
    elif a.command == "jvm":
        j = m.jvm_metric
        metric = j.JVMMetric(time=1700000000000, cpu=m.jvm_metric.CPU(usagePercent=12.5),
                             memory=[j.Memory(isHeap=True, init=1 << 27, max=1 << 30, used=1 << 28, committed=1 << 29),
                                     j.Memory(isHeap=False, init=1 << 20, max=-1, used=1 << 25, committed=1 << 26)])
        req = j.JVMMetricCollection(metrics=[metric], service="mall-order-service", serviceInstance="order-1@10.0.0.7")
        out = unary(channel, protos.JVM_COLLECT, req.SerializeToString(), metadata, a.timeout, m)
    elif a.command == "properties":
        req = m.management.InstanceProperties(service=a.service, serviceInstance=a.instance)
        for key, value in kv(a.prop):
            req.properties.add(key=key, value=value)
        out = unary(channel, protos.REPORT_PROPERTIES, req.SerializeToString(), metadata, a.timeout, m)
    elif a.command == "keepalive":
        req = m.management.InstancePingPkg(service=a.service, serviceInstance=a.instance)
        out = unary(channel, protos.KEEP_ALIVE, req.SerializeToString(), metadata, a.timeout, m)
    elif a.command == "hold":
        out = hold_many(channel, a.streams, metadata, a.timeout, m)
    elif a.command == "cds":
        req = m.configuration_discovery.ConfigurationSyncRequest(service=a.service, uuid=a.uuid)
        out = unary(channel, protos.FETCH_CONFIGURATIONS, req.SerializeToString(), metadata, a.timeout, m)
    else:
        import base64
        msgs = [base64.b64decode(x) for x in a.message]
        if a.kind == "unary":
            out = unary(channel, a.path, msgs[0] if msgs else b"", metadata, a.timeout, m)
        elif a.kind == "client_stream":
            out = client_stream(channel, a.path, msgs, metadata, a.timeout, a.hold, m)
        elif a.kind == "server_stream":
            call = channel.unary_stream(a.path)(msgs[0] if msgs else b"", metadata=metadata, timeout=a.timeout)
            out = streaming_response(call, msgs[:1], metadata, m)
        else:
            feed = Feed(msgs, a.hold)
            call = channel.stream_stream(a.path)(iter(feed), metadata=metadata, timeout=a.timeout)
            call.add_done_callback(lambda _: feed.release.set())
            if a.hold:
                watch_stdin(feed, call)
            out = streaming_response(call, msgs, metadata, m)
    emit(out)
    if a.hold and a.command in ("properties", "keepalive", "cds"):
        # As an agent's channel outlives its calls: the connection stays open until `close`.
        for line in sys.stdin:
            if line.strip() in ("close", "cancel"):
                break
    channel.close()


if __name__ == "__main__":
    main()
