#!/usr/bin/env python3
"""Writes the framed gRPC request bodies of the gateway benchmark (scripts/bench/gateway.sh).

    gateway_bodies.py OUT_DIR SEGMENTS_PER_CALL

- OUT_DIR/segments.bin: SEGMENTS_PER_CALL framed SegmentObject messages, the client stream of one
  TraceSegmentReportService/collect call (a Java agent flushing its segment buffer);
- OUT_DIR/jvm.bin: one framed JVMMetricCollection, the body of a unary
  JVMMetricReportService/collect call.

Prints one JSON line with the sizes. Each segment is a web request as an agent reports it: an
HTTP entry span, a database exit span, a cache exit span and an RPC exit span, with the tags an
agent sets (URL, method, status, statement), about 1.5 KB. Every segment has its own trace and
segment ids. The encoding is written here from the protobuf wire format and the field numbers of
SkyWalking's public v3 data collection protocol; nothing is generated from or copied out of
SkyWalking's code. The sink does not decode the messages; realistic sizes and shapes are what
matter (HPACK, DATA frame and flow-control behaviour of the proxies)."""
import json
import struct
import sys


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def uint(field, n):
    """A varint field (int32, int64, bool, enum), omitted at 0 as proto3 does."""
    return key(field, 0) + varint(n) if n else b""


def text(field, s):
    b = s.encode() if isinstance(s, str) else s
    return key(field, 2) + varint(len(b)) + b if b else b""


def sub(field, m):
    return key(field, 2) + varint(len(m)) + m


def double(field, x):
    return key(field, 1) + struct.pack("<d", x) if x else b""


def framed(message):
    return b"\0" + struct.pack(">I", len(message)) + message


# KeyStringValuePair { key = 1; value = 2 }
def tag(k, v):
    return text(1, k) + text(2, v)


# SegmentReference (not used: every segment here starts a trace)
# SpanObject { spanId = 1; parentSpanId = 2; startTime = 3; endTime = 4; refs = 5;
#   operationName = 6; peer = 7; spanType = 8 (Entry 0, Exit 1, Local 2); spanLayer = 9
#   (Database 1, RPCFramework 2, Http 3, MQ 4, Cache 5); componentId = 10; isError = 11;
#   tags = 12; logs = 13; skipAnalysis = 14 }
def span(span_id, parent, start, end, operation, peer, span_type, layer, component, tags, error=False):
    m = uint(1, span_id)
    # parentSpanId is -1 for the first span: an int32 -1 is a 10-byte varint.
    m += key(2, 0) + varint(parent & 0xFFFFFFFFFFFFFFFF) if parent < 0 else uint(2, parent)
    m += uint(3, start) + uint(4, end) + text(6, operation) + text(7, peer)
    m += uint(8, span_type) + uint(9, layer) + uint(10, component) + uint(11, int(error))
    for k, v in tags:
        m += sub(12, tag(k, v))
    return m


# SegmentObject { traceId = 1; traceSegmentId = 2; spans = 3; service = 4; serviceInstance = 5;
#   isSizeLimited = 6 }
def segment(i):
    t0 = 1_764_720_000_000 + i * 7
    trace = f"{0x5eed0000 + i:08x}.{i % 97}.{17647200000000 + i}"
    seg = f"{0x5e600000 + i:08x}.{i % 89}.{17647200000000 + i}"
    order = 100_000 + i
    spans = [
        span(1, 0, t0 + 2, t0 + 9, "SELECT mall_order.orders", "mysql-primary.prod.svc:3306", 1, 1, 33,
             [("db.type", "Mysql"), ("db.instance", "mall_order"),
              ("db.statement", "SELECT o.id, o.user_id, o.status, o.total_cents, o.currency, o.created_at, "
               "o.updated_at, i.sku, i.quantity, i.price_cents FROM orders o JOIN order_items i ON "
               f"i.order_id = o.id WHERE o.id = ? AND o.user_id = ? ORDER BY i.line_no LIMIT 200"),
              ("db.sql.parameters", f"[{order},{40_000 + i % 5000}]")]),
        span(2, 0, t0 + 10, t0 + 11, "Redis/GET", "redis-cache.prod.svc:6379", 1, 5, 7,
             [("cache.type", "Redis"), ("cache.op", "read"), ("cache.cmd", "GET"),
              ("cache.key", f"mall:order:summary:{order}")]),
        span(3, 0, t0 + 12, t0 + 31, "/inventory/api/v1/reservations/{sku}", "inventory-go.prod.svc:8080", 1, 3, 2,
             [("url", f"http://inventory-go.prod.svc:8080/inventory/api/v1/reservations/SKU-{i % 9973:05d}"),
              ("http.method", "POST"), ("http.status_code", "201")]),
        span(0, -1, t0, t0 + 35, "POST:/api/v1/orders/{orderId}/confirm", "", 0, 3, 1,
             [("url", f"https://mall.example.com/api/v1/orders/{order}/confirm?channel=app&locale=en_GB"),
              ("http.method", "POST"), ("http.status_code", "200"),
              ("http.headers", "user-agent=[MallApp/7.4.1 (Android 14; Pixel 8)]\n"
               "x-request-id=[" + f"{i:032x}" + "]"),
              ("x-le", '{"logic-span":true}')]),
    ]
    m = text(1, trace) + text(2, seg)
    for s in spans:
        m += sub(3, s)
    m += text(4, "mall-order-service|prod|eu") + text(5, f"7c3e{i % 64:02x}d1a2b34f0e9c8d7a6b5c4d3e2f1@10.42.{i % 250}.17")
    return m


# JVMMetricCollection { metrics = 1; service = 2; serviceInstance = 3 }
# JVMMetric { time = 1; cpu = 2 (CPU { usagePercent = 2 }); memory = 3 (Memory { isHeap = 1;
#   init = 2; max = 3; used = 4; committed = 5 }); memoryPool = 4; gc = 5; thread = 6; clazz = 7 }
def jvm_metrics():
    cpu = double(2, 23.5)
    heap = uint(1, 1) + uint(2, 268_435_456) + uint(3, 4_294_967_296) + uint(4, 1_512_345_678) + uint(5, 2_147_483_648)
    non_heap = uint(2, 7_667_712) + uint(4, 187_654_321) + uint(5, 201_326_592)
    metric = uint(1, 1_764_720_000_000) + sub(2, cpu) + sub(3, heap) + sub(3, non_heap)
    return sub(1, metric) + text(2, "mall-order-service|prod|eu") + text(3, "7c3e00d1a2b34f0e9c8d7a6b5c4d3e2f1@10.42.0.17")


def main():
    out, count = sys.argv[1], int(sys.argv[2])
    segments = [segment(i) for i in range(count)]
    body = b"".join(framed(s) for s in segments)
    open(f"{out}/segments.bin", "wb").write(body)
    jvm = framed(jvm_metrics())
    open(f"{out}/jvm.bin", "wb").write(jvm)
    sizes = [len(s) for s in segments]
    print(json.dumps({"segments": count, "segment_bytes_min": min(sizes), "segment_bytes_max": max(sizes),
                      "segments_body_bytes": len(body), "jvm_body_bytes": len(jvm)}))


if __name__ == "__main__":
    main()
