"""rollout-revert.sh's report: the held and plain runs of `skyconf-bench revert` with the
command, commit and machine, written to OUT as JSON and printed; a table on stderr.

Usage: revert_report.py WORK OUT COMMAND COMMIT MACHINE SERVER_CPU LOAD_CPU
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

def row(name, r):
    e, d, s, a = r["revert_event_to_all_ms"], r["failure_to_revert_event_ms"], r["start_to_all_ms"], r["revert_event_to_each_agent_us"]
    return (f"| {name} | {e['p50']:,.0f} | {e['p99']:,.0f} | {e['max']:,.0f} | {a['p50'] / 1000:,.0f} / {a['p99'] / 1000:,.0f} | "
            f"{d['p50']:,.0f} / {d['max']:,.0f} | {s['p50']:,.0f} / {s['max']:,.0f} |")
lines = [f"| server ({held['agents']:,} agents, {held['rounds']} rollouts) | revert → all agents p50 ms | p99 ms | max ms | per agent p50 / p99 ms | failure → revert p50 / max ms | start → all agents p50 / max ms |",
         "|---|---|---|---|---|---|---|",
         row("skyconf (held polls)", held), row("skyconf --no-hold-polls (20 s polls)", plain)]
print("\n".join(lines), file=sys.stderr)
