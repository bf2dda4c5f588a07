# The independent OpAMP clients of skyconf-opamp's interop tests
# (crates/skyconf-opamp/tests/it/interop.rs): PyPI `opentelemetry-opamp-client` in a virtualenv
# and npm `@elastic/opamp-client-node` in node_modules, both inside
# crates/skyconf-opamp/tests/interop/ (git-ignored), from the pinned requirements.txt and the
# package-lock.json there (which keeps versions and integrity hashes, no download URLs). Nothing
# is installed globally. Node and npm come from Debian when missing.
opamp_interop="$(dirname "${BASH_SOURCE[0]}")/../../crates/skyconf-opamp/tests/interop"
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || apt_install nodejs npm
if [ ! -x "$opamp_interop/.venv/bin/python" ] || ! "$opamp_interop/.venv/bin/python" -c 'import opentelemetry._opamp' 2>/dev/null; then
  echo "test.sh: installing opentelemetry-opamp-client into $opamp_interop/.venv" >&2
  python3 -m venv "$opamp_interop/.venv"
  "$opamp_interop/.venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$opamp_interop/requirements.txt"
fi
if [ ! -d "$opamp_interop/node_modules/@elastic/opamp-client-node" ]; then
  echo "test.sh: installing @elastic/opamp-client-node into $opamp_interop/node_modules" >&2
  (cd "$opamp_interop" && npm ci --silent --no-audit --no-fund)
fi
unset opamp_interop
export SKYCONF_REQUIRE_OPAMP_CLIENTS=1
