#!/usr/bin/env python3
"""A SkyWalking Java agent's talk with its collector, on grpcio (the C-core gRPC stack), for
skyconf's churn test (`crates/skyconf-cli/tests/it/churn/`). One process is one agent: one
channel, so one HTTP/2 connection, carrying everything the Java agent sends about configuration:

- `ManagementService/reportInstanceProperties` when it starts (service, instance name and the
  properties the Java agent reports: language, hostname, ipv4, OS name, process number), then
  `keepAlive` every `--keep-alive` seconds (30 by default) from a scheduler of its own, whatever
  the polls are doing; every tenth heartbeat reports the properties again;
- `ConfigurationDiscoveryService/fetchConfigurations` at a fixed rate of `--interval` (20 s for
  the Java agent), each call with a deadline of `--timeout` (30 s, `collector.grpc_upstream_timeout`),
  so a server that holds unchanged polls holds this one; a call that outlasts the interval is
  followed at once, never overlapped. Each call echoes the UUID of the last applied command.

With `--refuse`, the first configuration is applied and every later one fails to apply (as when
a watcher throws): the agent keeps echoing the first UUID, which a server shows as stuck.

One JSON line per event on stdout: `{"event": "config", "uuid"}` when a command is applied,
`{"event": "refused", "uuid"}`, `{"event": "error", "call", "code"}`. SIGTERM closes the channel
(a graceful stop: the connection ends with a FIN) and exits 0.

    java_agent.py --generate-stubs DIR          compile the protocol into DIR once, for --stubs
    java_agent.py --addr HOST:PORT --service S --instance I [--interval 20] [--timeout 30]
                  [--keep-alive 30] [--refuse] [--stubs DIR]
"""
import argparse
import json
import os
import signal
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import skyconf_protos  # noqa: E402 - compiles the protos into the package skyconf_pb (tests/python/)

PROTOS = ["common", "configuration_discovery", "management"]


def generate_stubs(out):
    os.makedirs(out, exist_ok=True)
    skyconf_protos.compile_protos(out, PROTOS)


def load_stubs(stubs):
    if stubs is None:
        import tempfile
        stubs = tempfile.mkdtemp(prefix="skyconf-java-agent-")
        generate_stubs(stubs)
    return tuple(skyconf_protos.load(stubs, m) for m in ("common_pb2", "configuration_discovery_pb2",
                                                      "configuration_discovery_pb2_grpc", "management_pb2",
                                                      "management_pb2_grpc"))


def say(**line):
    print(json.dumps({"t": time.time(), **line}), flush=True)


class Agent:
    def __init__(self, args):
        import grpc
        self.grpc = grpc
        self.args = args
        (self.common, self.cds, cds_rpc, self.mgmt, mgmt_rpc) = load_stubs(args.stubs)
        self.channel = grpc.insecure_channel(args.addr)
        self.cds_stub = cds_rpc.ConfigurationDiscoveryServiceStub(self.channel)
        self.mgmt_stub = mgmt_rpc.ManagementServiceStub(self.channel)
        self.uuid = ""
        self.stopping = threading.Event()

    def properties(self):
        host = socket.gethostname()
        pairs = [("language", "java"), ("hostname", host), ("ipv4", "127.0.0.1"), ("OS Name", "Linux"),
                 ("Process No.", str(os.getpid()))]
        return [self.common.KeyStringValuePair(key=k, value=v) for k, v in pairs]

    def report(self):
        request = self.mgmt.InstanceProperties(service=self.args.service, serviceInstance=self.args.instance,
                                               properties=self.properties())
        self.mgmt_stub.reportInstanceProperties(request, timeout=10)

    def keep_alive(self):
        ping = self.mgmt.InstancePingPkg(service=self.args.service, serviceInstance=self.args.instance)
        self.mgmt_stub.keepAlive(ping, timeout=10)

    def management_call(self, name, call):
        try:
            call()
            return True
        except self.grpc.RpcError as e:
            if not self.stopping.is_set():
                say(event="error", call=name, code=e.code().name)
            return False

    def heartbeat(self):
        """The Java agent's heartbeat: its own scheduler, independent of the polls."""
        beats = 0
        while not self.stopping.wait(self.args.keep_alive):
            beats += 1
            if beats % 10 == 0:
                self.management_call("reportInstanceProperties", self.report)
            else:
                self.management_call("keepAlive", self.keep_alive)

    def poll_once(self):
        request = self.cds.ConfigurationSyncRequest(service=self.args.service, uuid=self.uuid)
        try:
            commands = self.cds_stub.fetchConfigurations(request, timeout=self.args.timeout)
        except self.grpc.RpcError as e:
            if not self.stopping.is_set():
                say(event="error", call="fetchConfigurations", code=e.code().name)
            return
        for command in commands.commands:
            if command.command != "ConfigurationDiscoveryCommand":
                continue
            args = dict((a.key, a.value) for a in command.args)
            uuid = args.get("UUID")
            if not uuid or uuid == self.uuid:
                continue
            if self.args.refuse and self.uuid:
                say(event="refused", uuid=uuid)
                continue
            self.uuid = uuid
            say(event="config", uuid=uuid)

    def run(self):
        self.management_call("reportInstanceProperties", self.report)
        threading.Thread(target=self.heartbeat, daemon=True).start()
        next_at = time.monotonic()
        while not self.stopping.is_set():
            pause = next_at - time.monotonic()
            if pause > 0 and self.stopping.wait(pause):
                break
            next_at = time.monotonic() + self.args.interval
            self.poll_once()

    def stop(self):
        self.stopping.set()
        self.channel.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--generate-stubs", metavar="DIR")
    ap.add_argument("--stubs", metavar="DIR", help="stubs compiled by --generate-stubs (default: compile now)")
    ap.add_argument("--addr")
    ap.add_argument("--service")
    ap.add_argument("--instance")
    ap.add_argument("--interval", type=float, default=20.0, help="seconds between poll starts (Java: 20)")
    ap.add_argument("--timeout", type=float, default=30.0, help="deadline of each poll in seconds (Java: 30)")
    ap.add_argument("--keep-alive", type=float, default=30.0, help="seconds between heartbeats (Java: 30)")
    ap.add_argument("--refuse", action="store_true", help="apply the first configuration only")
    a = ap.parse_args()
    if a.generate_stubs:
        generate_stubs(a.generate_stubs)
        return
    if not (a.addr and a.service and a.instance):
        ap.error("--addr, --service and --instance are required")
    agent = Agent(a)

    def on_term(*_):
        agent.stop()
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    try:
        agent.run()
    finally:
        agent.stop()


if __name__ == "__main__":
    main()
