"""`foresight serve` options: the workloads YAML feeds labels and static capacity."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from adapter.app import create_app
from adapter.factory import build_settings
from adapter.quantity import parse_quantity
from core.errors import UserError
from core.store import MemoryForecastStore, make_forecast
from foresight.cli import build_parser
from tests.adapter.helpers import EXT

CONFIG = """
apiVersion: foresight/v1alpha1
kind: WorkloadConfig
store: {url: "redis://127.0.0.1:6390/0"}
workloads:
  - namespace: shop
    name: checkout
    labels: {tier: web, team: pay}
    capacity: {cpu_request_cores: 0.25, ready_pods: 3}
  - namespace: shop
    name: db
    kind: StatefulSet
"""


def test_config_labels_and_static_capacity_reach_the_served_values(tmp_path):
    cfg = tmp_path / "workloads.yaml"
    cfg.write_text(CONFIG)
    settings, url = build_settings({"config": str(cfg)})
    assert url == "redis://127.0.0.1:6390/0"
    assert settings.workload_labels["shop/checkout"] == {"workload": "checkout", "deployment": "checkout", "tier": "web", "team": "pay"}
    assert settings.workload_labels["shop/db"]["statefulset"] == "db"
    store = MemoryForecastStore()
    now = time.time()
    # a forecast whose meta has no capacity: the configured 3 pods x 0.25 core are used
    store.publish(make_forecast("shop/checkout", origin=now, step_seconds=60, mean=[1.5], quantiles={"p90": [1.5]},
                                model="naive", generated_at=now, observed=((now, 1.5),)))
    with TestClient(create_app(settings, store, clock=lambda: now)) as c:
        r = c.get(f"{EXT}/namespaces/shop/predicted_cpu_load_ratio", params={"labelSelector": "team=pay"})
        assert r.status_code == 200, r.text
        assert float(parse_quantity(r.json()["items"][0]["value"])) == pytest.approx(1.5 / (3 * 0.25))
        # a configured workload with no forecast and nothing observed: 503, never an empty list
        assert c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": "statefulset=db"}).status_code == 503


def test_a_forecast_without_pod_counts_is_503_with_the_reason():
    store = MemoryForecastStore()
    now = time.time()
    store.publish(make_forecast("shop/x", origin=now, step_seconds=60, mean=[1.0], quantiles={"p90": [1.0]},
                                model="naive", generated_at=now, observed=((now, 1.0),)))
    with TestClient(create_app(None, store, clock=lambda: now)) as c:
        r = c.get(f"{EXT}/namespaces/shop/predicted_cpu_load_ratio", params={"labelSelector": "workload=x"})
        cores = c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": "workload=x"})
    assert r.status_code == 503 and "ready pod count" in r.json()["message"]
    assert cores.status_code == 200


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["serve", "--port", "0"], "--port"),
        (["serve", "--workers", "0"], "--workers"),
        (["serve", "--cert", "/nonexistent.crt", "--key", "/nonexistent.key"], "no such file"),
        (["serve", "--cert", "/etc/hostname"], "--cert and --key go together"),
        (["serve", "--quantile", "90"], "quantile"),
    ],
)
def test_bad_serve_options_are_user_errors_naming_the_flag(argv, needle):
    from adapter.cli import options_from_args

    args = build_parser().parse_args(argv)
    with pytest.raises(UserError, match=needle):
        build_settings(options_from_args(args))


def test_without_a_store_flag_or_config_serve_defaults_to_local_redis():
    from adapter.factory import DEFAULT_STORE

    _, url = build_settings({})
    assert url == DEFAULT_STORE == "redis://127.0.0.1:6379/0"
