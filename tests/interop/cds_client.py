#!/usr/bin/env python3
"""An independent configuration-discovery client on grpcio (the C-core gRPC stack), written for
skyconf's interop tests. Stubs are generated at run time from skyconf's own .proto files.

    cds_client.py fetch --addr HOST:PORT --service NAME [--uuid U]   one call, JSON out
    cds_client.py check --addr HOST:PORT --golden FILE               assert the server answers
                                                                     exactly as the OAP would
    cds_client.py poll --addr HOST:PORT --service NAME [--interval S] [--seconds S] [--stuck]
                       [--instance I [--property K=V ...]]
                                                                     poll like an agent, one JSON
                                                                     line per applied change; with
                                                                     --instance, first report the
                                                                     instance's properties on the
                                                                     same channel, as agents do
    cds_client.py java-poll --addr HOST:PORT --service NAME [--interval S] [--timeout S]
                                                                     poll as the Java agent times
                                                                     it (30 s deadline, fixed
                                                                     rate), one JSON line per answer
                                                                     and per error

`fetch --timeout 0` makes the call without a deadline (no grpc-timeout), as generic tools do.
"""
import argparse
import json
import os
import signal
import time
import sys
import tempfile
import uuid as uuidlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import skyconf_protos  # noqa: E402 - compiles the protos into the package skyconf_pb (tests/python/)

EMPTY_DIGEST = ("410bb567794fe14362a2fb5912af7331eba74877614b82f36f3861fe86201c614f53423e896e5036"
                "509c0a815c7f444f20aefbc2bbe66545b382200299aced16")


def load_stubs():
    out = tempfile.mkdtemp(prefix="skyconf-grpcio-")
    skyconf_protos.compile_protos(out, ["common", "configuration_discovery", "management"])
    return skyconf_protos.load(out, "configuration_discovery_pb2"), skyconf_protos.load(out, "configuration_discovery_pb2_grpc")


def call(stub, pb, service, uuid="", timeout=10.0):
    import grpc
    try:
        return stub.fetchConfigurations(pb.ConfigurationSyncRequest(service=service, uuid=uuid),
                                        timeout=timeout if timeout > 0 else None)
    except grpc.RpcError as e:
        raise SystemExit(f"fetchConfigurations({service!r}) failed: {e.code().name} {e.details()}")


def as_json(commands):
    return [{"command": c.command, "args": [[a.key, a.value] for a in c.args]} for c in commands.commands]


def expect(condition, message):
    if not condition:
        raise SystemExit("FAIL: " + message)


def check_command(commands, want_uuid, want_config, seen_serials):
    expect(len(commands.commands) == 1, f"one command, got {as_json(commands)}")
    cmd = commands.commands[0]
    expect(cmd.command == "ConfigurationDiscoveryCommand", f"command name {cmd.command!r}")
    args = [(a.key, a.value) for a in cmd.args]
    expect(args[0][0] == "SerialNumber" and args[1][0] == "UUID", f"argument order {args[:2]}")
    serial = uuidlib.UUID(args[0][1])
    expect(serial.version == 4 and str(serial) == args[0][1], f"serial {args[0][1]!r} is a lowercase UUID v4")
    expect(args[0][1] not in seen_serials, "a fresh serial number on every response")
    seen_serials.add(args[0][1])
    expect(args[1][1] == want_uuid, f"UUID {args[1][1]} != golden {want_uuid}")
    expect(sorted(args[2:]) == sorted(want_config), f"config {args[2:]} != golden {want_config}")


def check(stub, pb, golden):
    seen = set()
    services = {k: v for k, v in golden.items() if not k.startswith("__")}
    expect(services, "the golden file names at least one service")
    for service, want in services.items():
        config = [tuple(pair) for pair in want["config"]]
        for _ in range(2):
            check_command(call(stub, pb, service), want["uuid"], config, seen)
        check_command(call(stub, pb, service, "a-stale-digest"), want["uuid"], config, seen)
        echoed = call(stub, pb, service, want["uuid"])
        expect(len(echoed.commands) == 0, f"{service}: echoing the digest must give no command, got {as_json(echoed)}")
    unknown = "skyconf-interop-no-such-service"
    check_command(call(stub, pb, unknown), EMPTY_DIGEST, [], seen)
    expect(len(call(stub, pb, unknown, EMPTY_DIGEST).commands) == 0, "unknown service echoing EMPTY gets no command")
    print(json.dumps({"ok": True, "services": len(services), "calls": len(seen) + len(services) + 1}))


def report_instance(channel, service, instance, properties):
    """ManagementService.reportInstanceProperties on `channel`, as an agent sends it at start."""
    from skyconf_pb.skywalking.v3 import common_pb2, management_pb2 as mpb, management_pb2_grpc as mrpc
    pairs = []
    for pair in properties:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {pair!r}")
        pairs.append(common_pb2.KeyStringValuePair(key=key, value=value))
    request = mpb.InstanceProperties(service=service, serviceInstance=instance, properties=pairs)
    mrpc.ManagementServiceStub(channel).reportInstanceProperties(request, timeout=10)


