#!/bin/sh
# Compiles CdsPoller (src/) with its messages and stubs generated from skyconf's .proto files into
# build/ here (git-ignored), against Debian's grpc-java, Netty and protobuf-java in /usr/share/java;
# writes the run-time classpath to build/classpath. Packages (scripts/deps/interop.sh installs them):
#   default-jdk-headless protobuf-compiler protobuf-compiler-grpc-java-plugin libgrpc-java
#   libprotobuf-java libnetty-java libguava-java libperfmark-java libgeronimo-annotation-1.3-spec-java
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
PROTO="$HERE/../../../crates/skyconf-proto/proto"
OUT="$HERE/build"
rm -rf "$OUT" && mkdir -p "$OUT/gen" "$OUT/classes"
protoc -I "$PROTO" --java_out="$OUT/gen" --plugin=protoc-gen-grpc-java=/usr/bin/grpc_java_plugin \
  --grpc-java_out="$OUT/gen" "$PROTO"/skywalking/v3/common.proto \
  "$PROTO"/skywalking/v3/configuration_discovery.proto "$PROTO"/skywalking/v3/management.proto
J=/usr/share/java
CP=$J/grpc-api.jar:$J/grpc-core.jar:$J/grpc-netty.jar:$J/grpc-stub.jar:$J/grpc-protobuf.jar
CP=$CP:$J/grpc-protobuf-lite.jar:$J/grpc-context.jar:$J/protobuf.jar:$J/guava.jar:$J/perfmark-api.jar
for f in $J/netty-buffer.jar $J/netty-codec.jar $J/netty-codec-http.jar $J/netty-codec-http2.jar \
  $J/netty-common.jar $J/netty-handler.jar $J/netty-resolver.jar $J/netty-transport.jar \
  $J/failureaccess.jar $J/geronimo-annotation-1.3-spec.jar $J/jsr305.jar; do
  [ -f "$f" ] && CP=$CP:$f
done
# -nowarn and the filter: the generated code uses APIs javac notes as deprecated.
javac -nowarn -d "$OUT/classes" -cp "$CP" $(find "$OUT/gen" "$HERE/src" -name '*.java') 2>&1 | { grep -v '^Note' || true; }
[ -f "$OUT/classes/CdsPoller.class" ]
echo "$CP:$OUT/classes" > "$OUT/classpath"
