"""The warm pool on the real node under an hour of the Azure Functions trace, beside the trace
simulator on the same functions and hour (``python -m bench.real_node warmpool``).

The chart runs the warm-pool controller as a pod (``warmpool.enabled``, Kubernetes backend, the
chart's policy base); each function is one WarmPool whose settings are the bundled example
policy's first pool (what ``foresight warmpool simulate --policy foresight`` replays), with the
function's memory as its pods' request and busybox httpd as its process. The functions are the
held-out half's (bench/warmpool_trace.py ``split``; the warm pool's defaults were chosen on the
other half) that were invoked in at least two minutes of the hour but not in all, in SHA-1 order.

The driver follows the simulator's measurement model (warmpool/tracesim.py) on the wall clock:
at 2 s into each minute every function invoked in that minute claims one container through the
warm-pool API (TLS with the chart's CA, a ServiceAccount token its namespace allows to claim) and
polls the claimed pod on its own address until it answers HTTP (traffic only to the node's pod
range); at 59 s it releases it. Counted: warm and cold claims, idle pods at each claim moment (the
simulator's idle container-minutes: resident minus the warm ones used), idle pod-minutes over
time (warm pods polled every 5 s), and per claim the API's answer time and claim -> serving.
The simulator runs the same functions and minutes through the controller on its sim backend.
"""

from __future__ import annotations

import hashlib
import ipaddress
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import numpy as np

NS = "bench-warmpool"
PORT = 8080
HOUR_START_MINUTE = 600  # 10:00 on the trace's day
MINUTES, QUICK_MINUTES = 60, 4
FUNCTIONS, QUICK_FUNCTIONS = 12, 3
POLL_S = 0.02
SERVE_TIMEOUT_S = 50.0  # a claim must serve before its release at 59 s
IDLE_SAMPLE_S = 5.0
POOL_LABEL, STATE_LABEL = "foresight.dev/pool", "foresight.dev/state"


def pick_functions(trace, start: int, minutes: int, n: int) -> list[int]:
    """Held-out functions invoked in at least 2 minutes of the window and idle in at least one
    (the rest tell a warm pool nothing), in SHA-1 order of their ids: the first ``n``."""
    from bench.warmpool_trace import part_indices

    used = (trace.invocations[:, start:start + minutes] > 0).sum(1)
    ok = [i for i in part_indices(trace, "holdout") if 2 <= used[i] <= minutes - 1]
    ok.sort(key=lambda i: hashlib.sha1(trace.function_ids[i].encode()).hexdigest())
    if len(ok) < n:
        raise RuntimeError(f"only {len(ok)} held-out functions are invoked on 2..{minutes - 1} minutes of the window")
    return ok[:n]


def window(trace, functions: list[int], start: int, minutes: int):
    from warmpool.tracesim import Trace

    f = np.asarray(functions)
    return Trace(tuple(trace.function_ids[i] for i in functions), trace.invocations[f, start:start + minutes],
                 trace.duration_seconds[f], trace.memory_mb[f])


def pool_name(i: int) -> str:
    return f"fn-{i}"


def warmpool_object(tpl, name: str, memory_mb: float, image: str) -> dict:
    """A WarmPool with the settings of ``tpl`` (a PoolSpec of the bundled example policy)."""
    ttl, im = tpl.idle_ttl, tpl.idle_model
    cmd = ["/bin/sh", "-c", f"hostname > /www/index.html && exec httpd -f -p {PORT} -h /www"]
    return {"apiVersion": "foresight.dev/v1alpha1", "kind": "WarmPool", "metadata": {"name": name, "namespace": NS},
            "spec": {"workload": name, "backend": "kubernetes", "runtimeClass": tpl.runtime_class, "quantile": tpl.quantile,
                     "minWarm": tpl.min_warm, "maxWarm": 100, "capacityPerContainer": tpl.capacity_per_container,
                     "leadSeconds": tpl.lead_seconds,
                     "idleTTL": {"initialSeconds": ttl.initial_seconds, "decay": ttl.decay, "floorSeconds": ttl.floor_seconds},
                     "idleModel": {"enabled": im.enabled, "binSeconds": im.bin_seconds, "priorScale": im.prior_scale,
                                   "priorPower": im.prior_power, "priorWeight": im.prior_weight,
                                   "previousGapWeight": im.previous_gap_weight, "holdOnTTL": im.hold_on_ttl},
                     "template": {"image": image, "command": cmd,
                                  "resources": {"cpu": "10m", "memory": f"{max(16.0, float(memory_mb)):.0f}Mi"}}}}


