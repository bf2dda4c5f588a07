#!/usr/bin/env bash
# Builds skyconf's container image as localhost/skyconf:dev on a machine with no container
# registry, and checks it by running the image's own binary.
#
#   scripts/image.sh            # build the release binary, the base (once), the image; check it
#   scripts/image.sh --no-check # build only
#
# 1. the release binary (`cargo build --release`), stamped with the commit (skyconf_build_info);
# 2. the base, localhost/skyconf-base:<codename>, made once from Debian's packages: a
#    `debootstrap --variant=minbase` tree of this machine's Debian release (so its glibc is the
#    one the binary was linked against), of which only what a dynamically linked Rust binary
#    needs is kept (glibc, libgcc, the CA bundle, /etc/passwd with the user 65532), imported with
#    `podman import` (about 30 s the first time);
# 3. `podman build --isolation chroot` of ./Containerfile on that base (no container is started:
#    deploy/image/containers.conf turns off what a build would need cgroups for);
# 4. the check: the image's filesystem (`podman image mount`) entered with chroot, as the image's
#    user and with the image's environment, runs `skyconf validate` on the example, then
#    `skyconf serve` until /readyz answers 200 with the example's services, then SIGTERM.
#
# Needs root (podman's storage, debootstrap, chroot). Installs podman and debootstrap with apt
# when missing. Environment: SKYCONF_BASE=IMAGE builds on that base instead (from a registry),
# IMAGE (localhost/skyconf:dev).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
IMAGE=${IMAGE:-localhost/skyconf:dev}
CHECK=1
[ "${1:-}" = "--no-check" ] && CHECK=0

log() { printf '== image.sh: %s\n' "$*" >&2; }

# shellcheck source=scripts/deps/00-lib.sh
. scripts/deps/00-lib.sh
apt_install podman debootstrap
export CONTAINERS_CONF=$ROOT/deploy/image/containers.conf

# --- 1. the binary ---------------------------------------------------------------------------
REVISION=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ "$REVISION" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  REVISION="$REVISION-modified"
fi
VERSION=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$VERSION" ] || { echo "image.sh: no version in Cargo.toml's [workspace.package]" >&2; exit 1; }
log "release binary ($VERSION, $REVISION)"
SKYCONF_COMMIT=$REVISION cargo build --release -q -p skyconf-cli
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
if [ "$TARGET/release/skyconf" != "$ROOT/target/release/skyconf" ]; then
  # The build context is the repository: the Containerfile copies target/release/skyconf.
  mkdir -p target/release && cp "$TARGET/release/skyconf" target/release/skyconf
fi
# The release profile ships no debug info (docs/deploy.md says how to get symbols): a binary over
# 30 MB means it crept back in.
BYTES=$(stat -c %s target/release/skyconf)
[ "$BYTES" -le $((30 * 1024 * 1024)) ] || { echo "image.sh: the release binary is $BYTES bytes, over 30 MiB" >&2; exit 1; }
log "release binary: $((BYTES / 1024 / 1024)) MiB"

# --- 2. the base -----------------------------------------------------------------------------
if [ -n "${SKYCONF_BASE:-}" ]; then
  BASE=$SKYCONF_BASE
  PULL=missing
