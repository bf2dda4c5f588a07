# shellcheck shell=bash
# What the benchmark scripts share (scripts/bench.sh, scripts/bench/gateway.sh, held.sh,
# profile.sh): logging, the results file, the processes to stop on exit, waiting for a port, a
# process's RSS. Sourced, not run; RESULTS names the results file where `record` is used.

log() { printf '\n== %s\n' "$*" >&2; }
record() { echo "$1" >>"$RESULTS"; }

# Every background process a script starts goes into PIDS; all are stopped on exit.
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# wait_port PORT [SECONDS]: until something listens on 127.0.0.1:PORT (default 30 s); else says
# so, naming the script, and fails.
wait_port() {
  local tries=$((${2:-30} * 10))
  for _ in $(seq 1 "$tries"); do
    (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$(basename "$0"): nothing listens on port $1" >&2
  return 1
}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# free_port: a TCP port free on 127.0.0.1 now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# bench_commit: the commit measured (HEAD), marked when the tree has uncommitted changes.
bench_commit() {
  local commit
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  git diff --quiet HEAD 2>/dev/null || commit="$commit (with uncommitted changes)"
  echo "$commit"
}

# bench_command SCRIPT ARG VAR...: the exact command that ran, with the VARs that were set in the
# environment before it, so a reader can rerun it.
bench_command() {
  local script=$1 arg=$2 command="" v
  shift 2
  for v in "$@"; do
    [ -n "${!v:-}" ] && command="$command$v=${!v} "
  done
  echo "$command$script${arg:+ $arg}"
}

# machine: the machine in one line (processor, CPUs, memory, kernel, load average now).
machine() {
  echo "$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2}') GiB, Linux $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
}
