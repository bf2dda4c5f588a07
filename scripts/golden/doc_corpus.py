#!/usr/bin/env python3
"""Seeded generator of random agentConfigurations documents, for diffing skyconf's reader against
the OAP's loader (DigestTool of ../shared/bench/javaref).

The documents are written as text, not dumped by a YAML library, so that they exercise the syntax
the OAP's users actually write and the corners where a YAML 1.2 parser and SnakeYAML (YAML 1.1)
could part ways: block and flow collections, anchors, aliases and `<<` merges, duplicate keys,
every scalar style with escapes, folding and chomping, comments, tags, complex keys, document
markers. Most documents are meant to be accepted; a small share carries a null value, a reserved
key or an unsupported tag so that refusals are compared too.

usage: doc_corpus.py OUT_DIR [--count N] [--seed S]
Writes OUT_DIR/gNNNNN.yaml (generated), OUT_DIR/eNNN-name.yaml (hand-written edge documents) and
OUT_DIR/list.txt (absolute paths, one per line, the input of BatchDigest and digest_like_oap).
"""

import argparse
import os
import random

# --- scalar text pools --------------------------------------------------------------------------

NUMBERISH = """0 00 -0 +0 1 -1 +5 7 08 010 007 0x1F 0xff 0b101 0o7 1_000 1__0 1:30 1:60 1:05:30 -1:30
1:30.5 1_0:30 .5 5. 1.0 0.5 0.50 0.0001 -0.0 1e3 1E3 1e+3 1e-3 1.5e3 1.0e+3 1_000.5 1e400 -1e400
.inf -.inf +.inf .Inf .NaN .nan .NAN 2147483647 2147483648 -2147483649 9223372036854775808
999999999999999999999 10000000.0 12345678.9 9999999.0 1e7 1e23 0.1 0.3 3.14159265358979 8.41e21
2.82879384806159e17 4.9e-324 1.7976931348623157e308 1e-400 0x 0b 0_ 1.0.0 1-2 1,000 +.5 -.5 ._""".split()

BOOLISH = """true True TRUE tRue false False FALSE yes Yes YES no No NO on On ON off Off OFF y Y n N
nUll""".split()

NULLISH = ["~", "null", "Null", "NULL"]

DATES = """2001-12-14 2001-12-14t21:59:43.10-05:00 2001-12-14T21:59:43Z 2001-1-1T1:00:00 2001-13-40
2000-02-29 1970-01-01 1582-10-10 1500-02-29 0001-01-01 2001-12-14T21:59 9999-12-31T23:59:59-12
2001-12-14T21:59:43.123456Z""".split() + ["2001-12-14 21:59:43.10", "2001-12-14 21:59:43 -5",
                                         "2001-12-14 21:59:43 +05:30"]

WORDS = """a b x value agent trace sample_rate /api/seller/seller/* /eureka/**,/actuator/** .txt,.log
http://host:8080/path a:b a::b key=value 50% @home `tick` a#b a-b -x ?x %x !x &x *x |x >x 'x "x
a,b [x] {x} a[0] a{b} true1 1true =  <<  <<< - -- --- ... é ü 日本語 😀 Ω℃ \\ \\n tab\there""".split()

UNICODE = ["é", "ß", "日本", "ключ", "😀", "🚀x", "Ω", "ü.ö", "\u00a0nbsp", "zh中文", "a\u200bb"]

RESERVED = ["SerialNumber", "UUID"]

SETTING_KEYS = ["agent.sample_n_per_3_secs", "agent.span_limit_per_segment", "agent.ignore_suffix",
                "agent.trace.ignore_path", "plugin.jdbc.trace_sql_parameters", "trace.sample_rate",
                "trace.ignore_path", "k", "j", "a", "b", "key", "x.y.z", "a b", "ä.key", "8", "010",
                "yes", "1.0", "0x10", "2001-12-14", "on", "-", "a:b", "with space", "UPPER", "k1", "k2"]

SERVICE_NAMES = ["serviceA", "serviceB", "svc", "s", "order-service", "my.service", "a b",
                 "svc::group", "123", "0x1F", "yes", "1.5", "服务", "сервис", "😀svc", "svc|x",
                 "ns/name", "UPPER", "x-y_z"]

DQ_NAMED = {"\n": "\\n", "\t": "\\t", '"': '\\"', "\\": "\\\\", "\0": "\\0", "\x07": "\\a",
            "\b": "\\b", "\x1b": "\\e", "\f": "\\f", "\x0b": "\\v", "\r": "\\r", "\x85": "\\N",
            "\xa0": "\\_", "\u2028": "\\L", "\u2029": "\\P", " ": "\\ ", "/": "\\/"}

INDICATORS = set("-?:,[]{}#&*!|>'\"%@`")


