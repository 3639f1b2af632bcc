"""A real local Ray cluster: ``ray start --head`` plus a separate worker node, one CPU each,
started once for the module's tests and stopped after (each by its own process group, so
nothing else named ray on the machine is touched)."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")


@dataclass
class RayCluster:
    address: str  # ray://127.0.0.1:PORT, what --ray-address takes
    gcs: str
    log: Path
    procs: dict[str, subprocess.Popen]

    def start_worker(self, name: str, env: dict[str, str]) -> None:
        self.procs[name] = _start([str(RAY), "start", f"--address={self.gcs}", "--num-cpus=1", "--block",
                                   "--disable-usage-stats", "--node-ip-address=127.0.0.1"], env,
                                  self.log.with_name(f"{name}.log"))

    def kill(self, name: str) -> None:
        _stop(self.procs.pop(name), signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Ray puts its workers in process groups of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if sig == signal.SIGKILL:  # a crash: the node and its workers at the same instant
        for pid in _descendants(proc.pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ray exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"ray did not open port {port} in {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def _wait_cpus(engine, cpus: int, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while engine.cluster_cpus() < cpus:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the cluster has {engine.cluster_cpus()} CPUs after {timeout:.0f} s, expected {cpus}")
        time.sleep(0.5)


@pytest.fixture(scope="session")
def ray_cluster():
    if not RAY.exists():
        msg = "ray is not installed: pip install -e '.[ray]' (make test installs it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # Ray's socket paths must stay short
    gcs, client = _free_port(), _free_port()
    # the workers import the test helpers (tests.engine.work) by name, like forecaster itself
    # token authentication on, as on a real cluster: the cluster and this client share a token
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    saved = {k: os.environ.get(k) for k in auth}
    os.environ.update(auth)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    log = tmp / "head.log"
    head = _start([str(RAY), "start", "--head", "--block", f"--port={gcs}", f"--ray-client-server-port={client}",
                   "--num-cpus=1", f"--temp-dir={tmp}", "--include-dashboard=false", "--disable-usage-stats",
                   "--node-ip-address=127.0.0.1"], env, log)
    cluster = RayCluster(f"ray://127.0.0.1:{client}", f"127.0.0.1:{gcs}", log, {"head": head})
    try:
        _wait_port(gcs, head, log)
        _wait_port(client, head, log)
        cluster.start_worker("worker", env)
        from forecaster.engines.ray_engine import RayEngine

        # one client connection for the session: every engine the tests open reuses it
        cluster.engine = RayEngine(address=cluster.address)  # type: ignore[attr-defined]
        _wait_cpus(cluster.engine, 2)
        cluster.env = env  # type: ignore[attr-defined]
        yield cluster
    finally:
        if getattr(cluster, "engine", None) is not None:
            cluster.engine.close()
        for name in [n for n in cluster.procs if n != "head"] + ["head"]:
            _stop(cluster.procs.pop(name))
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
