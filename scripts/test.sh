#!/usr/bin/env bash
# Runs every test of skyconf. On a fresh machine with only the Rust toolchain it first installs
# what the integration tests talk to (python3 grpcio for the independent-client interop test,
# schemathesis for the admin API's contract test),
# and it makes those tests fail rather than skip when their dependencies are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each scripts/deps/*.sh installs (if missing) one thing the integration tests talk to, and
# exports what the tests need to find it; the tests then fail rather than skip.
for deps in scripts/deps/*.sh; do
  [ -e "$deps" ] || continue
  # shellcheck source=/dev/null
  . "$deps"
done

if ! python3 -c 'import grpc, grpc_tools' 2>/dev/null; then
  echo "test.sh: installing grpcio and grpcio-tools for the interop test" >&2
  python3 -m pip install --quiet --disable-pip-version-check grpcio grpcio-tools
fi
export SKYCONF_REQUIRE_INTEROP=1
# The admin API's contract test (tests/contract/run.sh) is required: it fails, not skips, without it.
if ! python3 -c 'import schemathesis' 2>/dev/null; then
  echo "test.sh: installing schemathesis for the admin API contract test" >&2
  python3 -m pip install --quiet --disable-pip-version-check schemathesis
fi

# Every step runs even when an earlier one failed (--no-fail-fast within each), so one failure
# does not hide the others; the status says whether any failed.
status=0
# Everything but the store-write -> served latency tests, in parallel...
cargo test --workspace --all-targets --no-fail-fast -- --skip propagation_ || status=1
cargo test --workspace --doc --no-fail-fast || status=1
# ...then those alone, one at a time: they assert p99 bounds over 50 writes, and a parallel test
# stealing the CPU for one write would decide them.
cargo test -p skyconf-server --test it --no-fail-fast propagation_ -- --test-threads=1 || status=1
# The admin API against its OpenAPI description: schemathesis on a real server (under 3 minutes).
tests/contract/run.sh || status=1
exit "$status"
