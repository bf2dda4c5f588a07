"""Header blocks from Python's hpack encoder, for skyconf-h2's decoder to decode: one encoder
across all blocks (its dynamic table carries over, with size updates now and then), Huffman on and
off, random names and values. Prints one JSON object: the blocks with the fields each encodes, and
the Huffman code (code, bits) of each of the 257 symbols, from hpack's constants."""

import json
import random

import hpack
from hpack import huffman_constants

random.seed(7)
encoder = hpack.Encoder()
names = [b":method", b":path", b":authority", b":scheme", b"content-type", b"user-agent", b"grpc-timeout",
         b"authentication", b"x-custom", b"te", b"cookie", b"accept-encoding"]
blocks = []
for i in range(300):
    if i % 37 == 36:
        encoder.header_table_size = random.choice([0, 256, 1024, 4096])
    fields = []
    for _ in range(random.randint(1, 12)):
        name = random.choice(names) if random.random() < 0.7 else bytes(random.choice(b"abcdefghijklmnopqrstuvwxyz-0123456789") for _ in range(random.randint(1, 20)))
        value = bytes(random.randint(0x20, 0xFF) for _ in range(random.randint(0, 60))) if random.random() < 0.3 else random.choice([b"GET", b"/a/b", b"application/grpc", b"trailers", b"30S", b""])
        fields.append((name, value, random.random() < 0.1))
    block = encoder.encode([hpack.HeaderTuple(n, v) if not s else hpack.NeverIndexedHeaderTuple(n, v) for n, v, s in fields],
                           huffman=random.random() < 0.6)
    blocks.append({"block": block.hex(), "fields": [[n.hex(), v.hex()] for n, v, _ in fields]})
print(json.dumps({
    "blocks": blocks,
    "codes": [[c, l] for c, l in zip(huffman_constants.REQUEST_CODES, huffman_constants.REQUEST_CODES_LENGTH)],
}))
