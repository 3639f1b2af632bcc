"""docs/tasks/beside-keda.md is a tested recipe: its ScaledObject's trigger is one the scaler accepts, its
PredictiveAutoscaler renders a ScaledObject on the chart's Service and authentication, and its
authentication is the chart's default one. (tests/chart/test_chart_keda.py renders the chart
with the recipe's values file.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from adapter.keda.request import parse_ref

ROOT = Path(__file__).resolve().parents[2]


def recipe_docs() -> list[dict]:
    text = (ROOT / "docs" / "tasks" / "beside-keda.md").read_text()
    return [d for block in re.findall(r"```yaml\n(.*?)```", text, re.S) for d in yaml.safe_load_all(block) if d]


def doc_of(kind: str) -> dict:
    return next(d for d in recipe_docs() if d.get("kind") == kind)


def chart_values() -> dict:
    return yaml.safe_load((ROOT / "charts" / "foresight" / "values.yaml").read_text())


def test_the_recipes_scaled_object_trigger_is_accepted_by_the_scaler():
    so = doc_of("ScaledObject")
    trigger = so["spec"]["triggers"][0]
    assert trigger["type"] == "external-push"
    req = parse_ref(so["metadata"]["name"], so["metadata"]["namespace"], trigger["metadata"])
    assert req.series_id == "shop/checkout"
    assert req.activation_lead_seconds == 90.0 and req.cooldown_seconds == 0.0


def test_the_recipes_authentication_is_the_one_the_chart_makes_by_default():
    values = chart_values()["keda"]
    so = doc_of("ScaledObject")
    auth = doc_of("ClusterTriggerAuthentication")
    assert so["spec"]["triggers"][0]["authenticationRef"] == {"name": auth["metadata"]["name"], "kind": auth["kind"]}
    assert (auth["kind"], auth["metadata"]["name"]) == (values["triggerAuthentication"]["kind"],
                                                        values["triggerAuthentication"]["name"])
    assert so["spec"]["triggers"][0]["metadata"]["scalerAddress"] == f"foresight-keda.foresight.svc:{values['scaler']['port']}"


def test_the_recipes_predictive_autoscaler_renders_a_scaled_object_on_the_same_scaler():
    from kubeoperator.reconcile import reconcile_autoscaler
    from kubeoperator.scaledobject import KedaTarget

    pa = doc_of("PredictiveAutoscaler")
    pa["metadata"]["uid"] = "u-1"
    so = reconcile_autoscaler(pa, {}, 1_700_000_000.0, keda=KedaTarget()).scaled_object
    assert so["spec"]["minReplicaCount"] == 0
    push = [t for t in so["spec"]["triggers"] if t["type"] == "external-push"]
    hand = doc_of("ScaledObject")["spec"]["triggers"][0]
    assert push and all(t["metadata"]["scalerAddress"] == hand["metadata"]["scalerAddress"] for t in push)
    assert all(t["authenticationRef"] == hand["authenticationRef"] for t in push)