class Gen:
    def __init__(self, rng):
        self.r = rng
        self.anchors = []  # (name, kind): kind in scalar, seq, map
        self.next_anchor = 0

    # --- helpers ---------------------------------------------------------------------------------

    def p(self, prob):
        return self.r.random() < prob

    def pick(self, seq):
        return self.r.choice(seq)

    def comment(self):
        return self.pick(["# c", "#", "# comment: with [brackets] {and} 'quotes'", "# ünïcödé 😀",
                          "#no space", "# - item", "# key: value"])

    def trailing_comment(self):
        return ("  " + self.comment()) if self.p(0.12) else ""

    def anchor_name(self):
        self.next_anchor += 1
        return self.pick(["a", "base", "x", "anc", "é", "a-b", "a.b", "A1"]) + str(self.next_anchor)

    # --- scalar text ---------------------------------------------------------------------------

    def scalar_text(self, allow_null=False, long_ok=True):
        roll = self.r.random()
        if roll < 0.22:
            return self.pick(NUMBERISH)
        if roll < 0.32:
            return self.pick(BOOLISH)
        if roll < 0.38:
            return self.pick(DATES)
        if roll < 0.40 and allow_null:
            return self.pick(NULLISH)
        if roll < 0.47:
            return self.pick(UNICODE)
        if roll < 0.50 and long_ok:
            n = self.pick([200, 1000, 5000])
            unit = self.pick(["abc ", "x", "0123456789", "é😀 ", "/p/*,"])
            return (unit * (n // len(unit) + 1))[:n].strip() or "x"
        if roll < 0.60:
            # Several words, maybe with inner punctuation.
            return " ".join(self.pick(WORDS) for _ in range(self.r.randint(2, 6)))
        return self.pick(WORDS)

    @staticmethod
    def plain_ok(text, flow):
        """A conservative check that `text` survives as a plain scalar (so most docs parse)."""
        if not text or text != text.strip() or "\n" in text or "\t" in text:
            return False
        if text[0] in INDICATORS:
            # "-x", "?x", ":x" are plain when followed by a non-space; keep a few for the diff.
            if not (text[0] in "-?:" and len(text) > 1 and text[1] not in " ,[]{}"):
                return False
        if ": " in text or " #" in text or text.endswith(":"):
            return False
        if flow and any(c in text for c in ",[]{}"):
            return False
        if flow and ":" in text:
            return False
        if text in ("---", "...") or text.startswith(("--- ", "... ")):
            return False
        if "\\" in text or "\u2028" in text or "\u2029" in text or "\x85" in text:
            return False
        return True

    def single_quoted(self, text, indent, multiline_ok):
        body = text.replace("'", "''")
        if multiline_ok and self.p(0.2) and " " in body and "\n" not in text:
            # Fold: one line break reads as a space.
            words = body.split(" ")
            cut = self.r.randint(1, len(words) - 1)
            cont = " " * (indent + self.r.randint(1, 3))
            return "'" + " ".join(words[:cut]) + "\n" + cont + " ".join(words[cut:]) + "'"
        if "\n" in text:
            # A line break in single quotes is written as an empty line.
            cont = " " * (indent + 1)
            if not multiline_ok:
                return None
            return "'" + body.replace("\n", "\n\n" + cont) + "'"
        return "'" + body + "'"

    def double_quoted(self, text, indent, multiline_ok):
        out = []
        for c in text:
            o = ord(c)
            if c == '"' or c == "\\":
                out.append("\\" + c)
            elif c in DQ_NAMED and (o < 0x20 or self.p(0.3) or c in "\x85\u2028\u2029"):
                out.append(DQ_NAMED[c])
            elif o < 0x20 or o == 0x7F:
                out.append("\\x%02x" % o)
            elif self.p(0.05):
                if o <= 0xFF and self.p(0.5):
                    out.append("\\x%02X" % o)
                elif o <= 0xFFFF:
                    out.append("\\u%04x" % o)
                else:
                    out.append("\\U%08X" % o)
            else:
                out.append(c)
        body = "".join(out)
        if multiline_ok and self.p(0.15) and " " in body:
            cont = " " * (indent + self.r.randint(1, 3))
            i = body.index(" ")
            if self.p(0.5):
                body = body[:i] + "\n" + cont + body[i + 1:]          # folds to a space
            else:
                body = body[:i] + "\\\n" + cont + body[i:]            # escaped line break
        return '"' + body + '"'

    def plain_multiline(self, text, indent):
        words = text.split(" ")
        if len(words) < 2:
            return text
        cut = self.r.randint(1, len(words) - 1)
        cont = " " * (indent + self.r.randint(1, 4))
        sep = "\n" + ("\n" if self.p(0.2) else "") + cont
        return " ".join(words[:cut]) + sep + " ".join(words[cut:])

    def block_scalar(self, indent):
        """`|` or `>` with chomping and maybe an indentation indicator; returns (header, lines)."""
        style = self.pick("|>")
        chomp = self.pick(["", "-", "+"])
        nlines = self.r.randint(1, 5)
        lines = []
        for i in range(nlines):
            roll = self.r.random()
            if roll < 0.15 and i > 0:
                lines.append("")
            elif roll < 0.3:
                lines.append("  " + self.pick(WORDS))       # more indented
            else:
                lines.append(" ".join(self.pick(WORDS) for _ in range(self.r.randint(1, 3))))
        lines = [ln.replace("\t", " ") for ln in lines]
        trailing = self.pick([0, 0, 1, 2])
        step = self.r.randint(1, 4)
        ind_indicator = ""
        if self.p(0.3) or (lines and lines[0].startswith(" ")):
            ind_indicator = str(step)
        header = style + (ind_indicator + chomp if self.p(0.5) else chomp + ind_indicator)
        if self.p(0.15):
            header += " " + self.comment()
        pad = " " * (indent + step)
        body = []
        for ln in lines:
            body.append(pad + ln if ln else ("" if self.p(0.7) else pad))
        body.extend([""] * trailing)
        return header, body

    def tag_for_scalar(self, text):
        roll = self.r.random()
        if roll < 0.4:
            return "!!str"
        if roll < 0.5:
            return "!"
        if roll < 0.6:
            return "!!int"
        if roll < 0.68:
            return "!!float"
        if roll < 0.75:
            return "!!bool"
        if roll < 0.8:
            return "!!timestamp"
        if roll < 0.83:
            return "!<tag:yaml.org,2002:str>"
        if roll < 0.85:
            return "!!null"
        if roll < 0.87:
            return "!!binary"
        if roll < 0.89:
            return "!local"
        return "!!str"

    def scalar(self, indent, flow, allow_null=False, block_ok=True, key=False):
        """A scalar in some style. Returns a list of lines: the first continues the current line."""
        text = self.scalar_text(allow_null=allow_null, long_ok=not key)
        tag = ""
        if self.p(0.07):
            tag = self.tag_for_scalar(text)
            if tag in ("!!int",):
                text = self.pick(["10", "0x1F", "010", "1_000", "-5", "1:30", "abc", "08"])
            elif tag == "!!float":
                text = self.pick(["1", "1.5", ".5", "1e3", "-.inf", "x", "1_0.5"])
            elif tag == "!!bool":
                text = self.pick(["yes", "True", "off", "y", "1"])
            elif tag == "!!timestamp":
                text = self.pick(DATES + ["tomorrow"])
            elif tag == "!!null":
                text = self.pick(["", "~", "x"]) if allow_null else "x"
            elif tag == "!!binary":
                text = "aGVsbG8="
        roll = self.r.random()
        if block_ok and not flow and not key and roll < 0.1:
            header, body = self.block_scalar(indent)
            return [(tag + " " if tag else "") + header] + body
        if roll < 0.55 and self.plain_ok(text, flow):
            if not flow and not key and self.p(0.08) and " " in text:
                rendered = self.plain_multiline(text, indent)
            else:
                rendered = text
        elif roll < 0.75:
            rendered = self.single_quoted(text, indent, multiline_ok=not key)
            if rendered is None:
                rendered = self.double_quoted(text, indent, False)
        else:
            rendered = self.double_quoted(text, indent, multiline_ok=not key)
        if tag:
            rendered = tag + " " + rendered
        return rendered.split("\n")

    # --- collections ---------------------------------------------------------------------------

    def flow_value(self, depth, allow_null=True):
        roll = self.r.random()
        if depth < 3 and roll < 0.15:
            return self.flow_seq(depth + 1)
        if depth < 3 and roll < 0.25:
            return self.flow_map(depth + 1)
        if roll < 0.28 and self.anchors:
            return "*" + self.pick(self.anchors)[0]
        if roll < 0.3 and allow_null:
            return self.pick(["~", "null", ""])
        return " ".join(self.scalar(0, flow=True, block_ok=False))

    def flow_seq(self, depth):
        items = [self.flow_value(depth) for _ in range(self.r.randint(0, 4))]
        items = [i if i else "~" for i in items]
        tag = self.pick(["", "", "", "", "!!seq ", "! "])
        sep = self.pick([", ", ",", " , "])
        trail = "," if items and self.p(0.1) else ""
        return tag + "[" + sep.join(items) + trail + "]"

    def flow_key(self, depth):
        roll = self.r.random()
        if depth < 3 and roll < 0.05:
            return self.flow_seq(depth + 1)
        return " ".join(self.scalar(0, flow=True, block_ok=False, key=True))

    def flow_map(self, depth):
        entries = []
        for _ in range(self.r.randint(0, 4)):
            k = self.flow_key(depth)
            v = self.flow_value(depth)
            if self.p(0.05):
                entries.append(k)                      # a key with no value: null
            else:
                entries.append(k + ": " + v)
        tag = self.pick(["", "", "", "", "!!map ", "! "])
        if self.p(0.04):
            tag = "!!set "
            entries = [self.flow_key(depth) for _ in range(self.r.randint(0, 3))]
        return tag + "{" + ", ".join(entries) + "}"

    def block_value(self, indent, depth, allow_null):
        """Lines for a mapping value in block context; the first line continues `key:`."""
        roll = self.r.random()
        if depth < 4 and roll < 0.06:
            return [""] + self.block_map(indent + self.r.randint(1, 4), depth + 1, allow_null=True)
        if depth < 4 and roll < 0.12:
            return [""] + self.block_seq(indent + self.pick([0, 2, 2, 4]), depth + 1)
        if roll < 0.2:
            return [" " + (self.flow_seq(depth) if self.p(0.5) else self.flow_map(depth))]
        if roll < 0.25 and self.anchors:
            return [" *" + self.pick(self.anchors)[0]]
        if roll < 0.27 and allow_null:
            return [self.pick(["", " ~", " null", " !!null ''"])]
        if roll < 0.32:
            # An anchored value, usable later.
            name = self.anchor_name()
            lines = self.scalar(indent, flow=False)
            self.anchors.append((name, "scalar"))
            return [" &" + name + " " + lines[0]] + lines[1:]
        lines = self.scalar(indent, flow=False)
        return [" " + lines[0]] + lines[1:]

    def block_seq(self, indent, depth):
        out = []
        pad = " " * indent
        for _ in range(self.r.randint(1, 4)):
            roll = self.r.random()
            if depth < 4 and roll < 0.15:
                # A mapping as a list item: "- k: v" then aligned keys.
                sub = self.block_map(indent + 2, depth + 1, allow_null=True)
                first = sub[0].lstrip(" ")
                out.append(pad + "- " + first)
                out.extend(sub[1:])
            elif roll < 0.2:
                out.append(pad + "- " + self.flow_seq(depth))
            elif roll < 0.23:
                out.append(pad + "-")                   # null item
            else:
                lines = self.scalar(indent + 2, flow=False)
                out.append(pad + "- " + lines[0])
                out.extend(lines[1:])
            if self.p(0.08):
                out.append(" " * self.r.randint(0, indent + 2) + self.comment())
        return out

    def block_key(self, indent, depth, names=None):
        roll = self.r.random()
        if names is not None and roll < 0.7:
            k = self.pick(names)
            if self.plain_ok(k, False) and self.p(0.8):
                return k
            return self.pick(["'" + k.replace("'", "''") + "'", '"' + k + '"'])
        return " ".join(self.scalar(indent, flow=False, key=True))

    def block_map(self, indent, depth, allow_null, names=None, n=None):
        out = []
        pad = " " * indent
        count = n if n is not None else self.r.randint(1, 5)
        for _ in range(count):
            if self.p(0.06):
                out.append(" " * self.r.randint(0, indent) + self.comment())
            if self.p(0.03):
                out.append("")
            roll = self.r.random()
            if roll < 0.04 and self.anchors:
                maps = [a for a, kind in self.anchors if kind == "map"]
                if maps:
                    if self.p(0.3) and len(maps) > 1:
                        out.append(pad + "<<: [" + ", ".join("*" + m for m in self.r.sample(maps, 2)) + "]")
                    else:
                        out.append(pad + "<<: *" + self.pick(maps))
                    continue
            if roll < 0.06:
                out.append(pad + "<<: " + self.flow_map(depth + 1))
                continue
            if roll < 0.09:
                # Complex key.
                key_lines = [self.flow_seq(depth)] if self.p(0.6) else self.scalar(indent + 2, flow=False, key=True)
                out.append(pad + "? " + key_lines[0])
                out.extend(key_lines[1:])
                val = self.block_value(indent, depth, allow_null)
                out.append(pad + ":" + val[0])
                out.extend(val[1:])
                continue
            key = self.block_key(indent, depth, names)
            if roll < 0.14 and depth < 4:
                name = self.anchor_name()
                sub = self.block_map(indent + self.r.randint(1, 3), depth + 1, allow_null=True)
                out.append(pad + key + ": &" + name + self.trailing_comment())
                out.extend(sub)
                self.anchors.append((name, "map"))
                continue
            val = self.block_value(indent, depth, allow_null)
            first = pad + key + ":" + val[0]
            if len(val) == 1 and not val[0].rstrip().endswith(("|", ">")):
                first += self.trailing_comment()
            out.append(first)
            out.extend(val[1:])
        return out

    # --- services and documents --------------------------------------------------------------

    def setting_value_flow(self, depth):
        return self.flow_value(depth, allow_null=self.p(0.1))

    def service_flow(self):
        entries = []
        for _ in range(self.r.randint(0, 5)):
            if self.p(0.05) and any(k == "map" for _, k in self.anchors):
                entries.append("<<: *" + self.pick([a for a, k in self.anchors if k == "map"]))
                continue
            key = self.pick(SETTING_KEYS + (RESERVED if self.p(0.02) else []))
            if not self.plain_ok(key, True):
                key = '"' + key + '"'
            entries.append(key + ": " + self.setting_value_flow(1))
        sep = self.pick([", ", ",\n      "])
        return "{" + sep.join(entries) + "}"

    def service_block(self, indent):
        names = SETTING_KEYS + (RESERVED if self.p(0.02) else [])
        return self.block_map(indent, 2, allow_null=self.p(0.15), names=names, n=self.r.randint(0, 7) or 1)

    def configurations(self, indent):
        """The lines of the `configurations` value (after `configurations:`)."""
        roll = self.r.random()
        if roll < 0.08:
            # All flow.
            services = []
            for _ in range(self.r.randint(0, 3)):
                name = self.pick(SERVICE_NAMES)
                if not self.plain_ok(name, True):
                    name = '"' + name + '"'
                services.append(name + ": " + self.service_flow())
            return [" {" + ", ".join(services) + "}"]
        out = [self.trailing_comment()]
        pad = " " * indent
        for _ in range(self.r.randint(1, 4)):
            if self.p(0.08):
                out.append(self.comment())
            name = self.pick(SERVICE_NAMES + UNICODE[:4])
            if not self.plain_ok(name, False) or self.p(0.1):
                name = self.pick(['"%s"' % name, "'%s'" % name])
            if self.p(0.02):
                name = self.pick(["~", "", "8", "!!str 8"])
            roll = self.r.random()
            if roll < 0.2:
                out.append(pad + name + ": " + self.service_flow())
            elif roll < 0.23:
                out.append(pad + name + ": {}")
            elif roll < 0.25:
                out.append(pad + name + ":" + self.pick(["", " ~", " [a]", " x"]))
            elif roll < 0.3 and any(k == "map" for _, k in self.anchors):
                out.append(pad + name + ": *" + self.pick([a for a, k in self.anchors if k == "map"]))
            else:
                anchor = ""
                if self.p(0.1):
                    anchor = " &" + self.anchor_name()
                out.append(pad + name + ":" + anchor + self.trailing_comment())
                out.extend(self.service_block(indent + self.r.randint(1, 4)))
                if anchor:
                    self.anchors.append((anchor[2:], "map"))
        return out

    def other_top_level(self):
        roll = self.r.random()
        key = self.pick(["other", "meta", "version", "defaults", "x-common", "8", "'quoted key'"])
        if roll < 0.4:
            name = self.anchor_name()
            lines = [key + ": &" + name]
            lines += self.block_map(2, 1, allow_null=True)
            self.anchors.append((name, "map"))
            return lines
        if roll < 0.6:
            return [key + ": " + self.flow_seq(1)]
        if roll < 0.7:
            return [key + ":"]
        val = self.block_value(0, 1, True)
        return [key + ":" + val[0]] + val[1:]

    def document(self):
        lines = []
        if self.p(0.1):
            lines.append(self.comment())
        if self.p(0.03):
            lines.append("%YAML 1.1")
            lines.append("---")
        elif self.p(0.15):
            lines.append(self.pick(["---", "--- # start", "--- "]))
        before = [self.other_top_level() for _ in range(self.pick([0, 0, 1, 2]))]
        for b in before:
            lines.extend(b)
        indent = self.pick([1, 2, 2, 2, 3, 4])
        if self.p(0.02):
            pass  # no configurations key at all
        else:
            conf = self.configurations(indent)
            key = self.pick(["configurations"] * 12 + ['"configurations"', "'configurations'"])
            lines.append(key + ":" + conf[0])
            lines.extend(conf[1:])
        if self.p(0.15):
            lines.extend(self.other_top_level())
        if self.p(0.1):
            lines.append(self.comment())
        if self.p(0.05):
            lines.append("...")
        text = "\n".join(lines)
        if self.p(0.9):
            text += "\n"
        if self.p(0.03):
            text = text.replace("\n", "\r\n")
        return text


class TreeGen(Gen):
    """A second shape of document: a random value tree first, then rendered with random layout
    choices (block or flow at every level, indentation, indentless sequences, explicit keys,
    properties on keys and collections, tabs as separators, comments between any lines, a
    document that ends without a line break in the middle of any construct)."""

    def tree(self, depth):
        roll = self.r.random()
        if depth < 4 and roll < 0.18:
            return ("map", [(self.key_text(), self.tree(depth + 1)) for _ in range(self.r.randint(0, 4))])
        if depth < 4 and roll < 0.3:
            return ("seq", [self.tree(depth + 1) for _ in range(self.r.randint(0, 4))])
        return ("scalar", self.scalar_text(allow_null=True, long_ok=depth > 0))

    def key_text(self):
        return self.pick(SETTING_KEYS) if self.p(0.7) else self.scalar_text(long_ok=False)

    def sep(self):
        return self.pick([" ", " ", " ", "  ", "\t", " \t"])

    def props(self, kind):
        out = []
        if self.p(0.06):
            name = self.anchor_name().replace(".", "_")
            self.anchors.append((name, kind))
            out.append("&" + name)
        if self.p(0.04):
            out.append(self.pick({"map": ["!!map", "!"], "seq": ["!!seq", "!"], "scalar": ["!!str", "!"]}[kind]))
        self.r.shuffle(out)
        return " ".join(out)

    def scalar_lines(self, text, indent, flow, key=False):
        """Renders a given text in a random style; the first line continues the current one."""
        roll = self.r.random()
        if not flow and not key and roll < 0.1 and text and "\n" not in text:
            header, body = self.block_scalar(indent)
            return [header] + body
        if roll < 0.6 and self.plain_ok(text, flow):
            if not flow and not key and self.p(0.1) and " " in text:
                return self.plain_multiline(text, indent).split("\n")
            return [text]
        if roll < 0.8:
            return (self.single_quoted(text, indent, not key) or self.double_quoted(text, indent, False)).split("\n")
        return self.double_quoted(text, indent, not key).split("\n")

    def flow(self, node, indent, depth):
        kind, v = node
        if kind == "scalar":
            if v in ("~", "null", "Null", "NULL") and self.p(0.3):
                return ""
            return " ".join(self.scalar_lines(v, indent, flow=True))
        if self.p(0.1) and self.anchors:
            return "*" + self.pick(self.anchors)[0]
        props = self.props(kind)
        props = props + " " if props else ""
        brk = "\n" + " " * (indent + self.r.randint(1, 3)) if self.p(0.15) else " "
        if kind == "seq":
            return props + "[" + ("," + brk).join(self.flow(x, indent, depth + 1) or "~" for x in v) + "]"
        items = []
        for k, x in v:
            kt = " ".join(self.scalar_lines(k, indent, flow=True, key=True))
            items.append(kt + ":" + self.pick([" ", " ", "\t"]) + (self.flow(x, indent, depth + 1) or "~"))
        return props + "{" + ("," + brk).join(items) + "}"

    def block(self, node, indent, depth, in_seq=False):
        """Lines for `node` as a block value: [first-line suffix, more lines...]."""
        kind, v = node
        if kind == "scalar" or (not v) or self.p(0.25):
            if kind == "scalar":
                lines = self.scalar_lines(v, indent, flow=False)
                props = self.props("scalar") if self.p(0.5) else ""
                return [(props + " " if props else "") + lines[0]] + lines[1:]
            return [self.flow(node, indent, depth)]
        props = self.props(kind)
        head = props + (self.trailing_comment() if not props else "")
        out = [head]
        if kind == "map":
            pad = indent + self.r.randint(1, 4)
            out += self.block_map_lines(v, pad, depth + 1)
        else:
            pad = indent + self.pick([0, 0, 2, 2, 3, 4]) if not in_seq else indent + 2
            if pad == indent and in_seq:
                pad += 2
            out += self.block_seq_lines(v, pad, depth + 1)
        return out

    def block_map_lines(self, entries, indent, depth):
        pad = " " * indent
        out = []
        for k, x in entries:
            if self.p(0.05):
                out.append(" " * self.r.randint(0, indent) + self.comment())
            if self.p(0.06):
                key = self.scalar_lines(k, indent + 2, flow=False)
                out.append(pad + "?" + self.sep() + key[0])
                out += key[1:]
                val = self.block(x, indent, depth)
                out.append(pad + ":" + (self.sep() + val[0] if val[0] else ""))
                out += val[1:]
                continue
            key = " ".join(self.scalar_lines(k, indent, flow=False, key=True))
            kp = self.props("scalar") if self.p(0.05) else ""
            key = (kp + " " if kp else "") + key
            val = self.block(x, indent, depth)
            first = pad + key + ":" + (self.sep() + val[0] if val[0] else "")
            out.append(first)
            out += val[1:]
        return out or [pad + "{}"]

    def block_seq_lines(self, items, indent, depth):
        pad = " " * indent
        out = []
        for x in items:
            if self.p(0.05):
                out.append(" " * self.r.randint(0, indent) + self.comment())
            kind, v = x
            if kind == "map" and v and self.p(0.6):
                sub = self.block_map_lines(v, indent + 2, depth + 1)
                out.append(pad + "-" + self.pick([" ", " ", "   "])[:1] + sub[0].lstrip(" "))
                out += sub[1:]
                continue
            val = self.block(x, indent, depth, in_seq=True)
            out.append(pad + "-" + (self.sep() + val[0] if val[0] else ""))
            out += val[1:]
        return out

    def document(self):
        lines = []
        if self.p(0.1):
            lines.append(self.pick(["---", "--- # doc"]))
        if self.p(0.3):
            name = self.anchor_name().replace(".", "_")
            base = ("map", [(self.key_text(), self.tree(2)) for _ in range(self.r.randint(1, 3))])
            self.anchors.append((name, "map"))
            lines.append("defaults: &" + name)
            lines += self.block_map_lines(base[1], 2, 1)
        services = []
        for _ in range(self.r.randint(1, 3)):
            entries = [(self.key_text(), self.tree(1)) for _ in range(self.r.randint(0, 5))]
            entries = [(k, v if v != ("scalar", "") else ("scalar", "x")) for k, v in entries]
            services.append((self.pick(SERVICE_NAMES), entries))
        ind = self.pick([1, 2, 2, 4])
        lines.append("configurations:" + self.trailing_comment())
        for name, entries in services:
            if not self.plain_ok(name, False):
                name = '"' + name + '"'
            maps = [a for a, kind in self.anchors if kind == "map"]
            if self.p(0.2):
                lines.append(" " * ind + name + ": " + self.flow(("map", entries), ind, 1))
                continue
            lines.append(" " * ind + name + ":")
            sub = ind + self.r.randint(1, 4)
            if maps and self.p(0.25):
                if self.p(0.3) and len(maps) > 1:
                    lines.append(" " * sub + "<<:")
                    lines += [" " * (sub + 2) + "- *" + m for m in self.r.sample(maps, 2)]
                else:
                    lines.append(" " * sub + "<<: *" + self.pick(maps))
            if entries or not (maps and lines[-1].lstrip().startswith(("<<", "- *"))):
                lines += self.block_map_lines(entries, sub, 2)
        if self.p(0.1):
            lines.append(self.comment())
        text = "\n".join(lines)
        if self.p(0.75):
            text += "\n"
        return text


# --- hand-written edge documents ---------------------------------------------------------------

LICENSE = "\n".join("# " + line for line in """
Licensed to the Apache Software Foundation (ASF) under one or more
contributor license agreements.  See the NOTICE file distributed with
this work for additional information regarding copyright ownership.
The ASF licenses this file to You under the Apache License, Version 2.0
(the "License"); you may not use this file except in compliance with
the License.  You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.""".strip("\n").split("\n")).replace("# \n", "#\n")

EDGE = {
    # §5.1: the upstream fixture shape.
    "fixture": LICENSE + "\n\nconfigurations:\n  serviceA:\n    trace.sample_rate: 1000\n"
    "    trace.ignore_path: /api/seller/seller/*\n  serviceB:\n    trace.sample_rate: 1000\n"
    "    trace.ignore_path: /api/seller/seller/*\n",
    # §2.5 vectors (V2, the unknown service, is covered by the EMPTY constant; V2 doc has no service).
    "v01": "configurations:\n  svc:\n    trace.sample_rate: 1000\n    trace.ignore_path: /api/seller/seller/*\n",
    "v02": "configurations:\n  other: {k1: v}\n",
    "v03": "configurations:\n  svc: {}\n",
    "v04": "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n    agent.span_limit_per_segment: 400\n"
    "    agent.ignore_suffix: .txt,.log\n    agent.trace.ignore_path: /eureka/**,/actuator/**\n"
    "    plugin.jdbc.trace_sql_parameters: true\n",
    "v05": "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n    agent.span_limit_per_segment: 400\n",
    "v05q": "configurations:\n  svc:\n    agent.sample_n_per_3_secs: \"10\"\n    agent.span_limit_per_segment: 400\n",
    "v06": "configurations:\n  svc:\n    agent.span_limit_per_segment: 400\n    agent.sample_n_per_3_secs: 10\n",
    "v07": "configurations:\n  svc:\n    agent.sample_rate: 0.50\n",
    "v08": "configurations:\n  svc:\n    agent.sample_rate: \"0.50\"\n",
    "v09": "configurations:\n  svc:\n    plugin.jdbc.trace_sql_parameters: yes\n",
    "v10": "configurations:\n  svc:\n    k: 1\n    j: 2\n    k: 3\n",
    "v11": "configurations:\n  svc:\n    k1: v\n",
    "empty": "",
    "comments_only": "# nothing here\n# at all\n",
    "blank_lines": "\n\n   \n",
    "conf_null": "configurations:\n",
    "conf_tilde": "configurations: ~\n",
    "conf_list": "configurations:\n  - a\n  - b\n",
    "conf_scalar": "configurations: yes\n",
    "no_conf": "other: 1\n",
    "root_list": "- configurations\n",
    "root_scalar": "configurations\n",
    "two_docs": "configurations: {a: {k: v}}\n---\nconfigurations: {b: {k: v}}\n",
    "doc_end_then_doc": "configurations: {a: {k: v}}\n...\n---\nx: 1\n",
    "doc_markers": "---\nconfigurations:\n  a: {k: v}\n...\n",
    "yaml11_directive": "%YAML 1.1\n---\nconfigurations:\n  a: {k: 010}\n",
    "yaml12_directive": "%YAML 1.2\n---\nconfigurations:\n  a: {k: 010}\n",
    "tag_directive": "%TAG !e! tag:yaml.org,2002:\n---\nconfigurations:\n  a: {k: !e!str 010, j: !e!int '0x10'}\n",
    "bom": "\ufeffconfigurations:\n  a: {k: v}\n",
    "crlf": "configurations:\r\n  a:\r\n    k: v\r\n    j: |\r\n      x\r\n      y\r\n",
    "tabs_in_value": "configurations:\n  a:\n    k: a\tb\n    j: \"\\t\"\n",
    "tab_indent": "configurations:\n\ta: {k: v}\n",
    "null_value_first": "configurations:\n  a:\n    k:\n  b:\n    k: v\n",
    "null_value_later": "configurations:\n  a:\n    k: v\n  b:\n    k: ~\n  c:\n    k: v\n",
    "null_service": "configurations:\n  a: {k: v}\n  b:\n  c: {k: v}\n",
    "list_service": "configurations:\n  a: {k: v}\n  b: [x]\n",
    "scalar_service": "configurations:\n  a: {k: v}\n  b: x\n",
    "null_key": "configurations:\n  a: {~: v}\n",
    "null_service_name": "configurations:\n  ~: {k: v}\n",
    "reserved_uuid": "configurations:\n  a: {UUID: x}\n",
    "reserved_serial": "configurations:\n  a: {SerialNumber: x}\n",
    "dup_typed_key": "configurations:\n  a: {'8': x, 8: y}\n",
    "dup_typed_service": "configurations:\n  '8': {k: v}\n  8: {k: w}\n",
    "dup_service": "configurations:\n  a: {k: 1}\n  b: {k: 2}\n  a: {j: 3}\n",
    "dup_equal_int_forms": "configurations:\n  a: {8: x, 010: y, 0x8: z}\n",
    "alias_value": "configurations:\n  a: {k: &v hello, j: *v}\n",
    "alias_star_plain": "configurations:\n  a: {k: */api/*}\n",
    "alias_unknown": "configurations:\n  a: {k: *nope}\n",
    "alias_service": "base: &b {k: v, j: 2}\nconfigurations:\n  a: *b\n  b: *b\n",
    "merge_override": "base: &b {k: 1, j: 2}\nconfigurations:\n  a:\n    <<: *b\n    k: 3\n",
    "merge_list": "x: &x {a: 1, b: 2}\ny: &y {b: 3, c: 4}\nconfigurations:\n  s:\n    <<: [*x, *y]\n    d: 5\n",
    "merge_nested": "x: &x {a: 1}\ny: &y {<<: *x, b: 2}\nconfigurations:\n  s: {<<: *y, c: 3}\n",
    "merge_inline": "configurations:\n  s: {<<: {a: 1, b: 2}, b: 9}\n",
    "merge_twice": "x: &x {a: 1}\nconfigurations:\n  s: {<<: *x, <<: {b: 2}}\n",
    "merge_scalar": "configurations:\n  s: {<<: 5}\n",
    "merge_list_scalar": "configurations:\n  s: {<<: [5]}\n",
    "merge_quoted": "configurations:\n  s: {'<<': {a: 1}}\n",
    "merge_in_value": "x: &x {a: 1}\nconfigurations:\n  s: {k: {<<: *x, b: 2}}\n",
    "merge_services": "common: &c\n  svcA: {k: v}\nconfigurations:\n  <<: *c\n  svcB: {k: w}\n",
    "set_value": "configurations:\n  s: {k: !!set {a, b, a}}\n",
    "set_block": "configurations:\n  s:\n    k: !!set\n      ? x\n      ? y\n",
    "omap": "configurations:\n  s: {k: !!omap [a: 1, b: 2]}\n",
    "pairs": "configurations:\n  s: {k: !!pairs [a: 1, a: 2]}\n",
    "binary": "configurations:\n  s: {k: !!binary aGVsbG8=}\n",
    "local_tag": "configurations:\n  s: {k: !foo bar}\n",
    "verbatim_tag": "configurations:\n  s: {k: !<tag:yaml.org,2002:str> 010}\n",
    "nonspecific_tag": "configurations:\n  s: {k: ! 010, j: ! [a], m: ! {a: 1}}\n",
    "str_tag_on_seq": "configurations:\n  s: {k: !!str [a]}\n",
    "map_tag_on_seq": "configurations:\n  s: {k: !!map [a]}\n",
    "int_tag_bad": "configurations:\n  s: {k: !!int abc}\n",
    "float_tag_int": "configurations:\n  s: {k: !!float 1, j: !!float '0x1F'}\n",
    "bool_tag_y": "configurations:\n  s: {k: !!bool y}\n",
    "null_tag_text": "configurations:\n  s: {k: !!null x}\n",
    "complex_key_seq": "configurations:\n  s:\n    ? [a, b]\n    : 1\n",
    "complex_key_map": "configurations:\n  s:\n    ? {a: 1}\n    : 1\n",
    "complex_key_block": "configurations:\n  s:\n    ? |\n      block key\n    : v\n",
    "flow_seq_key": "configurations:\n  s: {[a, b]: 1}\n",
    "nested_values": "configurations:\n  s:\n    k: [a, [b, c], {d: e}]\n    j: {x: [1, 2], y: {z: ~}}\n"
    "    l:\n      - a: 1\n        b: 2\n      - c: 3\n",
    "block_literals": "configurations:\n  s:\n    a: |\n      x\n      y\n    b: |-\n      x\n    c: |+\n      x\n\n    d: >\n      f\n      g\n\n      h\n    e: >-\n      f\n       indented\n      g\n    f: >+\n      x\n\n\n    g: |2\n        two\n    h: |1-\n      one\n",
    "folded_more_indented": "configurations:\n  s:\n    a: >\n      one\n        two\n      three\n\n      four\n",
    "block_empty": "configurations:\n  s:\n    a: |\n    b: >-\n    c: |+\n\n",
    "plain_multiline": "configurations:\n  s:\n    a: one\n      two\n\n      three\n    b: x\n",
    "quoted_escapes": "configurations:\n  s:\n    a: \"\\n\\t\\u00e9\\x41\\U0001F600\\\\\\\"\"\n    b: \"\\0\\a\\b\\e\\f\\v\\r\\N\\_\\L\\P\\ \"\n    c: 'it''s'\n    d: \"\\/\"\n",
    "quoted_fold": "configurations:\n  s:\n    a: \"one\n      two\n\n      three\"\n    b: 'one\n      two\n\n\n      three'\n    c: \"one \\\n      two\"\n",
    "emoji_keys": "configurations:\n  \"😀\": {\"🚀\": \"🌍\"}\n  日本: {キー: 値}\n",
    "surrogate_escape": "configurations:\n  s: {k: \"\\ud83d\\ude00\"}\n",
    "long_value": "configurations:\n  s:\n    k: " + "x" * 20000 + "\n",
    "many_keys": "configurations:\n  s:\n" + "".join("    k%d: %d\n" % (i, i) for i in range(2000)),
    "many_services": "configurations:\n" + "".join("  s%d: {k: %d}\n" % (i, i) for i in range(500)),
    "deep_nesting": "configurations:\n  s: {k: " + "[" * 45 + "]" * 45 + "}\n",
    "too_deep": "configurations:\n  s: {k: " + "[" * 60 + "]" * 60 + "}\n",
    "alias_bomb": "a: &a [x, y]\n" + "".join("b%d: &b%d [*%s, *%s]\n" % (i, i, "a" if i == 0 else "b%d" % (i - 1), "a" if i == 0 else "b%d" % (i - 1)) for i in range(60)) + "configurations:\n  s: {k: v}\n",
    "recursive_alias": "configurations:\n  s: &s {k: *s}\n",
    "keys_like_values": "configurations:\n  s: {8: a, 010: b, 0x1F: c, 1.0: d, yes: e, no: f, 2001-12-14: g, .inf: h, -0.0: i}\n",
    "unicode_names": "configurations:\n  服务:\n    键: 值\n  ключ:\n    é: ü\n",
    "empty_flow_values": "configurations:\n  s: {a: [], b: {}, c: '', d: \"\"}\n",
    "top_level_extras": "version: 1\nconfigurations:\n  s: {k: v}\nextra: [a, b]\n",
    "top_level_bad_extra": "extra: !!int abc\nconfigurations:\n  s: {k: v}\n",
    "anchor_on_configurations": "configurations: &c\n  s: {k: v}\ncopy: *c\n",
    "indent_1": "configurations:\n s:\n  k: v\n",
    "seq_not_indented": "configurations:\n  s:\n    k:\n    - a\n    - b\n",
    "colon_in_values": "configurations:\n  s:\n    a: http://x:8080/y\n    b: a:b\n    c: ':x'\n    d: -x\n    e: ?x\n",
    "hash_in_values": "configurations:\n  s:\n    a: a#b\n    b: 'a #b'\n    c: a #b\n",
    "flow_in_block_multiline": "configurations:\n  s:\n    a: [one,\n      two]\n    b: {x: 1,\n      y: 2}\n",
    "question_plain": "configurations:\n  s:\n    ?x: 1\n",
    "dash_values": "configurations:\n  s:\n    a: -\n",
    "sexagesimal": "configurations:\n  s: {a: 1:30, b: 190:20:30, c: 1:30.5, d: -1:30, e: 1:60}\n",
    "timestamps": "configurations:\n  s: {a: 2001-12-14, b: 2001-12-14 21:59:43.10, c: 2001-12-14t21:59:43.10-05:00, d: 2001-13-40, e: 1500-01-01, f: !!timestamp 2002-01-01}\n",
    "key_is_collection_in_config": "configurations:\n  [a]: {k: v}\n",
    "service_map_key": "configurations:\n  {a: 1}: {k: v}\n",
    "bool_service": "configurations:\n  yes: {k: v}\n  1.50: {k: v}\n",
    "explicit_str_service": "configurations:\n  !!str 010: {k: v}\n",
    "null_in_nested": "configurations:\n  s: {k: [~, null, ''], j: {a: }}\n",
    "question_key_no_value": "configurations:\n  s:\n    ? k\n",
    "empty_key_flow": "configurations:\n  s: {: v}\n",
    "trailing_spaces": "configurations:   \n  s:   \n    k: v   \n",
    "comment_after_block_header": "configurations:\n  s:\n    k: | # note\n      text\n",
    "anchor_then_tag": "configurations:\n  s: {k: &a !!str 5, j: !!str &b 6, l: *a}\n",
    "nel_line_break": "configurations:\n  s: {k: \"a\u0085b\", j: a\u2028b}\n",
    "control_char": "configurations:\n  s: {k: \"a\\x7fb\", j: \"\\x01\"}\n",
    "indicator_in_flow_plain": "configurations:\n  s: {k: a:b, j: [a:b]}\n",
    "doc_start_inline": "--- {configurations: {s: {k: v}}}\n",
    "doc_start_block_scalar": "--- |\n  text\n",
    "reserved_in_nested_ok": "configurations:\n  s: {k: {UUID: x}}\n",

    # YAML 1.1 (SnakeYAML) against 1.2 (the parser skyconf uses): syntax corners.
    "flow_less_indented": "configurations:\n  s:\n    k: [a,\nb]\n",
    "flow_less_indented_map": "configurations:\n  s:\n    k: {a: 1,\n  b: 2}\n",
    "plain_less_indented": "configurations:\n  s:\n    k: a\n   b\n",
    "quoted_less_indented": "configurations:\n  s:\n    k: \"a\nb\"\n",
    "tab_after_colon": "configurations:\n  s:\n    k:\tv\n",
    "tab_before_comment": "configurations:\n  s:\n    k: v\t# c\n",
    "tab_in_block_scalar": "configurations:\n  s:\n    k: |\n      a\n      \tb\n",
    "key_no_space": "configurations:\n  s:\n    key:value: 1\n",
    "hash_no_space": "configurations:\n  s:\n    k: v#c\n",
    "yaml20_directive": "%YAML 2.0\n---\nconfigurations:\n  s: {k: v}\n",
    "yaml11_twice": "%YAML 1.1\n%YAML 1.1\n---\nconfigurations:\n  s: {k: v}\n",
    "unknown_directive": "%FOO bar\n---\nconfigurations:\n  s: {k: v}\n",
    "bom_inside": "configurations:\n  s: {k: \ufeffv}\n",
    "anchor_empty": "configurations:\n  s:\n    k: &a\n    j: v\n",
    "anchor_redefined": "x: &a 1\ny: &a 2\nconfigurations:\n  s: {k: *a}\n",
    "anchor_colon": "configurations:\n  s:\n    k: &a:b v\n",
    "anchor_odd_chars": "configurations:\n  s:\n    k: &a?%@`#!|'\"=~<\\b v\n    j: *a?%@`#!|'\"=~<\\b\n",
    "alias_key_space": "x: &a k\nconfigurations:\n  s: {*a : v}\n",
    "alias_key_colon": "x: &a k\nconfigurations:\n  s: {*a: v}\n",
    "complex_key_block_seq": "configurations:\n  s:\n    ? - a\n      - b\n    : v\n",
    "crlf_block_scalars": "configurations:\r\n  s:\r\n    k: |\r\n      a\r\n      b\r\n    j: >\r\n      c\r\n      d\r\n",
    "dq_line_continuation": "configurations:\n  s:\n    k: \"a\\\n      b\"\n    j: \"a \\\n      \\ b\"\n",
    "dash_compact": "configurations:\n  s:\n    k:\n    - - a\n      - b\n    -   c\n",
    "dash_before_flow_end": "configurations:\n  s:\n    k: [-]\n    j: {a: -}\n",
    "empty_flow_entry": "configurations:\n  s:\n    k: [a, , b]\n",
    "flow_map_keys_only": "configurations:\n  s:\n    k: {a, b}\n",
    "flow_question_mark": "configurations:\n  s:\n    a: {?x: 1}\n    b: [?x, ?y: 2]\n    c: {?}\n",
    "flow_question_mark_value": "configurations:\n  s:\n    k: {a: ?x}\n",
    "flow_query_string": "configurations:\n  s: {url: http://h/p?x=1}\n",
    "block_query_string": "configurations:\n  s:\n    url: http://h/p?x=1\n",
    "flow_leading_colon": "configurations:\n  s:\n    k: [:x]\n",
    "flow_multiline_key": "configurations:\n  s:\n    k: {[a,\n      b]: 1}\n",
    "long_implicit_key": "configurations:\n  s:\n    " + "k" * 1100 + ": v\n",
    "long_explicit_key": "configurations:\n  s:\n    ? " + "k" * 1100 + "\n    : v\n",
    "key_trailing_space": "configurations:\n  s:\n    \"a \": 1\n",
    "raw_line_separator": "configurations:\n  s:\n    k: a\u2028b\n",
    "raw_control": "configurations:\n  s:\n    k: a\x01b\n",
    "raw_del": "configurations:\n  s:\n    k: a\x7fb\n",
    "raw_c1": "configurations:\n  s:\n    k: a\x90b\n",
    "raw_fffe": "configurations:\n  s:\n    k: a\ufffeb\n",
    "control_in_comment": "# a\x01b\nconfigurations:\n  s:\n    k: v\n",
    "comment_before_nested": "configurations:\n  s:\n  # c\n    k: v\n",
    "tag_no_value": "configurations:\n  s:\n    k: !!str\n    j: &a !!str\n    l: !!str ~\n",
    "seq_in_seq_map": "configurations:\n  s:\n    k:\n      - a: 1\n        b: 2\n      - - x\n        - y\n",
    "explicit_key_block_value": "configurations:\n  s:\n    ? k\n    :\n      a: 1\n",
    "plain_colon_end": "configurations:\n  s:\n    k: a:\n",
    "value_then_key_same_line": "configurations:\n  s:\n    k: v: w\n",
    "quoted_then_text": "configurations:\n  s:\n    k: \"a\" b\n",
    "sq_empty_lines": "configurations:\n  s:\n    k: 'a\n\n\n      b'\n",
    "folded_indent_indicator": "configurations:\n  s:\n    k: >2\n       a\n      b\n\n       c\n",
    "literal_first_line_empty": "configurations:\n  s:\n    k: |\n\n      a\n",
    "literal_less_after_more": "configurations:\n  s:\n    k: |\n        a\n      b\n",
    "block_scalar_then_comment": "configurations:\n  s:\n    k: |\n      a\n    # not content\n    j: v\n",
    "block_scalar_eof_clip": "configurations:\n  s:\n    k: |\n      a",
    "block_scalar_eof_keep": "configurations:\n  s:\n    k: &x >+\n      a\n      b",
    "block_scalar_eof_blank": "configurations:\n  s:\n    k: |+\n      a\n\n      ",
    "doc_end_no_newline": "configurations:\n  s: {k: v}\n...",
    "doc_end_alone": "...\n",
    "doc_start_alone": "---\n",
    "doc_start_comment": "--- # hi\nconfigurations:\n  s: {k: v}\n",
    "root_null": "--- ~\n",
    "merge_seq_alias": "x: &x {a: 1}\ny: &y [*x]\nconfigurations:\n  s: {<<: *y}\n",
    "merge_dup_inline": "configurations:\n  s:\n    <<: {a: 1, a: 2}\n",
    "merge_dup_built_first": "x: &x {a: 1, a: 2}\nconfigurations:\n  s:\n    <<: *x\n",
    "merge_then_alias": "configurations:\n  t: {<<: &y {a: 1, a: 2}}\n  s: *y\n",
    "merge_source_loses_merge": "x: &x {a: 1}\nconfigurations:\n  t: {<<: &y {<<: *x, b: 2}}\n  s: *y\n",
    "set_dup": "configurations:\n  s: {k: !!set {a, a, b}}\n",
    "int_keys_equal": "configurations:\n  s: {1: a, 0x1: b, 01: c}\n",
    "float_keys_equal": "configurations:\n  s: {1.0: a, 1e0: b, .nan: c, .NaN: d}\n",
    "bool_keys_equal": "configurations:\n  s: {yes: a, true: b, on: c}\n",
    "null_keys_nested": "configurations:\n  s: {k: {~: a, null: b}}\n",
    "map_keys_equal": "configurations:\n  s: {k: {{a: 1}: x, {a: 1}: y}}\n",
    "date_keys_equal": "configurations:\n  s: {k: {2001-12-14: a, 2001-12-14 00:00:00: b}}\n",
    "tagged_int_lenient": "configurations:\n  s: {a: !!int 0x-1, b: !!int '1:-1', c: !!int 1000000:00:00, d: !!int 0b-1}\n",
    "tagged_float_lenient": "configurations:\n  s: {a: !!float 1.5f, b: !!float ' -1', c: !!float +NaN, d: !!float -Infinity, e: !!float 1E3D}\n",
    "tagged_float_hex": "configurations:\n  s: {a: !!float 0x1.8p3}\n",
    "tagged_int_unicode_digits": "configurations:\n  s: {a: !!int \u0663\u0664}\n",
    "tagged_bool_unknown": "configurations:\n  s: {a: [!!bool y, !!bool 1]}\n",
    "tagged_bool_unknown_top": "configurations:\n  s: {a: !!bool y}\n",
    "tagged_timestamp_lenient": "configurations:\n  s: {a: !!timestamp 2001-1-1, b: !!timestamp '2001-12-14T21:59:43+05:', c: !!timestamp '2001-12-14T21:59:59.9996'}\n",
    "nonspecific_quoted": "configurations:\n  s: {a: ! '010', b: ! \"yes\", c: ! '2001-12-14', d: [! '~']}\n",
    "sexagesimal_overflow": "configurations:\n  s: {a: 35791394:07, b: 35791394:08, c: 1000000:00:00}\n",
    "sexagesimal_too_big": "configurations:\n  s: {a: 99999999999999999999:00}\n",
    "tab_after_colon_value": "configurations:\n  s:\n    k:\tv\n",
    "tab_in_flow": "configurations:\n  s:\n    k: [a,\tb]\n",
    "tab_after_quoted": "configurations:\n  s:\n    k: 'q'\t# c\n",
    "tab_after_plain": "configurations:\n  s:\n    k\t: v\t# c\n",
    "tab_after_block_header": "configurations:\n  s:\n    k: >\t\n      x\n",
    "tab_in_block_content": "configurations:\n  s:\n    k: |\n      x\t\n      \ty\n",
    "tab_line_alone": "configurations:\n  s:\n    k: v\n\t\n",
    "empty_implicit_key_root": "configurations:\n  s: {k: v}\n: x\n",
    "lone_cr_breaks": "configurations:\r  s:\r    k: |\r      a\r      b\r",
    "comment_right_after_quoted": "configurations:\n  s:\n    k: \"q\"#c\n",
    "text_right_after_quoted": "configurations:\n  s:\n    ? \"k\"v\n",
    "nesting_50": "configurations:\n  s: {k: " + "[" * 47 + "x" + "]" * 47 + "}\n",
    "nesting_51_empty": "configurations:\n  s: {k: " + "[" * 48 + "]" * 48 + "}\n",
    "nesting_51": "configurations:\n  s: {k: " + "[" * 48 + "x" + "]" * 48 + "}\n",
    "aliases_50": "a: &a [x]\nb: [" + ", ".join(["*a"] * 50) + "]\nconfigurations:\n  s: {k: v}\n",
    "aliases_51": "a: &a [x]\nb: [" + ", ".join(["*a"] * 51) + "]\nconfigurations:\n  s: {k: v}\n",
    # Issue 10: keys that print alike (the last is sent, every one hashed), !!omap, F16.
    "dup_print_key_block": "configurations:\n  a:\n    1: x\n    j: y\n    \"1\": z\n",
    "dup_print_keys_three": "configurations:\n  a: {\"1\": x, 1: y, 1.0: w, \"1.0\": v, j: q}\n",
    "dup_print_service_between": "configurations:\n  1: {k: v}\n  b: {k: w}\n  \"1\": {k: x}\n",
    "dup_same_service": "configurations:\n  a: {k: v}\n  b: {k: w}\n  a: {k: x}\n",
    "dup_configurations": "configurations:\n  a: {k: v}\n  b: {k: w}\nother: 1\nconfigurations:\n  c: {k: x}\n",
    "omap_values": "configurations:\n  s:\n    k: !!omap [a: 1, b: 2]\n    j: !!omap\n      - x: yes\n      - y: [1, 2]\n    m: !!omap []\n",
    "omap_service_block": "configurations:\n  s: !!omap\n    - k: 1\n    - j: v\n",
    "omap_service_dup": "configurations:\n  s: !!omap [k: 1, j: 2, k: 3]\n",
    "omap_configurations": "configurations: !!omap\n  - s: {k: v}\n  - t: {k: w}\n",
    "omap_root": "!!omap\n- configurations: {s: {k: v}}\n",
    "omap_nested_key": "configurations:\n  s: {k: !!omap [{[x]: 1}, {z: ~}]}\n",
    "omap_alias": "x: &o !!omap [a: 1]\nconfigurations:\n  s: {k: *o, j: *o}\n",
    "omap_item_scalar": "configurations:\n  s: {k: !!omap [a: 1, b]}\n",
    "omap_item_two_keys": "configurations:\n  s: {k: !!omap [{a: 1, b: 2}]}\n",
    "omap_on_mapping": "configurations:\n  s: {k: !!omap {a: 1}}\n",
    "omap_merge_item": "configurations:\n  s: {k: !!omap [<<: {a: 1}]}\n",
    # Issue 10: NEL, LS and PS are line breaks; LS and PS stay in values.
    "ls_plain_flow": "configurations:\n  s: {k: a\u2028b, j: a\u2029b, m: a\u2028\u2028b, n: a\n      \u2028b, o: a\u2028\n      b, p: [x\u2028 y, z]}\n",
    "ls_plain_block": "configurations:\n  s:\n    k: a\u2028      b\n    j: a\n      b\u2028      c\n",
    "ls_line_ends": "configurations:\u2028  s:\u2028    k: v\u2028    j: w\u2029",
    "ls_single_quoted": "configurations:\n  s:\n    k: 'a\u2028b'\n    j: 'a  \u2028   b'\n    m: 'a\n      \u2028\n      b'\n    n: 'a\u2029\u2028b'\n    o: 'it''s\u2028'\n",
    "ls_double_quoted": "configurations:\n  s:\n    k: \"a\u2028b\"\n    j: \"a  \u2028   b\"\n    m: \"a\\\u2028      b\"\n    n: \"a\\L\\P\\Nb\"\n    o: \"a\\\n      \u2028  b\"\n    p: \"\\t\u2028\\x41\\ \u2028\"\n",
    "ls_literal": "configurations:\n  s:\n    k: |\n      a\u2028      b\n    j: |-\n      a\u2028      b\u2028\n    m: |+\n      a\u2028\u2028\n    n: |\n      a\u2028\n",
    "ls_folded": "configurations:\n  s:\n    k: >\n      a\u2028      b\n      c\n    j: >\n      a\n      b\u2029      c\n    m: >\n        x\n      y\u2028      z\n",
    "ls_block_indicator": "configurations:\n  s:\n    k: |2\n        a\u2028      b\n    j: >1-\n       a\u2028      b\n",
    "ls_block_anchor_eof": "configurations:\n  s:\n    j: &a |+\n\u2028\n    k: &b |\n      a\u2028      b",
    "ls_key_flow": "configurations:\n  s: {a\u2028b: v}\n",
    "nel_everywhere": "configurations:\n  s:\n    k: 'a\u0085b'\n    j: \"a\u0085      b\"\n    m: |\n      a\u0085      b\n    n: {x: a\u0085b}\n    o: >\n      a\u0085      b\n",
    "nel_line_ends": "configurations:\u0085  s:\u0085    k: v\u0085",
    "ls_between_flow_tokens": "configurations:\n  s:\n    k: {a: 1,\u2028      b: 2}\n    j: {a:\u2029      b}\n    m: [\u0085      x,\u2028      'y\u2028z']\n",
    "flow_key_colon_next_line": "configurations:\n  s: {k\n    : v}\n",
    "flow_collection_key_colon_next_line": "configurations:\n  s: {[x]\n    : v}\n",
    "flow_key_comment_then_colon": "configurations:\n  s: {\"k\"  # c\n    : v}\n",
    "flow_key_without_value_ends_line": "configurations:\n  s: {k\n    , j: v}\n",
    "ls_tagged_folded_crlf": "configurations:\n  s:\n    k: ! >1+\r\n      x\r\u2029      y\r\n",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=20261202)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    out = os.path.abspath(args.out)
    paths = []
    for i, (name, text) in enumerate(EDGE.items()):
        p = os.path.join(out, "e%03d-%s.yaml" % (i, name))
        with open(p, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        paths.append(p)
    rng = random.Random(args.seed)
    for i in range(args.count):
        # Two shapes in turn: feature-dense documents, and random trees rendered block-heavy.
        g = (Gen if i % 2 == 0 else TreeGen)(random.Random(rng.getrandbits(64)))
        p = os.path.join(out, "g%05d.yaml" % i)
        with open(p, "w", encoding="utf-8", newline="") as f:
            f.write(g.document())
        paths.append(p)
    with open(os.path.join(out, "list.txt"), "w") as f:
        f.write("\n".join(paths) + "\n")
    print(len(paths), "documents in", out)


if __name__ == "__main__":
    main()
