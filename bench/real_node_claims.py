"""Warm claims against cold starts on the real node, through the warm-pool API and a Service.

Per runtime class, two pools of busybox httpd pods on the Kubernetes backend
(``warmpool.backends.kubernetes``), each the selector of its own ClusterIP Service:
- warm: one pod pre-warmed (``min_warm: 1``); a claim patches its labels into the Service;
- cold: nothing warm (``max_warm: 0``); a claim creates the pod already claimed.
The controller (``warmpool.controller.Controller``) and the HTTP API (``warmpool.api.create_app``,
open, as ``foresight warmpool run --insecure-no-auth`` on loopback) run in this process. Each
claim is timed from just before its ``POST .../claim`` to the first HTTP 200 at two places, each
polled every 20 ms by its own thread (only the node's pod and Service ranges are ever sent to):
- the pod: the claim's ``endpoint`` (a warm pod's address; a cold pod has none yet, so its
  address is read from the API server as a claimer would);
- the pool's Service: what a client that goes through the ClusterIP sees, once the EndpointSlice
  controller and kube-proxy have caught up with the claim's labels.
Then the claim is released and the Service checked empty before the next one (a released warm
pod goes back to the pool; a cold one is deleted at once and waited for). Used by ``bench/real_node.py``.
"""

from __future__ import annotations

import ipaddress
import threading
import time

import httpx

NS = "bench-claims"
PORT = 8080
POLL_SECONDS = 0.02
SERVE_TIMEOUT_SECONDS = 120.0


def _policy(handler: str, image_ref: str, kind: str):
    from warmpool.policy import parse_policy

    name = f"{kind}-{handler}"
    sizes = {"min_warm": 1, "max_warm": 1} if kind == "warm" else {"min_warm": 0, "max_warm": 0}
    return parse_policy({"apiVersion": "foresight/v1alpha1", "kind": "WarmPoolPolicy", "pools": [{
        "name": name, "workload": {"namespace": NS, "name": name}, "backend": "kubernetes", "runtime_class": handler,
        "template": {"image": image_ref, "resources": {"cpu": "50m", "memory": "64Mi"},  # gVisor's sandbox counts too
                     "command": ["/bin/sh", "-c", f"hostname > /www/index.html && exec httpd -f -p {PORT} -h /www"]},
        "capacity_per_container": 1.0, "lead_seconds": 60,
        "idle_ttl": {"initial_seconds": 3600, "decay": 0.15}, **sizes}]})


def _service(cp, name: str) -> str:
    """A ClusterIP Service selecting the pool's claimed pods (``app: <workload>``); its address."""
    from tests.cluster.nodenet import SERVICE_CIDR

    body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": PORT}]}}
    r = cp.admin.apply(f"/api/v1/namespaces/{NS}/services/{name}", body, "bench-claims")
    if r.status_code not in (200, 201):
        raise RuntimeError(f"Service {name}: {r.status_code} {r.text[:300]}")
    ip = r.json()["spec"]["clusterIP"]
    if ipaddress.ip_address(ip) not in ipaddress.ip_network(SERVICE_CIDR):
        raise RuntimeError(f"Service {name} got {ip}, outside the node's Service range {SERVICE_CIDR}")
    return ip


def _answers(client: httpx.Client, ip: str) -> bool:
    try:
        return client.get(f"http://{ip}/").status_code == 200
    except httpx.HTTPError:
        return False


def _pod_address(cp, client: httpx.Client, endpoint: str, name: str):
    """A callable: does the claimed pod answer at its address? (The endpoint if it is an
    address, else the pod's IP once the API server has it.)"""
    from tests.cluster.nodenet import POD_CIDR

    ip = [None if endpoint.startswith("pod://") else endpoint]

    def ok() -> bool:
        if ip[0] is None:
            ip[0] = (cp.admin.json(f"/api/v1/namespaces/{NS}/pods/{name}").get("status") or {}).get("podIP")
            if ip[0] is None:
                return False
        if ipaddress.ip_address(ip[0]) not in ipaddress.ip_network(POD_CIDR):
            raise RuntimeError(f"pod {name} has {ip[0]}, outside the node's pod range {POD_CIDR}")
        return _answers(client, f"{ip[0]}:{PORT}")
    return ok


