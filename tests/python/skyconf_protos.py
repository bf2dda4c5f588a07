"""Compiles the tests' skywalking.v3 protocol modules at run time with grpcio-tools under a
package name of the project's own: `skyconf_pb.skywalking.v3.common_pb2` and so on, never a
top-level `skywalking`. The SkyWalking Python agent (PyPI `apache-skywalking`) owns the top-level
`skywalking` package; installed where the tests' Python finds it, a regular package of that name
would win over modules compiled into a temporary directory. The protocol package inside the
.proto files stays `skywalking.v3`, so every RPC path is the one agents call.

Each .proto is copied into OUT/src/skyconf_pb/<its path> with its `import "skywalking/..."`
lines pointed there, then compiled into OUT. Shared by tests/interop/cds_client.py,
tests/fleet/java_agent.py and tests/gateway/protos.py, which add this directory to sys.path."""
import importlib
import os
import re
import subprocess
import sys

PACKAGE = "skyconf_pb"
# The protos of skyconf's own crate: the common types, Management and CDS.
SKYCONF_PROTO_ROOT = os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "crates", "skyconf-proto", "proto"))
IMPORT = re.compile(r'^(\s*import\s+(?:public\s+|weak\s+)?")(skywalking/)', re.MULTILINE)


def compile_protos(out, names, roots=(SKYCONF_PROTO_ROOT,), grpc=True):
    """Compiles skywalking/v3/<name>.proto for each name, found in the first of `roots` that has
    it, into OUT/skyconf_pb/skywalking/v3/ (with `_grpc` service stubs when `grpc`)."""
    src = os.path.join(out, "src")
    protos = []
    for name in names:
        relative = f"skywalking/v3/{name}.proto"
        found = next((os.path.join(r, relative) for r in roots if os.path.exists(os.path.join(r, relative))), None)
        if found is None:
            raise SystemExit(f"skyconf_pb: {relative} is in none of {roots}")
        target = os.path.join(src, PACKAGE, relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(found, encoding="utf-8") as f:
            text = IMPORT.sub(lambda m: m.group(1) + PACKAGE + "/" + m.group(2), f.read())
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
        protos.append(f"{PACKAGE}/{relative}")
    outputs = ["--python_out=" + out] + (["--grpc_python_out=" + out] if grpc else [])
    subprocess.check_call([sys.executable, "-m", "grpc_tools.protoc", "-I", src] + outputs + protos)
    # Regular packages (with __init__.py), so no namespace portion elsewhere on the path joins them.
    for package in (PACKAGE, f"{PACKAGE}/skywalking", f"{PACKAGE}/skywalking/v3"):
        open(os.path.join(out, package, "__init__.py"), "a").close()


def load(out, module):
    """Imports skyconf_pb.skywalking.v3.<module> (`common_pb2`, `management_pb2_grpc`, ...)
    from OUT, compiled there by compile_protos."""
    if out not in sys.path:
        sys.path.insert(0, out)
    return importlib.import_module(f"{PACKAGE}.skywalking.v3.{module}")
