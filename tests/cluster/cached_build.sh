# Sourced by the tests/cluster/build*.sh scripts that build Go binaries into the shared cache:
# sets CACHE (FORESIGHT_CACHE_DIR, default ~/.cache/foresight) and defines log and exit_if_built.
CACHE="${FORESIGHT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/foresight}"
SCRIPT="$(basename "$0")"
log() { echo "[$SCRIPT $(date +%H:%M:%S)] $*" >&2; }
_all_built() { local f; for f in "$@"; do [ -x "$f" ] || return 1; done; }

# exit_if_built OUT PRINT FILE...: prints PRINT and exits 0 when every FILE is executable.
# Otherwise it needs Go, takes OUT/.lock on fd 9 (two test sessions never build at once; held
# until the script exits) and looks again, since the session it waited for may have built them.
exit_if_built() {
  local out=$1 print=$2
  shift 2
  if _all_built "$@"; then echo "$print"; exit 0; fi
  command -v go >/dev/null || { echo "$SCRIPT: the Go toolchain is needed (go not on PATH)" >&2; exit 2; }
  mkdir -p "$out/bin"
  exec 9>"$out/.lock"
  flock 9
  if _all_built "$@"; then echo "$print"; exit 0; fi
}
