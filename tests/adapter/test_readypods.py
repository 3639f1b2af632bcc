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
    from core.store import MemoryForecastStore
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
    from core.store import MemoryForecastStore

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


# --- the list and watch against the kube double (tests/adapter/kube_double.py) --------------

def _wait_for(cond, what, timeout=30.0):
    """Poll a condition (the watch runs in its own thread); the deadline only bounds a failure."""
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _api_pod(uid, ns, app, ready=True, cpu="250m"):
    return {"metadata": {"uid": uid, "namespace": ns, "name": uid, "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


@pytest.fixture
def pod_api():
    """The double with 1,203 pods over three namespaces (402 of shop/api Ready) and api's Deployment."""
    from tests.adapter.kube_double import KubeDouble, Policy

    double = KubeDouble(Policy()).start()
    for i in range(1203):
        ns = ("shop", "bank", "misc")[i % 3]
        double.pods.add(_api_pod(f"p{i}", ns, "api", ready=(i % 3 != 0 or i % 2 == 0)))
    double.pods.workloads["/apis/apps/v1/namespaces/shop/deployments/api"] = {
        "kind": "Deployment", "metadata": {"name": "api", "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": "api"}}}}
    yield double
    double.stop()


def _start_watch(double, **kw):
    from adapter.readypods import PodWatch
    from core.kubeclient import KubeClient

    kube = KubeClient.for_server(double.url, token="sa", timeout_seconds=10)
    w = PodWatch(kube, workloads=lambda: {"shop/api": ("shop", "Deployment", "api")}, **kw).start()
    _wait_for(lambda: w.count("shop/api") is not None, "the first list")
    return w


def test_the_pod_list_is_read_in_pages_and_the_watch_resumes_from_the_lists_resource_version(pod_api):
    w = _start_watch(pod_api, page_size=500)
    try:
        shop_ready = sum(1 for i in range(1203) if i % 3 == 0 and i % 2 == 0)
        assert w.count("shop/api") == shop_ready == 201
        assert w.cpu_request("shop/api") == pytest.approx(0.25)
        lists = pod_api.pods.lists()
        assert [q.get("limit") for q in lists] == ["500", "500", "500"]  # 1,203 pods: three pages
        assert "continue" not in lists[0] and lists[1]["continue"] and lists[2]["continue"] != lists[1]["continue"]
        _wait_for(lambda: pod_api.pods.watches(), "the watch")
        watch = pod_api.pods.watches()[0]
        assert watch["resourceVersion"] == lists[1]["continue"].partition(":")[0]  # the list's own version
        assert watch["allowWatchBookmarks"] in ("true", "True")
        pod_api.pods.emit("ADDED", _api_pod("new", "shop", "api"))
        _wait_for(lambda: w.count("shop/api") == 202, "the added pod")
        pod_api.pods.emit("DELETED", _api_pod("p0", "shop", "api"))
        _wait_for(lambda: w.count("shop/api") == 201, "the deleted pod")
    finally:
        pod_api.pods.closing = True
        w.stop()


def test_a_watch_gone_410_relists_in_pages_and_an_expired_continue_token_starts_the_list_again(pod_api):
    w = _start_watch(pod_api, page_size=500)
    try:
        _wait_for(lambda: pod_api.pods.watches(), "the watch")
        assert w.lists == 1
        pod_api.pods.expire_continue = True  # the relist's second page: 410, its continue token too old
        pod_api.pods.gone()
        _wait_for(lambda: w.lists == 2, "the relist")
        lists = pod_api.pods.lists()
        # first list (3 pages), a relist cut at its second page by the 410, a whole relist (3 pages)
        assert len(lists) == 3 + 2 + 3 and all(q["limit"] == "500" for q in lists)
        assert [("continue" in q) for q in lists[3:]] == [False, True, False, True, True]
        assert w.count("shop/api") == 201 and w.errors == 0  # 410s are routine, not errors
        _wait_for(lambda: len(pod_api.pods.watches()) >= 2, "the second watch")
        pod_api.pods.emit("ADDED", _api_pod("later", "shop", "api"))
        _wait_for(lambda: w.count("shop/api") == 202, "an event after the relist")
    finally:
        pod_api.pods.closing = True
        w.stop()
