#!/usr/bin/env bash
# Builds the node's container images with buildah (vfs storage, no registry, no container
# engine), caches each as an OCI archive keyed by the content it is built from, and prints a
# JSON manifest of them on stdout (progress and sizes go to stderr):
#   pause    a static C program (images/pause.c) FROM scratch: the pod sandbox image
#   busybox  Debian's static busybox FROM scratch: the smallest pod that answers HTTP
#   metrics-server, coredns  the real ones, built from their Go modules (build_metrics_server.sh,
#            build_coredns.sh), FROM scratch
#   base     Debian bookworm from its packages (mmdebstrap): python3 + venv, the foresight base
#   prometheus  Debian's Prometheus binary on that base: scrapes the kubelet
#   redis    Debian's redis-server package on that base: the chart's store (redis.image)
#   app      the Dockerfile's `app` target on that base: serve, operator, warmpool (no torch)
#   trainer  the default target (torch, Prophet, Ray): only with --trainer (several GB)
#
# Usage: tests/cluster/build_images.sh [--trainer]
# Env: FORESIGHT_CACHE_DIR (default ~/.cache/foresight), DEBIAN_MIRROR, DEBIAN_SUITE.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${FORESIGHT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/foresight}"
OUT="$CACHE/images"
STORE="$CACHE/buildah"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
BASE_PACKAGES="python3,python3-venv,ca-certificates,tzdata"
BUSYBOX_APPLETS="sh httpd wget cat echo sleep ls hostname"
WANT_TRAINER=0
for a in "$@"; do
  case "$a" in
    --trainer) WANT_TRAINER=1 ;;
    *) echo "build_images.sh: unknown argument '$a' (known: --trainer)" >&2; exit 2 ;;
  esac
done

log() { echo "[build_images.sh $(date +%H:%M:%S)] $*" >&2; }
need() { command -v "$1" >/dev/null || { echo "build_images.sh: '$1' is missing: $2 (make debs installs it)" >&2; exit 3; }; }
need buildah "Debian package buildah"
need mmdebstrap "Debian package mmdebstrap"
need gcc "Debian package gcc (and libc6-dev for -static)"
[ -x /bin/busybox ] || { echo "build_images.sh: /bin/busybox is missing: Debian package busybox-static" >&2; exit 3; }
[ "$(id -u)" = 0 ] || { echo "build_images.sh: buildah's vfs storage here needs root" >&2; exit 3; }

mkdir -p "$OUT" "$STORE" "$CACHE/pip"
exec 9>"$OUT/.lock"
flock 9  # two test sessions never build into one buildah store at once
B() { buildah --root "$STORE/root" --runroot "$STORE/run" --storage-driver vfs "$@"; }
key() { sha256sum | cut -c1-16; }
MANIFEST=()

# record NAME REF TAR: one entry of the JSON manifest printed at the end.
record() {
  local name=$1 ref=$2 tar=$3 size
  size=$(stat -c %s "$tar")
  log "$name: $ref  archive $(numfmt --to=iec "$size")  unpacked $(cat "$tar.unpacked" 2>/dev/null || echo ?)"
  MANIFEST+=("\"$name\": {\"ref\": \"$ref\", \"archive\": \"$tar\", \"archive_bytes\": $size, \"unpacked\": \"$(cat "$tar.unpacked" 2>/dev/null)\"}")
}

# commit_and_export CONTAINER REF TAR: commit a working container and write its OCI archive.
commit_and_export() {
  local c=$1 ref=$2 tar=$3
  B commit --quiet --rm "$c" "$ref" >/dev/null
  export_image "$ref" "$tar"
}

export_image() {
  local ref=$1 tar=$2
  rm -f "$tar.tmp"
  B push --quiet "$ref" "oci-archive:$tar.tmp:$ref" >&2
  B images --format '{{.Size}}' "$ref" | head -1 > "$tar.unpacked"
  mv "$tar.tmp" "$tar"
}

