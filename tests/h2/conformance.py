"""RFC 9113 conformance cases and hardening attacks against an HTTP/2 server, from a raw-frame
client (hyperframe's frames, hpack's encoder), one connection per case.

Usage: conformance.py HOST:PORT [CASE ...]. Prints one line per case, `PASS name` or
`FAIL name: what happened`, then a JSON summary line, and exits 1 if any case failed. The server
is skyconf's agent port (either HTTP/2 server): a call to the CDS path without END_STREAM stays
open while the server waits for its message, which gives the cases an open stream.
"""

import json
import socket
import struct
import sys
import time

import hpack
from hyperframe import frame as hf

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
CDS = "/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations"
TIMEOUT = 5.0

NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 0x5, 0x6, 0x7, 0x8
COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x9, 0xB


class Closed(Exception):
    pass


def raw(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def hpack_int(value, prefix, flags=0):
    mask = (1 << prefix) - 1
    if value < mask:
        return bytes([flags | value])
    out = [flags | mask]
    value -= mask
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def request_fields(path=CDS, extra=()):
    return [(":method", "POST"), (":scheme", "http"), (":authority", "skyconf"), (":path", path),
            ("content-type", "application/grpc"), ("te", "trailers")] + list(extra)


class Conn:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        self.buf = b""
        self.encoder = hpack.Encoder()
        self.server_settings = {}
        self.acked = False

    def send(self, *frames):
        data = b"".join(f if isinstance(f, bytes) else f.serialize() for f in frames)
        try:
            self.sock.sendall(data)
        except OSError:
            pass

    def handshake(self, settings=None, ack=True):
        self.send(PREFACE, hf.SettingsFrame(0, settings=settings or {}))
        while True:
            f = self.read()
            if isinstance(f, hf.SettingsFrame) and "ACK" not in f.flags:
                self.server_settings = dict(f.settings)
                if ack:
                    self.send(hf.SettingsFrame(0, flags=["ACK"]))
                    # The encoder keeps to the table size it acknowledged (a size update opens
                    # its next block).
                    self.encoder.header_table_size = self.server_settings.get(1, 4096)
                return

    def block(self, fields):
        return self.encoder.encode(fields)

    def headers(self, stream, fields=None, end_stream=False, end_headers=True, block=None):
        flags = (["END_HEADERS"] if end_headers else []) + (["END_STREAM"] if end_stream else [])
        return hf.HeadersFrame(stream, data=block if block is not None else self.block(fields or request_fields()), flags=flags)

    def read(self):
        while len(self.buf) < 9:
            self._fill()
        head, length = hf.Frame.parse_frame_header(memoryview(self.buf[:9]))
        while len(self.buf) < 9 + length:
            self._fill()
        body, self.buf = self.buf[9:9 + length], self.buf[9 + length:]
        head.parse_body(memoryview(body))
        if isinstance(head, hf.SettingsFrame) and "ACK" in head.flags:
            self.acked = True
        return head

    def _fill(self):
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, socket.timeout) as e:
            raise Closed(type(e).__name__)
        if not data:
            raise Closed("EOF")
        self.buf += data

    def outcome(self, stream=None):
        """Reads until a GOAWAY, an RST_STREAM on `stream`, a response HEADERS on `stream`, or
        the end: ("goaway", code), ("rst", code), ("headers", frame) or ("closed", why)."""
        try:
            while True:
                f = self.read()
                if isinstance(f, hf.GoAwayFrame):
                    return ("goaway", f.error_code)
                if stream is not None and isinstance(f, hf.RstStreamFrame) and f.stream_id == stream:
                    return ("rst", f.error_code)
                if stream is not None and isinstance(f, hf.HeadersFrame) and f.stream_id == stream:
                    return ("headers", f)
        except Closed as e:
            return ("closed", str(e))

    def close(self):
        self.sock.close()


def expect(result, *allowed):
    """`result` is one of `allowed` ((kind, code) pairs; ("closed", None) matches any close)."""
    kind, value = result
    for a_kind, a_code in allowed:
        if kind == a_kind and (a_code is None or value == a_code):
            return None
    shown = value if kind != "headers" else status_of(value)
    return f"got {kind} {shown}, expected one of {allowed}"


