"""Checks what the Kubernetes API schemas cannot: the rendered skyconf manifests fit together and
fit skyconf. Run by scripts/deploy-check.sh on `kubectl kustomize` output:

    check_manifests.py SKYCONF_BINARY OVERLAY=RENDERED.yaml...

- selectors: the Service and the PodDisruptionBudget select the Deployment's pods;
- probes: liveness on /healthz, readiness on /readyz, on the admin port by name;
- the pod runs as non-root with a read-only root filesystem, no privilege escalation, no
  capabilities; the replica name comes from the pod name;
- every SKYCONF_* variable is one `skyconf serve` reads (its --help lists them), every SW_* one a
  store reads (skyconf-sources names it);
- the `configmap` overlay's document is valid (`skyconf validate --strict` on the ConfigMap laid
  out as the kubelet mounts it), and the `etcd` overlay selects etcd.
"""

import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCUMENT_KEY = "configuration-discovery.default.agentConfigurations"


def known_variables(binary):
    """SKYCONF_* names from `skyconf --help` and `skyconf serve --help`, SW_* from the stores."""
    text = "".join(subprocess.run([binary, *args, "--help"], check=True, capture_output=True, text=True).stdout
                   for args in ([], ["serve"]))
    names = set(re.findall(r"\[env: (SKYCONF_[A-Z0-9_]+)[=\]]", text))
    sources = "".join(p.read_text() for p in (ROOT / "crates/skyconf-sources/src").rglob("*.rs"))
    names |= set(re.findall(r'"(SW_[A-Za-z0-9_]+)"', sources))
    # The logging filter is read by the logging set-up, not by clap.
    names.add("SKYCONF_LOG")
    return names


