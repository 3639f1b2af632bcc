"""Shared bits of the adapter tests: sample forecasts and a `foresight serve` subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from core.store import make_forecast

ROOT = Path(__file__).resolve().parents[2]
EXT = "/apis/external.metrics.k8s.io/v1beta1"


def sample_forecast(ns="shop", name="checkout", *, now=None, p90=(3.0, 4.0, 5.0), observed=2.0, ready_pods=4,
                    request=0.5, labels=None, kind="Deployment", age=0.0, status="ok", reason="", step=60.0):
    now = time.time() if now is None else now
    return make_forecast(
        f"{ns}/{name}",
        origin=now - age,
        step_seconds=step,
        mean=[v * 0.8 for v in p90],
        quantiles={"p50": [v * 0.8 for v in p90], "p90": list(p90)},
        model="ets",
        generated_at=now - age,
        status=status,
        reason=reason,
        backtest_error=0.12,
        observed=tuple((now - age - 60 * (k + 1), observed * 0.9) for k in reversed(range(5))) + ((now - age, observed),),
        meta={
            "namespace": ns,
            "workload": name,
            "kind": kind,
            "labels": dict(labels or {"tier": "web"}),
            "ready_pods": ready_pods,
            "cpu_request_cores": request,
        },
    )


class ServeProcess:
    """`foresight serve` as a real process; stopped by its pid."""

    def __init__(self, args: list[str], port: int, log_path: Path) -> None:
        self.port = port
        self.log_path = log_path
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "foresight", "serve", "--host", "127.0.0.1", "--port", str(port), *args],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )

    # a deadline, not a speed check: a loaded CI machine starts a serve process slowly
    def wait_ready(self, scheme="https", timeout=120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"foresight serve exited: {self.log_path.read_text()[-2000:]}")
            try:
                r = httpx.get(f"{scheme}://127.0.0.1:{self.port}/healthz", verify=False, timeout=1.0)
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"foresight serve did not start: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class SteppedClock:
    """The cache's clock (adapter/state.py judges TTL and max_stale on it), moved only by the test."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def wait_for(condition, what: str, seconds: float = 20.0, poll: float = 0.05):
    """Poll ``condition`` until it is truthy (returns it) or fail after ``seconds`` naming ``what``:
    a condition, not a duration, so a loaded machine only makes the test slower."""
    deadline = time.monotonic() + seconds
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {seconds} s for {what}")
        time.sleep(poll)
