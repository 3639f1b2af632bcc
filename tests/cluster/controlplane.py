"""A real Kubernetes control plane on loopback for the e2e suite.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built from their official Go
modules by tests/cluster/build.sh (cached outside the repository), started as processes in a
temp dir with:
- a cluster CA (serving certificate of kube-apiserver, client certificates of the admin and of
  each component), a front-proxy CA with its client certificate (the aggregator's identity
  towards aggregated API servers such as ``foresight serve``), service-account keys;
- RBAC authorization; ``--endpoint-reconciler-type=none`` (Endpoints reject loopback addresses);
- the controller manager without the node-lifecycle controller (there is no kubelet) and with
  per-controller service-account credentials, so the HPA controller reaches the metrics APIs
  under its own RBAC identity as in a real cluster.

Here there is no kubelet and no container runtime: :class:`KubeletStandIn` writes pod status (the
only thing a kubelet would add that the tests need), and nodes are plain Node objects. A real
node (tests/cluster/node.py) joins a control plane started with ``service_cidr="198.19.0.0/16"``
and ``node_lifecycle=True`` instead.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD_SCRIPT = HERE / "build.sh"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_build_script(script: Path, stream=None) -> str:
    """Run one of the build_*.sh scripts (seconds when cached) and return the last line it
    prints; a cold build's progress lines ("[name.sh ...") go to ``stream`` as they come."""
    stream = stream or sys.stderr
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err_lines: list[str] = []

    def pump():
        for line in proc.stderr:  # type: ignore[union-attr]
            err_lines.append(line)
            if line.startswith(f"[{script.name}"):
                stream.write(line)
                stream.flush()

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    out = proc.stdout.read()  # type: ignore[union-attr]
    proc.wait()
    t.join(5)
    if proc.returncode != 0:
        raise RuntimeError(f"tests/cluster/{script.name} failed (exit {proc.returncode}):\n{''.join(err_lines[-40:])}")
    return out.strip().splitlines()[-1]


def build_binaries(stream=None) -> Path:
    """Run build.sh (seconds when cached; a cold build prints its progress to ``stream``)."""
    return Path(run_build_script(BUILD_SCRIPT, stream))


# ------------------------------------------------------------------ certificates


def _pki(d: Path, service_cidr: str = "10.96.0.0/16") -> dict[str, Path]:
    """Every key and certificate the control plane needs, written under ``d``."""
    import ipaddress

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from adapter.tls import write_ca, write_signed

    d.mkdir(parents=True, exist_ok=True)
    ca_crt, ca_key, ca, cakey = write_ca(d, "cluster-ca")
    fp_crt, fp_key, fp, fpkey = write_ca(d, "front-proxy-ca")
    files: dict[str, Path] = {"ca": ca_crt, "ca_key": ca_key, "front_proxy_ca": fp_crt, "front_proxy_ca_key": fp_key}
    sans = ["127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local", str(ipaddress.ip_network(service_cidr)[1])]
    files["apiserver"], files["apiserver_key"] = write_signed(d, "apiserver", ca, cakey, cn="kube-apiserver", client=False, sans=sans)
    for name, cn, org in [("admin", "kubernetes-admin", "system:masters"),
                          ("kcm", "system:kube-controller-manager", None),
                          ("scheduler", "system:kube-scheduler", None)]:
        files[name], files[name + "_key"] = write_signed(d, name, ca, cakey, cn=cn, org=org, client=True)
    files["front_proxy_client"], files["front_proxy_client_key"] = write_signed(
        d, "front-proxy-client", fp, fpkey, cn="front-proxy-client", client=True)
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (d / "sa.key").write_bytes(sa.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                                serialization.NoEncryption()))
    (d / "sa.pub").write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                            serialization.PublicFormat.SubjectPublicKeyInfo))
    files["sa_key"], files["sa_pub"] = d / "sa.key", d / "sa.pub"
    return files


