"""The real helm binary (tests/cluster/build_helm.sh, cached outside the repository) and a
real control plane (tests/cluster) for the chart tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cluster.controlplane import ROOT
from tests.operator.conftest import start_control_plane

CHART = ROOT / "charts" / "foresight"
KUBE_VERSION = "1.35.4"  # the control plane the tests run (tests/cluster/build.sh)


# pytest-timeout counts fixture setup: the first test here may build the control plane (and
# helm) cold on a fresh machine, 15-35 min on 2 cores (tests/cluster/build.sh).
COLD_BUILD_TIMEOUT_SECONDS = 3000


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.timeout(COLD_BUILD_TIMEOUT_SECONDS))


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
