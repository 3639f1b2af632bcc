from __future__ import annotations

import pytest

from core.errors import ConfigError
from forecaster.config import DEFAULT_DEMAND_QUERY, load_config, parse_config
from forecaster.workloads import pod_regex

GOOD = """
apiVersion: foresight/v1alpha1
kind: WorkloadConfig
source: {url: "prometheus://127.0.0.1:9090", step_seconds: 60, thanos: {max_source_resolution: 5m, dedup: true}}
store: {url: "redis://127.0.0.1:6379/0"}
workloads:
  - namespace: shop
    name: checkout
    labels: {tier: web}
    capacity: {cpu_request_cores: 0.5}
  - namespace: shop
    name: cart
    kind: StatefulSet
    demand_query: sum(rate(x[5m]))
    capacity: {ready_pods: 3, cpu_request_query: "avg(y)"}
"""


def test_a_valid_file_compiles_with_defaults(tmp_path):
    p = tmp_path / "w.yaml"
    p.write_text(GOOD)
    cfg = load_config(p)
    w = cfg.workload("shop/checkout")
    assert w.demand_query == DEFAULT_DEMAND_QUERY.format(namespace="shop", pods=pod_regex("Deployment", "checkout"))
    assert 'pod=~"checkout-[' in w.demand_query and 'container!=""' in w.demand_query
    assert w.all_labels() == {"workload": "checkout", "deployment": "checkout", "tier": "web"}
    assert w.cpu_request_query() is None and "kube_pod_status_ready" in w.ready_pods_query()
    cart = cfg.workload("shop/cart")
    assert cart.ready_pods_query() is None and cart.cpu_request_query() == "avg(y)"
    assert cart.all_labels()["statefulset"] == "cart"
    assert cfg.source.thanos == {"max_source_resolution": "5m", "dedup": True}


def test_every_problem_is_reported_at_once_with_its_path():
    bad = {
        "apiVersion": "foresight/v2",
        "sourc": {},
        "source": {"url": "ftp://x", "step_seconds": "60", "thanos": {"dedup": "yes"}},
        "training": {"quantiles": [0.5, 1.5], "horizon_steps": 0},
        "workloads": [
            {"namespace": "Shop!", "name": "checkout", "replicas": 3},
            {"name": "cart", "capacity": {"cpu_request_cores": -1, "ready_pods": "three"}},
            {"namespace": "shop", "name": "checkout"},
            {"namespace": "shop", "name": "checkout"},
        ],
    }
    with pytest.raises(ConfigError) as e:
        parse_config(bad, "w.yaml")
    probs = "\n".join(e.value.problems)
    for expected in [
        "apiVersion:",
        "sourc: unknown key",
        "source.url:",
        "source.step_seconds: must be int/float",
        "source.thanos.dedup:",
        "training.quantiles[1]: 1.5",
        "training.horizon_steps: 0 must be > 0",
        "workloads[0].namespace: 'Shop!'",
        "workloads[0].replicas: unknown key",
        "workloads[1].namespace: is required",
        "workloads[1].capacity.cpu_request_cores: -1",
        "workloads[1].capacity.ready_pods: must be int",
        "workloads[3]: workload shop/checkout is listed twice",
    ]:
        assert expected in probs, f"missing {expected!r} in:\n{probs}"
    assert len(e.value.problems) >= 13
    assert str(e.value).startswith("w.yaml: ")


def test_unreadable_and_non_yaml_files_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")
    p = tmp_path / "bad.yaml"
    p.write_text("workloads: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(p)
