"""history-rss.sh's report: every server's run with the command, commit and machine, written
to OUT as JSON and printed; a table on stderr.

Usage: history_rss_report.py WORK OUT COMMAND COMMIT MACHINE NAME...
"""
import datetime, json, sys
work, out, command, commit, machine, *names = sys.argv[1:]
runs = [json.load(open(f"{work}/{n}.json")) for n in names]
report = {"command": command, "commit": commit, "machine": machine,
          "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "runs": runs}
with open(out, "w") as f:
    json.dump(report, f, indent=1)
    f.write("\n")
print(json.dumps(report))
print("| server | RSS, 1 release | RSS, releases kept | × | edit → served p50 |\n|---|---|---|---|---|", file=sys.stderr)
for r in runs:
    print(f"| {r['name']} | {r['rss_one_release_kb'] / 1024:.1f} MB | {r['rss_many_releases_kb'] / 1024:.1f} MB ({r['releases_kept']}) "
          f"| {r['ratio']:.2f}× | {r['edit_served_ms_p50']:.0f} ms |", file=sys.stderr)
