"""The Grafana dashboard loads, and every metric its PromQL names is one foresight exports
(or one of the few kube-state-metrics/cAdvisor series it compares against, named here)."""

from __future__ import annotations

import json
import re

from tests.cluster.controlplane import ROOT

DASHBOARD = ROOT / "charts" / "foresight" / "dashboards" / "foresight.json"
# the actual demand and replica counts the forecasts are compared with: not foresight's
OTHERS = {"container_cpu_usage_seconds_total", "kube_horizontalpodautoscaler_status_desired_replicas",
          "kube_deployment_status_replicas_ready"}
PROMQL_WORDS = {"sum", "by", "rate", "ignoring", "group_left", "histogram_quantile", "le", "label_values",
                "clamp_min", "clamp_max"}


def exported() -> set[str]:
    """Sample names foresight's own registries expose."""
    from warmpool.metrics import Metrics

    names = set()
    for fam in Metrics().registry.collect():  # every family, used or not
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}.get(fam.type, [""])
        names |= {fam.name + s for s in suffixes}
    src = "".join(p.read_text() for p in (ROOT / "adapter").rglob("*.py"))
    for n in set(re.findall(r'"(foresight_adapter_[a-z0-9_]+)"', src)):
        names |= {n, n + "_bucket", n + "_count", n + "_sum"}
    return names


def _metric_names(expr: str) -> set[str]:
    expr = re.sub(r'\{[^}]*\}', "", expr)  # label matchers
    expr = re.sub(r'\[[^\]]*\]', "", expr)  # ranges
    words = set(re.findall(r'[a-zA-Z_:][a-zA-Z0-9_:]*', expr))
    grouping = set()
    for m in re.finditer(r'(?:by|ignoring|without|on) *\(([^)]*)\)', expr):
        grouping |= {w.strip() for w in m.group(1).split(",")}
    return {w for w in words - PROMQL_WORDS - grouping if "_" in w}


def test_the_dashboard_loads_and_has_the_promised_panels():
    d = json.loads(DASHBOARD.read_text())
    titles = " | ".join(p["title"] for p in d["panels"])
    for what in ("actual", "source", "Desired vs ready", "cold starts"):
        assert what in titles, titles
    assert all(t["expr"] for p in d["panels"] for t in p["targets"])


def test_every_promql_expression_names_a_metric_foresight_exports():
    d = json.loads(DASHBOARD.read_text())
    ours = exported()
    exprs = [t["expr"] for p in d["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in d["templating"]["list"] if v["type"] == "query"]
    seen = set()
    for e in exprs:
        names = _metric_names(e)
        assert names, e
        unknown = names - ours - OTHERS
        assert not unknown, f"{e}: {unknown} is not exported by foresight"
        seen |= names
    assert {"foresight_adapter_served_value", "foresight_warmpool_claims_total", "foresight_warmpool_cold_starts_total"} <= seen


def test_the_check_would_catch_a_misspelt_metric():
    assert _metric_names('sum(rate(foresight_adapter_valuez_total[5m]))') - exported() == {"foresight_adapter_valuez_total"}
