"""Counting ready pods the way the HPA controller does (adapter/readypods.py); the watch itself
runs against the real kube-apiserver in tests/e2e/test_ready_pods.py."""

from __future__ import annotations

import math

import pytest

from adapter.readypods import label_selector_matches, pod_counts, pod_cpu_request, running_and_ready


def _pod(ns, labels, phase="Running", ready=True, cpu=None):
    pod = {"metadata": {"namespace": ns, "labels": labels},
           "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
    if cpu is not None:  # as _slim keeps it
        pod["cpu"] = cpu
    return pod


def _containers(*cpus, sidecars=(), init=()):
    def c(cpu, **extra):
        return {"name": "c", "resources": {"requests": {"cpu": cpu}} if cpu is not None else {}, **extra}
    return {"spec": {"containers": [c(x) for x in cpus],
                     "initContainers": [c(x, restartPolicy="Always") for x in sidecars] + [c(x) for x in init]}}


def test_a_selector_matches_labels_and_expressions_and_an_empty_one_matches_nothing():
    sel = {"matchLabels": {"app": "api"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]},
                                                                {"key": "canary", "operator": "DoesNotExist"}]}
    assert label_selector_matches(sel, {"app": "api", "tier": "web"})
    assert not label_selector_matches(sel, {"app": "api", "tier": "db"})
    assert not label_selector_matches(sel, {"app": "api", "tier": "web", "canary": "1"})
    assert not label_selector_matches({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["1"]}]}, {"x": "1"})
    assert label_selector_matches({"matchExpressions": [{"key": "x", "operator": "Exists"}]}, {"x": ""})
    assert not label_selector_matches({}, {"app": "api"}) and not label_selector_matches(None, {"app": "api"})


def test_only_running_and_ready_pods_of_the_workloads_own_selector_count():
    assert running_and_ready(_pod("a", {}))
    assert not running_and_ready(_pod("a", {}, phase="Pending"))
    assert not running_and_ready(_pod("a", {}, ready=False))
    pods = [_pod("shop", {"app": "api"}), _pod("shop", {"app": "api"}), _pod("shop", {"app": "api"}, ready=False),
            _pod("shop", {"app": "api-gateway"}),  # a sibling Deployment sharing the name prefix
            _pod("other", {"app": "api"})]  # the same labels in another namespace
    counts, _ = pod_counts(pods, {"shop/api": ("shop", {"matchLabels": {"app": "api"}}),
                                  "shop/api-gateway": ("shop", {"matchLabels": {"app": "api-gateway"}}),
                                  "shop/idle": ("shop", {"matchLabels": {"app": "idle"}})})
    assert counts == {"shop/api": 2, "shop/api-gateway": 1, "shop/idle": 0}


def test_a_pods_cpu_request_sums_its_containers_and_sidecars_as_the_hpa_does():
    assert pod_cpu_request(_containers("250m", "0.25")) == pytest.approx(0.5)
    # a native sidecar (restartPolicy Always) runs beside the app and counts; a plain init container does not
    assert pod_cpu_request(_containers("200m", sidecars=["100m"], init=["2"])) == pytest.approx(0.3)
    assert pod_cpu_request(_containers("200m", None)) is None  # one container without a request: unknown
    assert pod_cpu_request(_containers("lots")) is None
    assert pod_cpu_request({"spec": {}}) is None


def test_the_cpu_request_is_the_mean_over_the_ready_pods_of_the_workloads_selector():
    pods = [_pod("shop", {"app": "api"}, cpu=0.2), _pod("shop", {"app": "api"}, cpu=0.4),
            _pod("shop", {"app": "api"}, ready=False, cpu=8.0),  # not Ready: not counted, as by the HPA
            _pod("shop", {"app": "api"}),  # no request known: counted as ready, not in the mean
            _pod("shop", {"app": "api-gateway"}, cpu=1.0)]  # a sibling sharing the name prefix
    counts, req = pod_counts(pods, {"shop/api": ("shop", {"matchLabels": {"app": "api"}})})
    assert counts == {"shop/api": 3}
    total, n = req["shop/api"]
    assert n == 2 and math.isclose(total / n, 0.3)