def status_of(headers_frame):
    fields = dict(hpack.Decoder().decode(headers_frame.data))
    return fields.get(":status"), fields.get("grpc-status")


def conn_error(code):
    return [("goaway", code)]


CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def after_handshake(name, error, frames):
    """A case that sends `frames(conn)` after the handshake and expects a connection error."""

    def run(addr):
        c = Conn(addr)
        c.handshake()
        c.send(*frames(c))
        return expect(c.outcome(), *conn_error(error))

    CASES[name] = run


# --- Preface and SETTINGS (RFC 9113 §3.4, §6.5) ---

@case
def preface_invalid(addr):
    c = Conn(addr)
    c.send(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + raw(4, 0, 0))
    return expect(c.outcome(), ("goaway", PROTOCOL_ERROR), ("closed", None))


@case
def first_frame_not_settings(addr):
    c = Conn(addr)
    c.send(PREFACE, c.headers(1, end_stream=True))
    return expect(c.outcome(), *conn_error(PROTOCOL_ERROR))


after_handshake("settings_ack_with_payload", FRAME_SIZE_ERROR, lambda _: [raw(4, 1, 0, b"\x00\x01\x00\x00\x00\x00")])
after_handshake("settings_length_not_a_multiple_of_6", FRAME_SIZE_ERROR, lambda _: [raw(4, 0, 0, b"\x00\x01\x00\x00\x00")])
after_handshake("settings_on_a_stream", PROTOCOL_ERROR, lambda _: [raw(4, 0, 1, b"")])
after_handshake("settings_enable_push_2", PROTOCOL_ERROR, lambda _: [raw(4, 0, 0, struct.pack(">HI", 2, 2))])
after_handshake("settings_initial_window_over_2_31", FLOW_CONTROL_ERROR, lambda _: [raw(4, 0, 0, struct.pack(">HI", 4, 1 << 31))])
after_handshake("settings_max_frame_size_too_small", PROTOCOL_ERROR, lambda _: [raw(4, 0, 0, struct.pack(">HI", 5, 16383))])
after_handshake("settings_max_frame_size_too_large", PROTOCOL_ERROR, lambda _: [raw(4, 0, 0, struct.pack(">HI", 5, 1 << 24))])


@case
def settings_are_acknowledged_and_unknown_ones_ignored(addr):
    c = Conn(addr)
    c.handshake()
    c.send(raw(4, 0, 0, struct.pack(">HI", 0x99, 7)))
    acks = 0
    try:
        while acks < 2:
            f = c.read()
            if isinstance(f, hf.SettingsFrame) and "ACK" in f.flags:
                acks += 1
            if isinstance(f, hf.GoAwayFrame):
                return f"GOAWAY {f.error_code}"
    except Closed as e:
        return f"closed: {e}"
    return None


@case
def server_settings_advertise_table_size_0(addr):
    c = Conn(addr)
    c.handshake()
    s = c.server_settings
    if s.get(1) != 0 or s.get(2, 0) != 0:
        return f"settings {s}"
    return None


# --- Frame size (§4.2) ---

after_handshake("data_over_max_frame_size", FRAME_SIZE_ERROR, lambda c: [c.headers(1), raw(0, 0, 1, b"\x00" * 16385)])
after_handshake("headers_over_max_frame_size", FRAME_SIZE_ERROR, lambda _: [raw(1, 4, 1, b"\x00" * 16385)])


# --- Stream identifiers and states (§5.1) ---

after_handshake("headers_on_an_even_stream", PROTOCOL_ERROR, lambda c: [c.headers(2)])


@case
def headers_on_a_lower_stream_id(addr):
    c = Conn(addr)
    c.handshake()
    c.send(c.headers(5), c.headers(3))
    return expect(c.outcome(), ("goaway", PROTOCOL_ERROR), ("goaway", STREAM_CLOSED))


