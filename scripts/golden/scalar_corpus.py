#!/usr/bin/env python3
"""Writes the scalar corpus: one small document per candidate plain scalar,
`configurations: {s: {a: <scalar>}}` in block style, for pinning skyconf's YAML 1.1 typing and Java
stringification against the OAP's loader one scalar at a time.

The candidates are every string of up to three characters over an alphabet chosen to hit the
int, float, sexagesimal, boolean and null patterns and their near misses, a seeded sample of
longer strings over the same alphabet, and a hand list of boundaries (integer widths, doubles
that Java prints oddly, calendar corners, YAML 1.1 booleans). Candidates that cannot stand as a
plain block value (they start with an indicator, or hold `: ` or ` #`) are left out.

usage: scalar_corpus.py OUT_DIR
Writes OUT_DIR/NNNNN.yaml, OUT_DIR/index.json (the candidates, in file order) and OUT_DIR/list.txt.
"""

import itertools
import json
import os
import random
import sys

ALPHABET = ["0", "1", "7", "8", "9", "_", ".", ":", "e", "E", "+", "-", "x", "b", "o", "a", "F", "5"]

HAND = """0 00 000 -0 +0 0x 0x_ 0x_1 0x1_ 0xG 0b 0b_ 0b_1 0b1_ 0b2 0o7 0_ 0_7 07_ 08 09 010 -010 +010 0_1_
1_ _1 1__0 1:30 1:60 1:59 1:5 1:05:30 -1:30 0:30 00:30 1:30.5 1:30. -1:30.5 1_0:30 1:3_0 190:20:30
35791394:07 35791394:08 -35791394:08 1000000:00:00 1:00:00:00:00:00:00 99999999999999999999:00
.5 .5e3 .5e+3 5. 5.e3 1e3 1E3 1e+3 1e-3 1.0e+3 1_000.5 1_000 1_000_000 1__000.5 ._5 ._ . .e3 1.5e 1.5e+
1e400 -1e400 1e-400 .inf .Inf .INF -.inf +.inf .nan .NaN .NAN -.nan .infinity inf nan NaN Infinity
2147483647 2147483648 -2147483648 -2147483649 9223372036854775807 9223372036854775808
-9223372036854775809 999999999999999999999 0x7fffffff 0x80000000 -0x80000000 0xffffffffffffffff
0x1ffffffffffffffff 0777777777777777777777777 0b11111111111111111111111111111111
yes Yes YES yEs no No NO true True TRUE tRue false False FALSE on On ON off Off OFF y Y n N
~ null Null NULL nUll
10000000.0 12345678.9 0.0001 -0.0 0.50 0.001 0.0010 9999999.0 9999999.5 1e7 1e-4 123456789012345678
1234567890123456789.0 0.1 0.2 0.3 3.14159265358979323846 2.718281828459045 1e22 1e23 2e23 5e-324
4.9e-324 1.7976931348623157e308 2.2250738585072014e-308 8.41e21 2.82879384806159e17 1.0E-5
9.999999999999999e22 1.1:30.5 1:30.123456789
2001-12-14 2001-12-14t21:59:43.10-05:00 2001-12-14T21:59:43Z 2001-1-1 2001-1-1T1:00:00
2001-12-14T21:59 2001-13-40 2001-00-00 2001-02-29 2000-02-29 1970-01-01 0000-01-01 0001-01-01
0999-12-31 1582-10-04 1582-10-10 1582-10-15 1582-10-20 1583-01-01 1500-03-01 1500-02-29
2001-12-14T25:61:61 2001-12-14T21:59:43.123456789Z 9999-12-31T23:59:59-12 2001-12-14T21:59:59.9996
2001-12-14T99:99:99.999999 2001-12-14T21:59:43+05:30 2001-12-14T21:59:43-5 2001-12-14T21:59:43.Z
= == < << <<< ! * & % @ ` a b c 1a a1 0x1g 1.0.0 1-2 1,000 +.5 -.5 +-1 -+1 ++1 0.5.5 1e3e3 1_e3""".split()

SPACED = ["2001-12-14 21:59:43 -5", "2001-12-14 21:59:43 +05:30", "2001-12-14  21:59:43",
          "2001-12-14\t21:59:43", "2001-12-14 21:59:43.10", "2001-12-14 21:59:43 Z"]

# Starting with '-' is fine when a non-blank follows; these are kept although '-' is an indicator.
DASHED = {"-0", "-1", "-010", "-.inf", "-.nan", "-1:30", "-1:30.5", "-2147483648", "-2147483649",
          "-9223372036854775809", "-1e400", "-0.0", "-.5", "-+1", "-1e3", "-0x80000000",
          "-35791394:08"}


def candidates():
    rng = random.Random(7)
    cands = set()
    for n in range(1, 4):
        for t in itertools.product(ALPHABET, repeat=n):
            cands.add("".join(t))
    for _ in range(3000):
        cands.add("".join(rng.choice(ALPHABET) for _ in range(rng.randint(4, 9))))
    cands.update(HAND)
    cands.update(SPACED)
    indicators = ("-", "?", ":", "*", "&", "!", "%", "@", "`", "#", "|", ">", '"', "'", "[", "{", ",")
    keep = [c for c in cands if c and (not c.startswith(indicators) or c in DASHED)]
    return sorted(c for c in keep if not c.endswith(":") and ": " not in c and " #" not in c)


def main():
    out = os.path.abspath(sys.argv[1])
    os.makedirs(out, exist_ok=True)
    cands = candidates()
    with open(os.path.join(out, "index.json"), "w", encoding="utf-8") as f:
        json.dump(cands, f, ensure_ascii=False, indent=0)
    with open(os.path.join(out, "list.txt"), "w") as lst:
        for i, c in enumerate(cands):
            p = os.path.join(out, "%05d.yaml" % i)
            with open(p, "w", encoding="utf-8", newline="") as f:
                f.write("configurations:\n  s:\n    a: %s\n" % c)
            lst.write(p + "\n")
    print(len(cands), "scalars in", out)


if __name__ == "__main__":
    main()
