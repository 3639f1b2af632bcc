"""A real Kubernetes node joined to the control plane of tests/cluster/controlplane.py.

Parts, all real: Debian's containerd 1.6 (private --root/--state/socket in the node's dir; runc
and crun runtime handlers, and gVisor's runsc as ``gvisor`` when tests/cluster/build_gvisor.sh
built it, each with a RuntimeClass), the CNI bridge/host-local/loopback/portmap
plugins (network rules: tests/cluster/nodenet.py), the kubelet and kube-proxy (iptables) built by
tests/cluster/build.sh, and the images of tests/cluster/build_images.sh imported with
``ctr -n k8s.io images import``.

Settings these machines need (../shared/reference/stack-notes.md, "A real node"): cgroup v1
(``failCgroupV1: false``, cgroupfs), ``restrict_oom_score_adj`` (no CAP_SYS_RESOURCE here), a
node IP that is not loopback (198.18.255.1 on a portless bridge), ``/`` made rshared, a
home-built pause image. The control plane runs its node-lifecycle controller, which lifts the
not-ready taint once the kubelet reports Ready.

One node per machine (an flock on /run/foresight-node.lock, awaited up to 30 min): iptables chains and the test
ranges are machine-wide. :meth:`Node.stop` (also from atexit, and at the next start after a
killed run) kills every process in the node's cgroups (gVisor's sandboxes among them), unmounts
what it mounted, removes its shims' sockets and its network state (nodenet.teardown).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster import nodenet
from tests.cluster.controlplane import HERE, ControlPlane, Proc, free_port, run_build_script, wait_for

IMAGES_SCRIPT = HERE / "build_images.sh"
GVISOR_SCRIPT = HERE / "build_gvisor.sh"
GVISOR_BINARIES = ("runsc", "containerd-shim-runsc-v1", "containerd-shim-runsc-v1.real")
LOCK = Path("/run/foresight-node.lock")
LOCK_WAIT_SECONDS = 1800
STATE = Path("/run/foresight-node.json")
# containerd 1.6's shims and gVisor's put their ttrpc sockets here whatever containerd's own
# state dir; a SIGKILLed shim (every shim, on stop) leaves its socket behind.
SHIM_SOCKETS = Path("/run/containerd/s")
NODE_NAME = "foresight-node"
CGROUP_NAME = "foresight-node"
CGROUP_V1 = Path("/sys/fs/cgroup")
RUNTIMES = {"runc": "/usr/sbin/runc", "crun": "/usr/bin/crun"}
# crun 1.8 refuses to create a container where cgroup v1 and v2 are mounted side by side
# ("cgroups in hybrid mode not supported"), as here; the warm pool's crun backend meets the same.
# Each crun call then runs in a mount namespace of its own without the v2 mount, so crun sees
# plain v1 and manages the pod's cgroups as runc does.
CRUN_WRAPPER = """#!/bin/sh
exec unshare --mount --propagation private sh -c 'umount /sys/fs/cgroup/unified 2>/dev/null; exec /usr/bin/crun "$@"' crun "$@"
"""


class NodeError(RuntimeError):
    pass


def build_images(trainer: bool = False) -> dict:
    """Run build_images.sh (seconds when cached) and return its manifest: name -> ref, archive."""
    r = subprocess.run(["bash", str(IMAGES_SCRIPT), *(["--trainer"] if trainer else [])],
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise NodeError(f"tests/cluster/build_images.sh failed ({r.returncode}):\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def build_gvisor() -> tuple[Path | None, str]:
    """Run build_gvisor.sh (seconds when cached): (its bin dir, "") or (None, why it failed).
    A failed build only costs the node its gvisor handler, never runc and crun."""
    try:
        bin_dir = Path(run_build_script(GVISOR_SCRIPT))
    except (RuntimeError, OSError, IndexError) as exc:
        print(f"[node] no gvisor runtime class: {exc}", file=sys.stderr, flush=True)
        return None, str(exc)
    missing = [b for b in GVISOR_BINARIES if not (bin_dir / b).exists()]
    if missing:
        return None, f"tests/cluster/build_gvisor.sh printed {bin_dir}, which lacks {missing}"
    return bin_dir, ""


def cgroup_dirs() -> list[Path]:
    """The node's cgroup in every v1 hierarchy (the kubelet's cgroupRoot, pods below it)."""
    return [d / CGROUP_NAME for d in sorted(CGROUP_V1.iterdir())
            if d.is_dir() and d.name != "unified" and (d / "cgroup.procs").exists()]


def _make_cgroups() -> None:
    for d in cgroup_dirs():
        d.mkdir(exist_ok=True)
        if d.parent.name == "cpuset":  # a cpuset child takes no task before it has cpus and mems
            for f in ("cpuset.cpus", "cpuset.mems"):
                (d / f).write_text((d.parent / f).read_text())


def _pids_in(d: Path) -> set[int]:
    pids: set[int] = set()
    for procs in d.rglob("cgroup.procs") if d.is_dir() else []:
        try:
            pids |= {int(x) for x in procs.read_text().split()}
        except OSError:
            pass
    return pids


def kill_cgroup_tree(errors: list[str]) -> None:
    """SIGKILL every process in the node's cgroups (pods, shims, containerd), then rmdir them."""
    for _ in range(50):  # bounded: a frozen or D-state process is reported, not waited on forever
        pids = set().union(*(_pids_in(d) for d in cgroup_dirs()))
        pids.discard(os.getpid())
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    else:
        errors.append(f"processes still in the node's cgroups: {sorted(pids)}")
    for d in cgroup_dirs():
        for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [d]:
            try:
                sub.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                errors.append(f"rmdir {sub}: {exc}")


