#!/usr/bin/env python3
"""Checks the documentation the way a reader meets it, with no network and no packages:

- every relative link (and `#anchor`) in README.md, RELIABILITY.md, BENCHMARKS.md and docs/*.md
  names a file that exists, and a heading that exists in it (GitHub's anchor rules);
- README.md stays a user's document: at most 500 lines, with `scripts/test.sh` as its test command
  (the one .ci/run runs);
- every screenshot in docs/images/ is shown by some document, and every image shown exists there.

Prints one line per problem and exits 1 if there is any. Usage: scripts/docs-check.py
"""
import os
import re
import sys
import unicodedata

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
README_MAX_LINES = 500
IMAGE_MAX_BYTES = 160 * 1024

LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def documents():
    names = ["README.md", "RELIABILITY.md", "BENCHMARKS.md"]
    names += sorted(os.path.join("docs", n) for n in os.listdir(os.path.join(ROOT, "docs")) if n.endswith(".md"))
    return [n for n in names if os.path.exists(os.path.join(ROOT, n))]


def prose(text):
    """The lines of `text` outside fenced code blocks, with inline code blanked, numbered from 1."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip()
        if fence is None and (stripped.startswith("```") or stripped.startswith("~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        yield number, re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.replace("`", "").lower()
    kept = []
    for ch in text:
        if ch in " -_" or unicodedata.category(ch)[0] in "LN":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found, seen = set(), {}
        text = open(path, encoding="utf-8").read()
        fence = False
        for line in text.split("\n"):
            if line.lstrip().startswith("```"):
                fence = not fence
                continue
            m = None if fence else HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        found.update(re.findall(r'<a (?:id|name)="([^"]+)"', text))
        cache[path] = found
    return cache[path]


def main():
    problems = []
    shown = set()
    for name in documents():
        path = os.path.join(ROOT, name)
        text = open(path, encoding="utf-8").read()
        for number, line in prose(text):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                file_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                where = f"{name}:{number}"
                if not os.path.exists(dest):
                    problems.append(f"{where}: {target}: no such file")
                    continue
                if dest.endswith(".png") or dest.endswith(".svg"):
                    shown.add(os.path.relpath(dest, ROOT))
                if anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    problems.append(f"{where}: {target}: no heading with the anchor #{anchor}")

    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    count = readme.count("\n")
    if count > README_MAX_LINES:
        problems.append(f"README.md: {count} lines, more than {README_MAX_LINES}")
    if not re.search(r"(?m)^scripts/test\.sh$", readme):
        problems.append("README.md: no line `scripts/test.sh` in a code block (the test command .ci/run runs)")

    images = os.path.join(ROOT, "docs", "images")
    for image in sorted(os.listdir(images)) if os.path.isdir(images) else []:
        rel = os.path.join("docs", "images", image)
        if rel not in shown:
            problems.append(f"{rel}: shown by no document")
        if image.endswith(".png") and os.path.getsize(os.path.join(images, image)) > IMAGE_MAX_BYTES:
            problems.append(f"{rel}: {os.path.getsize(os.path.join(images, image))} bytes, over {IMAGE_MAX_BYTES}")

    for p in problems:
        print(p)
    print(f"docs-check: {len(documents())} documents, {len(shown)} images shown, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