after_handshake("data_on_an_idle_stream", PROTOCOL_ERROR, lambda _: [raw(0, 0, 1, b"x")])
after_handshake("rst_stream_on_an_idle_stream", PROTOCOL_ERROR, lambda _: [hf.RstStreamFrame(1, error_code=CANCEL)])
after_handshake("window_update_on_an_idle_stream", PROTOCOL_ERROR, lambda _: [hf.WindowUpdateFrame(1, window_increment=1)])
after_handshake("data_on_stream_0", PROTOCOL_ERROR, lambda _: [raw(0, 0, 0, b"x")])
after_handshake("headers_on_stream_0", PROTOCOL_ERROR, lambda c: [raw(1, 5, 0, c.block(request_fields()))])
after_handshake("rst_stream_on_stream_0", PROTOCOL_ERROR, lambda _: [raw(3, 0, 0, struct.pack(">I", 0))])


@case
def data_after_end_stream(addr):
    c = Conn(addr)
    c.handshake()
    c.send(c.headers(1, end_stream=True), raw(0, 0, 1, b"x"))
    return expect(c.outcome(1), ("rst", STREAM_CLOSED), ("goaway", STREAM_CLOSED), ("headers", None))


after_handshake("rst_stream_wrong_length", FRAME_SIZE_ERROR, lambda c: [c.headers(1), raw(3, 0, 1, b"\x00\x00\x00")])


# --- CONTINUATION (§6.10) ---

after_handshake("continuation_without_headers", PROTOCOL_ERROR, lambda c: [raw(9, 4, 1, c.block(request_fields()))])


@case
def a_frame_between_headers_and_continuation(addr):
    c = Conn(addr)
    c.handshake()
    block = c.block(request_fields())
    c.send(c.headers(1, end_headers=False, block=block[:5]), hf.PingFrame(0, opaque_data=b"12345678"), raw(9, 4, 1, block[5:]))
    return expect(c.outcome(), *conn_error(PROTOCOL_ERROR))


@case
def continuation_on_another_stream(addr):
    c = Conn(addr)
    c.handshake()
    block = c.block(request_fields())
    c.send(c.headers(1, end_headers=False, block=block[:5]), raw(9, 4, 3, block[5:]))
    return expect(c.outcome(), *conn_error(PROTOCOL_ERROR))


@case
def a_request_split_into_continuations_is_answered(addr):
    c = Conn(addr)
    c.handshake()
    block = c.block(request_fields("/no.Such/method"))
    c.send(c.headers(1, end_headers=False, end_stream=True, block=block[:3]), raw(9, 0, 1, block[3:6]), raw(9, 4, 1, block[6:]))
    return expect(c.outcome(1), ("headers", None))


# --- Flow control (§6.9) ---

after_handshake("window_update_of_0_on_the_connection", PROTOCOL_ERROR, lambda _: [raw(8, 0, 0, struct.pack(">I", 0))])


@case
def window_update_of_0_on_a_stream(addr):
    c = Conn(addr)
    c.handshake()
    c.send(c.headers(1), raw(8, 0, 1, struct.pack(">I", 0)))
    return expect(c.outcome(1), ("rst", PROTOCOL_ERROR), ("goaway", PROTOCOL_ERROR))


after_handshake("connection_window_overflow", FLOW_CONTROL_ERROR, lambda _: [hf.WindowUpdateFrame(0, window_increment=(1 << 31) - 1)])


@case
def stream_window_overflow(addr):
    c = Conn(addr)
    c.handshake()
    c.send(c.headers(1), hf.WindowUpdateFrame(1, window_increment=(1 << 31) - 1))
    return expect(c.outcome(1), ("rst", FLOW_CONTROL_ERROR), ("goaway", FLOW_CONTROL_ERROR))


after_handshake("window_update_wrong_length", FRAME_SIZE_ERROR, lambda _: [raw(8, 0, 0, b"\x00\x00\x00\x01\x00")])
after_handshake("padding_as_long_as_the_frame", PROTOCOL_ERROR, lambda c: [c.headers(1), raw(0, 0x8, 1, b"\x05abcd")])


# --- PING and GOAWAY (§6.7, §6.8) ---