else
  CODENAME=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$CODENAME" ] || { echo "image.sh: no VERSION_CODENAME in /etc/os-release" >&2; exit 1; }
  BASE=localhost/skyconf-base:$CODENAME
  PULL=never
  if ! podman image exists "$BASE"; then
    log "base $BASE from Debian's packages"
    # The mirror this machine's apt uses.
    MIRROR=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -m1 -v security || true)
    [ -n "$MIRROR" ] || MIRROR=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    MIRROR=${MIRROR:-http://deb.debian.org/debian}
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/skyconf-base.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT
    debootstrap --variant=minbase --include=ca-certificates "$CODENAME" "$WORK/tree" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
      { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
    # Keep what the binary needs: the files of these packages (paths relative to the tree, under
    # /usr where /lib and /bin are links to it, the links first), and the CA bundle.
    chroot "$WORK/tree" dpkg -L libc6 libgcc-s1 base-files |
      grep '^/' | grep -v -e '^/usr/share/doc' -e '^/usr/share/man' -e '^/usr/share/lintian' \
        -e '^/usr/share/locale' -e '/gconv' |
      sed -E 's#^/##; s#^(bin|sbin|lib|lib32|lib64|libx32)/#usr/\1/#' | sort -u >"$WORK/files"
    echo etc/ssl/certs/ca-certificates.crt >>"$WORK/files"
    links=$(cd "$WORK/tree" && for l in bin sbin lib lib32 lib64 libx32; do [ -L "$l" ] && echo "$l"; done || true)
    mkdir -p "$WORK/root"
    # shellcheck disable=SC2086 # the links are plain names
    (cd "$WORK/tree" && tar --no-recursion -cf - $links -T "$WORK/files") | tar -C "$WORK/root" -xf -
    mkdir -p "$WORK/root"/{tmp,proc,dev,sys,run,var/lib,usr/local/bin}
    chmod 1777 "$WORK/root/tmp"
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$WORK/root/etc/passwd"
    printf 'root:x:0:\nnonroot:x:65532:\n' >"$WORK/root/etc/group"
    printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$WORK/root/etc/nsswitch.conf"
    (cd "$WORK/root" && tar -cf - .) | podman import \
      --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
      --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
      - "$BASE" >/dev/null
    rm -rf "$WORK"
    trap - EXIT
  fi
fi

# --- 3. the image ----------------------------------------------------------------------------
log "$IMAGE on $BASE"
podman build --isolation chroot --pull="$PULL" -q -f Containerfile \
  --build-arg BASE="$BASE" --build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" \
  --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" -t "$IMAGE" . >/dev/null
log "$(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.1f MB", $1 / 1e6}'), binary $(du -h target/release/skyconf | cut -f1)"

[ "$CHECK" = 1 ] || exit 0

# --- 4. the check ----------------------------------------------------------------------------
log "check: the image's own binary, as its user, with its environment"
MNT=$(podman image mount "$IMAGE")
SERVER=""
cleanup() {
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
  podman image unmount "$IMAGE" >/dev/null || true
}
trap cleanup EXIT
USER_SPEC=$(podman image inspect --format '{{.Config.User}}' "$IMAGE")
mapfile -t IMAGE_ENV < <(podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$IMAGE" | grep -v '^$')
ENTRYPOINT=$(podman image inspect --format '{{index .Config.Entrypoint 0}}' "$IMAGE")
[ "$USER_SPEC" = "65532:65532" ] || { echo "image.sh: the image runs as '$USER_SPEC', not 65532:65532" >&2; exit 1; }
[ -z "$(podman image inspect --format '{{.Config.Healthcheck}}' "$IMAGE" | grep -v '<nil>')" ] ||
  { echo "image.sh: the image has a HEALTHCHECK" >&2; exit 1; }
CHROOT=$(command -v chroot)
[ "$(stat -c %u:%g "$MNT/var/lib/skyconf")" = 65532:65532 ] ||
  { echo "image.sh: /var/lib/skyconf in the image is not owned by 65532" >&2; exit 1; }
# in_image ARGS...: the entry point with ARGS inside the image, in a mount namespace of its own
# where /proc, a writable /var/lib/skyconf (as a volume would be) and /tmp exist. Every step
# execs the next, so the caller's process becomes skyconf and signals reach it: call it in a
# subshell.
in_image() {
  exec unshare --mount --propagation private -- sh -c '
    root=$1; shift
    mount -t tmpfs -o mode=0755 tmpfs "$root/var/lib/skyconf" && chown 65532:65532 "$root/var/lib/skyconf"
    mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
    mount -t proc proc "$root/proc"
    exec "$@"' sh "$MNT" env -i "${IMAGE_ENV[@]}" "$CHROOT" --userspec="$USER_SPEC" "$MNT" "$ENTRYPOINT" "$@"
}
(in_image validate --strict /etc/skyconf/agent-configurations.yaml)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ADMIN=127.0.0.1:$(free_port)
GRPC=127.0.0.1:$(free_port)
LOG=$(mktemp "${TMPDIR:-/tmp}/skyconf-image-serve.XXXXXX")
(in_image serve --grpc-addr "$GRPC" --admin-addr "$ADMIN" 2>"$LOG") &
SERVER=$!
ready=""
for _ in $(seq 1 100); do
  ready=$(curl -fsS "http://$ADMIN/readyz" 2>/dev/null) && break
  kill -0 "$SERVER" 2>/dev/null || break
  sleep 0.1
done
grep -q '"ready":true' <<<"$ready" && grep -q '"services":3' <<<"$ready" ||
  { echo "image.sh: the image's skyconf did not become ready: $ready" >&2; cat "$LOG" >&2; exit 1; }
metrics=$(curl -fsS "http://$ADMIN/metrics")
grep -q '^skyconf_build_info{version="'"$VERSION"'",commit="'"$REVISION"'"} 1$' <<<"$metrics" ||
  { echo "image.sh: /metrics has no skyconf_build_info for $VERSION ($REVISION)" >&2; exit 1; }
kill -TERM "$SERVER"
wait "$SERVER" || { echo "image.sh: serve did not stop cleanly on SIGTERM" >&2; cat "$LOG" >&2; exit 1; }
SERVER=""
rm -f "$LOG"
log "ok: validate, serve, /readyz ready with 3 services, build info, clean stop"