@dataclass
class Claim:
    pool: str
    minute: int
    cold: bool = False
    api_s: float = float("nan")
    serving_s: float = float("nan")
    error: str = ""
    container_id: str = ""


class WarmPoolClient:
    """The warm-pool API through its ClusterIP, as a caller of ``NS`` with a token."""

    def __init__(self, url: str, ctx, token: str):
        self.url = url
        self.api = httpx.Client(verify=ctx, timeout=30, headers={"Authorization": f"Bearer {token}"})

    def claim(self, pool: str) -> httpx.Response:
        return self.api.post(f"{self.url}/api/v1/pools/{pool}/claim")

    def release(self, pool: str, container_id: str) -> httpx.Response:
        return self.api.post(f"{self.url}/api/v1/pools/{pool}/release", json={"container_id": container_id})

    def close(self) -> None:
        self.api.close()


def _serving(cp, app: httpx.Client, name: str, t0: float) -> float:
    """Seconds from ``t0`` until pod ``name`` answers on its own address (its IP read from the
    API until it has one: a cold claim's pod is created at the claim)."""
    from tests.cluster.nodenet import POD_CIDR

    ip = None
    while time.monotonic() - t0 < SERVE_TIMEOUT_S:
        if ip is None:
            ip = (cp.admin.json(f"/api/v1/namespaces/{NS}/pods/{name}").get("status") or {}).get("podIP")
            if ip is not None and ipaddress.ip_address(ip) not in ipaddress.ip_network(POD_CIDR):
                raise RuntimeError(f"pod {name} has {ip}, outside the node's pod range {POD_CIDR}")
        if ip is not None:
            try:
                if app.get(f"http://{ip}:{PORT}/").status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
        time.sleep(POLL_S)
    raise TimeoutError(f"pod {name} did not answer within {SERVE_TIMEOUT_S:.0f} s")


def _claim_one(cp, client: WarmPoolClient, app: httpx.Client, c: Claim) -> Claim:
    t0 = time.monotonic()
    try:
        r = client.claim(c.pool)
        c.api_s = time.monotonic() - t0
        if r.status_code != 200:
            c.error = f"{r.status_code} {r.text[:200]}"
            return c
        got = r.json()
        c.cold, c.container_id = bool(got["cold_start"]), got["container_id"]
        c.serving_s = _serving(cp, app, c.container_id, t0)
    except (httpx.HTTPError, TimeoutError, RuntimeError) as exc:
        c.error = c.error or str(exc)[:200]
    return c


def _pods_by_state(cp) -> dict[str, dict[str, int]]:
    """pool -> {warm, creating, claimed}: the warm pool's pods in ``NS`` now."""
    out: dict[str, dict[str, int]] = {}
    for p in cp.admin.json(f"/api/v1/namespaces/{NS}/pods")["items"]:
        md = p["metadata"]
        pool = (md.get("labels") or {}).get(POOL_LABEL)
        if pool is None or md.get("deletionTimestamp"):
            continue
        state = md["labels"].get(STATE_LABEL, "warm")
        if state == "warm" and p["status"].get("phase") != "Running":
            state = "creating"
        d = out.setdefault(pool, {"warm": 0, "creating": 0, "claimed": 0})
        d[state] = d.get(state, 0) + 1
    return out


