"""Predictive against reactive on the real node, same demand (``python -m bench.real_node autoscale``).

Three copies of ``foresight demo-app`` (5 ms of CPU per request, CPU request = limit = 200m)
run at once in namespace bench-autoscale, each a Deployment with a ClusterIP Service, and
``foresight load`` (the library: one thread per copy, the same arrival times) drives each with
the bundled trace azurev1-737498 (held-out half) from 2017-01-28 15:00 on, played in real time:
flat, then a daily rise of 4.5x within ten minutes, then the peak. Scaled so the peak is
``PEAK_RPS`` requests/s per copy (about 0.4 cores each).

The request's cost is set so that a pod meets the latency SLO at the HPAs' 70% target and misses
it only when under-provisioned, as a service tuned for its SLO does: with a CPU limit of 200m
(CFS quota 20 ms per 100 ms), a 20-ms request already had 15% of its requests over 500 ms at
70% utilization, a 5-ms one none up to 90% and 12% at 110% (demo-app in a cgroup with that
quota, Poisson arrivals, 40 s per level). Breach minutes then count under-provisioning, which
is what the HPAs' timing decides.

A new pod becomes Ready about ``TIMING.pod_startup_seconds`` (60 s) after it is created, as the
product's lead assumes and as a service that warms up (JIT, caches, connections) does: the
readiness probe starts ``READY_AFTER_S`` in. This node starts the app's container in about 5 s,
and with that a reactive HPA kept up with the rise (an earlier quick run: 1-2 breach minutes per
copy, at the peak, none from scaling late), which says nothing about the pods users run.

- ``predictive``: a PredictiveAutoscaler with the shipped defaults (only target, min/max and
  cpuRequestCores set); the operator writes its HPA (CPU floor at 70% + predicted_cpu_load_ratio,
  the shipped behaviour), ``foresight train`` on the operator's config (the chart's trainer
  config: 14 days at 60 s, models auto, horizon 12) and ``foresight serve`` answer it.
- ``reactive``: an autoscaling/v2 HPA on CPU utilization 70% with the predictive HPA's behaviour.
- ``reactive-default``: the same with Kubernetes' default behaviour (5-minute scale-down window).
All three read the real metrics-server; the controller manager syncs HPAs every 15 s. A second
PredictiveAutoscaler, in Observe mode, watches the ``reactive`` copy (whose own HPA it leaves
alone): its would-have line is what Act mode would have done on the same demand, compared with
what the ``predictive`` copy's HPA did.

History: 14 days of the same trace before the segment, as the predictive copy's CPU counter,
backfilled into the node's Prometheus and ending where the live load starts
(tests/cluster/backfill.py). The ramp is anchored to the published forecast: the history ends
``LIVE_DELAY_S`` after the trainer can start, and the run stops with an error when the first
forecast was published less than a lead plus an HPA sync before the rise (the machine too slow
to measure the product, not a result).
"""

from __future__ import annotations

import math
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from forecaster.timing import TIMING

NS = "bench-autoscale"
COPIES = ("predictive", "reactive", "reactive-default")
OBSERVED = "reactive"  # the copy an Observe-mode PredictiveAutoscaler watches
CPU_MS_PER_REQUEST = 5.0
CPU_REQUEST = 0.2  # cores, request = limit
# The demo app's own CPU per request beyond its burn (HTTP parsing, a new connection each):
# 1.4 ms on loopback at a 5-ms burn, 1.8 ms at 20 (about 10% on the node at 20). The history's
# CPU uses it so that it continues at the live level.
OVERHEAD_CPU_MS = 1.6
CORES_PER_RPS = (CPU_MS_PER_REQUEST + OVERHEAD_CPU_MS) / 1000
SERIES = "azurev1-737498"  # held-out half (bench.replay_all.in_part)
FULL = ("2017-01-28T15:00:00Z", 45.0)
QUICK = ("2017-01-28T15:05:00Z", 20.0)
PEAK_RPS = 64.0
SLO_MS = 500.0
BREACH_SHARE = 0.01  # a minute breaches the SLO when more than 1% of its requests miss it (p99 > SLO)
LIVE_DELAY_S = 150.0  # the history ends (and the live load starts) this long after the backfill begins
MAX_REPLICAS = 8
POLL_SECONDS = 2.0
CONTAINER_START_S = 5.0  # create -> running on this node (app image, bench/results/real_node.md)
READY_AFTER_S = int(TIMING.pod_startup_seconds - CONTAINER_START_S)


