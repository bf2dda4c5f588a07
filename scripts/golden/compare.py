#!/usr/bin/env python3
"""Compares skyconf's reading of a corpus with the OAP's (DigestTool), line by line.

usage: compare.py LIST ORACLE OURS [--show N]
LIST holds one document path per line; ORACLE and OURS one JSON line per document, in the same
order (BatchDigest and digest_like_oap output). Every document lands in one class:

  same          both accept with the same services, pairs and digests, or both refuse
  deviation:*   skyconf refuses where the OAP accepts or installs a partial table, for one of the
                intended reasons (the README of tests/data/golden lists them)
  known:*       a known difference that skyconf does not remove: YAML 1.2 parser limits and
                corners of SnakeYAML that skyconf refuses rather than imitates (same README)
  MISMATCH      anything else: a bug in skyconf, or a difference to be understood and listed

Exit status 1 when there is at least one MISMATCH.
"""

import collections
import json
import re
import sys


def pairs_hook(pairs):
    # Keep duplicate keys visible: the oracle prints one object member per service, and two
    # services that stringify alike appear twice.
    return ("__pairs__", pairs)


def repair(line):
    """DigestTool prints `,,"__truncated_by"` when a service *name* is null (it writes the separator
    before it stringifies the name); drop the stray comma so the line is JSON."""
    return line.replace(',,"__truncated_by"', ',"__truncated_by"')


def load(line):
    return json.loads(repair(line), object_pairs_hook=pairs_hook)


def members(obj):
    return obj[1] if isinstance(obj, tuple) and obj[0] == "__pairs__" else []


def last_wins(pairs):
    """Of equal names the last, at its own place: the OAP's tables are Java maps keyed by the
    printed name, so two keys that print alike (`1` and `"1"`) are sent once, with the last value."""
    out = {}
    for name, value in pairs:
        out.pop(name, None)
        out[name] = value
    return list(out.items())


def served(obj):
    """What a table line serves: services and their pairs with the last of equal names kept; the
    digests as printed (the OAP hashes every pair written, repeated names included)."""
    table = []
    for name, svc in members(obj):
        fields = dict(members(svc))
        table.append((name, (fields.get("uuid"), last_wins([tuple(p) for p in fields.get("config", [])]))))
    return last_wins(table)


def classify(text, o_raw, u_raw):
    o, u = load(o_raw), load(u_raw)
    o_members = dict(members(o))
    u_members = dict(members(u))
    o_err = "error" in o_members
    o_trunc = "__truncated_by" in o_members
    u_err = "error" in u_members
    if o_err and u_err:
        return "same"
    if o_trunc and u_err:
        return "deviation:partial-table"
    if o_err or o_trunc:
        return known(text, o_members, None)
    if not u_err:
        if served(o) == served(u):
            return "same"
        return known(text, o_members, None)
    msg = u_members["error"]
    services = members(o)
    if "no top-level `configurations:` key" in msg and not services:
        return "deviation:no-configurations-key"
    if "`configurations` must map" in msg and not services:
        return "deviation:configurations-not-a-mapping"
    if "is reserved by the command format" in msg:
        return "deviation:reserved-key"
    m = re.search(r"the tag `([^`]*)` is not supported", msg)
    if m and (m.group(1) in ("!!binary", "!!pairs") or not m.group(1).startswith("!!")):
        return "deviation:unsupported-tag"
    return known(text, o_members, msg if u_err else None)


