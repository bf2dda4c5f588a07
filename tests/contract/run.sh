#!/usr/bin/env bash
# The admin API's contract test: starts `skyconf serve` on a temp copy of
# tests/contract/agent-configurations.yaml (file store, a --data-dir, read and write tokens),
# then runs schemathesis against GET /api/v1/openapi.json with every check but one (below): answers conform to
# the documented status codes, content types, headers and schemas, no 5xx, invalid input is
# refused, auth is enforced. Any finding fails the run (exit 1). Bounded: --max-examples per
# operation and a time limit on the whole run.
#
# One check is left out: use_after_free (a GET after a DELETE must be 404) cannot tell a
# `?dry_run=true` DELETE, which answers 200 and deletes nothing by design, from a real one.
#
#   tests/contract/run.sh [extra schemathesis options]
#
# One worker: Python 3.11 can fail in ast.parse when two threads parse at once (hypothesis
# describes its strategies that way), which schemathesis reports as a runtime error.
# Needs schemathesis (scripts/deps/python.sh); SKYCONF_BIN names a built `skyconf` (else it is built).
# CONTRACT_MAX_EXAMPLES (default 40) and CONTRACT_TIMEOUT (seconds, default 170) bound it;
# CONTRACT_KEEP=DIR keeps the server's files, log and schemathesis' cassettes after a failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

# schemathesis from the tests' Python ($SKYCONF_TEST_PYTHON: the project's virtualenv, which
# scripts/deps/python.sh makes), else python3's, else a console script on PATH.
python="${SKYCONF_TEST_PYTHON:-python3}"
if "$python" -c 'import schemathesis.cli' 2>/dev/null; then
  schemathesis=("$python" -c 'import sys; from schemathesis.cli import schemathesis; sys.argv[0] = "schemathesis"; schemathesis()')
elif command -v schemathesis >/dev/null; then
  schemathesis=(schemathesis)
else
  echo "contract: schemathesis is not installed (scripts/deps/python.sh installs it into .venv/)" >&2
  exit 1
fi
if [ -z "${SKYCONF_BIN:-}" ]; then
  cargo build --quiet -p skyconf-cli
  SKYCONF_BIN="${CARGO_TARGET_DIR:-target}/debug/skyconf"
fi

work="$(mktemp -d)"
server_pid=""
agent_pids=()
cleanup() {
  for pid in "${agent_pids[@]}"; do kill "$pid" 2>/dev/null; done
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

cp tests/contract/agent-configurations.yaml "$work/agents.yaml"
mkdir "$work/data"
read_token="contract-read-$RANDOM$RANDOM"
write_token="contract-write-$RANDOM$RANDOM"
printf 'read %s\nwrite %s\n' "$read_token" "$write_token" > "$work/tokens"
chmod 600 "$work/tokens"
# Two free loopback ports (the kernel's choice; a race with another process is unlikely).
read -r grpc_port admin_port < <("$python" -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')

# --reset-grace 0: a generated document that drops every service is installed at once, not held
# for ten minutes (the held routes then answer 409, as documented).
"$SKYCONF_BIN" serve --store file --file "$work/agents.yaml" --data-dir "$work/data" \
  --grpc-addr "127.0.0.1:$grpc_port" --admin-addr "127.0.0.1:$admin_port" \
  --admin-token-file "$work/tokens" --reset-grace 0 > "$work/server.log" 2>&1 &
server_pid=$!
base="http://127.0.0.1:$admin_port"
for _ in $(seq 100); do
  curl -fsS "$base/readyz" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.1
done
curl -fsS -H "Authorization: Bearer $read_token" "$base/api/v1/openapi.json" -o "$work/openapi.json"

# Rows for the fleet views, so their schemas are checked against real ones: an agent that
# reports its instance (properties, `agent-version` metadata) on its polls' connection, and one
# whose connection never says who it is (an anonymous poller). Both keep polling while
# schemathesis runs: a fleet row lives as long as its connection.
agent() { "$SKYCONF_BIN" agent --addr "127.0.0.1:$grpc_port" --service mall-order-service "$@" >/dev/null 2>&1 & agent_pids+=("$!"); }
agent --instance contract-pod@10.0.0.9 --agent-version 9.4.0-contract --property hostname=contract-host \
  --property ipv4=10.0.0.9 --property ipv4=172.17.0.1 --property language=java
agent
instances=""
for _ in $(seq 100); do
  instances="$(curl -fsS -H "Authorization: Bearer $read_token" "$base/api/v1/instances")"
  case "$instances" in
    *'"agent_version":"9.4.0-contract"'*'"anonymous":[{'*) break ;;
  esac
  sleep 0.1
done
case "$instances" in
  *'"agent_version":"9.4.0-contract"'*'"anonymous":[{'*) ;;
  *) echo "contract: the fed agents are not listed: $instances" >&2; exit 1 ;;
esac

started=$SECONDS
status=0
# From the temp folder: schemathesis leaves its .schemathesis/ cassettes in the working directory.
root="$PWD"
(cd "$work" && timeout --signal=INT "${CONTRACT_TIMEOUT:-170}" \
  "${schemathesis[@]}" --no-color --config-file "$root/tests/contract/schemathesis.toml" run "$work/openapi.json" --url "$base" \
  --checks all \
  --exclude-checks use_after_free \
  --header "Authorization: Bearer $write_token" \
  --max-examples "${CONTRACT_MAX_EXAMPLES:-40}" \
  --workers 1 \
  --request-timeout 70 \
  --suppress-health-check too_slow \
  --generation-database none \
  "$@") || status=$?
echo "contract: schemathesis exited $status after $((SECONDS - started)) s" >&2
if ! kill -0 "$server_pid" 2>/dev/null; then
  echo "contract: the server died" >&2
  status=1
fi
if grep -q "panicked" "$work/server.log"; then
  echo "contract: the server panicked:" >&2
  grep -A5 "panicked" "$work/server.log" >&2
  status=1
fi
if [ "$status" -ne 0 ]; then
  echo "contract: the server's log, last 40 lines:" >&2
  tail -n 40 "$work/server.log" >&2
  [ -n "${CONTRACT_KEEP:-}" ] && cp -r "$work" "$CONTRACT_KEEP" && echo "contract: kept in $CONTRACT_KEEP" >&2
fi
exit "$status"
