"""Puts a document at the agent-configurations key through etcd's JSON gateway (no etcdctl
needed): replicas.sh's seed.

Usage: etcd_seed.py ETCD_CLIENT_PORT DOCUMENT_FILE
"""
import base64, json, sys, urllib.request
port, path = sys.argv[1:]
key = b"/skywalking/configuration-discovery.default.agentConfigurations"
body = json.dumps({"key": base64.b64encode(key).decode(), "value": base64.b64encode(open(path, "rb").read()).decode()})
urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v3/kv/put", body.encode(), method="POST")).read()
