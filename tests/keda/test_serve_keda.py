"""``foresight serve --keda-port``: the flags refuse an open scaler, and a real `foresight serve`
process over Redis answers KEDA (with its certificate) the value it publishes, and nobody else."""

from __future__ import annotations

import grpc
import pytest

from adapter.keda import externalscaler_pb2 as pb, externalscaler_pb2_grpc as pb_grpc
from core.store import open_store
from foresight.cli import build_parser, main
from tests.adapter.helpers import ServeProcess, sample_forecast
from tests.keda.conftest import channel, ref
from tests.stack import free_port


def args_of(*argv: str):
    return build_parser().parse_args(["serve", "--store", "memory://", *argv])


@pytest.mark.parametrize("argv, says", [
    (("--host", "0.0.0.0", "--token-file", "t", "--keda-port", "9443"), "without --keda-client-ca anyone who reaches"),
    (("--host", "127.0.0.1", "--plain-http", "--keda-port", "9443", "--keda-client-ca", "ca.crt"),
     "--keda-client-ca needs TLS"),
    (("--host", "127.0.0.1", "--keda-port", "8443"), "--keda-port 8443: must be 1-65535 and differ from --port"),
    (("--host", "127.0.0.1", "--keda-client-ca", "ca.crt"), "--keda-client-ca and --keda-allowed-names need --keda-port"),
    (("--host", "127.0.0.1", "--keda-port", "9443", "--keda-allowed-names", "keda"),
     "--keda-allowed-names needs --keda-client-ca"),
    (("--host", "127.0.0.1", "--keda-port", "9443", "--keda-cert", "ca.crt"), "--keda-cert and --keda-key go together"),
])
def test_serve_refuses_keda_flags_that_would_open_or_break_the_scaler(tmp_path, capsys, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t").write_text("token\n")
    (tmp_path / "ca.crt").write_text("x")
    assert main(["serve", "--store", "memory://", *argv]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("workers", ["1", "2"])  # 2: the scaler reads a core of its own beside the workers
def test_a_real_serve_process_answers_keda_with_its_certificate_and_refuses_others(tmp_path, certs, redis_url, workers):
    fc = sample_forecast("shop", "checkout", p90=(3.0, 4.0, 5.0), observed=2.0)
    open_store(redis_url).publish(fc)
    port, keda_port = free_port(), free_port()
    # HTTPS on a self-signed pair; the scaler on its own (what the chart does: one name per Service)
    proc = ServeProcess(["--store", redis_url, "--cert-dir", str(tmp_path / "https"),
                         "--keda-cert", str(certs.server_crt), "--keda-key", str(certs.server_key),
                         "--keda-port", str(keda_port), "--keda-client-ca", str(certs.client_ca),
                         "--keda-allowed-names", "keda-operator", "--workers", workers], port, tmp_path / "serve.log")
    try:
        proc.wait_ready()
        ch = channel(keda_port, certs, (certs.keda_crt, certs.keda_key))
        grpc.channel_ready_future(ch).result(timeout=20)
        got = pb_grpc.ExternalScalerStub(ch).GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="predicted_cpu_cores-checkout"), timeout=10)
        assert got.metricValues[0].metricValueFloat > 3.0  # the p90 over the lead, above the 2 cores observed
        assert pb_grpc.ExternalScalerStub(ch).IsActive(ref(), timeout=10).result is True
        ch.close()
        anonymous = channel(keda_port, certs, None)
        with pytest.raises(grpc.RpcError) as exc:
            pb_grpc.ExternalScalerStub(anonymous).GetMetricSpec(ref(), timeout=5)
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
        anonymous.close()
        assert "KEDA external scaler: 127.0.0.1:%d" % keda_port in (tmp_path / "serve.log").read_text()
    finally:
        proc.stop()