@case
def ping_is_acknowledged_with_its_payload(addr):
    c = Conn(addr)
    c.handshake()
    c.send(hf.PingFrame(0, opaque_data=b"abcdefgh"))
    try:
        while True:
            f = c.read()
            if isinstance(f, hf.PingFrame) and "ACK" in f.flags:
                return None if f.opaque_data == b"abcdefgh" else f"payload {f.opaque_data!r}"
    except Closed as e:
        return f"closed: {e}"


after_handshake("ping_on_a_stream", PROTOCOL_ERROR, lambda _: [raw(6, 0, 1, b"12345678")])
after_handshake("ping_wrong_length", FRAME_SIZE_ERROR, lambda _: [raw(6, 0, 0, b"1234567")])
after_handshake("goaway_on_a_stream", PROTOCOL_ERROR, lambda _: [raw(7, 0, 1, struct.pack(">II", 0, 0))])
after_handshake("push_promise_from_a_client", PROTOCOL_ERROR, lambda c: [raw(5, 4, 1, struct.pack(">I", 2) + c.block(request_fields()))])


@case
def unknown_frame_types_are_ignored(addr):
    c = Conn(addr)
    c.handshake()
    c.send(raw(0xEE, 0xFF, 0, b"whatever"), hf.PingFrame(0, opaque_data=b"abcdefgh"))
    try:
        while True:
            f = c.read()
            if isinstance(f, hf.PingFrame) and "ACK" in f.flags:
                return None
            if isinstance(f, hf.GoAwayFrame):
                return f"GOAWAY {f.error_code}"
    except Closed as e:
        return f"closed: {e}"


# --- PRIORITY (§5.3, §6.3): validated, not scheduled ---

@case
def priority_depending_on_itself(addr):
    c = Conn(addr)
    c.handshake()
    c.send(c.headers(1), raw(2, 0, 1, struct.pack(">IB", 1, 16)))
    return expect(c.outcome(1), ("rst", PROTOCOL_ERROR), ("goaway", PROTOCOL_ERROR))


@case
def priority_wrong_length(addr):
    c = Conn(addr)
    c.handshake()
    c.send(c.headers(1), raw(2, 0, 1, struct.pack(">I", 0)))
    return expect(c.outcome(1), ("rst", FRAME_SIZE_ERROR), ("goaway", FRAME_SIZE_ERROR))


@case
def headers_depending_on_itself(addr):
    c = Conn(addr)
    c.handshake()
    c.send(raw(1, 0x24, 1, struct.pack(">IB", 1, 16) + c.block(request_fields())))
    return expect(c.outcome(1), ("rst", PROTOCOL_ERROR), ("goaway", PROTOCOL_ERROR))


@case
def headers_with_padding_and_priority_are_answered(addr):
    c = Conn(addr)
    c.handshake()
    block = c.block(request_fields("/no.Such/method"))
    c.send(raw(1, 0x2D, 1, bytes([3]) + struct.pack(">IB", 0, 16) + block + b"\x00\x00\x00"))
    return expect(c.outcome(1), ("headers", None))


# --- Request header rules (§8.2, §8.3) ---

def malformed(fields):
    def run(addr):
        c = Conn(addr)
        c.handshake()
        c.send(c.headers(1, fields=fields, end_stream=True))
        result = c.outcome(1)
        if result[0] == "headers" and status_of(result[1])[0] == "400":
            return None
        return expect(result, ("rst", PROTOCOL_ERROR))
    return run


BASE = [(":method", "POST"), (":scheme", "http"), (":authority", "skyconf"), (":path", CDS)]
for name, fields in {
    "request_without_method": BASE[1:],
    "request_without_scheme": [BASE[0]] + BASE[2:],
    "request_without_path": BASE[:3],
    "request_with_an_empty_path": BASE[:3] + [(":path", "")],
    "request_with_an_unknown_pseudo_header": BASE + [(":foo", "bar")],
    "request_with_status": BASE + [(":status", "200")],
    "request_with_a_pseudo_header_after_a_field": BASE[:3] + [("x-a", "b"), BASE[3]],
    "request_with_a_repeated_path": BASE + [(":path", "/other")],
    "request_with_an_uppercase_name": BASE + [("X-Upper", "1")],
    "request_with_connection": BASE + [("connection", "keep-alive")],
    "request_with_te_gzip": BASE + [("te", "gzip")],
    "request_with_transfer_encoding": BASE + [("transfer-encoding", "chunked")],
}.items():
    CASES[name] = malformed(fields)