def test_watch_events_keep_the_counts_a_full_recount_would_give():
    # the incremental path (one pod's namespace per event) against counting every pod again
    import random

    from adapter.readypods import PodWatch, _slim

    rnd = random.Random(3)
    w = PodWatch(kube=None, workloads=dict)
    w._st.synced = True
    w._st.selectors = {"a/api": ("a", {"matchLabels": {"app": "api"}}), "a/gw": ("a", {"matchLabels": {"app": "gw"}}),
                       "b/api": ("b", {"matchLabels": {"app": "api"}})}
    w._recount()
    for _ in range(2000):
        uid = f"u{rnd.randrange(40)}"
        if rnd.random() < 0.2:
            w._apply(uid, None)
            continue
        ready = rnd.random() < 0.6
        pod = {"metadata": {"namespace": rnd.choice("ab"), "labels": {"app": rnd.choice(["api", "gw", "db"])}},
               "spec": _containers(rnd.choice(["100m", "250m", "1", None]))["spec"],
               "status": {"phase": rnd.choice(["Running", "Running", "Pending"]),
                          "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
        w._apply(uid, _slim(pod))
    counts, req = pod_counts(w._st.pods.values(), w._st.selectors)
    assert w._st.counts == counts
    assert sum(w._st.counts.values()) > 0
    for sid, (total, n) in req.items():
        assert w._st.requests[sid][1] == n
        assert math.isclose(w._st.requests[sid][0], total, abs_tol=1e-9)
        assert w.cpu_request(sid) == (pytest.approx(total / n) if n else None)
    assert any(n for _, n in req.values())


class _Watch:
    """The adapter's pod-watch seam (``ReadyPods``): the pods and the request it has seen."""

    def __init__(self, pods, request):
        self.pods, self.request = pods, request

    def count(self, series_id, meta=None):
        return self.pods

    def cpu_request(self, series_id):
        return self.request

    def warming(self):
        return False


def test_the_load_ratio_divides_by_the_watched_request_without_kube_state_metrics_and_a_configured_one_wins():
    import time

    from adapter.core import AdapterCore
    from adapter.settings import METRIC_LOAD_RATIO, AdapterSettings
    from forecaster.store import MemoryForecastStore
    from tests.adapter.helpers import sample_forecast

    now = time.time()
    fc = sample_forecast(now=now, p90=(3.0, 3.0, 3.0), observed=2.0, request=None)  # no request published
    core = AdapterCore(AdapterSettings(), MemoryForecastStore(), clock=lambda: now)
    core.ready_pods = _Watch(pods=4, request=0.75)  # four Ready pods of 750m each, from their specs
    v = core.served(METRIC_LOAD_RATIO, fc.series_id, fc, now).value
    assert v == pytest.approx(3.0 / (4 * 0.75), rel=1e-6)
    # the trainer's kube-state-metrics reading is older than the pods the watch sees now
    stale = sample_forecast(now=now, p90=(3.0, 3.0, 3.0), observed=2.0, request=0.5)
    assert core.served(METRIC_LOAD_RATIO, fc.series_id, stale, now).value == pytest.approx(v, rel=1e-6)
    core.ready_pods = _Watch(pods=4, request=None)  # no pod with a request: the published one
    assert core.served(METRIC_LOAD_RATIO, fc.series_id, stale, now).value == pytest.approx(3.0 / (4 * 0.5), rel=1e-6)
    configured = AdapterCore(AdapterSettings(workload_capacity={fc.series_id: {"cpu_request_cores": 1.5}}),
                             MemoryForecastStore(), clock=lambda: now)
    configured.ready_pods = _Watch(pods=4, request=0.75)
    assert configured.served(METRIC_LOAD_RATIO, fc.series_id, fc, now).value == pytest.approx(3.0 / (4 * 1.5), rel=1e-6)


def test_a_replica_is_not_ready_until_its_pod_watch_has_listed_pods_but_only_for_a_grace_period():
    import time

    from fastapi.testclient import TestClient

    from adapter import readypods
    from adapter.app import create_app
    from adapter.readypods import PodWatch
    from adapter.settings import AdapterSettings
    from forecaster.store import MemoryForecastStore

    with TestClient(create_app(AdapterSettings(), MemoryForecastStore())) as c:
        assert c.get("/readyz").status_code == 200  # no watch: discovery alone decides
        w = PodWatch(kube=None, workloads=dict)  # never started: its first list never comes
        c.app.state.core.ready_pods = w
        w._started_at = time.monotonic()
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json()["why"] == "the pod watch has not listed pods yet"
        w._started_at = time.monotonic() - readypods.FIRST_LIST_GRACE_SECONDS - 1  # the API server never answered
        assert c.get("/readyz").status_code == 200
        w._started_at, w._st.synced = time.monotonic(), True
        assert c.get("/readyz").status_code == 200