class IdleSampler(threading.Thread):
    """Warm (unclaimed) pods, ready or starting, every ``IDLE_SAMPLE_S``: their pod-minutes."""

    def __init__(self, cp):
        super().__init__(daemon=True)
        self.cp, self.stop_event, self.pod_minutes, self.samples = cp, threading.Event(), 0.0, 0

    def run(self) -> None:
        last = time.monotonic()
        while not self.stop_event.wait(IDLE_SAMPLE_S):
            now = time.monotonic()
            try:
                idle = sum(d["warm"] + d["creating"] for d in _pods_by_state(self.cp).values())
            except Exception:  # noqa: BLE001 - one failed poll: the interval counts at the next
                continue
            self.pod_minutes += idle * (now - last) / 60.0
            self.samples += 1
            last = now


def _sleep_until(t: float) -> None:
    while (d := t - time.time()) > 0:
        time.sleep(min(d, 1.0))


def drive(cp, client: WarmPoolClient, demand: np.ndarray, names: list[str], start: float, progress=print) -> dict:
    """Claim and release by the minute from wall time ``start`` (``demand``: containers per
    function and minute, the single model's 0 or 1)."""
    from warmpool.tracesim import CLAIM_AT, RELEASE_AT

    claims: list[Claim] = []
    idle_at_claim = 0
    sampler = IdleSampler(cp)
    sampler.start()
    with ThreadPoolExecutor(max(1, len(names))) as pool, httpx.Client(timeout=1) as app:
        try:
            for m in range(demand.shape[1]):
                base = start + 60.0 * m
                _sleep_until(base + CLAIM_AT - 0.3)
                resident = _pods_by_state(cp)
                _sleep_until(base + CLAIM_AT)
                todo = [Claim(names[i], m) for i in range(len(names)) for _ in range(int(demand[i, m]))]
                done = list(pool.map(lambda c: _claim_one(cp, client, app, c), todo))
                claims += done
                for i, name in enumerate(names):
                    r = resident.get(name, {})
                    used = sum(1 for c in done if c.pool == name and not c.cold and not c.error)
                    idle_at_claim += max(0, r.get("warm", 0) + r.get("creating", 0) - used)
                _sleep_until(base + RELEASE_AT)
                for c in done:
                    if c.container_id:
                        r = client.release(c.pool, c.container_id)
                        if r.status_code != 200:
                            c.error = c.error or f"release: {r.status_code} {r.text[:200]}"
                cold = sum(c.cold for c in done)
                progress(f"minute {m + 1}/{demand.shape[1]}: {len(done)} claims, {cold} cold, "
                         f"{sum(1 for c in done if c.error)} failed; idle pods so far {idle_at_claim}")
        finally:
            sampler.stop_event.set()
            sampler.join(10)
    return {"claims": claims, "idle_at_claim": idle_at_claim, "idle_pod_minutes": sampler.pod_minutes}


def _q(xs) -> dict:
    a = np.asarray([x for x in xs if np.isfinite(x)], dtype=float)
    if not len(a):
        return {"n": 0}
    p = np.percentile(a, [50, 90, 99])
    return {"n": int(len(a)), "p50_s": round(float(p[0]), 4), "p90_s": round(float(p[1]), 4), "p99_s": round(float(p[2]), 4)}


def node_summary(res: dict) -> dict:
    claims = res["claims"]
    ok = [c for c in claims if not c.error]
    warm, cold = [c for c in ok if not c.cold], [c for c in ok if c.cold]
    return {"claims": len(claims), "warm": len(warm), "cold": len(cold), "failed": len(claims) - len(ok),
            "errors": sorted({c.error for c in claims if c.error})[:5],
            "idle_container_minutes": int(res["idle_at_claim"]), "idle_pod_minutes_polled": round(res["idle_pod_minutes"], 2),
            "api_s": _q(c.api_s for c in ok), "warm_serving_s": _q(c.serving_s for c in warm),
            "cold_serving_s": _q(c.serving_s for c in cold), "per_claim": [_claim_row(c) for c in claims]}


