"""adapter/keda/request.py: a ScaledObject's trigger metadata, every problem reported at once."""

from __future__ import annotations

import pytest

from adapter.keda.request import KEDA_POLLING_SECONDS, ScalerRequestError, parse_ref
from forecaster.timing import TIMING


def test_a_minimal_trigger_gets_the_documented_defaults():
    req = parse_ref("checkout-so", "shop", {"workload": "checkout", "targetValue": "0.35",
                                            "scalerAddress": "foresight:9443", "enableTLS": "true"})
    assert req.series_id == "shop/checkout"
    assert req.metric == "predicted_cpu_cores"
    assert req.target_value == 0.35
    assert req.activation_threshold == 0.0
    assert req.cooldown_seconds == 300.0
    assert req.activation_lead_seconds == TIMING.pod_startup_seconds + KEDA_POLLING_SECONDS
    assert req.metric_name == "predicted_cpu_cores-checkout"


def test_the_activation_lead_is_pod_start_up_plus_kedas_polling():
    req = parse_ref("so", "shop", {"workload": "w", "targetValue": "1", "podStartupSeconds": "20",
                                   "pollingIntervalSeconds": "10"})
    assert req.activation_lead_seconds == 30.0


def test_a_namespace_key_is_refused_the_namespace_is_the_scaled_objects_own():
    with pytest.raises(ScalerRequestError, match=r"scalerMetadata\.namespace: not allowed"):
        parse_ref("so", "shop", {"workload": "checkout", "targetValue": "1", "namespace": "payments"})


def test_a_workload_naming_another_namespace_is_refused():
    with pytest.raises(ScalerRequestError, match=r"scalerMetadata\.workload: 'payments/ledger'"):
        parse_ref("so", "shop", {"workload": "payments/ledger", "targetValue": "1"})


def test_every_problem_is_reported_at_once_with_its_key():
    with pytest.raises(ScalerRequestError) as exc:
        parse_ref("so", "shop", {"targetValue": "-1", "activationThreshold": "x", "cooldownSeconds": "nan",
                                 "metric": "cpu", "tresholdTypo": "1"})
    text = str(exc.value)
    for key in ("workload: missing", "targetValue: '-1'", "activationThreshold: 'x'", "cooldownSeconds: 'nan'",
                "metric: 'cpu'", "unknown key(s) tresholdTypo"):
        assert key in text
    assert text.startswith("ScaledObject shop/so: ")


def test_a_missing_target_value_says_how_to_fix_it():
    with pytest.raises(ScalerRequestError, match="targetValue: missing; set it to a number > 0"):
        parse_ref("so", "shop", {"workload": "checkout"})
