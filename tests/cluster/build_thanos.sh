#!/usr/bin/env bash
# Builds `thanos` from its official Go module (github.com/thanos-io/thanos) at one pinned
# version and caches the binary outside the repository, keyed by version, like build.sh does
# for the control plane. A warm run only checks that the binary is there and prints its path.
#
# How: Thanos' go.mod carries replace directives (forks of grpc-go, gomemcache, ...), so
# `go install pkg@version` refuses it. A throw-away wrapper module requires Thanos and copies
# its replace directives (minus local paths), then builds cmd/thanos with the exact build tags
# of Thanos' release (.promu.yml: `netgo slicelabels`).
#
# The tags matter: without `slicelabels`, Prometheus' labels use the stringlabels layout while
# Thanos' zero-copy gRPC codec still assumes slices, and the sidecar and store gateway panic on
# the querier's first Info call ("makeslice: len out of range" in extgrpc
# nonPoolingCodec.Marshal). The version, the tags and the Go toolchain key the cache directory.
#
# Usage: tests/cluster/build_thanos.sh     prints the thanos binary's path on its last line
# Env:   FORESIGHT_CACHE_DIR (default ~/.cache/foresight), THANOS_VERSION (default below)
set -euo pipefail

THANOS_VERSION="${THANOS_VERSION:-v0.42.4}"
TAGS="netgo,slicelabels"
source "$(dirname "$0")/cached_build.sh"
OUT="$CACHE/thanos-$THANOS_VERSION-slicelabels"
BIN="$OUT/bin/thanos"

exit_if_built "$OUT" "$BIN" "$BIN"

WORK="$OUT/wrapper"
rm -rf "$WORK"; mkdir -p "$WORK"
cd "$WORK"
start=$(date +%s)

log "fetching github.com/thanos-io/thanos@$THANOS_VERSION (go.mod only)"
TMOD=$(GOFLAGS=-mod=mod go mod download -json "github.com/thanos-io/thanos@$THANOS_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -f "$TMOD" ] || { echo "build_thanos.sh: could not download github.com/thanos-io/thanos@$THANOS_VERSION" >&2; exit 3; }
{
  echo "module foresight.local/thanosbuild"
  echo
  grep -m1 '^go ' "$TMOD"
  echo
  echo "require github.com/thanos-io/thanos $THANOS_VERSION"
  echo
  # Thanos' own replace directives, block and single-line forms; local paths would not resolve.
  awk '/^replace \($/{on=1; next} on&&/^\)$/{on=0; next} on' "$TMOD" | grep -E '=>' | grep -v '=> \./' | sed 's/^\s*/replace /' || true
  grep -E '^replace [^(]' "$TMOD" | grep -v '=> \./' || true
} > go.mod

log "resolving modules (cold: downloads ~1.4 GB into $(go env GOMODCACHE))"
GOFLAGS=-mod=mod go get "github.com/thanos-io/thanos/cmd/thanos@$THANOS_VERSION" >&2
grep -q "github.com/thanos-io/thanos $THANOS_VERSION" go.mod || { echo "build_thanos.sh: go get moved thanos off $THANOS_VERSION" >&2; exit 4; }

log "building thanos $THANOS_VERSION (tags $TAGS)"
V=github.com/prometheus/common/version
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -tags "$TAGS" \
  -ldflags "-s -w -X $V.Version=${THANOS_VERSION#v} -X $V.Branch=HEAD -X $V.BuildUser=foresight -X $V.BuildDate=19700101-00:00:00" \
  -o "$BIN.tmp" github.com/thanos-io/thanos/cmd/thanos
mv "$BIN.tmp" "$BIN"
log "built thanos in $(( $(date +%s) - start )) s"
echo "$BIN"
