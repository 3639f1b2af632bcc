"""``make cluster`` as a user runs it: the kubeconfig it prints works, the node is Ready with
CoreDNS and metrics-server on it, and Ctrl-C stops everything and leaves nothing behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cluster import nodenet
from tests.cluster.controlplane import ROOT
from tests.node.conftest import _need_root


def _read_until(proc: subprocess.Popen, marker: str, timeout: float) -> str:
    out, deadline = "", time.monotonic() + timeout
    while marker not in out:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise AssertionError(f"make cluster exited ({proc.wait()}) before printing {marker!r}:\n{out}")
        out += line
        if time.monotonic() > deadline:
            raise AssertionError(f"no {marker!r} within {timeout:.0f} s:\n{out}")
    return out + proc.stdout.readline()  # type: ignore[union-attr]


def test_make_cluster_prints_a_working_kubeconfig_and_ctrl_c_cleans_up(tmp_path):
    _need_root()
    proc = subprocess.Popen([sys.executable, "-m", "tests.cluster.run_cluster", "--dir", str(tmp_path)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = _read_until(proc, "kubeconfig:", 1500)
        kubeconfig = Path(out.split("kubeconfig:")[1].split()[0])
        assert kubeconfig.is_file() and kubeconfig.parent.parent == tmp_path
        kubectl = out.split("\n  ")[1].split()[0]
        r = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "get", "nodes", "-o", "json"],
                           capture_output=True, text=True, timeout=60)
        (n,) = json.loads(r.stdout)["items"]
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
        r = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()  # the next node start removes what it left
            raise
    assert rc == 0, proc.stdout.read()  # type: ignore[union-attr]
    assert nodenet.leftovers() == []
