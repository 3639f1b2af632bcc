"""A trainer rollout: SIGTERM stops ``foresight train`` at once (also as a container's PID 1),
it leaves its history windows beside the checkpoints, and the next trainer's first refresh
pulls only the new samples and publishes what an unbroken trainer would have published.
Windows that do not check out (tampered, another source, a changed query, too old) are
pulled in full, never used."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from core.store import MemoryForecastStore
from forecaster.config import parse_config
from forecaster.handover import RINGS_FILE, Stop
from forecaster.schedule import InlineFits, run_schedule

STEP = 300.0
T0 = 1_790_000_000.0 - 1_790_000_000.0 % STEP
ROOT = Path(__file__).resolve().parents[2]


def values(ts: np.ndarray, k: int) -> np.ndarray:
    return 2.0 + np.sin(2 * np.pi * ts / 86400.0 + k) + 0.1 * np.cos(ts / 7000.0 + k)


class Source:
    """Deterministic series on the 300 s grid; counts the points asked per query, and can call
    ``hook`` on a fetch (pulls run in the caller's thread with pull_threads=1)."""

    def __init__(self) -> None:
        self.points: dict[str, int] = {}
        self.hook = None

    def fetch(self, query, start, end, step_seconds, series_id=None):
        if self.hook is not None:
            self.hook(query)
        ts = np.arange(np.ceil(start / STEP) * STEP, end + 1, STEP)
        self.points[query] = self.points.get(query, 0) + len(ts)
        return pd.DataFrame({"series_id": series_id or query, "timestamp": pd.to_datetime(ts, unit="s", utc=True),
                             "value": values(ts, int(query[1:]))})


def config(n: int = 3, url: str = "csv://unused.csv", queries: dict | None = None):
    q = queries or {}
    return parse_config({
        "source": {"url": url, "step_seconds": STEP, "history_days": 3},
        "training": {"models": ["moving_average"], "retrain_interval_seconds": 86400, "refresh_interval_seconds": 60},
        "workloads": [{"namespace": "ns", "name": f"w{i}", "demand_query": q.get(i, f"q{i}"),
                       "capacity": {"cpu_request_cores": 1.0, "ready_pods": 2}} for i in range(n)],
    })


def run(cfg, source, store, start: float, ckpt, iterations: int = 10, sigterm_after: int | None = None) -> list[dict]:
    """run_schedule on a clock that its sleeps advance; a real SIGTERM to this process after
    ``sigterm_after`` steps (delivered to the handler run_schedule installs)."""
    t = [start]
    steps: list[dict] = []

    def sleep(s):
        t[0] += s
        if sigterm_after is not None and len(steps) == sigterm_after:
            os.kill(os.getpid(), signal.SIGTERM)

    run_schedule(cfg, source, store, clock=lambda: t[0], sleep=sleep, iterations=iterations, on_step=steps.append,
                 fits=InlineFits(budget_seconds=1e9, clock=lambda: t[0]), pull_threads=1, checkpoint_dir=ckpt)
    return steps


def test_sigterm_stops_the_schedule_and_the_next_trainer_pulls_only_new_samples_and_publishes_the_same(tmp_path):
    cfg, src = config(), Source()
    before = signal.getsignal(signal.SIGTERM)  # not always SIG_DFL: a library another test imported may have set one
    steps = run(cfg, src, MemoryForecastStore(), T0, tmp_path, sigterm_after=2)
    assert len(steps) == 2  # not 10: the SIGTERM after the second step ended it
    assert (tmp_path / RINGS_FILE).exists()
    assert signal.getsignal(signal.SIGTERM) is before  # the handler was only there while it ran

    # the successor 5 minutes later: checkpoints and windows from the directory
    later = T0 + 2 * 60.0 + 300.0
    src.points.clear()
    store = MemoryForecastStore()
    steps = run(cfg, src, store, later, tmp_path, iterations=1)
    assert steps[0]["pulls"] == {"full": 0, "incremental": 3}
    assert all(p <= 3 for p in src.points.values()), src.points  # the overlap and the new point, not 3 days
    assert steps[0]["queued"] == []  # fitted states restored: nothing to refit
    assert not (tmp_path / RINGS_FILE).exists()  # used once

    # a successor that pulls in full (no windows left: after a crash) publishes the same forecasts
    again = MemoryForecastStore()
    full = run(cfg, src, again, later, tmp_path, iterations=1)
    assert full[0]["pulls"] == {"full": 3, "incremental": 0}
    for w in cfg.workloads:
        a, b = store.latest(w.series_id), again.latest(w.series_id)
        assert "not trained yet" not in a.reason and a.model == "moving_average"
        assert a.origin == b.origin == later - later % STEP
        np.testing.assert_array_equal(a.mean, b.mean)
        assert a.quantiles == b.quantiles and a.observed == b.observed and a.policy == b.policy


def test_a_sigterm_during_a_step_stops_between_two_workloads(tmp_path, caplog):
    cfg, src = config(n=6), Source()
    published = []
    store = MemoryForecastStore()
    publish = store.publish
    store.publish = lambda fc: (published.append(fc.series_id), publish(fc))[1]

    def hook(query):  # during the third pull of the second step (the first step's fits pull too)
        if len(published) == 6 + 2:
            os.kill(os.getpid(), signal.SIGTERM)

    src.hook = hook
    with caplog.at_level(logging.INFO, logger="forecaster.schedule"):
        steps = run(cfg, src, store, T0, tmp_path)
    assert len(steps) == 1 and len(published) == 6 + 2  # that pull's workload is not refreshed any more
    assert "stopped after refreshing 2 workloads of 6" in caplog.text
    assert "saved the history windows of 6 workloads" in caplog.text


def _saved(tmp_path, cfg=None) -> Path:
    run(cfg or config(), Source(), MemoryForecastStore(), T0, tmp_path, sigterm_after=1)
    return tmp_path / RINGS_FILE


def _first_pulls(tmp_path, cfg, start: float = T0 + 300.0) -> dict:
    return run(cfg, Source(), MemoryForecastStore(), start, tmp_path, iterations=1)[0]["pulls"]


@pytest.mark.parametrize("offset", [12, -40, -1])
def test_a_tampered_or_truncated_window_file_is_not_used(tmp_path, offset, caplog):
    f = _saved(tmp_path)
    data = bytearray(f.read_bytes())
    if offset == -1:
        data = data[:-1000]  # truncated
    else:
        data[offset] ^= 0x01  # a bit flipped in the header or in the values
    f.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="forecaster.schedule"):
        assert _first_pulls(tmp_path, config()) == {"full": 3, "incremental": 0}
    assert "history windows in" in caplog.text and "ignored" in caplog.text
    assert not f.exists()


