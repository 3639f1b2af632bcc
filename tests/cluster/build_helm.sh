#!/usr/bin/env bash
# Builds the real `helm` CLI from its Go module (helm.sh/helm/v3) at one pinned version and
# caches the binary outside the repository, keyed by version, like build.sh does for the
# control plane. A warm run only checks that the binary is there and prints its path.
#
# `go install module/cmd@version` builds exactly the released module graph (helm's own go.sum),
# with no wrapper module: helm's go.mod has no replace directives that would forbid it.
#
# Usage: tests/cluster/build_helm.sh     prints the helm binary's path on its last line
# Env:   FORESIGHT_CACHE_DIR (default ~/.cache/foresight), HELM_VERSION (default below)
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
source "$(dirname "$0")/cached_build.sh"
OUT="$CACHE/helm-$HELM_VERSION"
BIN="$OUT/bin/helm"

exit_if_built "$OUT" "$BIN" "$BIN"

log "building helm $HELM_VERSION (cold: downloads its modules into $(go env GOMODCACHE))"
start=$(date +%s)
# helm prints this version in `helm version`; the release build sets the same variables.
LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
tmp=$(mktemp -d "$OUT/gobin.XXXXXX")
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-mod=mod go install -trimpath -ldflags "$LDFLAGS" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
mv "$tmp/helm" "$BIN"
rmdir "$tmp"
log "built helm in $(( $(date +%s) - start )) s"
echo "$BIN"
