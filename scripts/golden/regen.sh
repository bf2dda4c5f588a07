#!/bin/sh
# Regenerates crates/skyconf-core/tests/data/golden from the OAP-equivalent oracle: DigestTool of
# ../shared/bench/javaref (SnakeYAML 1.33 SafeConstructor, Java toString, SHA-512), run on JDK 17
# with TZ=UTC. Needs java/javac, python3 and cargo. Without ../shared (a plain clone) there is no
# oracle: the committed data stays as it is and this script says so and exits 0.
#
#   scripts/golden/regen.sh            # regenerate
#   SKYCONF_SHARED=/path/to/shared scripts/golden/regen.sh
#   SKYCONF_SNAKEYAML_JAR=/path/to/snakeyaml-2.0.jar scripts/golden/regen.sh   # the OAP's version
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SHARED=${SKYCONF_SHARED:-$ROOT/../shared}
GOLDEN=$ROOT/crates/skyconf-core/tests/data/golden
SEED=20261202
COUNT=3000

if [ ! -f "$SHARED/bench/javaref/build.sh" ]; then
  echo "regen.sh: no oracle at $SHARED/bench/javaref (../shared is absent); the golden data in"
  echo "  $GOLDEN is left as committed. Nothing to do."
  exit 0
fi
for tool in java javac python3 cargo; do
  command -v "$tool" >/dev/null 2>&1 || { echo "regen.sh: $tool is needed" >&2; exit 1; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/skyconf-golden.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
echo "regen.sh: building the oracle in $WORK"
JAVAREF_OUT=$WORK/javaref sh "$SHARED/bench/javaref/build.sh" >/dev/null
# The OAP pins SnakeYAML 2.0; Debian 12 packages 1.33. SKYCONF_SNAKEYAML_JAR=/path/snakeyaml-2.0.jar
# runs the oracle on that jar instead (DigestTool is built against 1.33's API, which 2.0 keeps).
if [ -n "${SKYCONF_SNAKEYAML_JAR:-}" ]; then
  sed "s#/usr/share/java/snakeyaml.jar#$SKYCONF_SNAKEYAML_JAR#" "$WORK/javaref/classpath" > "$WORK/javaref/classpath.new"
  mv "$WORK/javaref/classpath.new" "$WORK/javaref/classpath"
  echo "regen.sh: the oracle runs on $SKYCONF_SNAKEYAML_JAR"
fi
mkdir -p "$WORK/batch"
javac -nowarn -d "$WORK/batch" -cp "$(cat "$WORK/javaref/classpath")" "$HERE/BatchDigest.java"
oracle() { TZ=UTC java -cp "$(cat "$WORK/javaref/classpath"):$WORK/batch" BatchDigest; }

echo "regen.sh: building skyconf's digest_like_oap (used to classify documents only)"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
(cd "$ROOT" && cargo build -q -p skyconf-core --example digest_like_oap)
OURS=$TARGET/debug/examples/digest_like_oap

mkdir -p "$GOLDEN"
echo "regen.sh: scalars"
python3 "$HERE/scalar_corpus.py" "$WORK/scalars" >/dev/null
oracle < "$WORK/scalars/list.txt" > "$WORK/scalars/oracle.txt"
python3 "$HERE/make_golden.py" scalars "$WORK/scalars" "$WORK/scalars/oracle.txt" "$GOLDEN/scalars.json"

echo "regen.sh: documents (seed $SEED, $COUNT generated + the hand-written edge documents)"
python3 "$HERE/doc_corpus.py" "$WORK/docs" --count "$COUNT" --seed "$SEED" >/dev/null
oracle < "$WORK/docs/list.txt" > "$WORK/docs/oracle.txt"
"$OURS" < "$WORK/docs/list.txt" > "$WORK/docs/ours.txt"
python3 "$HERE/compare.py" "$WORK/docs/list.txt" "$WORK/docs/oracle.txt" "$WORK/docs/ours.txt" --show 10 || true
python3 "$HERE/make_golden.py" docs "$WORK/docs/list.txt" "$WORK/docs/oracle.txt" "$WORK/docs/ours.txt" "$GOLDEN"
echo "regen.sh: done; review with git diff $GOLDEN"
