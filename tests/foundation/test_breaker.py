"""The trainer's fleet-wide circuit breaker: a stalled Prometheus or a dead Redis costs about
one timeout per cool-down and one log line per outage, not one of each per workload."""

from __future__ import annotations

import http.server
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from core.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker, CircuitOpen
from core.store import MemoryForecastStore, RedisForecastStore, StoreCircuitOpen, StoreUnavailable, make_forecast
from forecaster.config import parse_config
from forecaster.schedule import InlineFits, TrainScheduler, trainer_from_config
from forecaster.sources.base import SourceUnavailable
from forecaster.sources.prometheus import PrometheusCircuitOpen, PrometheusSource
from tests import stack


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _outage_lines(caplog, name: str) -> tuple[list[str], list[str]]:
    msgs = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    return ([m for m in msgs if m.startswith(name) and "unavailable (" in m],
            [m for m in msgs if m.startswith(name) and "reachable again" in m])


# --- the state machine ---------------------------------------------------------------------

def test_the_breaker_opens_after_the_threshold_fails_fast_then_one_probe_closes_it(caplog):
    clock = _Clock()
    b = CircuitBreaker("dep", threshold=3, cooldown_seconds=30, clock=clock)
    caplog.set_level(logging.WARNING)
    for _ in range(2):
        assert b.allow()
        b.failed("Timeout")
    assert b.state == CLOSED
    assert b.allow()
    b.failed("Timeout")
    assert b.state == OPEN
    assert [b.allow() for _ in range(5)] == [False] * 5 and b.fast_failures == 5
    clock.t += 29.9
    assert not b.allow()
    clock.t += 0.1
    assert b.allow() and b.state == HALF_OPEN  # the one probe
    assert not b.allow()  # everyone else still fails fast while it is out
    b.failed("Timeout")
    assert b.state == OPEN and not b.allow()  # a failed probe: a new cool-down
    clock.t += 30
    assert b.allow()
    b.succeeded()
    assert b.state == CLOSED and b.allow()
    opened, closed = _outage_lines(caplog, "dep")
    assert len(opened) == 1 and "3 consecutive failures, last: Timeout" in opened[0]
    assert len(closed) == 1 and "after 60 s" in closed[0]


def test_a_success_between_failures_resets_the_count():
    b = CircuitBreaker("dep", threshold=2, clock=_Clock())
    b.failed("x")
    b.succeeded()
    b.failed("x")
    assert b.state == CLOSED


def test_a_probe_that_never_reports_is_replaced_after_another_cool_down():
    clock = _Clock()
    b = CircuitBreaker("dep", threshold=1, cooldown_seconds=10, clock=clock)
    b.failed("x")
    clock.t += 10
    assert b.allow()  # the probe; its caller dies without reporting
    clock.t += 9
    assert not b.allow()
    clock.t += 1
    assert b.allow()


@pytest.mark.parametrize("kw, field", [({"threshold": 0}, "threshold"), ({"cooldown_seconds": 0}, "cooldown_seconds")])
def test_a_breaker_that_could_never_work_is_refused_naming_the_setting(kw, field):
    with pytest.raises(ValueError, match=field):
        CircuitBreaker("dep", **kw)


# --- a real stalled Prometheus: accepts connections, never answers --------------------------

class _StalledPrometheus:
    """An HTTP server on 127.0.0.1 that accepts every connection and holds it unanswered until
    ``answer()``; from then on it answers every query with an empty result."""

    def __init__(self) -> None:
        self.accepted = 0
        self.released = threading.Event()
        self.answering = False
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # the stdlib's name
                outer.accepted += 1
                if not outer.answering:
                    outer.released.wait()  # never answer while stalled
                    return
                body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self) -> None:
        self.answering = True
        self.released.set()

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stalled():
    srv = _StalledPrometheus()
    yield srv
    srv.close()


def test_forty_pulls_over_four_threads_cost_a_few_timeouts_against_a_stalled_prometheus(stalled, caplog):
    caplog.set_level(logging.DEBUG, logger="forecaster")
    clock = _Clock()
    breaker = CircuitBreaker("Prometheus", threshold=3, cooldown_seconds=30, clock=clock)
    src = PrometheusSource(stalled.url, timeout_seconds=0.3, retries=3, backoff_seconds=0.01, breaker=breaker)

    def pull(i):
        try:
            src.fetch(f"up{{i='{i}'}}", 0, 600, 60)
        except SourceUnavailable as exc:
            return exc
        return None

    with ThreadPoolExecutor(4) as pool:
        errors = list(pool.map(pull, range(40)))
    assert all(isinstance(e, SourceUnavailable) for e in errors)
    assert sum(isinstance(e, PrometheusCircuitOpen) for e in errors) >= 40 - 4
    # three failed tries open it; at most the other three threads' tries were in flight then
    # (without the breaker: 40 pulls x 4 tries = 160 timeouts)
    assert stalled.accepted <= 3 + 3
    opened, closed = _outage_lines(caplog, "Prometheus")
    assert len(opened) == 1 and closed == []
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1  # no per-try, per-workload lines

    # after the cool-down exactly one probe goes out; it stalls too: open again, one more timeout
    before = stalled.accepted
    clock.t += 30
    with ThreadPoolExecutor(4) as pool:
        errors = list(pool.map(pull, range(40)))
    assert all(isinstance(e, PrometheusCircuitOpen) for e in errors)
    assert stalled.accepted == before + 1

    # Prometheus answers again: the next probe closes the circuit, one line says so
    stalled.answer()
    clock.t += 30
    assert pull(0) is None and breaker.state == CLOSED
    assert all(e is None for e in map(pull, range(5)))
    opened, closed = _outage_lines(caplog, "Prometheus")
    assert len(opened) == 1 and len(closed) == 1