@case
def trailers_with_a_pseudo_header(addr):
    c = Conn(addr)
    c.handshake()
    c.send(c.headers(1), c.headers(1, fields=[(":path", "/x")], end_stream=True))
    return expect(c.outcome(1), ("rst", PROTOCOL_ERROR))


@case
def second_headers_without_end_stream(addr):
    c = Conn(addr)
    c.handshake()
    c.send(c.headers(1), c.headers(1, fields=[("x-a", "b")]))
    return expect(c.outcome(1), ("rst", PROTOCOL_ERROR))


@case
def content_length_not_matching_the_data(addr):
    c = Conn(addr)
    c.handshake()
    c.send(c.headers(1, fields=request_fields(extra=[("content-length", "10")])), raw(0, 1, 1, b"12345"))
    result = c.outcome(1)
    return expect(result, ("rst", PROTOCOL_ERROR), ("headers", None)) if result[0] != "headers" or status_of(result[1])[0] == "400" else f"answered {status_of(result[1])}"


@case
def an_unknown_service_is_answered_trailers_only(addr):
    c = Conn(addr)
    c.handshake()
    c.send(c.headers(1, fields=request_fields("/no.Such/method"), end_stream=True))
    result = c.outcome(1)
    if result[0] != "headers":
        return f"got {result}"
    status = status_of(result[1])
    if status != ("200", "12") or "END_STREAM" not in result[1].flags:
        return f"status {status}, flags {result[1].flags}"
    return None


# --- HPACK (RFC 7541) ---

after_handshake("hpack_index_0", COMPRESSION_ERROR, lambda c: [c.headers(1, block=b"\x80", end_stream=True)])
after_handshake("hpack_index_beyond_the_tables", COMPRESSION_ERROR, lambda c: [c.headers(1, block=b"\xff\x7f", end_stream=True)])
after_handshake("hpack_huffman_padding_of_zeros", COMPRESSION_ERROR, lambda c: [c.headers(1, block=b"\x82\x86\x00\x81\x00\x81\x00", end_stream=True)])
after_handshake("hpack_table_size_update_over_the_bound", COMPRESSION_ERROR, lambda c: [c.headers(1, block=hpack_int(8192, 5, 0x20) + c.block(request_fields()), end_stream=True)])


@case
def hpack_huffman_coded_request_is_answered(addr):
    c = Conn(addr)
    c.handshake()
    block = c.encoder.encode(request_fields("/no.Such/method"), huffman=True)
    c.send(c.headers(1, block=block, end_stream=True))
    return expect(c.outcome(1), ("headers", None))


# --- Hardening attacks ---

@case
def attack_rapid_reset(addr):
    """Streams opened and reset at once, many times: the connection is closed."""
    c = Conn(addr)
    c.handshake()
    frames = []
    for i in range(500):
        sid = 2 * i + 1
        frames += [c.headers(sid), hf.RstStreamFrame(sid, error_code=CANCEL)]
    c.send(*frames)
    return expect(c.outcome(), ("goaway", ENHANCE_YOUR_CALM))


@case
def attack_continuation_flood(addr):
    """A header block that never ends: the connection is closed before 1 MiB of it is taken."""
    c = Conn(addr)
    c.handshake()
    c.send(c.headers(1, end_headers=False, block=c.block(request_fields())))
    sent = 0
    junk = hpack_int(0, 4) + hpack_int(3, 7) + b"x-a" + hpack_int(16000, 7) + b"a" * 16000
    c.sock.settimeout(2.0)
    try:
        while sent < (1 << 20):
            c.sock.sendall(raw(9, 0, 1, junk[:16384]))
            sent += 16384
    except OSError:
        pass
    c.sock.settimeout(TIMEOUT)
    result = c.outcome()
    if sent >= (1 << 20) and result[0] == "closed" and result[1] == "timeout":
        return "1 MiB of CONTINUATION taken without a close"
    return expect(result, ("goaway", ENHANCE_YOUR_CALM), ("goaway", PROTOCOL_ERROR), ("goaway", COMPRESSION_ERROR), ("closed", None))


