"""A real node (tests/cluster/node.py) joined to its own control plane (tests/cluster/controlplane.py
with Services in 198.19.0.0/16 and the node-lifecycle controller on), for the tests of this folder.

The first run builds the Kubernetes binaries (with the kubelet and kube-proxy) and the images;
later runs reuse both from ~/.cache/foresight. Needs root (network namespaces, iptables, cgroups):
without it every test here fails with the reason (in CI) or is skipped with it (elsewhere).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.cluster.controlplane import allow_cold_build


def pytest_collection_modifyitems(config, items):
    allow_cold_build(items, Path(__file__).parent)


def _need_root() -> None:
    if os.geteuid() != 0:
        msg = "the real node needs root (network namespaces, iptables, cgroups, mounts)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@pytest.fixture(scope="module")
def node(tmp_path_factory, request):
    """A started control plane and node, for one test module (the next module may start its own:
    one node per machine at a time)."""
    from tests.cluster.node import start_cluster

    _need_root()
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else _null():  # a cold build prints progress
        cp, n = start_cluster(tmp_path_factory.mktemp("node"))
    sys.stderr.write(f"\n[node] control plane + node up; node start {n.started_seconds:.1f} s ({cp.dir})\n")
    try:
        yield n
    finally:
        errors = n.stop()
        cp.stop()
        assert not errors, f"node cleanup left: {errors}"
