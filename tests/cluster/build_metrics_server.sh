#!/usr/bin/env bash
# Builds the real metrics-server from its Go module (sigs.k8s.io/metrics-server) at one pinned
# version, static, and caches the binary outside the repository keyed by version, like
# build_helm.sh. A warm run only prints the binary's path.
#
# Usage: tests/cluster/build_metrics_server.sh     prints the binary's path on its last line
# Env:   FORESIGHT_CACHE_DIR (default ~/.cache/foresight), METRICS_SERVER_VERSION (default below)
set -euo pipefail

VERSION="${METRICS_SERVER_VERSION:-v0.9.0}"
source "$(dirname "$0")/cached_build.sh"
OUT="$CACHE/metrics-server-$VERSION"
BIN="$OUT/bin/metrics-server"

exit_if_built "$OUT" "$BIN" "$BIN"

log "building metrics-server $VERSION (cold: downloads its modules into $(go env GOMODCACHE))"
start=$(date +%s)
LDFLAGS="-s -w -X sigs.k8s.io/metrics-server/pkg/version.gitVersion=$VERSION -X k8s.io/client-go/pkg/version.gitVersion=$VERSION"
tmp=$(mktemp -d "$OUT/gobin.XXXXXX")
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-mod=mod go install -trimpath -ldflags "$LDFLAGS" "sigs.k8s.io/metrics-server/cmd/metrics-server@$VERSION" >&2
mv "$tmp/metrics-server" "$BIN"
rmdir "$tmp"
log "built metrics-server in $(( $(date +%s) - start )) s"
echo "$BIN"