def _claim_row(c: Claim) -> dict:
    """One claim as saved: which pool, trace minute and kind, so a difference from the simulator
    can be traced to its function and minute."""
    row = {"pool": c.pool, "minute": c.minute, "cold": c.cold, "error": c.error}
    for k in ("api_s", "serving_s"):
        v = getattr(c, k)
        row[k] = round(v, 4) if np.isfinite(v) else None
    return row


def simulator_summary(sub) -> dict:
    """``foresight warmpool simulate --policy foresight`` on the same functions and minutes."""
    from warmpool.tracesim import resolve_policy, simulate

    r = simulate(sub, "single", resolve_policy("foresight"))
    return {"claims": r.invocations, "warm": r.invocations - r.cold_starts, "cold": r.cold_starts,
            "idle_container_minutes": r.idle_container_minutes, "cold_pct_invoked_minutes": round(r.cold_pct_invoked_minutes, 2)}


def table(doc: dict) -> str:
    n, s = doc["node"], doc["simulator"]
    rows = [("claims", n["claims"], s["claims"]), ("warm claims", n["warm"], s["warm"]), ("cold claims", n["cold"], s["cold"]),
            ("failed claims", n["failed"], 0), ("idle container-minutes (at each claim)", n["idle_container_minutes"],
                                                 s["idle_container_minutes"]),
            ("idle pod-minutes (polled every 5 s)", n["idle_pod_minutes_polled"], "")]
    lines = [f"{'':40s}{'node':>10s}{'simulator':>11s}"] + [f"{a:40s}{b!s:>10s}{c!s:>11s}" for a, b, c in rows]
    for k in ("api_s", "warm_serving_s", "cold_serving_s"):
        q = n[k]
        if q.get("n"):
            lines.append(f"{'node ' + k[:-2].replace('_', ' ') + ' p50/p90/p99 s':40s}{q['p50_s']:.3f} / {q['p90_s']:.3f} / {q['p99_s']:.3f} ({q['n']})")
    return "\n".join(lines)


def claimer_token(cp, seconds: int, name: str = "claimer") -> str:
    """A ServiceAccount of ``NS`` whose Role grants claim on warmpools there (what a caller needs),
    and a token for it valid ``seconds`` (the whole run: an expired one answers 401)."""
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}"
    for path, body in (
        (f"/api/v1/namespaces/{NS}/serviceaccounts/{name}", {"apiVersion": "v1", "kind": "ServiceAccount",
                                                             "metadata": {"name": name, "namespace": NS}}),
        (f"{rbac}/roles/{name}", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name, "namespace": NS},
                                  "rules": [{"apiGroups": ["foresight.dev"], "resources": ["warmpools"], "verbs": ["claim", "get"]}]}),
        (f"{rbac}/rolebindings/{name}", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                                         "metadata": {"name": name, "namespace": NS},
                                         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                                         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}]})):
        r = cp.admin.apply(path, body, "bench-warmpool")
        if r.status_code not in (200, 201):
            raise RuntimeError(f"{path}: {r.status_code} {r.text[:300]}")
    return cp.service_account_token(NS, name, seconds=seconds)


def warmpool_api(cp, namespace: str):
    """The chart's warm-pool API: its ClusterIP URL, and a TLS context trusting only the chart's CA."""
    import base64
    import ssl

    from tests.cluster.nodenet import SERVICE_CIDR

    svc = cp.admin.json(f"/api/v1/namespaces/{namespace}/services/foresight-warmpool")["spec"]
    if ipaddress.ip_address(svc["clusterIP"]) not in ipaddress.ip_network(SERVICE_CIDR):
        raise RuntimeError(f"the warm-pool Service has {svc['clusterIP']}, outside {SERVICE_CIDR}")
    ca = base64.b64decode(cp.admin.json(f"/api/v1/namespaces/{namespace}/secrets/foresight-warmpool-tls")["data"]["ca.crt"])
    ctx = ssl.create_default_context(cadata=ca.decode())
    # the certificate names foresight-warmpool.<ns>.svc, which this host cannot resolve: the chain
    # is still checked against the chart's CA, only the name is not
    ctx.check_hostname = False
    return f"https://{svc['clusterIP']}:{svc['ports'][0]['port']}", ctx


