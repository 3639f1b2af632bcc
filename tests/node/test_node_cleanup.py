"""A node stopped after a crash of its runtime leaves nothing on the host: no interface, route,
iptables chain, network namespace, mount, process or cgroup of its own, gVisor's sandboxes
(runsc, its gofer and the shim) included."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx

from tests.cluster import nodenet
from tests.cluster.controlplane import wait_for
from tests.cluster.node import cgroup_dirs, runsc_processes, shim_sockets, start_cluster
from tests.node.conftest import _need_root
from tests.node.test_node import BUSYBOX_WEB, _run


def _mounts_under(d: Path) -> list[str]:
    prefix = str(d.resolve()) + "/"
    return [ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines() if ln.split()[4].startswith(prefix)]


def test_a_node_whose_containerd_was_killed_still_cleans_up_everything(tmp_path):
    _need_root()
    cp, node = start_cluster(tmp_path)
    try:
        pods, cluster_ip = _run(cp, node, "web", node.images["busybox"]["ref"], BUSYBOX_WEB, 8080, 2)
        assert "gvisor" in node.runtime_handlers, f"no gvisor handler (tests/cluster/build_gvisor.sh): {node.gvisor_error}"
        _run(cp, node, "gv", node.images["busybox"]["ref"], BUSYBOX_WEB, 8080, 1, runtime_class="gvisor")
        sandboxes = runsc_processes()
        assert sandboxes  # the shim, runsc's sandbox and gofer
        assert shim_sockets(node.dir)  # each shim's ttrpc socket in /run/containerd/s
        wait_for("the Service", lambda: httpx.get(f"http://{cluster_ip}/", timeout=3).status_code == 200, timeout=60)
        assert _mounts_under(tmp_path) and nodenet.leftovers()  # there is something to clean up
        containerd = next(p for p in node.procs if p.name == "node-containerd")
        pids = {int(x) for d in cgroup_dirs() for f in d.rglob("cgroup.procs") for x in f.read_text().split()}
        assert len(pids) > 3  # containerd, shims, pause and httpd processes
        os.kill(containerd.popen.pid, signal.SIGKILL)
    finally:
        errors = node.stop()
        cp.stop()
    assert errors == []
    assert nodenet.leftovers() == []
    assert _mounts_under(tmp_path) == []
    assert not [d for d in cgroup_dirs() if d.exists()]
    alive = [p for p in pids | set(sandboxes) if Path(f"/proc/{p}").exists()]
    assert alive == []
    assert runsc_processes() == {}
    assert shim_sockets(node.dir) == []