def pod_template(name: str, image: str) -> dict:
    cmd = ["foresight", "demo-app", "--host", "0.0.0.0", "--port", "8080", "--cpu-ms-per-request", f"{CPU_MS_PER_REQUEST:g}",
           "--workers", "2", "--queue", "16", "--shutdown-delay-seconds", "2"]
    cpu = f"{int(CPU_REQUEST * 1000)}m"
    return {"metadata": {"labels": {"app": name}},
            "spec": {"terminationGracePeriodSeconds": 5, "containers": [{
                "name": "app", "image": image, "imagePullPolicy": "Never", "command": cmd,
                "ports": [{"containerPort": 8080}],
                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"cpu": cpu, "memory": "128Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 2,
                                   "initialDelaySeconds": READY_AFTER_S}}]}}


def deploy_copies(cp, node) -> dict[str, str]:
    """The three Deployments (1 replica) and Services; returns name -> ClusterIP."""
    from tests.cluster.controlplane import wait_for

    cp.ensure_namespace(NS)
    ips = {}
    for name in COPIES:
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                        "template": pod_template(name, node.images["app"]["ref"])}}
        svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
               "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]}}
        for path, body in ((f"/apis/apps/v1/namespaces/{NS}/deployments/{name}", dep), (f"/api/v1/namespaces/{NS}/services/{name}", svc)):
            r = cp.admin.apply(path, body, "foresight-bench")
            if r.status_code not in (200, 201):
                raise RuntimeError(f"{path}: {r.status_code} {r.text[:300]}")
        ips[name] = cp.admin.json(f"/api/v1/namespaces/{NS}/services/{name}")["spec"]["clusterIP"]
    wait_for("one Ready pod of each copy", lambda: (node.check_alive(), all(
        (cp.admin.json(f"/apis/apps/v1/namespaces/{NS}/deployments/{n}").get("status") or {}).get("readyReplicas") == 1
        for n in COPIES))[1], timeout=240, interval=1)
    return ips


