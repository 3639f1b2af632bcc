"""The observed-direct fallback at fleet scale: one batch reads many workloads with a few
grouped PromQL queries and gets exactly what each workload's own queries say (real Prometheus,
sibling workloads sharing name prefixes); the set of wanted workloads is bounded."""

from __future__ import annotations

import pytest

from adapter.fallback import ObservedDirect, PrometheusDemandReader
from forecaster.config import parse_config
from forecaster.sources.prometheus import PrometheusSource
from tests.foundation.test_default_queries import END, families


class AtEnd:
    def __init__(self, src):
        self.src = src

    def instant(self, q):
        return self.src.instant(q, time_s=END)


CONFIG = {"source": {"url": "prometheus://x:9090"}, "store": {"url": "memory://"}, "workloads": [
    {"namespace": "shop", "name": "api"}, {"namespace": "shop", "name": "api-gateway"},
    {"namespace": "shop", "name": "api-v2", "capacity": {"cpu_request_cores": 2.0}},
    {"namespace": "shop", "name": "db", "kind": "StatefulSet"},
    {"namespace": "shop", "name": "db-replica", "kind": "StatefulSet", "capacity": {"ready_pods": 1}},
    {"namespace": "shop", "name": "batch", "kind": "ReplicaSet"},
    {"namespace": "shop", "name": "batch-large", "kind": "ReplicaSet"},
    {"namespace": "shop", "name": "custom", "demand_query": 'sum(rate(container_cpu_usage_seconds_total{pod="db-0",container!=""}[5m]))'},
    {"namespace": "shop", "name": "ghost"}]}


@pytest.fixture(scope="module")
def reader(prometheus_factory):
    cfg = parse_config(CONFIG)
    r = PrometheusDemandReader(AtEnd(PrometheusSource(prometheus_factory(families(with_ksm=True)).url)),
                               cfg.workloads, clock=lambda: 1.0)
    yield r
    r.close()


def test_a_batch_equals_every_workloads_own_queries_with_three_grouped_queries_for_the_default_ones(reader):
    ids = sorted(reader.workloads)
    assert reader.batchable == set(ids) - {"shop/custom"}
    reader.queries = 0
    batch = reader.observe_many(ids)
    assert reader.queries == 6  # demand, ready pods, requests of all eight; the custom one its own three
    for sid in ids:
        assert batch[sid] == reader.observe(sid), sid
    assert batch["shop/api"].cores == pytest.approx(0.5) and batch["shop/api"].ready_pods == 2
    assert batch["shop/api"].cpu_request_cores == pytest.approx(0.6)  # per pod: the app 0.5 + its sidecar 0.1
    assert batch["shop/api-gateway"].cores == pytest.approx(1.0)
    assert batch["shop/db"].ready_pods == 1 and batch["shop/db-replica"].ready_pods == 1
    assert batch["shop/batch-large"].cores == pytest.approx(5.0)
    assert batch["shop/custom"].cores == pytest.approx(0.4)
    assert batch["shop/ghost"] is None  # no pods: nothing invented
    reader.queries = 0
    one = reader.observe_many(["shop/api"])  # the same three queries answer the whole namespace
    assert reader.queries == 3 and set(one) == reader.batchable and one["shop/db"] == batch["shop/db"]


def test_requests_share_one_batch_and_the_wanted_set_is_bounded(reader):
    od = ObservedDirect(reader, max_wanted=3, gather_seconds=0.2, clock=lambda: 1.0, max_age_seconds=1e9)
    pending: list = []
    for sid in ("shop/api", "shop/db", "shop/batch", "shop/api-gateway"):
        od.get(sid, pending)
    assert len(pending) == 3 and len({id(f) for f in pending}) == 1 and od.dropped == 1
    pending[0].result(timeout=30)
    assert od.batches == 1
    assert od.get("shop/api").cores == pytest.approx(0.5) and od.get("shop/db").ready_pods == 1
    # the one refused for a full set was read by the same batch (its namespace's queries)
    assert od.get("shop/api-gateway").cores == pytest.approx(1.0) and od.batches == 1
    od.close()


def test_kept_warm_the_readings_are_there_before_anyone_asks(reader):
    import time

    od = ObservedDirect(reader, keep_warm=True, gather_seconds=0.0, max_age_seconds=1e9, ttl_seconds=1e9).start()
    deadline = time.monotonic() + 30
    while od.batches < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert od.batches == 1
    pending: list = []
    assert od.get("shop/db", pending).cores == pytest.approx(1.0) and pending == []  # no read started
    assert od.get("shop/custom", pending) is None and len(pending) == 1  # its own query: read when asked
    od.close()
