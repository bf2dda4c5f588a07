"""held.sh's report: the held and plain runs of `skyconf-bench held` with the command, commit
and machine, written to OUT as JSON and printed; a table on stderr.

Usage: held_report.py WORK OUT COMMAND COMMIT MACHINE SERVER_CPU LOAD_CPU
"""
import datetime, json, sys
work, out, command, commit, machine, server_cpu, load_cpu = sys.argv[1:]
held = json.load(open(f"{work}/held.json"))
plain = json.load(open(f"{work}/plain.json"))
report = {"command": command, "commit": commit, "machine": machine, "server_cpu": server_cpu, "load_cpu": load_cpu,
          "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
          "held": held, "plain": plain}
with open(out, "w") as f:
    json.dump(report, f, indent=1)
    f.write("\n")
print(json.dumps(report))

def failed(r):
    o = r["outcome"]
    return sum(o["errors"].values()) + o["wrong_answers"]

def row(name, r):
    p, cpu = r["propagation_all_ms"], r["idle"]["cpu"] or {}
    # The projection: the same RSS before, and the same cost per agent, for 100,000 agents.
    projected = (r["rss_kb"]["before"] + r["rss_per_agent_kb"] * 100_000) / 1024 / 1024
    return (f"| {name} | {p['p50']:,.0f} | {p['p99']:,.0f} | {p['max']:,.0f} | "
            f"{r['rss_kb']['before'] / 1024:.1f} → {r['rss_kb']['steady'] / 1024:.1f} MB | "
            f"{r['rss_per_agent_kb']:.1f} KB | {projected:.2f} GiB | {failed(r)} of {r['calls']:,} | "
            f"{cpu.get('seconds', 0):.2f} s in {r['idle']['seconds']:.0f} s "
            f"({cpu.get('percent_of_one_core', 0):.1f} % of a core), {r['idle']['calls']:,} calls |")
lines = ["| server | write → all agents p50 ms | p99 ms | max ms | RSS before → with all agents | RSS per agent | "
         "100,000 agents projected | failed calls | CPU while nothing changes |",
         "|---|---|---|---|---|---|---|---|---|",
         row("skyconf (held polls)", held), row("skyconf --no-hold-polls (20 s polls)", plain)]
print("\n".join(lines), file=sys.stderr)
