#!/usr/bin/env bash
# Builds gVisor's runsc and its containerd shim (containerd-shim-runsc-v1) from their Go module
# (gvisor.dev/gvisor, the Go-buildable "go" branch) at one pinned version, static, and caches
# them outside the repository keyed by version, like build_coredns.sh. A warm run only checks
# that the binaries are there and prints their directory.
#
# Static (CGO_ENABLED=0) because runsc re-executes /proc/self/exe after pivot_root into an empty
# root, where a dynamic binary's ELF interpreter is missing ("error executing umounter").
#
# Two changes for the node's containerd 1.6, made to a copy of the module's source:
#  - the shim's `start` sets its own oom_score_adj to -999 and fails without CAP_SYS_RESOURCE
#    (not in this machine's bounding set, see restrict_oom_score_adj in nodeconfig.py): the
#    error is ignored, silently, since containerd parses what `start` prints;
#  - the shim is built on containerd/v2, whose `start` prints {"version":2,"address":...} where
#    containerd 1.6 expects the bare address: containerd-shim-runsc-v1 is a small sh wrapper that
#    prints only the address for `start` and execs the real shim (.real) otherwise.
#
# Usage: tests/cluster/build_gvisor.sh     prints the bin directory on its last line
# Env:   FORESIGHT_CACHE_DIR (default ~/.cache/foresight), GVISOR_VERSION (default below)
set -euo pipefail

VERSION="${GVISOR_VERSION:-v0.0.0-20260905035102-160fafc42237}"
source "$(dirname "$0")/cached_build.sh"
OUT="$CACHE/gvisor-$VERSION"
BIN="$OUT/bin"
TOOLS=(runsc containerd-shim-runsc-v1.real containerd-shim-runsc-v1)

exit_if_built "$OUT" "$BIN" "${TOOLS[@]/#/$BIN/}"

cd "$OUT"                    # outside any module: `go mod download` of an exact version
log "fetching gvisor.dev/gvisor@$VERSION"
MODDIR=$(GOFLAGS=-mod=mod go mod download -json "gvisor.dev/gvisor@$VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -d "$MODDIR/shim" ] || { echo "build_gvisor.sh: could not download gvisor.dev/gvisor@$VERSION" >&2; exit 3; }

SRC="$OUT/src"
rm -rf "$SRC"
cp -r "$MODDIR" "$SRC"
chmod -R u+w "$SRC"          # the module cache is read-only
MANAGER="$SRC/pkg/shim/v1/manager.go"
OLD='return shim.BootstrapParams{}, fmt.Errorf("failed to set OOM Score on shim: %w", err)'
NEW='_ = err // foresight: no CAP_SYS_RESOURCE here; start must print the bootstrap JSON alone'
[ "$(grep -cF "$OLD" "$MANAGER")" = 1 ] || {
  echo "build_gvisor.sh: $MANAGER at $VERSION no longer has the SetOOMScore error return to patch" >&2; exit 4; }
sed -i "s|$(printf '%s' "$OLD" | sed 's/[][\.*^$|]/\\&/g')|$NEW|" "$MANAGER"
grep -qF "$NEW" "$MANAGER" || { echo "build_gvisor.sh: patching $MANAGER failed" >&2; exit 4; }

log "building runsc and the shim (cold: downloads their modules into $(go env GOMODCACHE), about 2 min)"
start=$(date +%s)
tmp=$(mktemp -d "$OUT/gobin.XXXXXX")
# One `go build` for both: they share most packages. -mod=mod: the module's own go.mod/go.sum.
(cd "$SRC" && CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -ldflags "-s -w" -o "$tmp/" ./runsc ./shim) >&2
mv "$tmp/runsc" "$BIN/runsc"
mv "$tmp/shim" "$BIN/containerd-shim-runsc-v1.real"
rmdir "$tmp"
log "built runsc and the shim in $(( $(date +%s) - start )) s"

cat > "$BIN/containerd-shim-runsc-v1.tmp" <<'EOF'
#!/bin/sh
# containerd 1.6 reads a bare ttrpc address from `start`; this containerd/v2 shim prints
# {"version":2,"address":"unix://...","protocol":"ttrpc"}. Written by tests/cluster/build_gvisor.sh.
REAL="$(dirname "$0")/containerd-shim-runsc-v1.real"
last=
for a in "$@"; do last=$a; done
[ "$last" = start ] || exec "$REAL" "$@"
out=$("$REAL" "$@") || { rc=$?; printf '%s' "$out"; exit $rc; }
addr=$(printf '%s' "$out" | sed -n 's/.*"address": *"\([^"]*\)".*/\1/p')
printf '%s' "${addr:-$out}"
EOF
chmod 755 "$BIN/containerd-shim-runsc-v1.tmp"
mv "$BIN/containerd-shim-runsc-v1.tmp" "$BIN/containerd-shim-runsc-v1"
rm -rf "$SRC"                # only the binaries are kept
echo "$VERSION" > "$OUT/VERSION"
echo "$BIN"
