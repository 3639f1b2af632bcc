"""The replay's predictive HPA is the one users apply: manifests/hpa-example.yaml."""

from __future__ import annotations

from pathlib import Path

import yaml

from replay.hpa import ScalingPolicy, ScalingRules
from replay.simulate import ReplayConfig

MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "hpa-example.yaml"


def _rules(d: dict) -> ScalingRules:
    return ScalingRules(
        int(d["stabilizationWindowSeconds"]), d.get("selectPolicy", "Max"),
        tuple(ScalingPolicy(p["type"], int(p["value"]), int(p["periodSeconds"])) for p in d["policies"]),
    )


def test_the_replay_runs_the_metrics_targets_and_behavior_of_the_example_hpa():
    hpa = yaml.safe_load(MANIFEST.read_text())
    cfg = ReplayConfig()
    metrics = hpa["spec"]["metrics"]
    kinds = sorted(m["type"] for m in metrics)
    assert kinds == ["External", "Resource"]  # the predicted metric plus the reactive CPU floor
    res = next(m for m in metrics if m["type"] == "Resource")["resource"]
    ext = next(m for m in metrics if m["type"] == "External")["external"]
    assert res["name"] == "cpu" and res["target"]["averageUtilization"] == round(cfg.target * 100)
    assert ext["metric"]["name"] == "predicted_cpu_load_ratio"
    assert ext["target"]["type"] == "Value" and ext["target"]["value"] == f"{round(cfg.target * 1000)}m"
    spec = cfg.hpa_spec("predictive")
    behavior = hpa["spec"]["behavior"]
    assert _rules(behavior["scaleUp"]) == spec.scale_up
    assert _rules(behavior["scaleDown"]) == spec.scale_down


def test_the_reactive_baseline_keeps_kubernetes_default_scale_down_window():
    from replay.hpa import DEFAULT_SCALE_DOWN

    assert ReplayConfig().hpa_spec("reactive").scale_down == DEFAULT_SCALE_DOWN
    assert ReplayConfig().hpa_spec("predictive").scale_down.stabilization_window_seconds == 30