def write_kubeconfig(path: Path, server: str, ca: Path, *, cert: Path | None = None, key: Path | None = None,
                     token: str | None = None, user: str = "user") -> Path:
    u: dict[str, Any] = {}
    if cert:
        u = {"client-certificate": str(cert), "client-key": str(key)}
    if token:
        u = {"token": token}
    cfg = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "foresight-e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": u}],
        "contexts": [{"name": "ctx", "context": {"cluster": "foresight-e2e", "user": user}}],
        "current-context": "ctx",
    }
    path.write_text(json.dumps(cfg, indent=1))
    os.chmod(path, 0o600)
    return path


# ------------------------------------------------------------------ the control plane


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def wait_http(self, url: str, timeout: float = 120.0, what: str | None = None) -> None:
        """Until ``url`` answers 200 (loopback only), failing at once with the log's tail if the
        process exits, or after ``timeout`` seconds."""
        what = what or self.name
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{what} exited ({self.popen.returncode}):\n--- {self.log} ---\n{self.tail(40)}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{what} not ready at {url} after {timeout:.0f} s:\n--- {self.log} ---\n{self.tail(40)}")

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@dataclass
class ControlPlane:
    bin_dir: Path
    dir: Path
    hpa_sync_seconds: int = 2
    # A real node (tests/cluster/node.py) wants Services in 198.19.0.0/16, and the node-lifecycle
    # controller to lift the not-ready taint once its kubelet reports Ready.
    service_cidr: str = "10.96.0.0/16"
    node_lifecycle: bool = False
    procs: list[Proc] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)
    api_port: int = 0

    # -- lifecycle
    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    def _spawn(self, name: str, args: list[str]) -> Proc:
        log = self.dir / f"{name}.log"
        f = open(log, "w")
        p = Proc(name, subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, cwd=self.dir, start_new_session=True), log)
        f.close()
        self.procs.append(p)
        return p

    def _wait(self, what: str, ok: Callable[[], bool], proc: Proc | None, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc is not None and not proc.alive():
                raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.tail()}")
            try:
                if ok():
                    return
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(0.25)
        raise RuntimeError(f"{what} not ready within {timeout:.0f} s:\n{proc.tail() if proc else ''}")

    def start(self, timeout: float = 240.0) -> "ControlPlane":
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> "ControlPlane":
        b = self.bin_dir
        self.files = f = _pki(self.dir / "pki", self.service_cidr)
        etcd_port, etcd_peer = free_port(), free_port()
        self.api_port = free_port()
        etcd = self._spawn("etcd", [
            str(b / "etcd"), "--name=e2e", f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_port}", f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-cluster=e2e=http://127.0.0.1:{etcd_peer}", "--unsafe-no-fsync", "--log-level=warn",
            "--listen-metrics-urls=", "--quota-backend-bytes=2147483648",
        ])
        self._wait("etcd", lambda: httpx.get(f"http://127.0.0.1:{etcd_port}/health", timeout=2).status_code == 200, etcd, 60)
        api = self._spawn("kube-apiserver", [
            str(b / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.api_port}",
            f"--tls-cert-file={f['apiserver']}", f"--tls-private-key-file={f['apiserver_key']}",
            f"--client-ca-file={f['ca']}",
            f"--service-account-key-file={f['sa_pub']}", f"--service-account-signing-key-file={f['sa_key']}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--authorization-mode=RBAC",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--endpoint-reconciler-type=none",
            f"--requestheader-client-ca-file={f['front_proxy_ca']}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={f['front_proxy_client']}", f"--proxy-client-key-file={f['front_proxy_client_key']}",
            # The aggregator resolves an APIService's Service to its DNS name (an ExternalName
            # Service -> localhost) instead of Endpoints, which cannot hold loopback addresses.
            "--enable-aggregator-routing=false",
            "--allow-privileged=true", "--profiling=false", "--v=1",
        ])
        self.admin = ApiClient(self.server, f["ca"], (f["admin"], f["admin_key"]))
        self._wait("kube-apiserver /readyz", lambda: self.admin.get("/readyz").status_code == 200, api, timeout)
        write_kubeconfig(self.admin_kubeconfig, self.server, f["ca"], cert=f["admin"], key=f["admin_key"], user="admin")
        kcm_cfg = write_kubeconfig(self.dir / "kcm.kubeconfig", self.server, f["ca"], cert=f["kcm"], key=f["kcm_key"])
        sch_cfg = write_kubeconfig(self.dir / "scheduler.kubeconfig", self.server, f["ca"], cert=f["scheduler"], key=f["scheduler_key"])
        self._spawn("kube-controller-manager", [
            str(b / "kube-controller-manager"),
            f"--kubeconfig={kcm_cfg}", f"--authentication-kubeconfig={kcm_cfg}", f"--authorization-kubeconfig={kcm_cfg}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            "--controllers=*" if self.node_lifecycle else "--controllers=*,-node-lifecycle-controller",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={f['sa_key']}", f"--root-ca-file={f['ca']}",
            f"--cluster-signing-cert-file={f['ca']}", f"--cluster-signing-key-file={f['ca_key']}",
            "--leader-elect=false",
            # A short sync lets a test walk through many HPA decisions; every other HPA setting
            # keeps its default (the fidelity test states windows and policies explicitly).
            f"--horizontal-pod-autoscaler-sync-period={self.hpa_sync_seconds}s",
            "--v=2",
        ])
        self._spawn("kube-scheduler", [
            str(b / "kube-scheduler"),
            f"--kubeconfig={sch_cfg}", f"--authentication-kubeconfig={sch_cfg}", f"--authorization-kubeconfig={sch_cfg}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--leader-elect=false", "--v=2",
        ])
        # The controller manager is up once its service-account controller has made "default".
        self._wait("kube-controller-manager (default service account)",
                   lambda: self.admin.get("/api/v1/namespaces/default/serviceaccounts/default").status_code == 200,
                   self.procs[2], timeout)
        return self

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        self.procs.clear()

    def check_alive(self) -> None:
        dead = [p for p in self.procs if not p.alive()]
        if dead:
            raise RuntimeError("; ".join(f"{p.name} exited ({p.popen.returncode}): {p.tail(15)}" for p in dead))

    def spawn(self, name: str, args: list[str], env: Mapping[str, str] | None = None) -> Proc:
        """Start another process whose lifetime is the control plane's (stopped with it)."""
        log = self.dir / f"{name}.log"
        f = open(log, "w")
        p = Proc(name, subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, cwd=self.dir, start_new_session=True,
                                        env={**os.environ, **(env or {})}), log)
        f.close()
        self.procs.append(p)
        return p

    # -- helpers
    def kubectl(self, *args: str, input: str | None = None, check: bool = True, kubeconfig: Path | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
        r = subprocess.run([str(self.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args],
                           input=input, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        r = self.admin.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                             "spec": {"expirationSeconds": seconds}})
        r.raise_for_status()
        return r.json()["status"]["token"]

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        return write_kubeconfig(self.dir / f"sa-{namespace}-{name}.kubeconfig", self.server, self.files["ca"],
                                token=self.service_account_token(namespace, name), user=f"{namespace}-{name}")

    def ensure_namespace(self, name: str) -> None:
        r = self.admin.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        if r.status_code not in (201, 409):
            raise RuntimeError(f"create namespace {name}: {r.status_code} {r.text}")
        # Pods need the namespace's default service account, made by the controller manager.
        deadline = time.monotonic() + 60
        while self.admin.get(f"/api/v1/namespaces/{name}/serviceaccounts/default").status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"namespace {name}: no default service account after 60 s")
            time.sleep(0.2)

    def add_node(self, name: str, cpu: str = "16", memory: str = "64Gi", labels: Mapping[str, str] | None = None) -> None:
        """A Node object as a kubelet would register it: capacity, Ready, no taints."""
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                      **(labels or {})}}}
        r = self.admin.post("/api/v1/nodes", body)
        if r.status_code not in (201, 409):
            raise RuntimeError(f"create node {name}: {r.status_code} {r.text}")
        # The NodeTaint admission plugin marks new nodes not-ready; a kubelet's first Ready
        # status makes the node-lifecycle controller lift it. Neither exists here.
        self.admin.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})
        now = _now()
        status = {"status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "stand-in",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
        }}
        r = self.admin.patch(f"/api/v1/nodes/{name}/status", status)
        r.raise_for_status()