def poll(stub, pb, service, interval, seconds, stuck):
    """Polls as a stock agent does: one channel, the digest of the last applied configuration
    sent back on every call, a command applied only when its UUID differs from that digest.
    With `stuck`, the first configuration is applied and every later one "fails" (as a Java
    agent whose watcher throws): the agent keeps echoing the first digest forever."""
    import grpc
    uuid = ""
    deadline = time.monotonic() + seconds if seconds > 0 else None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while deadline is None or time.monotonic() < deadline:
        try:
            commands = stub.fetchConfigurations(pb.ConfigurationSyncRequest(service=service, uuid=uuid), timeout=10)
            for cmd in commands.commands:
                if cmd.command != "ConfigurationDiscoveryCommand":
                    continue
                args = [(a.key, a.value) for a in cmd.args]
                new = dict(args).get("UUID")
                if new is None or new == uuid:
                    continue
                if stuck and uuid:
                    print(json.dumps({"t": time.time(), "refused": new}), flush=True)
                    continue
                uuid = new
                config = {k: v for k, v in args if k not in ("SerialNumber", "UUID")}
                print(json.dumps({"t": time.time(), "uuid": uuid, "config": config}), flush=True)
        except grpc.RpcError as e:
            print(json.dumps({"t": time.time(), "error": e.code().name}), flush=True)
        time.sleep(interval)


def java_poll(stub, pb, service, interval, timeout, seconds):
    """Polls with the Java agent's timing against a server that may hold a call: every call
    carries a deadline of `timeout` (the agent's `collector.grpc_upstream_timeout`, 30 s), calls
    start at a fixed rate of `interval` (`scheduleAtFixedRate`, 20 s), and a call that outlasts
    the interval is followed at once, never overlapped. The digest of the last received command
    is echoed.

    One JSON line per answer, `t` the wall-clock time it arrived and `elapsed` the call's
    duration: `{"t", "elapsed", "uuid", "serial", "config"}` for a command,
    `{"t", "elapsed", "unchanged": true}` for an empty answer, and
    `{"t", "elapsed", "error": CODE, "details"}` for a failed call."""
    import grpc
    uuid = ""
    stop_at = time.monotonic() + seconds if seconds > 0 else None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    next_at = time.monotonic()
    while stop_at is None or time.monotonic() < stop_at:
        pause = next_at - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        started = time.monotonic()
        next_at = started + interval
        line = {}
        try:
            commands = stub.fetchConfigurations(pb.ConfigurationSyncRequest(service=service, uuid=uuid),
                                                timeout=timeout)
            found = [c for c in commands.commands if c.command == "ConfigurationDiscoveryCommand"]
            if found:
                args = [(a.key, a.value) for a in found[0].args]
                keyed = dict(args)
                uuid = keyed.get("UUID", uuid)
                line = {"uuid": keyed.get("UUID"), "serial": keyed.get("SerialNumber"),
                        "config": {k: v for k, v in args if k not in ("SerialNumber", "UUID")}}
            else:
                line = {"unchanged": True}
        except grpc.RpcError as e:
            line = {"error": e.code().name, "details": e.details()}
        line = {"t": time.time(), "elapsed": round(time.monotonic() - started, 6), **line}
        print(json.dumps(line), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["fetch", "check", "poll", "java-poll"])
    ap.add_argument("--addr", required=True)
    ap.add_argument("--service")
    ap.add_argument("--uuid", default="")
    ap.add_argument("--golden")
    ap.add_argument("--interval", type=float, default=20.0, help="seconds between polls (agents: 20)")
    ap.add_argument("--timeout", type=float,
                    help="deadline of each call in seconds, 0 for none (fetch: 10, java-poll: 30)")
    ap.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: until SIGTERM)")
    ap.add_argument("--stuck", action="store_true", help="apply the first configuration only")
    ap.add_argument("--instance", help="poll: report this instance name first, on the same channel")
    ap.add_argument("--property", action="append", default=[], help="poll --instance: a reported KEY=VALUE")
    a = ap.parse_args()
    import grpc
    pb, rpc = load_stubs()
    channel = grpc.insecure_channel(a.addr)
    stub = rpc.ConfigurationDiscoveryServiceStub(channel)
    if a.instance:
        report_instance(channel, a.service, a.instance, a.property)
    if a.mode == "fetch":
        print(json.dumps(as_json(call(stub, pb, a.service, a.uuid, 10.0 if a.timeout is None else a.timeout))))
    elif a.mode == "java-poll":
        java_poll(stub, pb, a.service, a.interval, 30.0 if a.timeout is None else a.timeout, a.seconds)
    elif a.mode == "poll":
        poll(stub, pb, a.service, a.interval, a.seconds, a.stuck)
    else:
        with open(a.golden) as f:
            check(stub, pb, json.load(f))


if __name__ == "__main__":
    main()
