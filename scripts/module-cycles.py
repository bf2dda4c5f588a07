#!/usr/bin/env python3
"""Lists the `crate::X` edges between the top-level modules of a crate's `src/` and the cycles
among them: mutual pairs, then every strongly connected group of more than one module.

Only code before a file's first `#[cfg(test)]` counts (tests may reach anywhere), files of a
module declared under `#[cfg(test)]` do not count at all, and comments do not. Usage: scripts/module-cycles.py [crates/skyconf-server/src]
"""

import re
import sys
from pathlib import Path

PATH = re.compile(r"\bcrate::(?:\{\s*)?([a-z_][a-z0-9_]*)")
GROUP = re.compile(r"\bcrate::\{([^}]*)\}", re.S)


def top_level(src: Path, file: Path) -> str | None:
    parts = file.relative_to(src).parts
    if parts == ("lib.rs",) or parts == ("main.rs",):
        return None
    return parts[0].removesuffix(".rs")


def code_of(text: str) -> str:
    text = text.split("#[cfg(test)]", 1)[0]
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;")


def test_only(src: Path) -> set[Path]:
    """The files of modules declared under `#[cfg(test)]`, and of their submodules."""
    roots = set()
    for file in src.rglob("*.rs"):
        folder = file.parent if file.name in ("mod.rs", "lib.rs", "main.rs") else file.with_suffix("")
        for name in TEST_MOD.findall(file.read_text()):
            roots |= {folder / f"{name}.rs", folder / name}
    return {f for f in src.rglob("*.rs") if any(f == r or r in f.parents for r in roots)}


def edges(src: Path) -> dict[str, set[str]]:
    modules = {top_level(src, f) for f in src.rglob("*.rs")} - {None}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    skipped = test_only(src)
    for file in src.rglob("*.rs"):
        here = top_level(src, file)
        if here is None or file in skipped:
            continue
        code = code_of(file.read_text())
        named = set(PATH.findall(code))
        for group in GROUP.findall(code):
            named |= {item.strip().split("::")[0] for item in group.split(",")}
        graph[here] |= {m for m in named if m in modules and m != here}
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main() -> None:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "crates/skyconf-server/src")
    graph = edges(src)
    pairs = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if a in graph[b]})
    print(f"{sum(len(v) for v in graph.values())} edges between {len(graph)} top-level modules")
    print(f"{len(pairs)} mutual pairs:")
    for a, b in pairs:
        print(f"  {a} <-> {b}")
    groups = strongly_connected(graph)
    print(f"{len(groups)} cycles (strongly connected groups):")
    for group in groups:
        print("  " + " ".join(group))
    if "-v" in sys.argv:
        for a in sorted(graph):
            print(f"{a} -> {' '.join(sorted(graph[a]))}")


if __name__ == "__main__":
    main()
