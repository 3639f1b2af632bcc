#!/usr/bin/env bash
# Builds KEDA's operator and metrics API server from the Go module github.com/kedacore/keda/v2 at
# one pinned version and caches them, with the module's CRDs and the external scaler's proto,
# outside the repository, keyed by version, like build.sh does for the control plane.
#
# KEDA's go.mod has replace directives, so `go install module/cmd@version` refuses it: the module
# is downloaded, its source copied out of the module cache (made writable) and built in place.
# v2.20.2 is the newest release that declares a Go this machine has (v2.21 needs Go 1.27.4).
#
# Usage: tests/cluster/build_keda.sh   prints the output directory on its last line:
#        DIR/bin/keda-operator, DIR/bin/keda-adapter, DIR/config/crd/bases/*.yaml, DIR/externalscaler.proto
# Env:   FORESIGHT_CACHE_DIR (default ~/.cache/foresight), KEDA_VERSION (default below)
set -euo pipefail

KEDA_VERSION="${KEDA_VERSION:-v2.20.2}"
source "$(dirname "$0")/cached_build.sh"
OUT="$CACHE/keda-$KEDA_VERSION"

exit_if_built "$OUT" "$OUT" "$OUT/bin/keda-operator" "$OUT/bin/keda-adapter"

log "building KEDA $KEDA_VERSION (cold: downloads its module graph, ~2 GB, into $(go env GOMODCACHE))"
start=$(date +%s)
GOFLAGS=-mod=mod go mod download "github.com/kedacore/keda/v2@$KEDA_VERSION" >&2
src_mod="$(go env GOMODCACHE)/github.com/kedacore/keda/v2@$KEDA_VERSION"
src="$OUT/src"
rm -rf "$src"
cp -r "$src_mod" "$src"
chmod -R u+w "$src"
cd "$src"
GOFLAGS=-mod=mod go mod download >&2
LDFLAGS="-s -w -X github.com/kedacore/keda/v2/version.Version=$KEDA_VERSION"
for cmd in operator adapter; do
  log "go build ./cmd/$cmd"
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$LDFLAGS" -o "$OUT/bin/keda-$cmd.tmp" "./cmd/$cmd" >&2
  mv "$OUT/bin/keda-$cmd.tmp" "$OUT/bin/keda-$cmd"
done
mkdir -p "$OUT/config"
rm -rf "$OUT/config/crd"
cp -r "$src/config/crd" "$OUT/config/crd"
cp "$src/pkg/scalers/externalscaler/externalscaler.proto" "$OUT/externalscaler.proto"
cp "$src/LICENSE" "$OUT/LICENSE"
cd "$OUT"
rm -rf "$src"
log "built KEDA in $(( $(date +%s) - start )) s"
echo "$OUT"