def runsc_processes() -> dict[int, str]:
    """Host processes of gVisor binaries built by build_gvisor.sh (the shim, runsc's sandbox,
    gofer and its short-lived commands): pid -> command line. They run in the node's cgroups
    (children of containerd's shims), so kill_cgroup_tree ends them; this checks it did."""
    found: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            exe = Path(os.readlink(proc / "exe"))
            if exe.name in ("runsc", "containerd-shim-runsc-v1.real") and exe.parent.parent.name.startswith("gvisor-"):
                found[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
        except OSError:  # exited meanwhile, or a kernel thread
            pass
    return found


def shim_sockets(node_dir: Path) -> list[Path]:
    """The node's shim sockets in SHIM_SOCKETS, as named by its task bundles' address files
    (the names are hashes: only the bundles tell ours from another containerd's)."""
    found = set()
    for f in (node_dir / "containerd" / "state" / "io.containerd.runtime.v2.task").glob("*/*/address"):
        try:
            sock = Path(f.read_text().strip().removeprefix("unix://"))
        except OSError:
            continue
        if sock.parent == SHIM_SOCKETS and sock.exists():
            found.add(sock)
    return sorted(found)


def _remove_shim_sockets(node_dir: Path, errors: list[str]) -> None:
    for sock in shim_sockets(node_dir):
        try:
            sock.unlink()
        except OSError as exc:
            errors.append(f"rm {sock}: {exc}")
    for d in (SHIM_SOCKETS, SHIM_SOCKETS.parent):  # only when empty: a host containerd may use them
        try:
            d.rmdir()
        except OSError:
            pass


def unmount_under(root: Path, errors: list[str]) -> None:
    """Every mount below ``root`` (the kubelet's volumes, containerd's rootfs and shm), deepest first."""
    prefix = str(root.resolve()) + "/"
    mounts = [ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines()]
    for m in sorted({m for m in mounts if m.startswith(prefix)}, key=len, reverse=True):
        r = subprocess.run(["umount", "-l", m], capture_output=True, text=True)
        if r.returncode and "not mounted" not in r.stderr:
            errors.append(f"umount {m}: {r.stderr.strip()}")


def cleanup_host(node_dir: Path | None, netns: list[str] = ()) -> list[str]:
    """Everything a node leaves on the host, also after a crash; returns what could not go."""
    errors: list[str] = []
    kill_cgroup_tree(errors)
    errors += [f"gVisor process {pid} outside the node's cgroups: {cmd}" for pid, cmd in runsc_processes().items()]
    state = _read_state()
    # after a killed run, the node dir recorded at its start (its mounts; its shims' bundles name their sockets)
    root = node_dir or (Path(state["node_dir"]) if state.get("node_dir") else None)
    if root is not None:
        unmount_under(root, errors)
        _remove_shim_sockets(root, errors)
    nodenet.teardown(STATE, list(netns), errors)
    if state.get("propagation_was_private"):
        subprocess.run(["mount", "--make-rprivate", "/"], capture_output=True)
    STATE.with_suffix(".mounts.json").unlink(missing_ok=True)
    return errors


def _rfc3339(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _read_state() -> dict:
    p = STATE.with_suffix(".mounts.json")
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return {}


@dataclass
class Node:
    cp: ControlPlane
    dir: Path
    images: dict
    name: str = NODE_NAME
    procs: list[Proc] = field(default_factory=list)
    runtime_handlers: list[str] = field(default_factory=list)
    gvisor_bin: Path | None = None  # build_gvisor.sh's bin dir: runsc and its shim; None: no gvisor handler
    gvisor_error: str = ""  # why gvisor_bin is None, for the tests' failure message
    kubelet_port: int = 0
    started_seconds: float = 0.0
    lock_wait_seconds: float = LOCK_WAIT_SECONDS  # how long start() waits for another node to stop
    _lock: object = None
    _relay: object = None
    _kubelet_args: list[str] = field(default_factory=list)  # restart_kubelet runs the same command

    @property
    def sock(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    def ctr(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        r = subprocess.run(["ctr", "--address", str(self.sock), "-n", "k8s.io", *args],
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise NodeError(f"ctr {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r

    # -- lifecycle
    def start(self, timeout: float = 180.0) -> "Node":
        t0 = time.monotonic()
        self._take_lock()
        atexit.register(self.stop)
        try:
            left = cleanup_host(None)  # what a killed run left
            if left:
                raise NodeError("could not remove a previous node's leftovers: " + "; ".join(left))
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        self.started_seconds = time.monotonic() - t0
        return self

    def _take_lock(self) -> None:
        # Wait a bounded time for another node (a second test session on a shared machine) to end
        # rather than fail at once; it frees the lock when it stops, even on failure.
        f = open(LOCK, "w")
        deadline = time.monotonic() + self.lock_wait_seconds
        announced = False
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    f.close()
                    raise NodeError(f"another foresight node runs on this machine (waited {self.lock_wait_seconds:.0f} s "
                                    f"for lock {LOCK}); one node per machine: stop it (make cluster: Ctrl-C) first") from None
                if not announced:
                    print(f"[node] waiting for another foresight node to stop (lock {LOCK})", file=sys.stderr, flush=True)
                    announced = True
                time.sleep(2)
        self._lock = f

    def _start(self, timeout: float) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._share_root_mount()
        nodenet.NodeNetwork(STATE).setup()
        _make_cgroups()
        self._start_containerd()
        self._import_images()
        self._start_kubelet(timeout)
        self._start_kube_proxy()
        self._runtime_classes()
        from tests.cluster.apirelay import ApiRelay, point_kubernetes_service_at

        # in-cluster clients: the kubernetes Service -> a relay on the node IP -> the loopback API
        self._relay = ApiRelay(nodenet.NODE_IP, self.cp.api_port, self.cp.api_port).start()
        point_kubernetes_service_at(self.cp, nodenet.NODE_IP, self.cp.api_port)

    def _share_root_mount(self) -> None:
        out = subprocess.run(["findmnt", "-no", "PROPAGATION", "/"], capture_output=True, text=True).stdout.strip()
        STATE.with_suffix(".mounts.json").write_text(json.dumps({"propagation_was_private": out == "private",
                                                                 "node_dir": str(self.dir)}))
        subprocess.run(["mount", "--make-rshared", "/"], check=True)

    def _spawn(self, name: str, args: list[str], pids_cgroup: bool = False, env: dict[str, str] | None = None) -> Proc:
        p = self.cp.spawn(f"node-{name}", args, env=env)
        self.procs.append(p)
        self.cp.procs.remove(p)  # the node stops its own processes, before the control plane
        if pids_cgroup:  # its children (containerd's shims) are then found and killed on stop
            sub = CGROUP_V1 / "pids" / CGROUP_NAME / name
            sub.mkdir(exist_ok=True)
            (sub / "cgroup.procs").write_text(str(p.popen.pid))
        return p

    def _start_containerd(self) -> None:
        from tests.cluster.nodeconfig import containerd_config

        d = self.dir / "containerd"
        (self.dir / "cni").mkdir(parents=True, exist_ok=True)
        (self.dir / "cni" / "10-foresight.conflist").write_text(json.dumps(nodenet.cni_conflist(self.dir / "ipam")))
        self.runtime_handlers = [h for h, b in RUNTIMES.items() if Path(b).exists()]
        binaries = {h: RUNTIMES[h] for h in self.runtime_handlers}
        d.mkdir(parents=True, exist_ok=True)
        if "crun" in binaries and Path("/sys/fs/cgroup/unified").is_mount():
            binaries["crun"] = str(d / "crun-v1-only")
            Path(binaries["crun"]).write_text(CRUN_WRAPPER)
            os.chmod(binaries["crun"], 0o755)
        cfg = containerd_config(d, self.dir / "cni", self.images["pause"]["ref"], binaries, self._runsc_config(d))
        (d / "config.toml").write_text(cfg)
        env = None
        if self.gvisor_bin is not None:  # containerd finds a shim binary (containerd-shim-runsc-v1) on its PATH only
            env = {"PATH": f"{self.gvisor_bin}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"}
        proc = self._spawn("containerd", ["containerd", "--config", str(d / "config.toml")], pids_cgroup=True, env=env)
        wait_for("containerd", lambda: proc.alive() and subprocess.run(
            ["ctr", "--address", str(self.sock), "version"], capture_output=True, timeout=10).returncode == 0,
            timeout=60, interval=0.2, detail=proc.tail)

    def _runsc_config(self, d: Path) -> Path | None:
        """The gvisor handler's runsc.toml (and the handler itself) when its build is there."""
        from tests.cluster.nodeconfig import runsc_toml

        if self.gvisor_bin is None or not all((self.gvisor_bin / b).exists() for b in GVISOR_BINARIES):
            return None
        self.runtime_handlers.append("gvisor")
        cfg = d / "runsc.toml"
        cfg.write_text(runsc_toml(self.gvisor_bin / "runsc", d / "runtime-root" / "gvisor"))
        return cfg

    def _import_images(self) -> None:
        """Every built image but the base (only other images are built from it)."""
        wanted = {n: i for n, i in self.images.items() if n != "base"}
        for img in wanted.values():
            self.ctr("images", "import", img["archive"])
        have = set(self.ctr("images", "ls", "-q").stdout.split())
        missing = [i["ref"] for i in wanted.values() if i["ref"] not in have]
        if missing:
            raise NodeError(f"ctr images import did not name the images as built: missing {missing}; have {sorted(have)}")

    def _start_kubelet(self, timeout: float) -> None:
        from tests.cluster.nodeconfig import kubelet_config, node_credentials

        creds = node_credentials(self.cp, self.dir / "pki", self.name)
        self.kubelet_port = free_port()
        cfg = self.dir / "kubelet.yaml"
        cfg.write_text(kubelet_config(self, creds))
        self._kubelet_args = [
            str(self.cp.bin_dir / "kubelet"), f"--config={cfg}", f"--kubeconfig={creds['kubelet_kubeconfig']}",
            f"--root-dir={self.dir / 'kubelet'}", f"--cert-dir={self.dir / 'pki'}", f"--hostname-override={self.name}",
            f"--node-ip={nodenet.NODE_IP}", "--v=1"]
        proc = self._spawn("kubelet", self._kubelet_args)
        wait_for(f"node {self.name} Ready", lambda: proc.alive() and self.ready(), timeout=timeout, interval=0.5,
                 detail=lambda: proc.tail(40))
        # The node-lifecycle controller lifts node.kubernetes.io/not-ready once it sees Ready.
        wait_for(f"node {self.name} without taints", lambda: not self.cp.admin.json(f"/api/v1/nodes/{self.name}")["spec"]
                 .get("taints"), timeout=timeout, interval=0.5)

    def restart_kubelet(self, timeout: float = 180.0) -> float:
        """Stop the kubelet (SIGTERM, as `systemctl restart kubelet` does) and start it again with
        the same config, port and credentials; the pods keep running under containerd meanwhile.
        Returns the seconds from the stop until the node reports Ready again."""
        import httpx
        import yaml

        (old,) = [p for p in self.procs if p.name == "node-kubelet"]
        healthz = yaml.safe_load((self.dir / "kubelet.yaml").read_text())["healthzPort"]
        t0, stopped_at = time.monotonic(), time.time()
        old.stop(timeout=30)
        self.procs.remove(old)
        proc = self._spawn("kubelet", self._kubelet_args)

        def back() -> bool:  # the Ready condition stays True for a while without a kubelet: ask for a new heartbeat
            if not proc.alive() or httpx.get(f"http://127.0.0.1:{healthz}/healthz", timeout=2).status_code != 200:
                return False
            conds = self.cp.admin.json(f"/api/v1/nodes/{self.name}").get("status", {}).get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" and _rfc3339(c["lastHeartbeatTime"]) >= stopped_at
                       for c in conds)

        wait_for(f"node {self.name} Ready after a kubelet restart", back, timeout=timeout, interval=0.5,
                 detail=lambda: proc.tail(40))
        return time.monotonic() - t0

    def ready(self) -> bool:
        r = self.cp.admin.get(f"/api/v1/nodes/{self.name}")
        if r.status_code != 200:
            return False
        conds = r.json().get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    def _start_kube_proxy(self) -> None:
        from tests.cluster.nodeconfig import kube_proxy_config

        cfg = self.dir / "kube-proxy.yaml"
        healthz = free_port()
        cfg.write_text(kube_proxy_config(self, healthz))
        proc = self._spawn("kube-proxy", [str(self.cp.bin_dir / "kube-proxy"), f"--config={cfg}", "--v=1"])
        import httpx

        wait_for("kube-proxy /healthz", lambda: proc.alive() and httpx.get(
            f"http://127.0.0.1:{healthz}/healthz", timeout=2).status_code == 200, timeout=60, detail=proc.tail)

    def _runtime_classes(self) -> None:
        for h in self.runtime_handlers:
            body = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": h}, "handler": h}
            r = self.cp.admin.apply(f"/apis/node.k8s.io/v1/runtimeclasses/{h}", body, "foresight-node")
            if r.status_code not in (200, 201):
                raise NodeError(f"RuntimeClass {h}: {r.status_code} {r.text}")

    def check_alive(self) -> None:
        dead = [p for p in self.procs if not p.alive()]
        if dead:
            raise NodeError("; ".join(f"{p.name} exited ({p.popen.returncode}): {p.tail(20)}" for p in dead))

    def stop(self) -> list[str]:
        """Idempotent; returns what could not be cleaned up (also logged to the node's dir)."""
        if self._lock is None:
            return []
        if self._relay is not None:
            self._relay.stop()  # type: ignore[attr-defined]
            self._relay = None
        for p in reversed(self.procs):
            if p.name != "node-containerd":
                p.stop(timeout=10)
        errors = cleanup_host(self.dir)
        for p in self.procs:
            p.stop(timeout=5)
        self.procs.clear()
        # containerd outlives the first pass, and a sandbox it was still tearing down can leave a
        # mount behind it (gVisor's null-netns was seen once)
        unmount_under(self.dir, errors)
        if errors:
            (self.dir / "cleanup-errors.txt").write_text("\n".join(errors))
        self._lock.close()  # type: ignore[attr-defined]
        self._lock = None
        return errors


def start_cluster(d: Path, images: dict | None = None) -> tuple[ControlPlane, Node]:
    """Build (cached) and start a control plane and a node joined to it, under ``d``."""
    from tests.cluster.controlplane import build_binaries

    t0 = time.monotonic()
    bin_dir = build_binaries()
    missing = [b for b in ("kubelet", "kube-proxy") if not (bin_dir / b).exists()]
    if missing:
        raise NodeError(f"{missing} missing from {bin_dir}: tests/cluster/build.sh builds them")
    images = images or build_images()
    gvisor_bin, gvisor_error = build_gvisor()
    t1 = time.monotonic()
    (d / "cp").mkdir(parents=True, exist_ok=True)
    cp = ControlPlane(bin_dir=bin_dir, dir=d / "cp", service_cidr=nodenet.SERVICE_CIDR, node_lifecycle=True).start()
    cp.build_seconds, cp.start_seconds = t1 - t0, time.monotonic() - t1  # type: ignore[attr-defined]
    try:
        return cp, Node(cp, d / "node", images, gvisor_bin=gvisor_bin, gvisor_error=gvisor_error).start()
    except BaseException:
        cp.stop()
        raise
