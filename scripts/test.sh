#!/usr/bin/env bash
# Runs every test of skyconf. On a fresh machine with only the Rust toolchain it first installs
# what the integration tests talk to (scripts/deps/: servers, a browser, and the Python packages
# in the project's virtualenv .venv/, never the global site-packages), and it makes those tests
# fail rather than skip when their dependencies are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each scripts/deps/*.sh installs (if missing) one thing the integration tests talk to, and
# exports what the tests need to find it; the tests then fail rather than skip.
for deps in scripts/deps/*.sh; do
  [ -e "$deps" ] || continue
  # shellcheck source=/dev/null
  . "$deps"
done

# Every step runs even when an earlier one failed (--no-fail-fast within each), so one failure
# does not hide the others; the status says whether any failed.
status=0
# Everything but the store-write -> served latency tests, in parallel...
cargo test --workspace --all-targets --no-fail-fast -- --skip propagation_ || status=1
cargo test --workspace --doc --no-fail-fast || status=1
# ...then those alone, one at a time: they assert p99 bounds over 50 writes, and a parallel test
# stealing the CPU for one write would decide them.
cargo test -p skyconf-server --test it --no-fail-fast propagation_ -- --test-threads=1 || status=1
# The agent port's own suites once more on hyper's HTTP/2 server, the fallback to the default own
# server (`grpcHttp2Server: hyper`); about a minute.
SKYCONF_AGENT_HTTP2=hyper cargo test -p skyconf-server --test it --no-fail-fast -- security:: held:: gateway:: shutdown:: fleet:: || status=1
# The admin API against its OpenAPI description: schemathesis on a real server (under 3 minutes).
tests/contract/run.sh || status=1
exit "$status"
