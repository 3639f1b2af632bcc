#!/usr/bin/env bash
# Builds the real Kubernetes control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl), etcd, and the node's kubelet and kube-proxy from their official Go modules at one pinned version,
# and caches the binaries outside the repository, keyed by version. A warm run only checks
# that the binaries are there and prints their directory.
#
# How: k8s.io/kubernetes cannot be required as-is, because its go.mod replaces every staging
# module (k8s.io/api, k8s.io/apiserver, ...) with a local ./staging path. A throw-away wrapper
# module requires k8s.io/kubernetes and replaces each staging module with its published
# v0.Y.Z instead, which is exactly how Kubernetes documents using it as a library. etcd comes
# from go.etcd.io/etcd/server/v3 at the version Kubernetes itself pins.
#
# Usage: tests/cluster/build.sh        prints the bin directory on its last line
# Env:   FORESIGHT_CACHE_DIR (default ~/.cache/foresight), K8S_VERSION (default below)
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.35.4}"
source "$(dirname "$0")/cached_build.sh"
OUT="$CACHE/kubernetes-$K8S_VERSION"
BIN="$OUT/bin"
TOOLS=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kubelet kube-proxy)

exit_if_built "$OUT" "$BIN" "${TOOLS[@]/#/$BIN/}"

WORK="$OUT/wrapper"
mkdir -p "$WORK"
cd "$WORK"

log "fetching k8s.io/kubernetes@$K8S_VERSION (go.mod only)"
KMOD=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -f "$KMOD" ] || { echo "build.sh: could not download k8s.io/kubernetes@$K8S_VERSION" >&2; exit 3; }
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
GO_LINE=$(grep -m1 '^go ' "$KMOD")
ETCD_VERSION=$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2; exit}' "$KMOD")

{
  echo "module foresight.local/k8sbuild"
  echo
  echo "$GO_LINE"
  echo
  echo "require ("
  echo "	k8s.io/kubernetes $K8S_VERSION"
  echo "	go.etcd.io/etcd/server/v3 $ETCD_VERSION"
  echo ")"
  echo
  echo "replace ("
  grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging/' "$KMOD" | awk -v v="$STAGING_VERSION" '{print "\t" $1 " => " $1 " " v}'
  echo ")"
} > go.mod
# Non-staging pins from Kubernetes' own go.mod (e.g. a fork or an exact version) kept as is.
grep -E '^\s+[^k].* => .* v' "$KMOD" | grep -v '=> \./' | sed 's/^\s*/replace /' >> go.mod || true


log "resolving modules (cold: downloads ~1.5 GB into $(go env GOMODCACHE))"
PKGS=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3
      k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
# Each package at the module version pinned above: a bare `go get pkg` would upgrade to latest.
GOFLAGS=-mod=mod go get "${PKGS[0]}@$K8S_VERSION" "${PKGS[1]}@$K8S_VERSION" "${PKGS[2]}@$K8S_VERSION" \
  "${PKGS[3]}@$K8S_VERSION" "${PKGS[4]}@$ETCD_VERSION" "${PKGS[5]}@$K8S_VERSION" "${PKGS[6]}@$K8S_VERSION" >&2
grep -q "k8s.io/kubernetes $K8S_VERSION" go.mod || { echo "build.sh: go get moved k8s.io/kubernetes off $K8S_VERSION" >&2; exit 4; }

MINOR="${K8S_VERSION#v1.}"; MINOR="${MINOR%%.*}"
LDFLAGS="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDFLAGS="$LDFLAGS -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$MINOR"
  LDFLAGS="$LDFLAGS -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

for p in "${PKGS[@]}"; do
  name=$(basename "$p"); [ "$name" = v3 ] && name=etcd
  [ -x "$BIN/$name" ] && continue
  log "building $name"
  start=$(date +%s)
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$LDFLAGS" -o "$BIN/$name.tmp" "$p"
  mv "$BIN/$name.tmp" "$BIN/$name"
  log "built $name in $(( $(date +%s) - start )) s"
done
echo "$K8S_VERSION" > "$OUT/VERSION"
echo "$BIN"