def _now(offset: float = 0.0) -> str:
    t = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=offset)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def tls_context(ca: Path, cert: tuple[Path, Path] | None = None):
    """An SSL context trusting ``ca`` and presenting ``cert`` (httpx 0.28 wants contexts)."""
    import ssl

    ctx = ssl.create_default_context(cafile=str(ca))
    if cert:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


class ApiClient:
    """JSON over HTTPS to kube-apiserver with a client certificate or a bearer token.

    The tests speak the REST API directly (as kubectl does) so that what is asserted is the wire,
    not a client library's model classes.
    """

    def __init__(self, server: str, ca: Path, cert: tuple[Path, Path] | None = None, token: str | None = None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=server, verify=tls_context(ca, cert), headers=headers, timeout=30)

    def get(self, path: str, **params) -> httpx.Response:
        return self.http.get(path, params=params or None)

    def json(self, path: str, **params) -> dict:
        r = self.get(path, **params)
        r.raise_for_status()
        return r.json()

    def post(self, path: str, body: Mapping) -> httpx.Response:
        return self.http.post(path, json=body)

    def put(self, path: str, body: Mapping) -> httpx.Response:
        return self.http.put(path, json=body)

    def delete(self, path: str) -> httpx.Response:
        return self.http.delete(path)

    def patch(self, path: str, body: Mapping, kind: str = "merge") -> httpx.Response:
        ctype = {"merge": "application/merge-patch+json", "strategic": "application/strategic-merge-patch+json",
                 "json": "application/json-patch+json"}[kind]
        return self.http.patch(path, content=json.dumps(body), headers={"Content-Type": ctype})

    def apply(self, path: str, body: Mapping, manager: str, force: bool = True) -> httpx.Response:
        """Server-side apply."""
        return self.http.patch(path, content=json.dumps(body), params={"fieldManager": manager, "force": str(force).lower()},
                               headers={"Content-Type": "application/apply-patch+yaml"})