build_pause() {
  local k tar ref c d
  k=$( { cat "$HERE/images/pause.c"; gcc --version | head -1; } | key)
  ref="localhost/foresight/pause:$k"; tar="$OUT/pause-$k.tar"
  if [ ! -s "$tar" ]; then
    log "pause: gcc -static + FROM scratch"
    d=$(mktemp -d); gcc -static -O2 -s -o "$d/pause" "$HERE/images/pause.c"
    c=$(B from scratch)
    B copy --quiet "$c" "$d/pause" /pause
    B config --entrypoint '["/pause"]' --user 65535:65535 "$c"
    commit_and_export "$c" "$ref" "$tar"; rm -rf "$d"
  fi
  record pause "$ref" "$tar"
}

build_busybox() {
  local k tar ref c d
  k=$( { sha256sum /bin/busybox; echo "$BUSYBOX_APPLETS v1"; } | key)
  ref="localhost/foresight/busybox:$k"; tar="$OUT/busybox-$k.tar"
  if [ ! -s "$tar" ]; then
    log "busybox: Debian's static busybox FROM scratch"
    d=$(mktemp -d); mkdir -p "$d/bin" "$d/tmp" "$d/www"; cp /bin/busybox "$d/bin/busybox"
    for t in $BUSYBOX_APPLETS; do ln -s busybox "$d/bin/$t"; done
    c=$(B from scratch)
    B copy --quiet "$c" "$d" /
    B config --env PATH=/bin --entrypoint '[]' --cmd '["/bin/sh"]' "$c"
    commit_and_export "$c" "$ref" "$tar"; rm -rf "$d"
  fi
  record busybox "$ref" "$tar"
}

BASE_REF=""
# A static Go binary FROM scratch (built and cached by its own build script).
# build_static NAME SCRIPT USER
build_static() {
  local name=$1 script=$2 user=$3 bin k tar ref c d
  bin=$(bash "$HERE/$script" | tail -1)
  k=$( { sha256sum "$bin"; echo "$user v1"; } | key)
  ref="localhost/foresight/$name:$k"; tar="$OUT/$name-$k.tar"
  if [ ! -s "$tar" ]; then
    log "$name: $bin FROM scratch"
    d=$(mktemp -d); mkdir -p "$d/tmp"; chmod 1777 "$d/tmp"; cp "$bin" "$d/$name"
    c=$(B from scratch)
    B copy --quiet "$c" "$d" /
    B config --entrypoint "[\"/$name\"]" --user "$user" "$c"
    commit_and_export "$c" "$ref" "$tar"; rm -rf "$d"
  fi
  record "$name" "$ref" "$tar"
}

build_base() {
  local k tar c d
  k=$( { echo "$SUITE $MIRROR $BASE_PACKAGES v1"; sed -n '/^build_base()/,/^}/p' "$0"; } | key)
  BASE_REF="localhost/foresight/base:$k"; tar="$OUT/base-$k.tar"
  if [ ! -s "$tar" ]; then
    log "base: mmdebstrap $SUITE ($BASE_PACKAGES)"
    d=$(mktemp -d)
    mmdebstrap --quiet --variant=minbase --include="$BASE_PACKAGES" \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
      "$SUITE" "$d/rootfs.tar" "deb $MIRROR $SUITE main" >&2
    c=$(B from scratch)
    B add --quiet "$c" "$d/rootfs.tar" /
    B config --env PATH=/usr/local/bin:/usr/bin:/bin --env LANG=C.UTF-8 --cmd '["python3"]' "$c"
    commit_and_export "$c" "$BASE_REF" "$tar"; rm -rf "$d"
  elif ! B inspect "$BASE_REF" >/dev/null 2>&1; then
    local id; id=$(B pull --quiet "oci-archive:$tar" | tail -1)  # the archive outlived buildah's store
    B tag "$id" "$BASE_REF"
  fi
  record base "$BASE_REF" "$tar"
}

# Debian's Prometheus (the binary of the host's prometheus package, which needs only libc) on the
# Debian base: what scrapes the kubelet in the cluster.
build_prometheus() {
  local bin=/usr/bin/prometheus k tar ref c
  [ -x "$bin" ] || { echo "build_images.sh: $bin is missing: Debian package prometheus" >&2; exit 3; }
  k=$( { sha256sum "$bin"; echo "$BASE_REF v1"; } | key)
  ref="localhost/foresight/prometheus:$k"; tar="$OUT/prometheus-$k.tar"
  if [ ! -s "$tar" ]; then
    log "prometheus: $bin on $BASE_REF"
    c=$(B from --pull=never "$BASE_REF")
    B copy --quiet "$c" "$bin" /usr/bin/prometheus
    B config --entrypoint '["/usr/bin/prometheus"]' --cmd '[]' --user 65534:65534 "$c"
    commit_and_export "$c" "$ref" "$tar"
  fi
  record prometheus "$ref" "$tar"
}

