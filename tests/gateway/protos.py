"""The gateway tests' skywalking.v3 messages, compiled at run time with grpcio-tools into a
temporary directory that is removed at exit, as modules of the tests' own package
(tests/python/skyconf_protos.py: `skyconf_pb.skywalking.v3`, which no installed `skywalking`
package can shadow): the trace-segment and JVM-metric protocols from proto/ (written for these
tests from the published field numbers), the common types, Management and CDS from skyconf's own
crates/skyconf-proto/proto. Shared by client.py and upstream.py."""
import atexit
import base64
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import skyconf_protos  # noqa: E402 - found through the line above

PROTO_ROOT = os.path.join(HERE, "proto")
FILES = ["common", "tracing", "management", "jvm_metric", "configuration_discovery"]

TRACE_COLLECT = "/skywalking.v3.TraceSegmentReportService/collect"
JVM_COLLECT = "/skywalking.v3.JVMMetricReportService/collect"
REPORT_PROPERTIES = "/skywalking.v3.ManagementService/reportInstanceProperties"
KEEP_ALIVE = "/skywalking.v3.ManagementService/keepAlive"
FETCH_CONFIGURATIONS = "/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations"


class Messages:
    """The compiled modules, by short name: common, tracing, management, jvm_metric,
    configuration_discovery."""


def load():
    out = tempfile.mkdtemp(prefix="skyconf-gateway-pb-")
    atexit.register(shutil.rmtree, out, True)
    skyconf_protos.compile_protos(out, FILES, roots=(PROTO_ROOT, skyconf_protos.SKYCONF_PROTO_ROOT), grpc=False)
    m = Messages()
    for name in FILES:
        setattr(m, name, skyconf_protos.load(out, f"{name}_pb2"))
    return m


def b64(data):
    return base64.b64encode(data).decode("ascii")


def metadata_json(metadata):
    """gRPC metadata as a JSON list of [key, value]; binary (`-bin`) values as base64."""
    if metadata is None:
        return None
    out = []
    for key, value in metadata:
        out.append([key, b64(value) if isinstance(value, bytes) else value])
    return out


def metadata_from_json(pairs):
    """The inverse of metadata_json: `-bin` values are base64 in JSON."""
    return [(k, base64.b64decode(v) if k.endswith("-bin") else v) for k, v in pairs or []]


def commands_json(m, data):
    """A Commands message's bytes as JSON, or None when they are not one."""
    try:
        parsed = m.common.Commands.FromString(data)
    except Exception:  # noqa: BLE001 - not a Commands message: report None
        return None
    return [{"command": c.command, "args": [[a.key, a.value] for a in c.args]} for c in parsed.commands]