def test_a_window_file_written_with_another_key_is_not_used(tmp_path):
    f = _saved(tmp_path)
    (tmp_path / ".hmac-key").write_bytes(b"k" * 32)  # as if another writer's key (the checkpoints fail too)
    assert _first_pulls(tmp_path, config())["incremental"] == 0
    assert not f.exists()


def test_only_workloads_with_the_same_query_from_the_same_source_take_their_window(tmp_path):
    _saved(tmp_path)
    # workload 1's query changed: its saved window is of another series
    assert _first_pulls(tmp_path, config(queries={1: "q7"})) == {"full": 1, "incremental": 2}
    _saved(tmp_path)
    assert _first_pulls(tmp_path, config(url="csv://other.csv")) == {"full": 3, "incremental": 0}
    _saved(tmp_path)
    assert _first_pulls(tmp_path, config(n=2)) == {"full": 0, "incremental": 2}  # one workload left


def test_a_save_cut_short_leaves_no_temporary_file_behind_after_the_next_start(tmp_path):
    _saved(tmp_path)
    (tmp_path / ".tmp-rings-x1").write_bytes(b"\0" * 4096)  # SIGKILL during a save
    assert _first_pulls(tmp_path, config()) == {"full": 0, "incremental": 3}
    assert not list(tmp_path.glob(".tmp-rings-*"))


