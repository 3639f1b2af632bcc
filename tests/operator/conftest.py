"""A real control plane for the operator tests (tests/cluster: the e2e suite's binaries and
ControlPlane class). Package-scoped, so it is stopped as soon as these tests are done instead
of living beside the e2e suite's own for the rest of the session."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.cluster.controlplane import allow_cold_build, ROOT, ControlPlane, build_binaries

CRDS = sorted((ROOT / "manifests" / "crds").glob("*.yaml"))


def start_control_plane(request, tmp_path_factory) -> ControlPlane:
    capman = request.config.pluginmanager.getplugin("capturemanager")
    # A cold build takes many minutes: its progress goes through pytest's capture.
    if capman:
        with capman.global_and_fixture_disabled():
            bin_dir = build_binaries()
    else:
        bin_dir = build_binaries()
    t0 = time.monotonic()
    cp = ControlPlane(bin_dir=bin_dir, dir=tmp_path_factory.mktemp("k8s-operator")).start()
    sys.stderr.write(f"\n[operator] control plane up in {time.monotonic() - t0:.0f} s ({cp.server})\n")
    return cp



def pytest_collection_modifyitems(config, items):
    allow_cold_build(items, Path(__file__).parent)


@pytest.fixture(scope="package")
def control_plane(request, tmp_path_factory):
    cp = start_control_plane(request, tmp_path_factory)
    yield cp
    cp.stop()


@pytest.fixture(scope="package")
def crds(control_plane):
    cp = control_plane
    cp.kubectl("apply", "--server-side", *[a for p in CRDS for a in ("-f", str(p))])
    cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
               "crd/predictiveautoscalers.foresight.dev", "crd/warmpools.foresight.dev")
    cp.ensure_namespace("shop")
    return cp