def create_autoscalers(cp) -> dict:
    """The PredictiveAutoscaler (shipped defaults) and the two reactive HPAs; returns the
    behaviour of the HPA the operator wrote."""
    from tests.cluster.controlplane import wait_for

    for name, mode in (("predictive", "Act"), (OBSERVED, "Observe")):
        pa = {"apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler", "metadata": {"name": name, "namespace": NS},
              "spec": {"mode": mode, "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                       "minReplicas": 1, "maxReplicas": MAX_REPLICAS,
                       "metrics": [{"name": "cpu", "type": "Resource", "cpuRequestCores": CPU_REQUEST}]}}
        r = cp.admin.post(f"/apis/foresight.dev/v1alpha1/namespaces/{NS}/predictiveautoscalers", pa)
        if r.status_code != 201:
            raise RuntimeError(f"PredictiveAutoscaler {name}: {r.status_code} {r.text[:300]}")
    hpa = wait_for("the operator's HPA for the PredictiveAutoscaler", lambda: (lambda r: r.json() if r.status_code == 200 else None)(
        cp.admin.get(f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers/predictive")), timeout=120, interval=1)
    behavior = hpa["spec"]["behavior"]
    for name, beh in (("reactive", behavior), ("reactive-default", None)):
        spec = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                "minReplicas": 1, "maxReplicas": MAX_REPLICAS,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]}
        if beh:
            spec["behavior"] = beh
        r = cp.admin.post(f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers",
                          {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                           "metadata": {"name": name, "namespace": NS}, "spec": spec})
        if r.status_code != 201:
            raise RuntimeError(f"HPA {name}: {r.status_code} {r.text[:300]}")
    return behavior


@dataclass
class Plan:
    segment: object
    offsets: list[float]
    rise_offset_s: float  # wall seconds from the live start to the start of the rise
    history: object  # the trace before the segment (loaddriver.Segment)

    def rps(self, offset_s: float) -> float:
        """Requests per wall second at a trace offset: the interpolated value, scaled to the peak."""
        import numpy as np

        seg = self.segment
        return float(np.interp(offset_s, seg.offsets_s, seg.values)) / max(seg.values) * PEAK_RPS


def plan(start: str, minutes: float, seed: int = 0) -> Plan:
    from datetime import datetime

    from foresight.loaddriver import bundled_traces, load_segment, plan_arrivals

    seg = load_segment(bundled_traces(), SERIES, start, minutes)
    t0 = datetime.fromisoformat(start.replace("Z", "+00:00"))
    hist = load_segment(bundled_traces(), SERIES, (t0 - timedelta(days=14, minutes=10)).isoformat(), 14 * 1440 + 10)
    # the rise starts at the last trace point still within 10% of the segment's first value
    # before the first one halfway from it to the peak
    half = seg.values[0] + (max(seg.values) - seg.values[0]) / 2
    k = next(i for i, v in enumerate(seg.values) if v >= half)
    j = max([i for i in range(k) if seg.values[i] <= seg.values[0] * 1.1], default=0)
    return Plan(seg, plan_arrivals(seg, PEAK_RPS, 1.0, "poisson", seed), seg.offsets_s[j], hist)


# The short run (``--ramp``, what make test runs): a daily step the trainer has seen before,
# flat at RAMP_FLAT of the peak, rising to the peak in RAMP_RISE_S, held RAMP_HOLD_S a day.
# The live load is RAMP_LIVE_S of flat, the rise and RAMP_PEAK_LIVE_S of the peak; one pod
# saturates about a minute into the rise, and a reactive HPA's pods come two metric-and-start-up
# delays later, so the reactive copy breaches while the forecast's pods are ready.
RAMP_FLAT = 0.21  # the trace's flat part over its peak (azurev1-737498 at 15:05)
RAMP_RISE_S = 180.0
RAMP_HOLD_S = 1800.0
RAMP_LIVE_S = 120.0
RAMP_PEAK_LIVE_S = 240.0
RAMP_HISTORY_DAYS = 14
DAY_S = 86400.0


def ramp_level(offset_s: float) -> float:
    """The daily step's level (peak = 1) at a time relative to a rise, any day before or after."""
    into = offset_s % DAY_S
    if into < RAMP_RISE_S:
        return RAMP_FLAT + (1 - RAMP_FLAT) * into / RAMP_RISE_S
    if into < RAMP_RISE_S + RAMP_HOLD_S:
        return 1.0
    if into < 2 * RAMP_RISE_S + RAMP_HOLD_S:
        return 1.0 - (1 - RAMP_FLAT) * (into - RAMP_RISE_S - RAMP_HOLD_S) / RAMP_RISE_S
    return RAMP_FLAT


def ramp_plan(seed: int = 0) -> Plan:
    """The short run's plan: the live segment and its history from ``ramp_level`` at 30-s points
    (a fixed date: only offsets matter; the rise falls at the same time of day every day)."""
    from foresight.loaddriver import Segment, plan_arrivals

    start = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
    length = RAMP_LIVE_S + RAMP_RISE_S + RAMP_PEAK_LIVE_S
    live = tuple(float(t) for t in range(0, int(length) + 1, 30))
    seg = Segment("synthetic-daily-ramp", start, live, tuple(ramp_level(t - RAMP_LIVE_S) for t in live))
    hist_s = RAMP_HISTORY_DAYS * DAY_S + 600
    past = tuple(float(t) for t in range(0, int(hist_s) + 1, 30))
    hist = Segment(seg.series_id, start - timedelta(seconds=hist_s), past,
                   tuple(ramp_level(t - hist_s - RAMP_LIVE_S) for t in past))
    return Plan(seg, plan_arrivals(seg, PEAK_RPS, 1.0, "poisson", seed), RAMP_LIVE_S, hist)


def history_cores(p: Plan, live_start_unix: float):
    """CPU cores of the predictive copy at a unix time before the live start (the trace before
    the segment, scaled as the live load is)."""
    import numpy as np

    top = max(p.segment.values)
    hist_t0 = p.history.start.timestamp() - p.segment.start.timestamp()  # trace seconds, segment start = 0
    xs = np.array(p.history.offsets_s) + hist_t0
    ys = np.array(p.history.values) / top * PEAK_RPS * CORES_PER_RPS

    def cores(t: float) -> float:
        return float(np.interp(t - live_start_unix, xs, ys))
    return cores


def poisson_counter(cores, start: float, end: float, step: float, seed: int = 0) -> list[tuple[float, float]]:
    """``counter_samples`` with each step's requests drawn from a Poisson count, as the live
    driver's arrivals are: a history in which every sample is the trace's smooth interpolation is
    quieter than anything the node measures live, and a model fitted on it reads live noise as a
    trend."""
    import numpy as np

    from tests.cluster.backfill import counter_samples

    exact = counter_samples(cores, start, end, step)
    requests = np.diff([0.0] + [c for _, c in exact]) / CORES_PER_RPS
    drawn = np.random.default_rng(seed).poisson(requests) * CORES_PER_RPS
    return [(t, float(c)) for (t, _), c in zip(exact, np.cumsum(drawn))]


@dataclass
class Observer:
    """Every POLL_SECONDS: each copy's HPA desired replicas, Deployment replicas and Ready pods,
    the Observe-mode autoscaler's would-have replicas, each pod's first Ready sighting, and the
    predictive copy's latest forecast."""
    cp: object
    store: object
    rows: list = field(default_factory=list)
    pod_ready: dict = field(default_factory=dict)  # pod -> (app, first seen Ready, created; unix)
    forecasts: list = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> "Observer":
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self) -> None:
        last_fc = last_say = 0.0
        while not self.stop.wait(POLL_SECONDS):
            try:
                self._poll()
                if time.time() - last_say >= 60 and "error" not in self.rows[-1]:
                    last_say, r = time.time(), self.rows[-1]
                    print("  live: " + "  ".join(f"{n} desired {r[f'{n}_desired']} ready {r[f'{n}_ready']}" for n in COPIES),
                          flush=True)
                if time.time() - last_fc >= 10:
                    last_fc = time.time()
                    fc = self.store.latest(f"{NS}/predictive")
                    if fc is not None and (not self.forecasts or self.forecasts[-1]["generated_at"] != fc.generated_at):
                        pol = fc.policy or {}
                        self.forecasts.append({"generated_at": fc.generated_at, "origin": fc.origin, "model": fc.model,
                                               "status": fc.status, "source": pol.get("source"), "quantile": pol.get("quantile"),
                                               "headrooms": pol.get("headrooms"), "gap_edges": pol.get("gap_edges"),
                                               "p50": list(fc.quantiles.get("p50", ()))[:12], "p90": list(fc.quantiles.get("p90", ()))[:12],
                                               "observed": fc.observed[-1][1] if fc.observed else None})
            except Exception as exc:  # noqa: BLE001 - a missed poll is a gap in the timeline, reported by its size
                self.rows.append({"t": time.time(), "error": repr(exc)[:200]})

    def _poll(self) -> None:
        now = time.time()
        hpas = {h["metadata"]["name"]: h for h in self.cp.admin.json(f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers")["items"]}
        deps = {d["metadata"]["name"]: d for d in self.cp.admin.json(f"/apis/apps/v1/namespaces/{NS}/deployments")["items"]}
        pods = self.cp.admin.json(f"/api/v1/namespaces/{NS}/pods")["items"]
        ready: dict[str, int] = {n: 0 for n in COPIES}
        for p in pods:
            app = p["metadata"].get("labels", {}).get("app")
            ok = p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp") and any(
                c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
            if app in ready and ok:
                ready[app] += 1
                created = datetime.fromisoformat(p["metadata"]["creationTimestamp"].replace("Z", "+00:00")).timestamp()
                self.pod_ready.setdefault(p["metadata"]["name"], (app, now, created))
        observe = (self.cp.admin.json(f"/apis/foresight.dev/v1alpha1/namespaces/{NS}/predictiveautoscalers/{OBSERVED}")
                   .get("status") or {}).get("observe") or {}
        row = {"t": now, "observe_would_have": observe.get("wouldHaveReplicas")}
        for n in COPIES:
            row[f"{n}_desired"] = (hpas.get(n, {}).get("status") or {}).get("desiredReplicas")
            row[f"{n}_replicas"] = (deps.get(n, {}).get("spec") or {}).get("replicas")
            row[f"{n}_ready"] = ready[n]
        row["predictive_metric"] = _external_value(hpas.get("predictive"))
        self.rows.append(row)

    def finish(self) -> None:
        self.stop.set()
        self._t.join(30)


def _external_value(hpa: dict | None) -> float | None:
    """The predicted ratio as the HPA last read it (its status.currentMetrics), for the timeline."""
    for m in ((hpa or {}).get("status") or {}).get("currentMetrics") or []:
        cur = (m.get("external") or {}).get("current") or {}
        if m.get("type") == "External" and cur.get("value") is not None:
            from adapter.quantity import parse_quantity
            return round(float(parse_quantity(cur["value"])), 4)
    return None


def say(t0: float, what: str) -> None:
    """One progress line (the run takes half an hour and more)."""
    print(f"[{time.monotonic() - t0:6.0f} s] {what}", flush=True)


def run_loads(ips: dict[str, str], offsets: list[float], start_mono: float, max_seconds: float) -> dict[str, list]:
    from foresight.loaddriver import resolve_target, run_load

    out: dict[str, list] = {}
    threads = []
    for name, ip in ips.items():
        target = resolve_target(f"http://{ip}/")

        def go(name=name, target=target):
            out[name] = run_load(target, offsets, concurrency=64, timeout_s=10.0, max_seconds=max_seconds,
                                 start_at=start_mono)
        threads.append(threading.Thread(target=go, daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join(max_seconds + 60)
    return out


def first_fitted_forecast(node, fs, store, live_unix: float, rise_unix: float):
    """The trainer's first fitted forecast (not the persistence placeholder it publishes before
    its first fit) and when it came; an error when it came less than a lead plus an HPA sync
    before the rise: then the machine, not the product, would be measured."""
    from bench.real_node_stack import HPA_SYNC_SECONDS
    from tests.cluster.controlplane import wait_for

    def fitted():
        node.check_alive()
        fc = store.latest(f"{NS}/predictive")
        return fc if fc is not None and fc.status != "fallback" else None

    fc = wait_for("the trainer's first fitted forecast", fitted, timeout=max(30.0, rise_unix - time.time()), interval=1,
                  detail=lambda: fs.trainer_log.read_text()[-3000:])
    published = time.time()
    need = TIMING.lead_seconds + HPA_SYNC_SECONDS
    if published > rise_unix - need:
        raise RuntimeError(f"the first forecast was published {rise_unix - published:.0f} s before the rise, less than "
                           f"a lead + an HPA sync ({need:.0f} s): the machine was too slow to measure the product "
                           f"(trainer started {live_unix - fs.trainer_started_at:.0f} s before the live start); "
                           "raise LIVE_DELAY_S")
    return fc, published


def experiment(quick: bool, work: Path | None = None, start: str | None = None, minutes: float | None = None,
               ramp: bool = False) -> dict:
    """Everything on one node; returns the raw run (bench.real_node_report summarises it).
    ``ramp``: the short synthetic run (``ramp_plan``) instead of the trace."""
    from bench.real_node_stack import HPA_SYNC_SECONDS, Foresight, start_node
    from core.store import open_store
    from tests.cluster.backfill import backfill, counter_samples, deploy_prometheus, history_labels

    if ramp:
        p = ramp_plan()
        series, start, minutes = p.segment.series_id, None, p.segment.length_s / 60
    else:
        start, minutes = start or (QUICK if quick else FULL)[0], minutes or (QUICK if quick else FULL)[1]
        p, series = plan(start, minutes), SERIES
    history_s = min(14 * 86400.0, (p.segment.start - p.history.start).total_seconds() - 600)
    owned = work is None  # a folder of our own is removed at the end (containerd's root: about 1.5 GB)
    work = work or Path(tempfile.mkdtemp(prefix="foresight-real-node-autoscale-"))
    t_setup = time.monotonic()
    say(t_setup, f"starting the control plane and the node in {work}")
    cp, node = start_node(work)
    try:
        say(t_setup, "node Ready; deploying Prometheus, foresight, the two copies and their autoscalers")
        prom_url, prom_pod = deploy_prometheus(node)
        fs = Foresight(cp, work / "foresight", prom_url).start()
        ips = deploy_copies(cp, node)
        behavior = create_autoscalers(cp)
        config = fs.trainer_config(f"{NS}/predictive", f"{NS}/{OBSERVED}")
        fs.start_adapter(config)
        setup_s = time.monotonic() - t_setup

        live_unix = math.ceil(time.time() + LIVE_DELAY_S)
        cores = history_cores(p, live_unix)
        # the ramp's history is exact (a synthetic check of the orderings); a trace's carries the
        # arrivals' noise, as a deployment's history does
        sample = counter_samples if ramp else poisson_counter
        samples = sample(cores, live_unix - history_s, live_unix, 30.0)
        say(t_setup, f"backfilling {history_s / 86400:.0f} days of history; the live segment starts in {live_unix - time.time():.0f} s")
        bf = backfill(node, prom_url, prom_pod, [(history_labels(node, NS, n), samples) for n in ("predictive", OBSERVED)])
        say(t_setup, "history loaded; the trainer starts")
        fs.start_trainer(config)
        store = open_store(fs.redis_url)
        rise_unix = live_unix + p.rise_offset_s
        fc, published = first_fitted_forecast(node, fs, store, live_unix, rise_unix)
        say(t_setup, f"first fitted forecast ({fc.model}) {rise_unix - published:.0f} s before the rise; "
                     f"{p.segment.length_s / 60:.0f} min of load follow, a line a minute")
        obs = Observer(cp, store).start()
        start_mono = time.monotonic() + (live_unix - time.time())
        records = run_loads(ips, p.offsets, start_mono, p.segment.length_s + 5)
        time.sleep(POLL_SECONDS * 2)
        obs.finish()
        node.check_alive()
        hpas = {h["metadata"]["name"]: h for h in cp.admin.json(f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers")["items"]}
        pa = cp.admin.json(f"/apis/foresight.dev/v1alpha1/namespaces/{NS}/predictiveautoscalers/predictive")
        observe = cp.admin.json(f"/apis/foresight.dev/v1alpha1/namespaces/{NS}/predictiveautoscalers/{OBSERVED}")
    finally:
        errors = node.stop()
        cp.stop()
        if owned and not errors:  # kept when the node's clean-up left something to look at
            shutil.rmtree(work, ignore_errors=True)
    return {"quick": quick or ramp, "ramp": ramp, "series": series, "segment_start": start, "segment_minutes": minutes, "peak_rps": PEAK_RPS,
            "slo_ms": SLO_MS, "breach_share": BREACH_SHARE, "cpu_ms_per_request": CPU_MS_PER_REQUEST,
            "cpu_request_cores": CPU_REQUEST, "hpa_sync_seconds": HPA_SYNC_SECONDS, "lead_seconds": TIMING.lead_seconds,
            "live_unix": live_unix, "rise_unix": rise_unix, "first_forecast": {"published_unix": published, "model": fc.model,
                                                                                 "source": (fc.policy or {}).get("source")},
            "trainer_started_unix": fs.trainer_started_at, "setup_seconds": setup_s, "backfill": bf, "behavior": behavior,
            "plan": p, "records": records, "rows": obs.rows, "pod_ready": obs.pod_ready, "forecasts": obs.forecasts,
            "hpa_status": {n: h.get("status") for n, h in hpas.items()}, "pa_status": pa.get("status"),
            "observe_status": (observe.get("status") or {}).get("observe"),
            "cleanup_errors": errors, "work_dir": str(work)}
