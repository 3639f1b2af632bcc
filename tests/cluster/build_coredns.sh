#!/usr/bin/env bash
# Builds the real CoreDNS from its Go module (github.com/coredns/coredns) at one pinned
# version, static, and caches the binary outside the repository keyed by version, like
# build_helm.sh. A warm run only prints the binary's path.
#
# Usage: tests/cluster/build_coredns.sh     prints the binary's path on its last line
# Env:   FORESIGHT_CACHE_DIR (default ~/.cache/foresight), COREDNS_VERSION (default below)
set -euo pipefail

VERSION="${COREDNS_VERSION:-v1.15.0}"
source "$(dirname "$0")/cached_build.sh"
OUT="$CACHE/coredns-$VERSION"
BIN="$OUT/bin/coredns"

exit_if_built "$OUT" "$BIN" "$BIN"

log "building coredns $VERSION (cold: downloads its modules into $(go env GOMODCACHE))"
start=$(date +%s)
LDFLAGS="-s -w"
tmp=$(mktemp -d "$OUT/gobin.XXXXXX")
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-mod=mod go install -trimpath -ldflags "$LDFLAGS" "github.com/coredns/coredns@$VERSION" >&2
mv "$tmp/coredns" "$BIN"
rmdir "$tmp"
log "built coredns in $(( $(date +%s) - start )) s"
echo "$BIN"
