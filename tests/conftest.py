"""Shared fixtures: real Redis and real Prometheus on loopback (see tests/stack.py)."""

from __future__ import annotations

import logging
import os

import pytest

from tests import stack

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
    from forecaster.logs import _HANDLER_NAME

    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h.get_name() == _HANDLER_NAME and h not in before:  # pytest's own handlers stay
            root.removeHandler(h)
    root.setLevel(level)


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