def _in_controller(client: WarmPoolClient, names: list[str]) -> bool:
    r = client.api.get(f"{client.url}/api/v1/pools")
    return r.status_code == 200 and set(names) <= {p["pool"] for p in r.json()["pools"]}


def experiment(node, release_namespace: str, quick: bool, data_dir, progress=print) -> dict:
    """The trace hour on a node where the chart runs with the warm pool (``release_namespace``);
    the WarmPools it makes are deleted at the end."""
    from tests.cluster.controlplane import wait_for
    from warmpool.tracesim import load_trace, resolve_policy

    cp = node.cp
    minutes, n = (QUICK_MINUTES, QUICK_FUNCTIONS) if quick else (MINUTES, FUNCTIONS)
    trace = load_trace(data_dir)
    functions = pick_functions(trace, HOUR_START_MINUTE, minutes, n)
    sub = window(trace, functions, HOUR_START_MINUTE, minutes)
    names = [pool_name(i) for i in functions]
    tpl = resolve_policy("foresight").template.pools[0]
    cp.ensure_namespace(NS)
    url, ctx = warmpool_api(cp, release_namespace)
    # the token outlives the run's set-up, its minutes and the releases after them
    client = WarmPoolClient(url, ctx, claimer_token(cp, seconds=60 * (minutes + 30)))
    pools = [f"{NS}-{x}" for x in names]  # the controller's pool names (namespace-name)
    try:
        for name, mem in zip(names, sub.memory_mb):
            body = warmpool_object(tpl, name, float(mem), node.images["busybox"]["ref"])
            r = cp.admin.apply(f"/apis/foresight.dev/v1alpha1/namespaces/{NS}/warmpools/{name}", body, "bench-warmpool")
            if r.status_code not in (200, 201):
                raise RuntimeError(f"WarmPool {name}: {r.status_code} {r.text[:300]}")
        wait_for("every WarmPool in the controller", lambda: _in_controller(client, pools), timeout=120, interval=1)
        start = (time.time() // 60 + 2) * 60  # a minute boundary, like the simulator's
        progress(f"{len(names)} functions ({', '.join(names)}), {minutes} trace minutes from minute {HOUR_START_MINUTE}, "
                 f"{int((sub.invocations > 0).sum())} invoked function-minutes; starting at the next minute boundary")
        res = drive(cp, client, sub.demand("single"), pools, start, progress)
    finally:
        for name in names:
            cp.admin.delete(f"/apis/foresight.dev/v1alpha1/namespaces/{NS}/warmpools/{name}")
        client.close()
    doc = {"functions": [trace.function_ids[i] for i in functions], "pools": names, "hour_start_minute": HOUR_START_MINUTE,
           "minutes": minutes, "template_pool": tpl.name, "node": node_summary(res), "simulator": simulator_summary(sub)}
    doc["left_after_delete"] = _left_after_delete(cp)
    return doc


def _left_after_delete(cp, timeout: float = 180.0) -> dict:
    """The pools' pods still there ``timeout`` after their WarmPools were deleted (claimed pods
    whose release failed outlive their pool by design), then deleted so the node stops clean;
    reported rather than raised so a long run keeps its figures."""
    deadline = time.monotonic() + timeout
    while (left := _pods_by_state(cp)) and time.monotonic() < deadline:
        time.sleep(1)
    if left:
        cp.admin.delete(f"/api/v1/namespaces/{NS}/pods?labelSelector={POOL_LABEL}")
    return left
