#!/usr/bin/env python3
"""Writes IEEE-754 bit patterns (hex, one per line) that exercise every branch of Java's
Double.toString: uniform random bits, short decimals at every exponent, integers around 2^53..2^63,
powers of two and ten, subnormals and the extremes. Usage: double_corpus.py COUNT SEED"""
import random, struct, sys

count, seed = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
bits = lambda d: struct.unpack('>Q', struct.pack('>d', d))[0]
out = set()
for e in range(-1074, 1024):
    out.add(bits(2.0 ** e) if e > -1075 else 0)
for e in range(-323, 309):
    out.add(bits(float(f'1e{e}')))
    out.add(bits(float(f'5e{e}')) if e < 308 else 0)
for v in [5e-324, 4.9e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.1, 0.2, 0.3, 1e23, 2e23, 8.41e21]:
    out.add(bits(v))
while len(out) < count:
    kind = rng.randrange(5)
    if kind == 0:
        b = rng.getrandbits(64) & ~(1 << 63)
        if (b >> 52) == 0x7ff:
            continue
        out.add(b)
    elif kind == 1:
        digits = rng.randint(1, 17)
        mant = rng.randrange(10 ** (digits - 1), 10 ** digits)
        out.add(bits(float(f'{mant}e{rng.randint(-330, 300)}')))
    elif kind == 2:
        out.add(bits(float(rng.randrange(2 ** 52, 2 ** 63))))
    elif kind == 3:
        out.add(rng.randrange(1, 1 << 52))  # subnormal
    else:
        digits = rng.randint(1, 6)
        out.add(bits(float(f'{rng.randrange(10 ** digits)}e{rng.randint(-12, 12)}')))
out.discard(0)
for b in sorted(out):
    if b < (0x7ff << 52):
        print(f'{b:016x}')