def test_a_window_older_than_the_gap_limit_is_pulled_in_full(tmp_path):
    _saved(tmp_path)
    assert _first_pulls(tmp_path, config(), start=T0 + 2 * 3600.0) == {"full": 3, "incremental": 0}


def test_without_a_sigterm_no_window_file_is_written(tmp_path):
    run(config(), Source(), MemoryForecastStore(), T0, tmp_path, iterations=2)
    assert not (tmp_path / RINGS_FILE).exists() and list(tmp_path.glob("*.ckpt"))


def test_a_pause_ends_early_once_a_stop_is_requested():
    t = [0.0]
    stop = Stop(sleep=lambda s: t.__setitem__(0, t[0] + s), clock=lambda: t[0])
    stop.pause(2.0)
    assert t[0] == pytest.approx(2.0)
    calls = []
    stop = Stop(sleep=lambda s: (calls.append(s), stop.request()), clock=lambda: t[0])
    stop.pause(60.0)
    assert len(calls) == 1 and calls[0] <= 0.25


# --- the command, as a container runs it ---------------------------------------------------------


def _train_cmd(tmp_path: Path) -> list[str]:
    now = time.time()
    ts = np.arange(now - 4 * 86400.0 - now % STEP, now + 3600.0, STEP)
    pd.DataFrame({"series_id": "vm", "timestamp": pd.to_datetime(ts, unit="s", utc=True),
                  "value": values(ts, 0)}).to_csv(tmp_path / "demand.csv", index=False)
    (tmp_path / "workloads.yaml").write_text(f"""
source: {{url: "csv://{tmp_path / 'demand.csv'}", step_seconds: 300, history_days: 3}}
training: {{models: [moving_average], refresh_interval_seconds: 30}}
workloads:
  - {{namespace: ns, name: vm, demand_query: vm, capacity: {{cpu_request_cores: 1.0, ready_pods: 1}}}}
""")
    return [sys.executable, "-m", "foresight", "train", "--config", str(tmp_path / "workloads.yaml"),
            "--checkpoint-dir", str(tmp_path / "ckpt")]


def _pid1_wrapper() -> list[str] | None:
    """``unshare`` that makes the command PID 1 of a new PID namespace, as in a container."""
    exe = shutil.which("unshare")
    if exe is None:
        return None
    probe = subprocess.run([exe, "--pid", "--fork", "--kill-child", sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, timeout=30)
    return [exe, "--pid", "--fork", "--kill-child"] if probe.stdout.strip() == "1" else None


@pytest.mark.parametrize("pid1", [False, True], ids=["process", "pid-1"])
def test_foresight_train_exits_at_sigterm_and_leaves_its_windows(tmp_path, pid1):
    wrapper = _pid1_wrapper() if pid1 else []
    if wrapper is None:
        pytest.skip("cannot make a PID namespace here (unshare --pid needs root or user namespaces)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(wrapper + _train_cmd(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, cwd=tmp_path)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.time() + 120
        while not any(line.startswith("refreshed 1/1") for line in lines) and time.time() < deadline and p.poll() is None:
            time.sleep(0.2)
        assert any(line.startswith("refreshed 1/1") for line in lines), (lines, p.poll())
        target = p.pid
        if pid1:  # the namespace's PID 1 is unshare's child
            target = int(Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()[0])
        t0 = time.monotonic()
        os.kill(target, signal.SIGTERM)
        rc = p.wait(timeout=20)  # without a handler PID 1 ignores SIGTERM: this would time out
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = p.stderr.read()
    assert rc == 0, err[-2000:]
    assert "SIGTERM: the trainer stops; saved the history windows of 1 workloads" in err, err[-2000:]
    assert (tmp_path / "ckpt" / RINGS_FILE).exists()
    assert took < 20
