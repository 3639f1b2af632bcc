"""The real helm binary (tests/cluster/build_helm.sh, cached outside the repository) and a
real control plane (tests/cluster) for the chart tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cluster.controlplane import ROOT, allow_cold_build
from tests.operator.conftest import start_control_plane

CHART = ROOT / "charts" / "foresight"
KUBE_VERSION = "1.35.4"  # the control plane the tests run (tests/cluster/build.sh)



def pytest_collection_modifyitems(config, items):
    allow_cold_build(items, Path(__file__).parent)


@pytest.fixture(scope="session")
def helm(request) -> Path:
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():  # a cold build prints its progress
        r = subprocess.run(["bash", str(ROOT / "tests/cluster/build_helm.sh")], stdout=subprocess.PIPE, text=True)
    assert r.returncode == 0, "tests/cluster/build_helm.sh failed (its log is above)"
    return Path(r.stdout.strip().splitlines()[-1])


def run_helm(helm: Path, *args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=300, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


@pytest.fixture(scope="package")
def control_plane(request, tmp_path_factory):
    cp = start_control_plane(request, tmp_path_factory)
    yield cp
    cp.stop()
