#!/usr/bin/env python3
"""Turns the JSON lines scripts/bench.sh collected into BENCHMARKS.md and an SVG plot.

report.py RESULTS.jsonl OUT.md PLOT_DIR --command CMD --commit C --have-refs 0|1 --rounds N
          --duration S --server-cpu A --load-cpu B --machine TEXT --tools TEXT

Standard library only: the plot is written as SVG by hand.
"""
import argparse
import datetime
import json
import math
import os

SERVERS = ["skyconf", "javaref", "nullserver"]
COLORS = {"skyconf": "#d9480f", "javaref": "#1c7ed6", "nullserver": "#868e96"}


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def fmt(n, digits=0):
    if n is None:
        return "–"
    if digits == 0:
        return f"{round(n):,}"
    return f"{n:,.{digits}f}"


def ratio(a, b):
    return None if not a or not b else a / b


def best(rows, server, scenario):
    vals = [r["calls_per_s"] for r in rows
            if r["kind"] == "h2load" and r["server"] == server and r["scenario"] == scenario]
    return max(vals) if vals else None


def met(ok):
    return "**met**" if ok else "**missed**"


def svg_plot(sweep, path):
    """Calls/s against connections (log scale), one line per server."""
    servers = [s for s in SERVERS if any(r["server"] == s for r in sweep)]
    xs = sorted({r["connections"] for r in sweep})
    ymax = max(r["calls_per_s"] for r in sweep) * 1.1
    step = 10 ** math.floor(math.log10(ymax))
    for m in (1, 2, 5):
        if ymax / (step * m) <= 6:
            step *= m
            break
    ymax = math.ceil(ymax / step) * step
    w, h, left, right, top, bottom = 720, 420, 80, 150, 40, 60
    pw, ph = w - left - right, h - top - bottom
    lx = [math.log2(x) for x in xs]
    x0, x1 = min(lx), max(lx) if max(lx) > min(lx) else min(lx) + 1

    def px(x):
        return left + (math.log2(x) - x0) / (x1 - x0) * pw

    def py(y):
        return top + ph - y / ymax * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14" font-weight="bold">fetchConfigurations, unchanged '
           '(empty answer): calls/s against HTTP/2 connections (16 streams each)</text>']
    y = 0
    while y <= ymax + 1e-9:
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{left + pw}" y2="{py(y):.1f}" stroke="#e9ecef"/>')
        out.append(f'<text x="{left - 8}" y="{py(y) + 4:.1f}" text-anchor="end">{y / 1000:g}k</text>')
        y += step
    for x in xs:
        out.append(f'<line x1="{px(x):.1f}" y1="{top}" x2="{px(x):.1f}" y2="{top + ph}" stroke="#f1f3f5"/>')
        out.append(f'<text x="{px(x):.1f}" y="{top + ph + 18}" text-anchor="middle">{x}</text>')
    out.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="black"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="black"/>')
    out.append(f'<text x="{left + pw / 2}" y="{h - 15}" text-anchor="middle">concurrent connections (log scale)</text>')
    out.append(f'<text transform="translate(18 {top + ph / 2}) rotate(-90)" text-anchor="middle">calls/s</text>')
    for i, s in enumerate(servers):
        pts = sorted((r["connections"], r["calls_per_s"]) for r in sweep if r["server"] == s)
        path_d = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        c = COLORS.get(s, "black")
        out.append(f'<polyline points="{path_d}" fill="none" stroke="{c}" stroke-width="2.5"/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{c}"/>')
        ly = top + 20 + i * 22
        out.append(f'<line x1="{left + pw + 15}" y1="{ly}" x2="{left + pw + 40}" y2="{ly}" stroke="{c}" stroke-width="2.5"/>')
        out.append(f'<text x="{left + pw + 46}" y="{ly + 4}">{s}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def kept_section(path, title):
    """The "## {title}" section of the report at `path` (up to the next "## " heading), or ""."""
    try:
        text = open(path).read()
    except OSError:
        return ""
    start = text.find(f"\n## {title}\n")
    if start < 0:
        return ""
    end = text.find("\n## ", start + 1)
    return text[start + 1:end if end >= 0 else len(text)].rstrip("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("out")
    ap.add_argument("plot_dir")
    for a in ("command", "commit", "have_refs", "rounds", "duration", "server_cpu", "load_cpu", "machine", "tools"):
        ap.add_argument("--" + a.replace("_", "-"), required=True)
    ap.add_argument("--note", default="")
    # To rewrite the report of an earlier run from its results.jsonl.
    ap.add_argument("--date", default="")
    a = ap.parse_args()
    rows = load(a.results)
    refs = a.have_refs == "1"
    servers = SERVERS if refs else ["skyconf"]
    kind = lambda k: [r for r in rows if r["kind"] == k]  # noqa: E731
    one = lambda k: (kind(k) or [None])[0]  # noqa: E731
    today = a.date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    md = []
    w = md.append
    w("# Benchmarks")
    w("")
    w(f"Generated by `{a.command}` on {today}, commit {a.commit}. To reproduce, run that command from a "
      "checkout with `../shared/bench` beside it; it builds everything, starts the servers and rewrites "
      "this file and [docs/benchmarks/](docs/benchmarks/). Numbers move from machine to machine: compare "
      "the **ratios**, which come from one run on one machine.")
    w("")
    if a.note:
        w(f"> {a.note}")
        w("")
    w(f"- **Machine**: {a.machine}. **Tools**: {a.tools}.")
    w(f"- **Pinning**: every server runs alone on CPU {a.server_cpu} and every load generator on CPU "
      f"{a.load_cpu} (`taskset`), so a figure is *per server core*.")
    if refs:
        w("- **Servers**, started together, measured in turn with the same load: **skyconf** (`skyconf serve`), "
          "**javaref** (the OAP's handler algorithm on grpc-java + netty, the OAP's own stack, "
          "`../shared/bench/javaref`), **nullserver** (tonic answering an empty `Commands` without any lookup: "
          "the ceiling of the gRPC stack, `../shared/bench/nullserver`). All serve the same 1,000-service × "
          "6-key document and skyconf and javaref serve the same digests (checked by the script).")
    else:
        w("- **`../shared/bench` was not found** next to this checkout, so the reference servers (javaref, "
          "nullserver) could not be built: **skyconf is measured alone** and no ratio is given.")
    w(f"- **Throughput**: h2load (nghttp2), 1 thread, 32 connections × 16 streams, {a.duration} s per run after a "
      f"warm-up; the best of {a.rounds} interleaved round(s) per server. h2load does not read grpc-status, so "
      "every scenario is also run with `skyconf-bench`, which checks every call's grpc-status and answer.")
    w("- **Scenarios**: *unchanged* = the agent echoes the digest, the answer is an empty `Commands`; "
      "*changed* = no uuid, the answer is the whole command (6 settings, a fresh serial number); *mixed* = "
      "80 % unchanged, 15 % changed, 5 % unknown services, over 1,000 services.")
    w("")

    # Throughput
    w("## Throughput (calls/s)")
    w("")
    head = "| scenario | " + " | ".join(servers)
    if refs:
        head += " | skyconf / javaref | skyconf / nullserver"
    w(head + " |")
    w("|" + "---|" * (len(head.split("|")) - 1))
    for sc in ("unchanged", "changed"):
        vals = [best(rows, s, sc) for s in servers]
        line = f"| {sc} | " + " | ".join(fmt(v) for v in vals)
        if refs:
            line += f" | {fmt(ratio(vals[0], vals[1]), 2)}× | {fmt(ratio(vals[0], vals[2]), 2)}×"
        w(line + " |")
    w("")
    w("<details><summary>every round</summary>")
    w("")
    w("| round | scenario | " + " | ".join(servers) + " |")
    w("|" + "---|" * (len(servers) + 2))
    for rnd in sorted({r["round"] for r in kind("h2load")}):
        for sc in ("unchanged", "changed"):
            vals = []
            for s in servers:
                v = [r["calls_per_s"] for r in kind("h2load") if r["round"] == rnd and r["server"] == s and r["scenario"] == sc]
                vals.append(v[0] if v else None)
            w(f"| {rnd} | {sc} | " + " | ".join(fmt(v) for v in vals) + " |")
    w("")
    w("</details>")
    w("")

    # Checked load
    w("## Every answer checked (`skyconf-bench`, 32 connections × 16 streams, closed loop)")
    w("")
    w("The tonic load generator is heavier than h2load, so its calls/s are lower; what it adds is the check "
      "of every grpc-status and every answer (digest, serial number, empty or not). nullserver is checked "
      "for grpc-status only (it answers canned content).")
    w("")
    w("| server | scenario | calls/s | p50 µs | p99 µs | calls | failed calls | wrong answers |")
    w("|---|---|---|---|---|---|---|---|")
    for r in kind("skyconf_bench") + kind("skyconf_bench_10k"):
        res = r["result"]
        lat = res.get("latency_us") or {}
        out = res["outcome"]
        label = res["scenario"] + (" (10,000 services)" if r["kind"] == "skyconf_bench_10k" else "")
        w(f"| {r['server']} | {label} | {fmt(res['calls_per_s'])} | {fmt(lat.get('p50'))} | {fmt(lat.get('p99'))} | "
          f"{fmt(res['calls'])} | {sum(out['errors'].values())} | {out['wrong_answers']} |")
    w("")

    # Latency
    w("## Latency at half of the maximum rate (open loop)")
    w("")
    w("`skyconf-bench --rate R`: 512 callers on 32 connections are handed evenly spaced send times by a "
      "pacer thread and latency counts from each call's send time, so a server that falls behind cannot hide "
      "its queue. R is half of the "
      "server's maximum: its best h2load figure above, or, where lower, the closed-loop figure `skyconf-bench` "
      "reaches against it (the checked tonic client costs more per call than h2load, and past its own "
      "maximum the latency measured would be the client's queue). Compare the rate asked with the h2load "
      "maximum: where it is lower, the server ran at less than half of its capacity.")
    w("")
    w("| server | scenario | rate asked | achieved | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | failed |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for r in kind("latency"):
        res = r["result"]
        lat = res.get("latency_us") or {}
        w(f"| {r['server']} | {r['scenario']} | {fmt(r['rate'])} | {fmt(res['calls_per_s'])} | {fmt(lat.get('p50'))} | "
          f"{fmt(lat.get('p90'))} | {fmt(lat.get('p99'))} | {fmt(lat.get('p999'))} | {fmt(lat.get('max'))} | "
          f"{sum(res['outcome']['errors'].values())} |")
    w("")

    # Sweep
    sweep = kind("sweep")
    if sweep:
        os.makedirs(a.plot_dir, exist_ok=True)
        svg = os.path.join(a.plot_dir, "throughput-vs-connections.svg")
        svg_plot(sweep, svg)
        rel = os.path.relpath(svg, os.path.dirname(os.path.abspath(a.out)))
        w("## Throughput against concurrent connections")
        w("")
        w(f"![calls/s against connections]({rel})")
        w("")
        conns = sorted({r["connections"] for r in sweep})
        w("| connections (× 16 streams) | " + " | ".join(servers) + " |")
        w("|" + "---|" * (len(servers) + 1))
        for c in conns:
            vals = []
            for s in servers:
                v = [r["calls_per_s"] for r in sweep if r["server"] == s and r["connections"] == c]
                vals.append(v[0] if v else None)
            w(f"| {c} | " + " | ".join(fmt(v) for v in vals) + " |")
        w("")

    # Memory and scale
    mb = lambda kb: kb / 1024  # noqa: E731
    w("## Memory and scale (skyconf)")
    w("")
    idle = one("rss_idle")
    s10k = one("rss_10k_services")
    s10k_after = one("rss_10k_services_after_load")
    agents = one("agents")
    reload_ = one("reload")
    props = kind("propagation")
    prop = props[0] if props else None
    if idle:
        w(f"- RSS idle, README example document: **{fmt(mb(idle['kb']), 1)} MB**")
    for r in kind("rss_idle_loaded"):
        w(f"- RSS of {r['server']} serving the 1,000-service document, before load: {fmt(mb(r['kb']), 1)} MB")
    for r in kind("rss_after_load"):
        w(f"- RSS of {r['server']} after all the load above: {fmt(mb(r['kb']), 1)} MB")
    if s10k:
        w(f"- RSS with 10,000 services × 6 keys: **{fmt(mb(s10k['kb']), 1)} MB** idle"
          + (f", {fmt(mb(s10k_after['kb']), 1)} MB after 5 s of mixed load over all of them" if s10k_after else ""))
    per_conn = None
    if agents:
        res = agents["result"]
        per_conn = (agents["rss_steady_kb"] - agents["rss_before_kb"]) * 1024 / agents["agents"]
        w(f"- {fmt(agents['agents'])} agents, one HTTP/2 connection each from 127.0.0.2–5, each polling every "
          f"{fmt(res['interval_s'])} s (`skyconf-bench agents`): RSS {fmt(mb(agents['rss_before_kb']), 1)} MB → "
          f"{fmt(mb(agents['rss_steady_kb']), 1)} MB with all of them connected and polled once "
          f"({agents['fds']} open descriptors), **{fmt(per_conn / 1024, 1)} KB per connection**; "
          f"{fmt(res['calls'])} calls, {sum(res['outcome']['errors'].values())} failed, "
          f"p99 {fmt((res.get('latency_us') or {}).get('p99'))} µs; connecting all took {res['connect_seconds']} s.")
    if reload_:
        res = reload_["result"]
        how = {"edit": "one service edited, as a store change reloads", "cold": "a first read, every service",
               "full": "the whole document read the ordinary way"}.get(res.get("reload", "full"), "")
        w(f"- Reload of a 10,000-service × 6-key document ({fmt(res['bytes'] / 1024, 0)} KiB), parse + digests + "
          f"pre-encoded answers, in process (`skyconf-bench reload --mode {res.get('reload', 'full')}`: {how}; "
          f"{res['repeat']} times): "
          f"**p50 {res['total_ms']['p50']} ms**, max {res['total_ms']['max']} ms "
          f"(parse {res['parse_ms']['p50']} ms, table build {res['install_ms']['p50']} ms)")
    for p in props:
        res = p["result"]
        lat = res.get("latency_us") or {}
        w(f"- File edit → new digest served, on the {fmt(res['services'])}-service document (each edit changes "
          f"one service; `skyconf-bench propagation`, {res['edits']} edits, file replaced by rename): "
          f"p50 {fmt((lat.get('p50') or 0) / 1000, 1)} ms, **p99 {fmt((lat.get('p99') or 0) / 1000, 1)} ms**, "
          f"max {fmt((lat.get('max') or 0) / 1000, 1)} ms; {res['timed_out']} edits not seen in time")
    if not (idle or s10k or agents):
        w("- (not measured in this run: SKIP_SCALE=1)")
    w("")

    # Profile
    prof = kind("profile")
    if prof:
        w("## Instructions per call (callgrind)")
        w("")
        w("`scripts/bench/profile.sh`: the server under valgrind's callgrind, h2load sending 1,000 then 11,000 calls; "
          "the difference of the two totals over 10,000 is the cost of one call (start-up excluded). Instruction "
          "counts repeat from run to run where wall-clock time on a shared machine does not. skyconf's count "
          "includes its background work during the run (the file source re-hashes the document every 10 s as a "
          "safety net, which valgrind's 50× slow-down makes look per-call). Hottest functions: "
          + ", ".join(f"[{p['result']['name']}](docs/benchmarks/{p['result']['name']}.top.txt)" for p in prof) + ".")
        w("")
        w("| server | scenario | instructions per call |")
        w("|---|---|---|")
        for p in prof:
            w(f"| {p['server']} | {p['scenario']} | {fmt(p['result']['per_call'])} |")
        w("")
    prel = one("profile_reload")
    if prel:
        w(f"One in-process reload of 10,000 services × 6 keys under callgrind: {fmt(prel['instructions'])} "
          "instructions (document generation included); where they go: "
          "[docs/benchmarks/reload.top.txt](docs/benchmarks/reload.top.txt).")
        w("")

    # What the profiles say
    w("## What limits skyconf (profile evidence)")
    w("")
    per = {(p["server"], p["scenario"]): p["result"]["per_call"] for p in prof}
    if ("skyconf", "unchanged") in per and ("nullserver", "unchanged") in per:
        sk, nu = per[("skyconf", "unchanged")], per[("nullserver", "unchanged")]
        w(f"- **Per call**, skyconf spends {fmt(sk)} instructions on an unchanged answer against the null "
          f"server's {fmt(nu)} ({(sk / nu - 1) * 100:+.1f} %, background re-hash included): the CPU ceiling of its "
          f"unchanged path is about {nu / sk:.2f}× the null server's. Nearly all of a call is the shared gRPC stack "
          "(h2 frame and HPACK coding, hyper, tonic's routing, allocation): see the hottest-function files above. "
          "A wall-clock ratio far from this one says the run was disturbed, not that the handler is slow.")
    if ("skyconf", "changed") in per and ("skyconf", "unchanged") in per:
        extra = per[("skyconf", "changed")] - per[("skyconf", "unchanged")]
        cost = (f"costs {fmt(extra)} instructions more than an unchanged one" if extra > 0 else
                f"costs no more than an unchanged one ({fmt(-extra)} instructions fewer: background noise)")
        w(f"- A **changed** answer (the pre-encoded command, copied with a fresh serial patched in) {cost}. "
          "Syscalls are not instructions: until skyconf's sockets reported no vectored writes, h2 sent every "
          "answer over 256 bytes in a `writev` of its own (1.27 per changed call against 0.26 per unchanged "
          "call, `strace -c`), which cost changed calls 40 % of their rate; see `skyconf_server::socket`.")
    top = os.path.join(a.plot_dir, "reload.top.txt")
    if os.path.exists(top):
        text = open(top).read()

        def incl(pattern):
            import re
            m = re.search(r"^\s*([\d,]+) \([^)]*\)\s+\S*" + pattern, text, re.M)
            return int(m.group(1).replace(",", "")) if m else None
        # The bench driver may be inlined away; the whole run's count is the fallback.
        total = incl(r"skyconf::commands::bench::run") or (prel and prel["instructions"])
        read = incl(r"skyconf_core::reader::read \[")
        tree = incl(r"skyconf_core::reader::tree::parse")
        install = incl(r"skyconf_server::state::ServedTable::install \[")
        digest = incl(r"skyconf_core::digest::Digest::of_entries")
        if total and read:
            parts = [f"parsing and typing (`skyconf_core::reader::read`) {read / total * 100:.0f} %"]
            if tree:
                parts.append(f"of which the YAML tree (`reader::tree::parse`, saphyr-parser's scanner inside) "
                             f"{tree / total * 100:.0f} %")
            if digest:
                parts.append(f"the SHA-512 digests {digest / total * 100:.0f} %")
            if install:
                parts.append(f"building the served table (pre-encoded answers) {install / total * 100:.0f} %")
            w(f"- A **reload** of 10,000 services × 6 keys is about {total / 1e9:.1f} billion instructions: "
              + "; ".join(parts) + " ([reload.top.txt](docs/benchmarks/reload.top.txt)). The reader, not the "
              "server, decides whether a reload fits in 150 ms, and with it the edit → served latency of a "
              "10,000-service document.")
    w("- **Memory per connection** on the agent port's default HTTP/2 server (`skyconf-h2`) is the "
      "connection's task, socket registration and small state (no read or write buffer while idle: the "
      "worker's are lent for each step) plus the agent's fleet row: 3.9 KB per polling agent and 5.7 KB per "
      "held agent at 19,000 (\"skyconf's own HTTP/2 server on the agent port\"); on hyper/h2 "
      "(`grpcHttp2Server: hyper`) h2's fixed buffers make it about 23 / 28 KB.")
    w("- **Latency at half of the maximum rate** is measured with `skyconf-bench`, which checks every answer "
      "and runs on the one load core: half of *its* maximum is the rate asked, and its own scheduling on that "
      "core is inside every figure (the p99.9 and max rows are the client's stalls as much as the server's).")
    w("")

    # Targets
    w("## Targets")
    w("")
    w("| target | measured | |")
    w("|---|---|---|")
    su, sc = best(rows, "skyconf", "unchanged"), best(rows, "skyconf", "changed")
    if refs:
        ju, jc, nu = best(rows, "javaref", "unchanged"), best(rows, "javaref", "changed"), best(rows, "nullserver", "unchanged")
        r1, r2, r3 = ratio(su, ju), ratio(su, nu), ratio(sc, jc)
        w(f"| unchanged ≥ 3× javaref | {fmt(r1, 2)}× | {met(r1 and r1 >= 3)} |")
        w(f"| unchanged ≥ 0.85× nullserver | {fmt(r2, 2)}× | {met(r2 and r2 >= 0.85)} |")
        w(f"| changed ≥ 3× javaref | {fmt(r3, 2)}× | {met(r3 and r3 >= 3)} |")
    else:
        w("| ratios to javaref and nullserver | not measured: `../shared/bench` absent | – |")
    for r in kind("latency"):
        if r["server"] == "skyconf":
            p99 = (r["result"].get("latency_us") or {}).get("p99")
            w(f"| p99 ≤ 2 ms at half of the maximum rate, {r['scenario']} | {fmt((p99 or 0) / 1000, 2)} ms | "
              f"{met(p99 is not None and p99 <= 2000)} |")
    if reload_:
        v = reload_["result"]["total_ms"]["p50"]
        w(f"| reload of 10,000 services × 6 keys ≤ 150 ms | {v} ms (p50; max {reload_['result']['total_ms']['max']} ms) | {met(v <= 150)} |")
    if idle:
        w(f"| RSS ≤ 30 MB idle | {fmt(mb(idle['kb']), 1)} MB | {met(mb(idle['kb']) <= 30)} |")
    if s10k:
        worst = max(s10k["kb"], s10k_after["kb"] if s10k_after else 0)
        w(f"| RSS ≤ 80 MB with 10,000 services | {fmt(mb(worst), 1)} MB | {met(mb(worst) <= 80)} |")
    if per_conn is not None:
        w(f"| ≤ 20 KB per idle agent connection at 10,000 | {fmt(per_conn / 1024, 1)} KB | {met(per_conn / 1024 <= 20)} |")
    for p in props:
        p99 = (p["result"].get("latency_us") or {}).get("p99") or 0
        w(f"| file edit → new digest served, p99 ≤ 100 ms ({fmt(p['result']['services'])} services) | "
          f"{fmt(p99 / 1000, 1)} ms | {met(p99 <= 100_000 and p['result']['timed_out'] == 0)} |")
    w("")
    w("Raw results of this run: [docs/benchmarks/results.jsonl](docs/benchmarks/results.jsonl).")
    # Sections written by runs of their own (scripts/bench/gateway.sh, scripts/bench/held.sh)
    # are kept as they are until those scripts replace them.
    for title in ("Gateway", "Held polls"):
        section = kept_section(a.out, title)
        if section:
            w("")
            w(section)
    with open(a.out, "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
