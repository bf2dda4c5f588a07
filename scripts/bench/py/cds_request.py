"""Writes a framed ConfigurationSyncRequest{service, uuid} (1 flag byte, 4 length bytes, the
protobuf), the body h2load sends to fetchConfigurations.

Usage: cds_request.py FILE SERVICE [DIGEST]   (no DIGEST: an agent that holds none)
"""
import struct
import sys


def varint(n):
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def field(n, s):
    b = s.encode()
    return bytes([n << 3 | 2]) + varint(len(b)) + b  # the 128-character digest needs two length bytes


def body(service, uuid):
    m = field(1, service) + (field(2, uuid) if uuid else b"")
    return b"\0" + struct.pack(">I", len(m)) + m


if __name__ == "__main__":
    path, service, digest = sys.argv[1], sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else "")
    with open(path, "wb") as f:
        f.write(body(service, digest))
