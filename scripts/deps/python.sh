# The Python packages of the integration tests (tests/requirements.txt: grpcio and grpcio-tools
# for the independent gRPC clients, schemathesis for the admin API's contract test) in a
# virtualenv of the project's own, never the machine's global site-packages, where another
# package (the SkyWalking Python agent's top-level `skywalking`, say) could change what the tests
# import. The virtualenv is .venv/ at the root (git-ignored; SKYCONF_TEST_VENV names another),
# made again when tests/requirements.txt changes. Exports SKYCONF_TEST_PYTHON, the interpreter
# the tests run their Python tools on, and SKYCONF_REQUIRE_INTEROP=1 (the grpcio tests fail
# rather than skip). python3 comes from Debian when missing, with its venv module.
skyconf_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
skyconf_venv="${SKYCONF_TEST_VENV:-$skyconf_root/.venv}"
skyconf_requirements="$skyconf_root/tests/requirements.txt"
command -v python3 >/dev/null 2>&1 || apt_install python3
if ! cmp -s "$skyconf_requirements" "$skyconf_venv/.skyconf-requirements" \
  || ! "$skyconf_venv/bin/python" -c 'import grpc, grpc_tools, schemathesis' 2>/dev/null; then
  echo "test.sh: installing tests/requirements.txt into $skyconf_venv" >&2
  # Debian's python3 makes virtualenvs only with python3-venv.
  python3 -m venv --clear "$skyconf_venv" 2>/dev/null || { apt_install python3-venv && python3 -m venv --clear "$skyconf_venv"; }
  "$skyconf_venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$skyconf_requirements"
  cp "$skyconf_requirements" "$skyconf_venv/.skyconf-requirements"
fi
export SKYCONF_TEST_PYTHON="$skyconf_venv/bin/python"
export SKYCONF_REQUIRE_INTEROP=1
unset skyconf_root skyconf_venv skyconf_requirements