def _both(what: str, checks: dict, timeout: float) -> dict[str, float]:
    """Poll each check in its own thread; the monotonic time each first passed."""
    got: dict[str, float] = {}
    errors: list[BaseException] = []

    def one(name, ok):
        try:
            got[name] = _until(f"{what} ({name})", ok, timeout)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors.append(exc)
    threads = [threading.Thread(target=one, args=kv, daemon=True) for kv in checks.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return got


def _until(what: str, ok, timeout: float) -> float:
    t0 = time.monotonic()
    while not ok():
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"timed out after {timeout:.0f} s: {what}")
        time.sleep(POLL_SECONDS)
    return time.monotonic()


class _Api:
    """The warm-pool API around ``ctl`` on a loopback port (uvicorn in a thread)."""

    def __init__(self, ctl):
        import uvicorn

        from tests.cluster.controlplane import free_port
        from warmpool.api import create_app

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(create_app(ctl), host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.port}"
        _until("the warm-pool API", lambda: _answers_path(f"{self.url}/healthz"), 30)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def _answers_path(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def measure_claims(cp, node, handler: str, kind: str, claims: int) -> dict[str, list[float]]:
    """Seconds from POST claim to the first answer through the Service (``served``) and at the
    pod's address (``pod``), ``claims`` times, and the API's own answer time; ``kind``: warm or cold."""
    from core.store import MemoryForecastStore
    from warmpool.backends.kubernetes import KubernetesBackend
    from warmpool.controller import Controller

    cp.ensure_namespace(NS)
    policy = _policy(handler, node.images["busybox"]["ref"], kind)
    pool = policy.pools[0].name
    ip = _service(cp, pool)
    ctl = Controller(policy, MemoryForecastStore(), {"kubernetes": KubernetesBackend(kubeconfig=str(cp.admin_kubeconfig))})
    api = _Api(ctl)
    out: dict[str, list[float]] = {"served": [], "pod": [], "api": []}
    try:
        # a short connect timeout: a sandbox that is not listening yet may drop the SYN (gVisor's
        # netstack does), and a long one would round every first answer up to it
        timeout = httpx.Timeout(0.5, connect=0.1)
        with httpx.Client(timeout=timeout) as client, httpx.Client(timeout=timeout) as pod_client:
            for _ in range(claims):
                if kind == "warm":  # the controller's loop, run here: one warm pod before each claim
                    _until(f"a warm {handler} pod", lambda: (ctl.step(), ctl.describe()["pools"][0]["warm"] >= 1)[1], 180)
                t0 = time.monotonic()
                r = httpx.post(f"{api.url}/api/v1/pools/{pool}/claim", timeout=60)
                answered = time.monotonic()
                if r.status_code != 200:
                    raise RuntimeError(f"claim from {pool}: {r.status_code} {r.text[:300]}")
                got = r.json()
                if got["cold_start"] != (kind == "cold"):
                    raise RuntimeError(f"a {kind} claim from {pool} came back with cold_start={got['cold_start']}")
                at = _both(f"{pool}'s claim answering", {
                    "service": lambda: _answers(client, ip),
                    "pod": _pod_address(cp, pod_client, got["endpoint"], got["container_id"])}, SERVE_TIMEOUT_SECONDS)
                out["served"].append(at["service"] - t0)
                out["pod"].append(at["pod"] - t0)
                out["api"].append(answered - t0)
                r = httpx.post(f"{api.url}/api/v1/pools/{pool}/release", json={"container_id": got["container_id"]}, timeout=60)
                if r.status_code != 200:
                    raise RuntimeError(f"release in {pool}: {r.status_code} {r.text[:300]}")
                if kind == "cold":  # gone before the next claim, as the batch bench's pods are: a sandbox still
                    # terminating (busybox's httpd ignores SIGTERM: 30 s grace); while they did, gVisor starts took 3-10x longer
                    path = f"/api/v1/namespaces/{NS}/pods/{got['container_id']}"
                    cp.admin.http.delete(path, params={"gracePeriodSeconds": 0})
                    _until(f"{got['container_id']} gone", lambda: cp.admin.get(path).status_code == 404, 120)
                _until(f"{pool}'s Service empty after the release", lambda: not _answers(client, ip), 60)
                node.check_alive()
    finally:
        api.stop()
        cp.admin.delete(f"/api/v1/namespaces/{NS}/services/{pool}")
        for p in cp.admin.json(f"/api/v1/namespaces/{NS}/pods")["items"]:
            cp.admin.delete(f"/api/v1/namespaces/{NS}/pods/{p['metadata']['name']}")
    return out
