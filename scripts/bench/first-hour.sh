#!/usr/bin/env bash
# Times the README's quick start as a new user meets it (issue 17): a fresh clone of this
# repository, an empty target directory, then the README's first command until `skyconf fetch`
# gets the first answer. With --tests it then times the README's test command in the same clone.
# Prints one JSON line. Usage: scripts/bench/first-hour.sh [--tests]
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
# shellcheck source=scripts/bench/lib.sh
. "$repo/scripts/bench/lib.sh"
trap 'pkill -f "grpc-addr 127.0.0.1:$grpc" 2>/dev/null || true; rm -rf "$work"' EXIT
git clone -q "$repo" "$work/skyconf"
cd "$work/skyconf"
unset CARGO_TARGET_DIR
grpc="$(free_port)" admin="$(free_port)"
start=$(date +%s)
cargo run -q --release -p skyconf-cli -- serve --file examples/agent-configurations.yaml \
  --grpc-addr "127.0.0.1:$grpc" --admin-addr "127.0.0.1:$admin" >"$work/serve.log" 2>&1 &
until [ -x target/release/skyconf ] &&
  target/release/skyconf fetch --addr "127.0.0.1:$grpc" --service mall-order-service >/dev/null 2>&1; do
  sleep 0.5
done
quick_start=$(( $(date +%s) - start ))
pkill -f "grpc-addr 127.0.0.1:$grpc" || true
tests=null
if [ "${1:-}" = "--tests" ]; then
  start=$(date +%s)
  scripts/test.sh >"$work/test.log" 2>&1 || { tail -50 "$work/test.log" >&2; exit 1; }
  tests=$(( $(date +%s) - start ))
fi
echo "{\"quick_start_to_first_answer_s\": $quick_start, \"test_command_s\": $tests}"
