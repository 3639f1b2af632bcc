#!/usr/bin/env bash
# Runs the given tests/cluster build scripts one after the other (tests/conftest.py starts this
# niced in the background with the scripts the collected tests need, in the order the run meets
# them). Each takes seconds when its output is cached; a test that needs one while it builds
# waits on the script's lock, then finds it built. A failed build is left to the test that needs
# it: it runs the script again and reports the error.
set -u
cd "$(dirname "$0")"
for s in "$@"; do
  if [ "$s" = build_images.sh ] || [ "$s" = build_gvisor.sh ]; then [ "$(id -u)" = 0 ] || continue; fi  # the node's: root only
  start=$(date +%s)
  if bash "$s" >/dev/null; then echo "prebuild: $s done in $(( $(date +%s) - start )) s"
  else echo "prebuild: $s failed after $(( $(date +%s) - start )) s (the test that needs it runs it again)"; fi
done
