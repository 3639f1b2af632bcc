"""The alerts in manifests/monitoring/prometheusrule.yaml, checked and unit-tested by the real
promtool, over the metric names the adapter really exports."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from adapter.app import create_app
from core.store import MemoryForecastStore
from tests import stack
from tests.adapter.helpers import EXT, sample_forecast

ROOT = Path(__file__).resolve().parents[2]
RULE = yaml.safe_load((ROOT / "manifests" / "monitoring" / "prometheusrule.yaml").read_text())

TESTS = """
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'foresight_adapter_store_up{pod="a"}'
        values: '1 1 0 0 0 0 0 0'
      - series: 'foresight_adapter_store_up{pod="b"}'
        values: '1 1 1 1 1 1 1 1'
      - series: 'foresight_adapter_values_total{source="forecast"}'
        values: '0+10x30'
      - series: 'foresight_adapter_values_total{source="observed-direct"}'
        values: '0+0x5 0+10x25'
      - series: 'foresight_adapter_responses_total{route="apis",code="2xx"}'
        values: '0+100x30'
      - series: 'foresight_adapter_responses_total{route="apis",code="5xx"}'
        values: '0+0x10 0+5x20'
    alert_rule_test:
      - eval_time: 1m
        alertname: ForesightStoreUnreachable
        exp_alerts: []
      - eval_time: 5m
        alertname: ForesightStoreUnreachable
        exp_alerts:
          - exp_labels: {severity: warning}
            exp_annotations:
              summary: The forecast store (Redis) is unreachable from the adapter
              description: >-
                Values are served as observed-direct (a reactive floor) until Redis is back. /readyz shows the last error.
      - eval_time: 28m
        alertname: ForesightFallbackShareHigh
        exp_alerts:
          - exp_labels: {severity: warning}
            exp_annotations:
              summary: "50% of served values are fallbacks"
              description: foresight_adapter_fallbacks_total says why, by cause.
      - eval_time: 25m
        alertname: ForesightAdapterErrors
        exp_alerts:
          - exp_labels: {severity: critical}
            exp_annotations:
              summary: "4.762% of adapter responses are 5xx"
              description: Check the adapter's log; foresight_adapter_responses_total has them by route.
"""


def _promtool():
    if not stack.have("promtool"):
        pytest.skip("promtool is not installed; run `make deps`")


def test_the_rules_are_valid_promql_for_promtool(tmp_path):
    _promtool()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": RULE["spec"]["groups"]}))
    r = subprocess.run(["promtool", "check", "rules", str(tmp_path / "rules.yaml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_alerts_fire_on_the_degraded_states_they_name(tmp_path):
    _promtool()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": RULE["spec"]["groups"]}))
    (tmp_path / "tests.yaml").write_text(TESTS)
    r = subprocess.run(["promtool", "test", "rules", "tests.yaml"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_metric_an_alert_uses_is_one_the_adapter_exports():
    store = MemoryForecastStore()
    store.publish(sample_forecast("shop", "checkout", now=time.time()))

    class Up:
        def knows(self, sid):
            return True

        def observe(self, sid):
            return None

    with TestClient(create_app(None, store, demand=Up())) as c:
        c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": "workload=checkout"})
        c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": "workload=none"})
        c.get("/api/v1/forecasts")
        exported = set(re.findall(r"^(foresight_\w+?)(?:_total)?(?:\{| )", c.get("/metrics").text, re.M))
    used = {m.removesuffix("_total") for g in RULE["spec"]["groups"] for rule in g["rules"]
            for m in re.findall(r"foresight_adapter_\w+", rule["expr"])}  # the warm pool's: tests/chart/test_monitoring.py
    missing = used - exported
    # demand_source_up appears once a direct read was tried (the both-down test shows it)
    assert missing <= {"foresight_adapter_demand_source_up"}, missing
    assert used >= {"foresight_adapter_store_up", "foresight_adapter_stale_forecasts", "foresight_adapter_no_data",
                    "foresight_adapter_values", "foresight_adapter_responses"}
