"""manifests/monitoring (and the chart's copy): the PrometheusRule alerts on every degraded
state issue 13 lists, over metrics foresight really exports, and the ServiceMonitors select
services and ports that exist. The manifests are also applied to a real kube-apiserver with
the Prometheus Operator's CRDs (tests/e2e/conftest.py OPERATOR_CRDS)."""

from __future__ import annotations

import filecmp
import subprocess

import pytest
import yaml

from tests import stack
from tests.chart.conftest import CHART
from tests.chart.test_dashboard import _metric_names, exported
from tests.cluster.controlplane import ROOT

MONITORING = ROOT / "manifests" / "monitoring"
RULE = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
RULES = {r["alert"]: r for g in RULE["spec"]["groups"] for r in g["rules"]}


def test_every_alert_expression_names_a_metric_foresight_exports():
    ours = exported()
    for name, rule in RULES.items():
        names = _metric_names(rule["expr"])
        assert names, f"{name}: no metric in {rule['expr']!r}"
        assert not names - ours, f"{name}: {names - ours} is not exported by foresight"


@pytest.mark.parametrize("metric, needle", [
    ("foresight_adapter_stale_forecasts", ""),  # stale forecasts
    ("foresight_adapter_values_total", 'source!="forecast"'),  # fallback share above a threshold
    ("foresight_adapter_store_up", ""),  # store unreachable
    ("foresight_adapter_demand_source_up", ""),  # Prometheus unreachable
    ("foresight_adapter_responses_total", 'code="5xx"'),  # adapter 5xx
    ("foresight_warmpool_claims_total", 'result="cold"'),  # warm-pool cold-start rate
], ids=["stale", "fallback-share", "store-down", "prometheus-down", "adapter-5xx", "cold-starts"])
def test_an_alert_watches_each_degraded_state_the_issue_lists(metric, needle):
    hits = [n for n, r in RULES.items() if metric in _metric_names(r["expr"]) and needle in r["expr"]]
    assert hits, f"no alert reads {metric} {needle}"
    for n in hits:
        assert RULES[n]["labels"]["severity"] in ("warning", "critical") and RULES[n]["annotations"]["summary"]


COLD_TESTS = """
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'foresight_warmpool_claims_total{pool="busy",result="warm"}'
        values: '0+8x40'
      - series: 'foresight_warmpool_claims_total{pool="busy",result="cold"}'
        values: '0+2x40'
      - series: 'foresight_warmpool_claims_total{pool="quiet",result="cold"}'
        values: '0x10 1x30'
      - series: 'foresight_warmpool_claims_total{pool="fine",result="warm"}'
        values: '0+10x40'
      - series: 'foresight_warmpool_claims_total{pool="fine",result="cold"}'
        values: '0x10 1x30'
    alert_rule_test:
      - eval_time: 10m
        alertname: ForesightWarmPoolColdStartsHigh
        exp_alerts: []
      - eval_time: 35m
        alertname: ForesightWarmPoolColdStartsHigh
        exp_alerts:
          - exp_labels: {severity: warning, pool: busy}
            exp_annotations:
              summary: "20% of claims on pool busy were cold starts"
              description: >-
                Compare foresight_warmpool_warm with foresight_warmpool_target, and the pool's forecast with the claims it got; foresight_warmpool_cold_starts_total also counts refused claims.
"""


def test_the_cold_start_alert_fires_on_a_busy_pool_only_not_on_one_cold_claim_or_a_rare_one(tmp_path):
    if not stack.have("promtool"):
        pytest.skip("promtool is not installed; run `make deps`")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": RULE["spec"]["groups"]}))
    (tmp_path / "tests.yaml").write_text(COLD_TESTS)
    r = subprocess.run(["promtool", "test", "rules", "tests.yaml"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_charts_rule_file_is_the_one_in_manifests():
    assert filecmp.cmp(CHART / "files" / "prometheusrule.yaml", MONITORING / "prometheusrule.yaml", shallow=False)


def _services() -> list[dict]:
    docs = [d for p in (ROOT / "manifests").rglob("*.yaml") for d in yaml.safe_load_all(p.read_text())
            if isinstance(d, dict)]
    return [d for d in docs if d.get("kind") == "Service"]


def test_each_service_monitor_selects_a_manifest_service_with_the_port_it_scrapes():
    monitors = [d for d in yaml.safe_load_all((MONITORING / "servicemonitor.yaml").read_text()) if d]
    assert {m["metadata"]["name"] for m in monitors} == {"foresight-adapter", "foresight-warmpool"}
    for m in monitors:
        want = m["spec"]["selector"]["matchLabels"]
        namespaces = m["spec"]["namespaceSelector"]["matchNames"]
        picked = [s for s in _services() if s["metadata"]["namespace"] in namespaces
                  and want.items() <= (s["metadata"].get("labels") or {}).items()]
        assert [s["metadata"]["name"] for s in picked] == [m["metadata"]["name"]], m["metadata"]["name"]
        ports = {p["name"] for p in picked[0]["spec"]["ports"]}
        for ep in m["spec"]["endpoints"]:
            assert ep["port"] in ports, f"{m['metadata']['name']}: no port {ep['port']!r} on the Service"
