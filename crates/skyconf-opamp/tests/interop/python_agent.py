"""An agent driven by the PyPI client `opentelemetry-opamp-client`, for skyconf's OpAMP tests.

usage: python_agent.py URL SERVICE INTERVAL_SECONDS

It starts the client's OpAMPAgent with the client's own defaults (its 1 s request timeout, its
default capabilities), applies every remote configuration it receives the way an OTel Python
distro would (the client parses application/json files and refuses other content types),
reports APPLIED or FAILED with the configuration's hash and its effective configuration, and
prints one JSON line per event on stdout. It stops (sending AgentDisconnect) when stdin closes.

Over TLS and with a token when the environment says so: OPAMP_TOKEN (sent as
`Authorization: Bearer`), OPAMP_CA (the CA bundle the server's certificate must chain to), and
OPAMP_CLIENT_CERT with OPAMP_CLIENT_KEY (a client certificate).
"""

import os

import json
import sys
import threading

from opentelemetry._opamp.agent import OpAMPAgent
from opentelemetry._opamp.callbacks import OpAMPCallbacks
from opentelemetry._opamp.client import OpAMPClient
from opentelemetry._opamp.proto import opamp_pb2

lock = threading.Lock()


def emit(event, **fields):
    with lock:
        print(json.dumps({"event": event, **fields}), flush=True)


class Callbacks(OpAMPCallbacks):
    def on_connect_failed(self, agent, client, error):
        emit("connect_failed", error=str(error))

    def on_error(self, agent, client, error_response):
        emit("error_response", type=error_response.type, message=error_response.error_message)

    def on_message(self, agent, client, message):
        remote = message.remote_config
        if remote is None:
            return
        config_hash = remote.config_hash
        try:
            files = dict(client.decode_remote_config(remote))
        except Exception as error:  # the client's parse/decode errors
            status = client.update_remote_config_status(
                remote_config_hash=config_hash,
                status=opamp_pb2.RemoteConfigStatuses_FAILED,
                error_message=str(error),
            )
            emit("failed", hash=config_hash.hex(), error=str(error))
        else:
            client.update_effective_config(files, content_type="application/json")
            status = client.update_remote_config_status(
                remote_config_hash=config_hash,
                status=opamp_pb2.RemoteConfigStatuses_APPLIED,
            )
            emit("applied", hash=config_hash.hex(), files=files)
        if status is not None:
            agent.send(client.build_remote_config_status_response_message(status))
            # The effective configuration travels in the full state message.
            agent.send(client.build_full_state_message())


def main():
    url, service, interval = sys.argv[1], sys.argv[2], float(sys.argv[3])
    env = os.environ.get
    tls = {}
    if env("OPAMP_CA"):
        tls["tls_certificate"] = env("OPAMP_CA")
    if env("OPAMP_CLIENT_CERT"):
        tls["tls_client_certificate"] = env("OPAMP_CLIENT_CERT")
        tls["tls_client_key"] = env("OPAMP_CLIENT_KEY")
    headers = {"Authorization": "Bearer " + env("OPAMP_TOKEN")} if env("OPAMP_TOKEN") else None
    client = OpAMPClient(
        endpoint=url,
        headers=headers,
        **tls,
        agent_identifying_attributes={"service.name": service},
        agent_non_identifying_attributes={"host.name": "interop-host"},
    )
    agent = OpAMPAgent(interval=interval, callbacks=Callbacks(), client=client)
    agent.start()
    emit("started", instance_uid=client._instance_uid.hex())
    sys.stdin.read()
    agent.stop(timeout=5)
    emit("stopped")


if __name__ == "__main__":
    main()