# Known differences, each recognised narrowly by skyconf's message and the oracle's answer.
KNOWN_REFUSALS = [
    ("known:continuation-less-indented", lambda m, t: "invalid indentation" in m),
    ("known:tab-indented-continuation", lambda m, t: "tab cannot be used as indentation" in m),
    ("known:text-right-after-quoted-scalar", lambda m, t: "invalid trailing content after" in m),
    ("known:comment-right-after-quoted-scalar", lambda m, t: "comments must be separated from other tokens" in m),
    ("known:percent-line-inside-document", lambda m, t: "missing explicit document end marker" in m),
    ("known:question-mark-at-end", lambda m, t: "expected whitespace" in m and t.rstrip("\n").endswith("?")),
    ("known:surrogate-escape", lambda m, t: "invalid Unicode character escape" in m or "found invalid Unicode" in m),
    ("known:recursive-alias", lambda m, t: "recursive structures are not supported" in m),
    ("known:bom-inside-document", lambda m, t: "byte order mark must not appear inside" in m),
    ("known:anchor-name-with-colon", lambda m, t: re.search(r"anchor or alias name `[^`]*:[^`]*`", m)
     or re.search(r"&[^\s,\[\]{}]*:", t)),
    ("known:colon-before-flow-collection", lambda m, t: "may not precede any of `[{`" in m),
    ("known:explicit-key-value-without-colon", lambda m, t: "did not find expected key" in m
     and preceded_by_explicit_key(m, t)),
    ("known:directive-without-document", lambda m, t: "did not find expected <document start>" in m
     and t.lstrip().startswith("%")),
    ("known:bracket-in-tag", lambda m, t: ("while scanning a tag" in m or "is not valid YAML 1.1 (the OAP's loader reads a tag" in m)
     and re.search(r"![^\s]*[\[\],]", t)),
    ("known:question-mark-glued-in-flow", lambda m, t: "`?` is the key indicator" in m
     and re.search(r"[\[{,]\s*\?['\"!&*\[{]", t)),
    ("known:alias-followed-by-colon", lambda m, t: "found unknown anchor" in m and re.search(r"\*[^\s,\[\]{}]*:", t)),
    ("known:dash-before-flow-indicator", lambda m, t: "cannot start with '-' followed by" in m),
    ("known:java-hex-float", lambda m, t: "is not a valid float" in m and re.search(r"!!float\s+['\"]?[-+]?0[xX]", t)),
    ("known:unicode-digits", lambda m, t: "is not a valid integer" in m and re.search(r"!!int\s+['\"]?[^\x00-\x7f]", t)),
]


def preceded_by_explicit_key(message, text):
    """The refused line follows a `? key` line: SnakeYAML takes a more-indented next line as the
    key's value even without `:`."""
    m = re.match(r"line (\d+),", message)
    if not m:
        return False
    lines = text.split("\n")
    n = int(m.group(1)) - 1
    return any(line.lstrip().startswith("?") for line in lines[max(0, n - 2):n + 1])


def known(text, o_members, our_error):
    # A character the two YAML versions read differently: whatever the outcome, that is why.
    if text and "\ufeff" in text[1:]:
        return "known:bom-inside-document"
    if our_error is not None and "error" not in o_members:
        for name, test in KNOWN_REFUSALS:
            if test(our_error, text or ""):
                return name
    return "MISMATCH"


def main():
    args = sys.argv[1:]
    show = 30
    if "--show" in args:
        i = args.index("--show")
        show = int(args[i + 1])
        del args[i:i + 2]
    paths = open(args[0], encoding="utf-8").read().splitlines()
    ora = open(args[1], encoding="utf-8").read().rstrip("\n").split("\n")
    our = open(args[2], encoding="utf-8").read().rstrip("\n").split("\n")
    if not (len(paths) == len(ora) == len(our)):
        sys.exit("length mismatch: %d paths, %d oracle lines, %d of ours" % (len(paths), len(ora), len(our)))
    counts = collections.Counter()
    shown = 0
    for p, o, u in zip(paths, ora, our):
        text = open(p, encoding="utf-8", newline="").read()
        c = classify(text, o, u)
        counts[c] += 1
        if c == "MISMATCH" and shown < show:
            shown += 1
            print("---", p)
            print("  oracle:", o[:400])
            print("  ours:  ", u[:400])
    for c, n in sorted(counts.items()):
        print("%-45s %d" % (c, n))
    print("total", len(paths))
    sys.exit(1 if counts["MISMATCH"] else 0)


if __name__ == "__main__":
    main()