# ------------------------------------------------------------------ pod status


class KubeletStandIn:
    """Plays the kubelet's status role for pods bound to the test's Node objects, and nothing else.

    There is no kubelet (no container runtime on these machines). For every pod the scheduler
    has bound, this writes what a kubelet would report once the containers run: phase Running,
    startTime, a pod IP and the Ready condition; and it finishes the deletion of terminating pods
    (grace period 0), as a kubelet does once their containers have stopped. Tests decide readiness per workload:
    ``startup_seconds[(ns, app)]`` delays Ready after binding (image pull + start + probe), and
    ``unready[(ns, app)] = n`` keeps the n newest pods of that workload Running but not Ready.
    It never schedules or creates pods, and removes only pods that are already being deleted.
    """

    def __init__(self, api: ApiClient, interval: float = 0.25):
        self.api = api
        self.interval = interval
        self.startup_seconds: dict[tuple[str, str], float] = {}
        self.unready: dict[tuple[str, str], int] = {}
        self._bound_at: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    def start(self) -> "KubeletStandIn":
        self._thread = threading.Thread(target=self._run, name="kubelet-stand-in", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync_once()
            except Exception as exc:  # noqa: BLE001 - keep playing; tests read .errors
                self.errors.append(repr(exc))
                del self.errors[:-20]
            self._stop.wait(self.interval)

    def sync_once(self) -> None:
        pods = self.api.json("/api/v1/pods")["items"]
        groups: dict[tuple[str, str], list[dict]] = {}
        for p in pods:
            if not p["spec"].get("nodeName"):
                continue
            if p["metadata"].get("deletionTimestamp"):
                # A kubelet stops the containers, then removes the pod for good; without that the
                # pod stays Terminating and keeps its node's CPU in the scheduler's books.
                md = p["metadata"]
                self.api.http.request("DELETE", f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}",
                                      json={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                                            "preconditions": {"uid": md["uid"]}})
                self._bound_at.pop(md["uid"], None)
                continue
            app = (p["metadata"].get("labels") or {}).get("app", "")
            groups.setdefault((p["metadata"]["namespace"], app), []).append(p)
        now = time.time()
        for key, group in groups.items():
            group.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
            hold = self.unready.get(key, 0)
            held = {p["metadata"]["uid"] for p in group[len(group) - hold:]} if hold > 0 else set()
            for p in group:
                uid = p["metadata"]["uid"]
                bound = self._bound_at.setdefault(uid, now)
                ready = uid not in held and now - bound >= self.startup_seconds.get(key, 0.0)
                self._write(p, ready)

    def _write(self, pod: dict, ready: bool) -> None:
        st = pod.get("status") or {}
        conds = {c["type"]: c for c in st.get("conditions") or []}
        want = "True" if ready else "False"
        if st.get("phase") == "Running" and conds.get("Ready", {}).get("status") == want:
            return
        now = _now()
        start = st.get("startTime") or now
        prev = conds.get("Ready")
        transition = now if prev is None or prev.get("status") != want else prev.get("lastTransitionTime", now)
        if prev is None and not ready:
            transition = start  # never ready since start (how the HPA tells "not yet ready")
        conditions = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": start},
            {"type": "Initialized", "status": "True", "lastTransitionTime": start},
            {"type": "ContainersReady", "status": want, "lastTransitionTime": transition},
            {"type": "Ready", "status": want, "lastTransitionTime": transition},
        ]
        containers = [{"name": c["name"], "image": c["image"], "imageID": "", "ready": ready, "restartCount": 0,
                       "started": True, "state": {"running": {"startedAt": start}}}
                      for c in pod["spec"]["containers"]]
        body = {"status": {"phase": "Running", "startTime": start, "hostIP": "127.0.0.1", "podIP": "127.0.0.1",
                           "podIPs": [{"ip": "127.0.0.1"}], "conditions": conditions, "containerStatuses": containers}}
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        r = self.api.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", body)
        if r.status_code not in (200, 404, 409):
            self.errors.append(f"{ns}/{name}: {r.status_code} {r.text[:200]}")


def wait_for(what: str, ok: Callable[[], Any], timeout: float = 120.0, interval: float = 0.5,
             detail: Callable[[], str] | None = None) -> Any:
    """Poll until ``ok()`` is truthy; fail with what was awaited and (optionally) why."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = ok()
            if v:
                return v
        except Exception as exc:  # noqa: BLE001 - keep polling, report the last error
            last = exc
        time.sleep(interval)
    extra = detail() if detail else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last!r}) {extra}")


# pytest-timeout counts fixture setup, and the first test of a suite that needs the control
# plane (or helm, or thanos) may build it cold on a fresh machine: 15-35 min on 2 cores.
COLD_BUILD_TIMEOUT_SECONDS = 3000


def allow_cold_build(items, folder: Path, seconds: float = COLD_BUILD_TIMEOUT_SECONDS) -> None:
    """Give every test collected under ``folder`` a timeout that covers a cold build."""
    import pytest

    for item in items:
        if folder in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.timeout(seconds))