def test_a_bad_query_never_opens_the_fleet_wide_breaker():
    class Rejecting(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode()
            self.send_response(400)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Rejecting)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        src = PrometheusSource(f"http://127.0.0.1:{srv.server_address[1]}", retries=0,
                               breaker=CircuitBreaker("p", threshold=1, clock=_Clock()))
        for _ in range(5):
            with pytest.raises(Exception, match="parse error"):
                src.fetch("up{", 0, 60, 60)
        assert src.breaker.state == CLOSED
    finally:
        srv.shutdown()
        srv.server_close()


def _fleet(url: str, n: int):
    return parse_config({
        "source": {"url": url, "step_seconds": 60, "history_days": 1},
        "training": {"horizon_steps": 6, "models": ["persistence"]},
        "workloads": [
            {"namespace": "shop", "name": f"w{i}", "demand_query": f'cpu{{workload="w{i}"}}',
             "capacity": {"cpu_request_cores": 0.5, "ready_pods": 2}}
            for i in range(n)
        ],
    })


def test_one_trainer_refresh_of_a_fleet_against_a_stalled_prometheus_logs_one_line_and_keeps_the_last_forecasts(
        stalled, caplog):
    caplog.set_level(logging.WARNING)
    config = _fleet(stalled.url, 60)
    store = MemoryForecastStore()
    last = make_forecast("shop/w0", origin=0, step_seconds=60, mean=[1.0] * 6, model="naive")
    gen = store.publish(last)
    src = PrometheusSource(stalled.url, timeout_seconds=0.3, retries=3, backoff_seconds=0.01,
                           breaker=CircuitBreaker("Prometheus", threshold=3, clock=_Clock()))
    sched = TrainScheduler(config, src, trainer_from_config(config, store), fits=InlineFits(budget_seconds=0.0), pull_threads=4)
    report = sched.step(time.time())
    assert report["published"] == 0 and len(report["results"]) == 60
    assert stalled.accepted <= 3 + 3  # not 60 workloads x pulls x 4 tries
    assert store.latest("shop/w0").generation == gen  # the last forecast is still what is served
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "unavailable (" in warnings[0], warnings


# --- a real Redis, killed and restarted ------------------------------------------------------

def test_publishes_to_a_killed_redis_fail_fast_with_one_line_and_resume_after_its_restart(tmp_path, caplog):
    if not stack.have("redis-server"):
        pytest.skip("redis-server not installed; run `make deps`")
    caplog.set_level(logging.WARNING)
    srv = stack.start_redis(tmp_path)
    clock = _Clock()
    store = RedisForecastStore(srv.url, socket_timeout=1.0,
                               publish_breaker=CircuitBreaker("Redis", threshold=3, cooldown_seconds=10, clock=clock))
    fc = [make_forecast(f"shop/w{i}", origin=0, step_seconds=60, mean=[1.0], model="naive") for i in range(30)]
    try:
        assert store.publish(fc[0]) == 1
        srv.stop()
        errors = []
        for f in fc:
            with pytest.raises(StoreUnavailable) as info:
                store.publish(f)
            errors.append(info.value)
        assert sum(isinstance(e, CircuitOpen) and isinstance(e, StoreCircuitOpen) for e in errors) >= 30 - 2
        opened, closed = _outage_lines(caplog, "Redis")
        assert len(opened) == 1 and closed == []
        srv.start()
        # a pooled connection may still be the dead one: each cool-down gives one probe
        for _ in range(5):
            clock.t += 10
            try:
                gen = store.publish(fc[0])
                break
            except StoreUnavailable:
                continue
        else:
            pytest.fail("publishing never resumed after Redis came back")
        assert gen == 1 and store.publish_breaker.state == CLOSED  # a fresh Redis (no persistence)
        assert all(store.publish(f) >= 1 for f in fc[1:])
        opened, closed = _outage_lines(caplog, "Redis")
        assert len(opened) == 1 and len(closed) == 1
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 2
    finally:
        store.close()
        srv.stop()