@case
def attack_hpack_bomb(addr):
    """A 4 KB table entry referenced 2,000 times (8 MB decoded) in a 2 KB block, before the client
    acknowledges the server's table size: answered 431 (or refused), and the connection lives."""
    c = Conn(addr)
    c.handshake(ack=False)
    value = b"v" * 4000
    block = b"\x40" + hpack_int(5, 7) + b"x-big" + hpack_int(len(value), 7) + value
    fields = c.block(request_fields())
    c.send(c.headers(1, block=fields + block + b"\xbe" * 2000, end_stream=True))
    result = c.outcome(1)
    if result[0] == "headers" and status_of(result[1])[0] == "431":
        ok = None
    else:
        ok = expect(result, ("rst", REFUSED_STREAM), ("rst", PROTOCOL_ERROR), ("goaway", ENHANCE_YOUR_CALM), ("goaway", COMPRESSION_ERROR))
    return ok


@case
def attack_hpack_reference_after_the_table_is_0(addr):
    """Once the client acknowledged table size 0, an indexed reference to a dynamic entry is a
    compression error: nothing was kept."""
    c = Conn(addr)
    c.handshake()
    c.send(hf.PingFrame(0, opaque_data=b"abcdefgh"))
    while not c.acked:
        c.read()
    c.send(c.headers(1, block=b"\x40" + hpack_int(1, 7) + b"x" + hpack_int(1, 7) + b"y" + b"\xbe" + c.block(request_fields()), end_stream=True))
    return expect(c.outcome(), *conn_error(COMPRESSION_ERROR))


@case
def attack_header_list_over_the_limit(addr):
    """A 20 KB header list (limit 16 KiB): 431, and the connection lives."""
    c = Conn(addr)
    c.handshake()
    fields = request_fields(extra=[(f"x-h{i}", "v" * 1000) for i in range(20)])
    block = hpack.Encoder().encode(fields, huffman=False)
    chunks = [block[i:i + 16384] for i in range(0, len(block), 16384)]
    frames = [raw(1, 1 | (4 if len(chunks) == 1 else 0), 1, chunks[0])]
    for i, chunk in enumerate(chunks[1:], 1):
        frames.append(raw(9, 4 if i == len(chunks) - 1 else 0, 1, chunk))
    c.send(*frames)
    result = c.outcome(1)
    if result[0] == "headers" and status_of(result[1])[0] == "431":
        c.send(c.headers(3, fields=request_fields("/no.Such/method"), end_stream=True))
        return expect(c.outcome(3), ("headers", None))
    return expect(result, ("rst", REFUSED_STREAM), ("rst", PROTOCOL_ERROR))


@case
def attack_stream_error_flood(addr):
    """Stream errors caused on purpose, over and over: the connection is closed."""
    c = Conn(addr)
    c.handshake()
    frames = []
    for i in range(1100):
        frames.append(c.headers(2 * i + 1, fields=BASE + [("X-Upper", "1")], end_stream=True))
    c.send(*frames)
    return expect(c.outcome(), ("goaway", ENHANCE_YOUR_CALM))


@case
def streams_over_the_concurrency_limit_are_refused(addr):
    c = Conn(addr)
    c.handshake()
    limit = c.server_settings.get(3, 100)
    frames = [c.headers(2 * i + 1) for i in range(limit + 1)]
    c.send(*frames)
    return expect(c.outcome(2 * limit + 1), ("rst", REFUSED_STREAM))


def main():
    addr = sys.argv[1]
    names = sys.argv[2:] or list(CASES)
    failed = []
    for name in names:
        started = time.monotonic()
        try:
            problem = CASES[name](addr)
        except Exception as e:  # a case that breaks is a failure, not a crash of the run
            problem = f"{type(e).__name__}: {e}"
        took = time.monotonic() - started
        if problem:
            failed.append(name)
            print(f"FAIL {name}: {problem} ({took:.2f}s)", flush=True)
        else:
            print(f"PASS {name} ({took:.2f}s)", flush=True)
    print(json.dumps({"cases": len(names), "failed": failed}), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