def check(overlay, docs, binary, known, problems):
    def fail(message):
        problems.append(f"{overlay}: {message}")

    kinds = {}
    for doc in docs:
        kinds.setdefault(doc["kind"], []).append(doc)
    counts = {kind: len(kinds.get(kind, [])) for kind in ("Deployment", "Service", "PodDisruptionBudget")}
    if set(counts.values()) != {1}:
        fail(f"expected one of each: {counts}")
        return
    deployment, service, pdb = kinds["Deployment"][0], kinds["Service"][0], kinds["PodDisruptionBudget"][0]
    namespaces = {doc["metadata"].get("namespace") for doc in docs}
    if len(namespaces) != 1 or None in namespaces:
        fail(f"every resource needs the same namespace, found {namespaces}")

    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    for name, selector in (("Deployment", deployment["spec"]["selector"]["matchLabels"]),
                           ("Service", service["spec"]["selector"]),
                           ("PodDisruptionBudget", pdb["spec"]["selector"]["matchLabels"])):
        if not selector or any(pod_labels.get(k) != v for k, v in selector.items()):
            fail(f"the {name} selector {selector} does not select the pods {pod_labels}")

    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    if ports != {"grpc": 11800, "admin": 12800}:
        fail(f"container ports {ports}")
    service_ports = {p["port"]: p["targetPort"] for p in service["spec"]["ports"]}
    if service_ports != {11800: "grpc", 12800: "admin"}:
        fail(f"Service ports {service_ports}")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container.get(probe, {}).get("httpGet", {})
        if (get.get("path"), get.get("port")) != (path, "admin"):
            fail(f"{probe} must GET {path} on the admin port, has {get}")

    pod_security = pod.get("securityContext", {})
    security = container.get("securityContext", {})
    if not (pod_security.get("runAsNonRoot") and pod_security.get("runAsUser", 0) != 0):
        fail(f"the pod must run as a non-root user: {pod_security}")
    wanted = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True}
    if any(security.get(k) != v for k, v in wanted.items()) or security.get("capabilities", {}).get("drop") != ["ALL"]:
        fail(f"the container's securityContext must forbid escalation, write no root fs and drop ALL: {security}")
    if pod.get("automountServiceAccountToken") is not False:
        fail("skyconf does not use the Kubernetes API: automountServiceAccountToken must be false")
    resources = container.get("resources", {})
    if not resources.get("requests", {}).get("memory") or not resources.get("limits", {}).get("memory"):
        fail(f"memory request and limit are required: {resources}")

    env = {e["name"]: e for e in container.get("env", [])}
    for name in env:
        if name not in known:
            fail(f"`{name}` is not a variable skyconf reads")
    replica = env.get("SKYCONF_REPLICA_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    if replica != "metadata.name":
        fail("SKYCONF_REPLICA_NAME must come from the pod name (fieldRef metadata.name)")
    if not env.get("SKYCONF_UPSTREAM", {}).get("value"):
        fail("gateway mode needs SKYCONF_UPSTREAM")
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    data_dir = env.get("SKYCONF_DATA_DIR", {}).get("value")
    if data_dir not in mounts:
        fail(f"SKYCONF_DATA_DIR {data_dir} must be a mounted volume (the root filesystem is read-only)")
    for path, name in mounts.items():
        if name not in volumes:
            fail(f"the mount {path} names no volume `{name}`")

    store = env.get("SKYCONF_STORE", {}).get("value")
    if overlay == "configmap":
        file_path = env.get("SKYCONF_FILE", {}).get("value")
        volume = volumes.get(mounts.get(file_path), {})
        name = volume.get("configMap", {}).get("name")
        maps = {m["metadata"]["name"]: m for m in kinds.get("ConfigMap", [])}
        if store != "file" or name not in maps:
            fail(f"the file store must serve the mounted ConfigMap: store {store}, SKYCONF_FILE {file_path}, volume {volume}")
            return
        data = maps[name].get("data", {})
        if DOCUMENT_KEY not in data:
            fail(f"the ConfigMap has no `{DOCUMENT_KEY}` key: {sorted(data)}")
            return
        # The ConfigMap as the kubelet mounts it: one file per key, and dot-named internals.
        with tempfile.TemporaryDirectory() as mount:
            for key, value in data.items():
                (pathlib.Path(mount) / key).write_text(value)
            (pathlib.Path(mount) / "..data").mkdir()
            result = subprocess.run([binary, "validate", "--strict", mount], capture_output=True, text=True)
            if result.returncode != 0:
                fail(f"the ConfigMap's document is refused: {result.stdout}{result.stderr}")
        example = (ROOT / "examples/agent-configurations.yaml").read_text()
        if data[DOCUMENT_KEY] != example:
            fail("the ConfigMap's document differs from examples/agent-configurations.yaml")
    elif overlay == "etcd":
        if store != "etcd" or "SKYCONF_FILE" in env or not env.get("SW_CONFIG_ETCD_ENDPOINTS", {}).get("value"):
            fail(f"the etcd overlay must select etcd with endpoints and no file: {sorted(env)}")
        if kinds.get("ConfigMap"):
            fail("the etcd overlay has no use for a ConfigMap")


def main():
    binary, *rendered = sys.argv[1:]
    known = known_variables(binary)
    problems = []
    for arg in rendered:
        overlay, path = arg.split("=", 1)
        docs = [d for d in yaml.safe_load_all(pathlib.Path(path).read_text()) if d]
        check(overlay, docs, binary, known, problems)
    for text_file in [ROOT / "Containerfile", ROOT / "deploy/systemd/skyconf.service", ROOT / "docs/deploy.md"]:
        for name in sorted(set(re.findall(r"\b(SKYCONF_[A-Z0-9_]+)\b", text_file.read_text()))):
            if name not in known and name != "SKYCONF_COMMIT" and not name.startswith("SKYCONF_BASE"):
                problems.append(f"{text_file.relative_to(ROOT)}: `{name}` is not a variable skyconf reads")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        sys.exit(1)
    print(f"manifests: {len(rendered)} overlays fit skyconf ({len(known)} known variables)")


if __name__ == "__main__":
    main()
