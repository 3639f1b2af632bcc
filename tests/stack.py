"""Real Prometheus and Redis for tests (and benchmarks): start on loopback in a temp dir,
backfill Prometheus history with promtool, stop at the end.

Used by tests/conftest.py fixtures and by bench/ scripts. Needs Debian's ``prometheus``
(prometheus + promtool) and ``redis-server`` on PATH (the Makefile installs them).
"""

from __future__ import annotations

import atexit
import math
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def have(binary: str) -> bool:
    return shutil.which(binary) is not None


@dataclass
class RedisServer:
    port: int
    dir: Path
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(self.dir),
                "--daemonize", "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_port(self.port, what="redis-server")
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self, down_seconds: float = 0.0) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()


def start_redis(tmpdir: Path | None = None) -> RedisServer:
    """A Redis on a free port; without ``tmpdir`` its folder is a new temporary one, removed
    when this process exits (after the caller's stop, which may restart it meanwhile)."""
    if tmpdir is None:
        tmpdir = Path(tempfile.mkdtemp(prefix="foresight-redis-"))
        atexit.register(shutil.rmtree, tmpdir, True)
    return RedisServer(port=free_port(), dir=Path(tmpdir)).start()


@dataclass
class PrometheusServer:
    port: int
    dir: Path
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def _fmt_labels(labels: Mapping[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels.items()))


def write_openmetrics(
    path: Path,
    families: Mapping[str, Sequence[tuple[Mapping[str, str], Sequence[tuple[float, float]]]]],
    metric_type: str = "gauge",
) -> None:
    """families: metric name -> [(labels, [(unix_ts, value), ...]), ...].
    NaN values are skipped (a gap stays a gap). Timestamps in seconds, increasing."""
    with open(path, "w") as f:
        for name, series in families.items():
            f.write(f"# TYPE {name} {metric_type}\n")
            for labels, samples in series:
                lab = _fmt_labels(labels)
                head = f"{name}{{{lab}}}" if lab else name
                for ts, v in samples:
                    if v is None or (isinstance(v, float) and math.isnan(v)):
                        continue
                    f.write(f"{head} {repr(float(v))} {ts:.3f}\n")
        f.write("# EOF\n")


def start_prometheus(
    families: Mapping[str, Sequence[tuple[Mapping[str, str], Sequence[tuple[float, float]]]]] | None = None,
    tmpdir: Path | None = None,
    metric_type: str = "gauge",
) -> PrometheusServer:
    """Backfill ``families`` with promtool (before start) and start Prometheus on loopback."""
    d = Path(tmpdir or tempfile.mkdtemp(prefix="foresight-prom-"))
    data = d / "data"
    data.mkdir(parents=True, exist_ok=True)
    if families:
        om = d / "history.om"
        write_openmetrics(om, families, metric_type)
        r = subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise RuntimeError(f"promtool backfill failed: {r.stderr[-2000:]}")
    cfg = d / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    port = free_port()
    log = open(d / "prometheus.log", "w")
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={cfg}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=3650d",
            "--query.lookback-delta=5m",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    srv = PrometheusServer(port=port, dir=d, proc=proc)
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited: {(d / 'prometheus.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{srv.url}/-/ready", timeout=1) as resp:
                if resp.status == 200:
                    return srv
        except OSError:
            time.sleep(0.1)
    srv.stop()
    raise RuntimeError("prometheus did not become ready in 60 s")


def _wait_port(port: int, what: str, timeout: float = 20.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s")


DATA_DIR = Path(__file__).parent / "data"


def load_trace_slice(name: str = "cpu_slice.csv.gz"):
    """The real CPU series bundled for tests (see tests/data/ATTRIBUTION.md)."""
    import pandas as pd

    return pd.read_csv(DATA_DIR / name, parse_dates=["timestamp"])
