# The clients written by others of skyconf-cli's interop tests (crates/skyconf-cli/tests/it/interop.rs):
# npm `@grpc/grpc-js` and `@grpc/proto-loader` in tests/interop/grpc-js/node_modules (from the
# package-lock.json there, which keeps versions and integrity hashes), and the SkyWalking Python
# agent, PyPI `apache-skywalking`, in a virtualenv of its own, tests/interop/swpython/.venv (from
# the pinned requirements.txt there): it owns the top-level `skywalking` package, which must not
# meet the tests' generated `skywalking.v3` modules. Both are git-ignored; nothing is installed
# globally. Node and npm come from Debian when missing. The grpc-java poller
# (tests/interop/grpc-java) is compiled into its git-ignored build/ by build.sh there, against
# Debian's grpc-java, Netty and protobuf-java (about 10 MB, plus a JDK when javac is missing),
# and recompiled when a source is newer than the build.
interop_dir="$(dirname "${BASH_SOURCE[0]}")/../../tests/interop"
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || apt_install nodejs npm
if [ ! -f "$interop_dir/grpc-js/node_modules/@grpc/grpc-js/package.json" ] \
  || [ ! -f "$interop_dir/grpc-js/node_modules/@grpc/proto-loader/package.json" ]; then
  echo "test.sh: installing @grpc/grpc-js and @grpc/proto-loader into $interop_dir/grpc-js/node_modules" >&2
  (cd "$interop_dir/grpc-js" && npm ci --silent --no-audit --no-fund)
fi
if ! "$interop_dir/swpython/.venv/bin/python" -c 'import skywalking.agent, skywalking.protocol' 2>/dev/null; then
  echo "test.sh: installing apache-skywalking into $interop_dir/swpython/.venv" >&2
  python3 -m venv "$interop_dir/swpython/.venv"
  "$interop_dir/swpython/.venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$interop_dir/swpython/requirements.txt"
fi
command -v javac >/dev/null 2>&1 || apt_install default-jdk-headless
apt_install protobuf-compiler protobuf-compiler-grpc-java-plugin libgrpc-java libprotobuf-java \
  libnetty-java libguava-java libperfmark-java libgeronimo-annotation-1.3-spec-java
if [ ! -f "$interop_dir/grpc-java/build/classpath" ] \
  || [ -n "$(find "$interop_dir/grpc-java/src" "$interop_dir/grpc-java/build.sh" "$interop_dir/../../crates/skyconf-proto/proto/skywalking" \
    -newer "$interop_dir/grpc-java/build/classpath" -print -quit)" ]; then
  echo "test.sh: compiling the grpc-java poller into $interop_dir/grpc-java/build" >&2
  sh "$interop_dir/grpc-java/build.sh"
fi
unset interop_dir
export SKYCONF_REQUIRE_INTEROP=1
