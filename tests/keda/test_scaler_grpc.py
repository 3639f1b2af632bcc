"""The KEDA scaler over real mutual TLS on 127.0.0.1: the four calls, the namespace rule, the
client certificate, and a stream that pushes a newly published forecast's activation."""

from __future__ import annotations

import time

import grpc
import pytest

from adapter.keda import externalscaler_pb2 as pb, externalscaler_pb2_grpc as pb_grpc
from adapter.keda.server import start_keda_server
from adapter.quantity import format_quantity
from forecaster.served import served_cores
from tests.adapter.helpers import sample_forecast
from tests.keda.conftest import channel, ref


def _idle_then_ramp(now: float, ramp_at_step: int, name: str = "checkout", ns: str = "shop"):
    """Idle (0 cores observed, 0 forecast) until point ``ramp_at_step`` (one per minute), 2 cores from there."""
    p90 = tuple(0.0 if i < ramp_at_step else 2.0 for i in range(10))
    return sample_forecast(ns, name, now=now, p90=p90, observed=0.0)


def test_get_metric_spec_names_the_trigger_and_carries_its_target(keda):
    spec = keda.GetMetricSpec(ref(targetValue="0.35"), timeout=10)
    assert [(s.metricName, s.targetSizeFloat) for s in spec.metricSpecs] == [("predicted_cpu_cores-checkout", 0.35)]


def test_get_metrics_serves_the_value_the_external_metrics_api_serves(keda, store, core, clock):
    clock.now = time.time()
    fc = sample_forecast("shop", "checkout", now=clock.now - 30, p90=(3.0, 4.0, 5.0), observed=2.0)
    store.publish(fc)
    got = keda.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="predicted_cpu_cores-checkout"),
                          timeout=10).metricValues
    assert len(got) == 1 and got[0].metricName == "predicted_cpu_cores-checkout"
    assert got[0].metricValueFloat == served_cores(fc, clock.now, core.settings.metric).value
    code, body = core.answer_apis("GET", "/apis/external.metrics.k8s.io/v1beta1/namespaces/shop/predicted_cpu_cores",
                                  b"labelSelector=workload%3Dcheckout")
    assert code == 200 and f'"value":"{format_quantity(got[0].metricValueFloat)}"' in body.decode()


def test_a_scaled_object_reads_only_its_own_namespaces_forecast(keda, store):
    store.publish(sample_forecast("payments", "ledger", p90=(9.0, 9.0, 9.0), observed=9.0))
    with pytest.raises(grpc.RpcError) as exc:  # "ledger" in shop: there is none
        keda.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(workload="ledger"),
                                             metricName="predicted_cpu_cores-ledger"), timeout=10)
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE and "shop/ledger" in exc.value.details()
    with pytest.raises(grpc.RpcError) as exc:
        sneaky = pb.ScaledObjectRef(name="so", namespace="shop", scalerMetadata={
            "workload": "ledger", "targetValue": "1", "namespace": "payments"})
        keda.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=sneaky, metricName="predicted_cpu_cores-ledger"),
                        timeout=10)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "scalerMetadata.namespace: not allowed" in exc.value.details()


def test_an_unknown_metric_is_refused_with_the_served_ones(keda):
    with pytest.raises(grpc.RpcError) as exc:
        keda.GetMetricSpec(ref(metric="predicted_nothing_ratio"), timeout=10)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "served metrics: predicted_cpu_load_ratio, predicted_cpu_cores" in exc.value.details()


@pytest.mark.parametrize("who", ["no certificate", "a certificate from another CA"])
def test_a_caller_without_a_certificate_the_client_ca_signed_is_refused(scaler, certs, store, who):
    store.publish(sample_forecast())
    pair = None if who == "no certificate" else (certs.other_crt, certs.other_key)
    ch = channel(scaler.port, certs, pair)
    try:
        with pytest.raises(grpc.RpcError) as exc:
            pb_grpc.ExternalScalerStub(ch).GetMetricSpec(ref(), timeout=5)
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE  # the TLS handshake failed: no call was made
    finally:
        ch.close()


def test_a_certificate_outside_the_allowed_names_is_denied(core, certs):
    handle = start_keda_server(core, "127.0.0.1", 0, certs.server_crt, certs.server_key, certs.client_ca,
                               allowed_names=["keda-operator-other"])
    ch = channel(handle.port, certs, (certs.keda_crt, certs.keda_key))
    try:
        with pytest.raises(grpc.RpcError) as exc:
            pb_grpc.ExternalScalerStub(ch).GetMetricSpec(ref(), timeout=5)
        assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED and "'keda-operator'" in exc.value.details()
    finally:
        ch.close()
        handle.stop()


def test_is_active_answers_true_when_the_forecast_rises_within_the_activation_lead(keda, store):
    now = time.time()
    # nothing observed; the forecast rises at the third minute: inside pod start-up + polling (90 s)
    # only from 60 s before it, so a 20 s lead does not see it yet and the 90 s default does
    store.publish(_idle_then_ramp(now - 75, ramp_at_step=2))  # ramp point at now + 105 s
    assert keda.IsActive(ref(podStartupSeconds="60", pollingIntervalSeconds="30"), timeout=10).result is True
    assert keda.IsActive(ref(name="short-lead", podStartupSeconds="10", pollingIntervalSeconds="10"),
                         timeout=10).result is False


def test_is_active_is_false_for_an_idle_workload_with_nothing_forecast(keda, store):
    store.publish(_idle_then_ramp(time.time(), ramp_at_step=10))
    assert keda.IsActive(ref(), timeout=10).result is False


def test_stream_is_active_pushes_a_newly_published_forecasts_crossing_and_ends_with_the_client(keda, store, scaler):
    now = time.time()
    store.publish(_idle_then_ramp(now, ramp_at_step=10))
    call = keda.StreamIsActive(ref(), timeout=30)
    stream = iter(call)
    assert next(stream).result is False
    store.publish(_idle_then_ramp(time.time(), ramp_at_step=1))  # the trainer's next forecast: load in 2 minutes
    start = time.monotonic()
    assert next(stream).result is True
    assert time.monotonic() - start < 5.0  # pushed at the next poll of the cache, not KEDA's 30 s
    assert scaler.service.streams == 1
    call.cancel()
    deadline = time.monotonic() + 10
    while scaler.service.streams and time.monotonic() < deadline:
        time.sleep(0.02)
    assert scaler.service.streams == 0  # the server let go of the stream when the client did


def test_stream_refuses_a_bad_trigger_at_once(keda):
    with pytest.raises(grpc.RpcError) as exc:
        next(iter(keda.StreamIsActive(ref(targetValue="0"), timeout=10)))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "targetValue" in exc.value.details()


def test_streams_beyond_the_bound_are_refused_not_queued(core, certs, store):
    store.publish(sample_forecast())
    handle = start_keda_server(core, "127.0.0.1", 0, certs.server_crt, certs.server_key, certs.client_ca,
                               stream_poll_seconds=0.05, max_streams=1)
    ch = channel(handle.port, certs, (certs.keda_crt, certs.keda_key))
    try:
        stub = pb_grpc.ExternalScalerStub(ch)
        first = stub.StreamIsActive(ref(), timeout=30)
        assert next(iter(first)).result is True
        with pytest.raises(grpc.RpcError) as exc:
            next(iter(stub.StreamIsActive(ref(name="second"), timeout=10)))
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        first.cancel()
    finally:
        ch.close()
        handle.stop()
