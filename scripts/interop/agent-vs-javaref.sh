#!/usr/bin/env bash
# Runs skyconf-agent's scenarios (first sync, unchanged, modify, delete by omission, unknown
# service, server down then up, late watcher, watcher error) against RefServer, the
# OAP-equivalent CDS endpoint on grpc-java in bench/javaref.
#
# bench/ ships in the project's shared folder beside the checkout (../shared), not in the
# repository: where it is absent (a user's clone) this script says so and exits 0. Where it is
# present but Java is not installed, it also skips; the Debian packages are listed at the top of
# bench/javaref/build.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."

SHARED=${SKYCONF_SHARED:-../shared}
JAVAREF=$SHARED/bench/javaref
if [ ! -f "$JAVAREF/build.sh" ]; then
  echo "agent-vs-javaref: skipped: $JAVAREF/build.sh not found (bench/ lives beside the checkout, in ../shared)"
  exit 0
fi
for tool in java javac protoc; do
  if ! command -v "$tool" >/dev/null; then
    echo "agent-vs-javaref: skipped: $tool is not installed (see the packages at the top of $JAVAREF/build.sh)"
    exit 0
  fi
done

# Our own output folder: build.sh empties it first, and others may be using the default one.
export JAVAREF_OUT=${JAVAREF_OUT:-${TMPDIR:-/tmp}/skyconf-javaref-agent}
CP_FILE=$JAVAREF_OUT/classpath
if [ ! -f "$CP_FILE" ] || [ -n "$(find "$JAVAREF/src" -newer "$CP_FILE" -name '*.java')" ]; then
  echo "agent-vs-javaref: building RefServer into $JAVAREF_OUT" >&2
  CP_FILE=$(sh "$JAVAREF/build.sh")
fi

export SKYCONF_JAVAREF_CP=$CP_FILE
cargo test -p skyconf-agent --test it javaref:: -- --nocapture
