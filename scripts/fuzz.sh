#!/usr/bin/env bash
# Coverage-guided fuzzing with AFL++ (cargo-afl, stable Rust) of the places untrusted bytes
# enter skyconf: the agent-configurations reader, the admin API's write routes, the CDS
# request, OpAMP messages (HTTP bodies, gzip or not, and WebSocket messages), and the bytes a client sends
# on the agent port's HTTP/2 connection (skyconf-h2). Each target runs for a bounded time from its committed corpus (fuzz/corpus/<target>);
# any crash fails the run and is left in fuzz/out/<target>/default/crashes: copy it into the
# corpus, where `cargo test` in fuzz/ replays every input, so it stays a regression test.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]      (default 20; CI runs it bounded)
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${1:-20}"
export PATH="$HOME/.cargo/bin:$PATH"
# The fuzz crate is not a workspace member and builds into its own directory.
export CARGO_TARGET_DIR="$PWD/target"

if ! cargo afl --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-afl (builds AFL++ from its crate, a few minutes)" >&2
  cargo install cargo-afl --locked --quiet
fi
# Builds the AFL++ runtime for this rustc unless it is there already.
cargo afl config --build >/dev/null 2>&1 || true

echo "== fuzz: replaying the committed corpora"
cargo test --quiet

echo "== fuzz: building the instrumented targets"
cargo afl build --release --quiet

# No UI, no CPU-governor or core-pattern checks (CI machines cannot change those).
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_QUIET=1
status=0
mkdir -p out
for target in reader admin cds opamp h2; do
  rm -rf "out/$target"
  echo "== fuzz: $target for ${seconds}s"
  cargo afl fuzz -V "$seconds" -i "corpus/$target" -o "out/$target" "target/release/$target" >"out-$target.log" 2>&1 || {
    echo "fuzz.sh: afl-fuzz failed for $target:" >&2
    tail -20 "out-$target.log" >&2
    status=1
    continue
  }
  crashes=$(find "out/$target/default/crashes" -type f -name 'id:*' 2>/dev/null | wc -l)
  execs=$(awk -F: '/^execs_done/ {gsub(/ /, "", $2); print $2}' "out/$target/default/fuzzer_stats" 2>/dev/null || echo "?")
  echo "fuzz: $target: $execs executions, $crashes crashes"
  if [ "$crashes" -gt 0 ]; then
    echo "fuzz.sh: $target crashed; inputs in fuzz/out/$target/default/crashes" >&2
    status=1
  fi
  rm -f "out-$target.log"
done
exit "$status"
