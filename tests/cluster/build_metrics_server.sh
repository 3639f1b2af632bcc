#!/usr/bin/env bash
# Builds the real metrics-server from its Go module (sigs.k8s.io/metrics-server) at one pinned
# version, static, and caches the binary outside the repository keyed by version, like
# build_helm.sh. A warm run only prints the binary's path.
#
# Usage: tests/cluster/build_metrics_server.sh     prints the binary's path on its last line
# Env:   FORESIGHT_CACHE_DIR (default ~/.cache/foresight), METRICS_SERVER_VERSION (default below)
set -euo pipefail

VERSION="${METRICS_SERVER_VERSION:-v0.9.0}"
CACHE="${FORESIGHT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/foresight}"
OUT="$CACHE/metrics-server-$VERSION"
BIN="$OUT/bin/metrics-server"

if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
command -v go >/dev/null || { echo "build_metrics_server.sh: the Go toolchain is needed (go not on PATH)" >&2; exit 2; }
mkdir -p "$OUT/bin"
exec 9>"$OUT/.lock"
flock 9
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi

log() { echo "[build_metrics_server.sh $(date +%H:%M:%S)] $*" >&2; }
log "building metrics-server $VERSION (cold: downloads its modules into $(go env GOMODCACHE))"
start=$(date +%s)
LDFLAGS="-s -w -X sigs.k8s.io/metrics-server/pkg/version.gitVersion=$VERSION -X k8s.io/client-go/pkg/version.gitVersion=$VERSION"
tmp=$(mktemp -d "$OUT/gobin.XXXXXX")
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-mod=mod go install -trimpath -ldflags "$LDFLAGS" "sigs.k8s.io/metrics-server/cmd/metrics-server@$VERSION" >&2
mv "$tmp/metrics-server" "$BIN"
rmdir "$tmp"
log "built metrics-server in $(( $(date +%s) - start )) s"
echo "$BIN"
