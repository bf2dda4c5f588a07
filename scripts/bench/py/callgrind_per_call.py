"""Each function's instructions per call: the difference of two callgrind profiles of one server
(a run of BASE calls and a run of BASE + CALLS), divided by CALLS, so start-up and document
loading cancel out and what is left is what every call costs. Self and inclusive, largest first.

Usage: callgrind_per_call.py SMALL.callgrind LARGE.callgrind CALLS [TOP]
"""
import re
import subprocess
import sys

LINE = re.compile(r"^\s*([\d,]+)\s+\([^)]*\)\s+(.*)$")


def costs(path, inclusive):
    """{function: instructions} as callgrind_annotate reports them (every function over 0)."""
    args = ["callgrind_annotate", "--threshold=100", f"--inclusive={'yes' if inclusive else 'no'}", path]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    table, started = {}, False
    for line in out.splitlines():
        if line.startswith("Ir") and "file:function" in line:
            started = True
            continue
        m = LINE.match(line) if started else None
        if m:
            # The file part names the binary's path, which differs between builds: keep the function.
            name = m.group(2).split(":", 1)[-1].rsplit(" [", 1)[0]
            table[name] = table.get(name, 0) + int(m.group(1).replace(",", ""))
    return table


def main():
    small, large, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 60
    for inclusive in (False, True):
        a, b = costs(small, inclusive), costs(large, inclusive)
        rows = sorted(((b.get(f, 0) - a.get(f, 0)) / calls, f) for f in set(a) | set(b))
        rows.reverse()
        print(f"== {'inclusive' if inclusive else 'self'} instructions per call, top {top}")
        for per_call, name in rows[:top]:
            print(f"{per_call:10.1f}  {name[:200]}")
        print()


if __name__ == "__main__":
    main()
