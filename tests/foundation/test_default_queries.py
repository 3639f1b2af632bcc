"""The default queries count exactly the workload's pods, on a real Prometheus fed sibling
workloads whose names share a prefix (``api`` beside ``api-gateway`` and ``api-v2``, ``db``
beside ``db-replica``, a ReplicaSet ``batch`` beside ``batch-large``), and say how to do without
kube-state-metrics when it is not scraped."""

from __future__ import annotations

import re

import pytest

from forecaster.config import parse_config
from forecaster.schedule import _capacity
from forecaster.sources.prometheus import PrometheusSource
from forecaster.workloads import pod_regex

END = 1_700_000_000
STAMPS = [END - 600 + 30 * k for k in range(21)]
# pod -> (CPU cores used, CPU request, ready); names as Kubernetes generates them
PODS = {
    "api-66b6c48dd5-4jw2m": (0.30, 0.5, 1), "api-66b6c48dd5-x7k9p": (0.20, 0.5, 1),
    "api-gateway-5d8f9c7b4-q2w5z": (1.00, 2.0, 1), "api-v2-7c9b5d-zz2bq": (2.00, 2.0, 1),
    "db-0": (0.40, 1.0, 1), "db-1": (0.60, 1.0, 0), "db-replica-0": (3.00, 4.0, 1),
    "batch-b2x7q": (0.25, 0.25, 1), "batch-large-b2x7q": (5.0, 8.0, 1),
}
CONFIG = {"source": {"url": "prometheus://x:9090"}, "store": {"url": "memory://"}, "workloads": [
    {"namespace": "shop", "name": "api"}, {"namespace": "shop", "name": "db", "kind": "StatefulSet"},
    {"namespace": "shop", "name": "batch", "kind": "ReplicaSet"}]}


def families(with_ksm: bool) -> dict:
    cadvisor = [({"namespace": "shop", "pod": p, "container": "app"}, [(t, 100 + used * (t - STAMPS[0])) for t in STAMPS])
                for p, (used, _, _) in PODS.items()]
    # the pod-level cgroup series cAdvisor also exports (container="") must not double the sum
    cadvisor += [({"namespace": "shop", "pod": p, "container": ""}, [(t, 100 + used * (t - STAMPS[0])) for t in STAMPS])
                 for p, (used, _, _) in PODS.items()]
    out = {"container_cpu_usage_seconds_total": cadvisor}
    if with_ksm:
        out["kube_pod_status_ready"] = [({"namespace": "shop", "pod": p, "condition": "true"}, [(t, ready) for t in STAMPS])
                                        for p, (_, _, ready) in PODS.items()]
        out["kube_pod_container_resource_requests"] = [
            ({"namespace": "shop", "pod": p, "container": "app", "resource": "cpu"}, [(t, req) for t in STAMPS])
            for p, (_, req, _) in PODS.items()]
        # a sidecar in api's pods: a pod's request is both containers' (0.5 + 0.1), not their mean
        out["kube_pod_container_resource_requests"] += [
            ({"namespace": "shop", "pod": p, "container": "proxy", "resource": "cpu"}, [(t, 0.1) for t in STAMPS])
            for p in PODS if p.startswith("api-66b6c48dd5-")]
    return out


class AtEnd:
    """The source as the trainer calls it (instant queries 'now'), now being the data's end."""

    def __init__(self, src):
        self.src = src

    def instant(self, q):
        return self.src.instant(q, time_s=END)


def value(src, q):
    res = src.instant(q, time_s=END)
    assert len(res) == 1, (q, res)
    return res[0][1]


def test_the_pod_regexes_match_their_own_pods_only():
    for kind, name, mine in (("Deployment", "api", {"api-66b6c48dd5-4jw2m", "api-66b6c48dd5-x7k9p"}),
                             ("StatefulSet", "db", {"db-0", "db-1"}), ("ReplicaSet", "batch", {"batch-b2x7q"})):
        rx = re.compile(pod_regex(kind, name))
        assert {p for p in PODS if rx.fullmatch(p)} == mine, kind


@pytest.fixture(scope="module")
def cfg():
    return parse_config(CONFIG)


def test_demand_ready_pods_and_requests_count_only_the_workloads_pods(prometheus_factory, cfg):
    src = PrometheusSource(prometheus_factory(families(with_ksm=True)).url)
    api, db, batch = (cfg.workload(f"shop/{n}") for n in ("api", "db", "batch"))
    assert value(src, api.demand_query) == pytest.approx(0.5, abs=1e-6)
    assert value(src, db.demand_query) == pytest.approx(1.0, abs=1e-6)
    assert value(src, batch.demand_query) == pytest.approx(0.25, abs=1e-6)
    # the old prefix took the siblings in: api 3.5 cores instead of 0.5
    assert value(src, api.demand_query.replace(pod_regex("Deployment", "api"), "api-.*")) == pytest.approx(3.5, abs=1e-6)
    assert value(src, api.ready_pods_query()) == 2 and value(src, db.ready_pods_query()) == 1
    assert value(src, api.cpu_request_query()) == pytest.approx(0.6) and value(src, db.cpu_request_query()) == 1.0
    meta, problems = _capacity(api, AtEnd(src))
    assert problems == [] and meta == {"ready_pods": 2, "cpu_request_cores": pytest.approx(0.6)}


def test_without_kube_state_metrics_the_demand_still_works_and_the_trainer_says_what_to_set(prometheus_factory, cfg):
    src = PrometheusSource(prometheus_factory(families(with_ksm=False)).url)
    api = cfg.workload("shop/api")
    assert value(src, api.demand_query) == pytest.approx(0.5, abs=1e-6)
    meta, problems = _capacity(api, AtEnd(src))
    assert meta == {}  # nothing invented
    assert len(problems) == 2
    ready, request = problems
    assert ready.startswith("ready_pods query returned nothing") and "--ready-pods watch" in ready
    assert request.startswith("cpu_request query returned nothing") and "capacity.cpu_request_cores" in request
    assert "--ready-pods watch" in request  # the adapter reads the pods' requests from the Kubernetes API
