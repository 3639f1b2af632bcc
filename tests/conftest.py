"""Shared fixtures: real Redis and real Prometheus on loopback (see tests/stack.py)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from tests import stack

TESTS = Path(__file__).resolve().parent

# httpx logs every request at INFO. Session fixtures keep serving after the test that started
# them (the kube-controller-manager polls the metrics-server stand-in), and their log lines then
# hit pytest's closed capture streams: each failed write prints a traceback from that thread,
# and on CPython 3.11.7 formatting a traceback parses source (ast) while the main thread may be
# parsing too, which that version can fail with "AST constructor recursion depth mismatch".
logging.getLogger("httpx").setLevel(logging.WARNING)


@pytest.fixture(autouse=True)
def _cli_logging_ends_with_the_test():
    """A test that runs ``foresight.cli.main`` leaves the CLI's root handler writing to that
    test's captured stderr, which pytest then closes: every later warning through it prints a
    "Logging error" traceback instead. A real process's stderr stays open, so the handler goes
    with the test that installed it."""
    from core.logs import _HANDLER_NAME

    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h.get_name() == _HANDLER_NAME and h not in before:  # pytest's own handlers stay
            root.removeHandler(h)
    root.setLevel(level)


# Tests on the Go-built control plane, node, helm or Thanos, and the tests/cluster/build*.sh
# scripts each group needs, in the order a full run meets them. A cold machine spends most of an
# hour building those; the builds start in the background as soon as such a test is collected
# (niced: they take the cores the other suites leave idle), and these tests run last, so the
# other suites run meanwhile instead of waiting behind the first build.
BUILDS = {"adapter/test_authz_apiserver.py": ("build.sh",), "chart": ("build.sh", "build_helm.sh"),
          "e2e": ("build.sh",), "keda/test_keda_e2e.py": ("build.sh", "build_keda.sh"),
          "node": ("build.sh", "build_helm.sh", "build_images.sh", "build_gvisor.sh"),
          "operator": ("build.sh",), "tenancy/test_hostile_tenant.py": ("build.sh",), "thanos": ("build_thanos.sh",),
          "warmpool/test_claim_authz_apiserver.py": ("build.sh",)}
_prebuild = None


def _builds(item) -> tuple[str, ...]:
    rel = Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix()
    return BUILDS.get(rel) or BUILDS.get(rel.split("/", 1)[0], ())


@pytest.hookimpl(trylast=True)  # after -k/--deselect have removed what will not run
def pytest_collection_modifyitems(session, config, items):
    global _prebuild
    items.sort(key=lambda i: bool(_builds(i)))  # stable: each group keeps its order
    scripts = list(dict.fromkeys(s for i in items for s in _builds(i)))
    if _prebuild is None and scripts:
        import subprocess

        log = Path(tempfile.gettempdir()) / f"foresight-prebuild-{os.getpid()}.log"
        _prebuild = subprocess.Popen(["nice", "-n", "19", "bash", str(TESTS / "cluster" / "prebuild.sh"), *scripts],
                                     stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
        sys.stderr.write(f"\n{', '.join(scripts)} (seconds when cached) started in the background, log {log}; "
                         "the tests that need them run last\n")


def pytest_sessionfinish(session, exitstatus):
    if _prebuild is not None and _prebuild.poll() is None:  # a run that ended before needing them
        os.killpg(_prebuild.pid, signal.SIGTERM)
        _prebuild.wait(30)


def _require(binary: str) -> None:
    if not stack.have(binary):
        msg = f"{binary} is not installed; run `make test` (it installs Debian packages as root)"
        if os.environ.get("CI"):
            pytest.fail(msg)  # in CI a missing real part is a failure, not a skip
        pytest.skip(msg)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    _require("redis-server")
    srv = stack.start_redis(tmp_path_factory.mktemp("redis"))
    yield srv
    srv.stop()


@pytest.fixture
def redis_url(redis_server):
    """A clean database for each test."""
    import redis

    r = redis.Redis.from_url(redis_server.url)
    r.flushall()
    r.close()
    return redis_server.url


@pytest.fixture(scope="session")
def trace_slice():
    return stack.load_trace_slice()


@pytest.fixture(scope="session")
def prometheus_factory(tmp_path_factory):
    """Call with {metric: [(labels, [(ts, value), ...]), ...]} to get a started, backfilled
    Prometheus. Every server is stopped at the end of the session."""
    _require("prometheus")
    _require("promtool")
    started = []

    def make(families, metric_type="gauge"):
        srv = stack.start_prometheus(families, tmp_path_factory.mktemp("prom"), metric_type)
        started.append(srv)
        return srv

    yield make
    for s in started:
        s.stop()