# Debian's redis-server package (apt inside the build, from the same mirror as the base) on the
# Debian base: the chart's store. Entrypoint redis-server, like the official image's command.
build_redis() {
  local k tar ref c
  k=$( { echo "$BASE_REF"; sed -n '/^build_redis()/,/^}/p' "$0"; } | key)
  ref="localhost/foresight/redis:$k"; tar="$OUT/redis-$k.tar"
  if [ ! -s "$tar" ]; then
    log "redis: Debian's redis-server on $BASE_REF"
    c=$(B from --pull=never "$BASE_REF")
    B run --isolation chroot --network host "$c" -- sh -c 'apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null \
      && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /etc/redis/redis.conf && mkdir -p /data && chmod 1777 /data' >&2
    B config --entrypoint '["/usr/bin/redis-server"]' --cmd '[]' --workingdir /data --user 999:999 "$c"
    commit_and_export "$c" "$ref" "$tar"
  fi
  record redis "$ref" "$tar"
}

# The sources the Dockerfile copies, hashed: an unchanged tree reuses the archive.
source_key() {
  (cd "$ROOT" && find Dockerfile pyproject.toml README.md requirements foresight core forecaster adapter warmpool replay kubeoperator \
     -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum; echo "$1") | key
}

build_target() {
  local name=$1 target=$2 k tar ref extra=()
  k=$(source_key "$BASE_REF $target")
  ref="localhost/foresight/$name:$k"; tar="$OUT/$name-$k.tar"
  [ "$target" = trainer ] && extra=(--build-arg TORCH_INDEX=https://pypi.org/simple)
  # The CA bundle the host's pip trusts (PIP_CERT or pip's config), for a TLS proxy to PyPI.
  local host_ca ca=()
  host_ca="${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}"
  [ -n "$host_ca" ] && [ -f "$host_ca" ] && ca=(-v "$host_ca:/pip-ca.crt:ro" --build-arg PIP_CA_MOUNT=/pip-ca.crt)
  if [ ! -s "$tar" ]; then
    log "$name: Dockerfile --target $target on $BASE_REF (pip from PyPI, cached in $CACHE/pip)"
    # --network host: pip reaches PyPI as the host does; no build network, bridge or NAT is made.
    B bud --quiet --pull=never --isolation chroot --network host --target "$target" \
      --build-arg "BASE=$BASE_REF" --build-arg PIP_CACHE_MOUNT=/pip-cache -v "$CACHE/pip:/pip-cache" "${ca[@]}" \
      "${extra[@]}" -t "$ref" -f "$ROOT/Dockerfile" "$ROOT" >&2
    export_image "$ref" "$tar"
    # Each change of the sources makes a new archive: keep the newest three, and the store's
    # copy of this one only.
    ls -t "$OUT/$name"-*.tar | tail -n +4 | while read -r old; do rm -f "$old" "$old.unpacked"; done
    B images --format '{{.Name}}:{{.Tag}}' | grep "^localhost/foresight/$name:" | grep -v ":$k\$" \
      | xargs -r -n1 buildah --root "$STORE/root" --runroot "$STORE/run" --storage-driver vfs rmi >/dev/null 2>&1 || true
  fi
  record "$name" "$ref" "$tar"
}

# One function, called on the script's last line: bash has parsed all of it before it runs, so
# editing the file during a build cannot break that build.
main() {
  local t0=$SECONDS
  build_pause
  build_busybox
  build_static metrics-server build_metrics_server.sh 1000:1000
  build_static coredns build_coredns.sh 0:0
  build_base
  build_prometheus
  build_redis
  build_target app app
  [ "$WANT_TRAINER" = 1 ] && build_target trainer trainer
  log "done in $((SECONDS - t0)) s; archives in $OUT"
  (IFS=,; echo "{${MANIFEST[*]}}")
}

main; exit
