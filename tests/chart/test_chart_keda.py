"""charts/foresight beside KEDA, rendered by the real helm: the APIService switch, the scaler's
Service and flags, its certificates and KEDA's authentication -- and the rendered certificates
carry a real mutual-TLS call to the scaler on 127.0.0.1."""

from __future__ import annotations

import base64
from pathlib import Path

import grpc
import pytest

from tests.chart.conftest import CHART, KUBE_VERSION, run_helm
from tests.chart.test_chart_static import _container_args, render

pytestmark = [pytest.mark.e2e]

KEDA_ON = ["--set", "keda.scaler.enabled=true", "--set", "adapter.apiService.enabled=false"]


def _named(docs, kind, name):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def _kinds(docs):
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


def test_lint_strict_passes_with_the_keda_scaler(helm):
    out = run_helm(helm, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *KEDA_ON).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_the_apiservice_is_registered_by_default_and_left_out_when_another_provider_owns_it(helm):
    assert ("APIService", "v1beta1.external.metrics.k8s.io") in _kinds(render(helm))
    assert ("APIService", "v1beta1.external.metrics.k8s.io") not in _kinds(
        render(helm, "--set", "adapter.apiService.enabled=false"))
    # the older plain boolean still works
    assert ("APIService", "v1beta1.external.metrics.k8s.io") not in _kinds(render(helm, "--set", "adapter.apiService=false"))


def test_nothing_of_keda_is_rendered_by_default(helm):
    docs = render(helm)
    assert not any(d["apiVersion"].startswith("keda.sh") or d["metadata"]["name"].startswith("foresight-keda")
                   for d in docs)
    assert not any(a.startswith("--keda") for a in _container_args(docs, "foresight-adapter"))


def test_the_scaler_has_its_service_port_and_flags_and_they_pass_the_clis_own_refusals(helm):
    from adapter.cli import keda_problems, unauthenticated_bind
    from foresight.cli import build_parser

    docs = render(helm, *KEDA_ON)
    svc = _named(docs, "Service", "foresight-keda")
    assert svc["spec"]["ports"] == [{"name": "grpc", "port": 9443, "targetPort": "keda", "appProtocol": "grpc"}]
    adapter = _named(docs, "Deployment", "foresight-adapter")["spec"]["template"]["spec"]
    assert {"name": "keda", "containerPort": 9443} in adapter["containers"][0]["ports"]
    serve = build_parser().parse_args(_container_args(docs, "foresight-adapter"))
    assert serve.keda_port == 9443 and serve.keda_allowed_names == "keda-operator"
    assert unauthenticated_bind(serve) is None
    # the files are mounted from Secrets in the pod: only their absence here may be reported
    assert [p for p in keda_problems(serve) if "no such file" not in p] == []
    mounts = {m["mountPath"] for m in adapter["containers"][0]["volumeMounts"]}
    assert {str(Path(serve.keda_cert).parent), str(Path(serve.keda_client_ca).parent)} <= mounts


def test_the_operator_writes_scaled_objects_that_dial_the_scalers_service(helm):
    from foresight.cli import build_parser

    docs = render(helm, *KEDA_ON)
    op = build_parser().parse_args(_container_args(docs, "foresight-operator"))
    assert op.keda_scaler_address == "foresight-keda.foresight.svc:9443"
    assert (op.keda_auth_kind, op.keda_auth_name) == ("ClusterTriggerAuthentication", "foresight-keda")
    role = _named(docs, "ClusterRole", "foresight-operator")
    assert any(r["apiGroups"] == ["keda.sh"] and "scaledobjects" in r["resources"] and "delete" in r["verbs"]
               for r in role["rules"])


def test_keda_authenticates_with_a_cluster_trigger_authentication_over_a_secret_in_kedas_namespace(helm):
    docs = render(helm, *KEDA_ON)
    auth = _named(docs, "ClusterTriggerAuthentication", "foresight-keda")
    assert auth["apiVersion"] == "keda.sh/v1alpha1" and "namespace" not in auth["metadata"]
    assert {(r["parameter"], r["key"]) for r in auth["spec"]["secretTargetRef"]} == {
        ("caCert", "ca.crt"), ("tlsClientCert", "tls.crt"), ("tlsClientKey", "tls.key")}
    assert _named(docs, "Secret", "foresight-keda-client")["metadata"]["namespace"] == "keda"
    namespaced = render(helm, *KEDA_ON, "--set", "keda.triggerAuthentication.kind=TriggerAuthentication",
                        "--set", "keda.namespace=shop")
    ta = _named(namespaced, "TriggerAuthentication", "foresight-keda")
    assert ta["metadata"]["namespace"] == "shop" == _named(namespaced, "Secret", "foresight-keda-client")["metadata"]["namespace"]


@pytest.mark.parametrize("args, message", [
    (["--set", "keda.scaler.port=8443"], "/keda/scaler/port"),
    (["--set", "keda.scaler.enable=true"], "additional properties 'enable' not allowed"),
    (["--set", "keda.triggerAuthentication.kind=Secret"], "/keda/triggerAuthentication/kind"),
    (["--set", "adapter.apiService.enable=false"], "/adapter/apiService"),
], ids=["scaler-on-the-adapters-port", "typo", "bad-auth-kind", "apiservice-typo"])
def test_bad_keda_values_are_refused_by_the_schema(helm, args, message):
    r = run_helm(helm, "lint", str(CHART), "--kube-version", KUBE_VERSION, *args, check=False)
    assert r.returncode != 0 and message in r.stdout + r.stderr


def test_the_rendered_certificates_carry_a_mutual_tls_call_and_refuse_a_caller_without_keda_s(helm, tmp_path):
    """The scaler with the chart's serving pair and client CA, KEDA with the chart's client Secret,
    on 127.0.0.1 with the Service's name: what KEDA's external-push trigger does in the cluster."""
    from adapter.core import AdapterCore
    from adapter.keda import externalscaler_pb2_grpc as pb_grpc
    from adapter.keda.server import start_keda_server
    from adapter.settings import AdapterSettings
    from core.store import MemoryForecastStore
    from tests.adapter.helpers import sample_forecast
    from tests.keda.conftest import ref

    docs = render(helm, *KEDA_ON)

    def files(secret, keys):
        data = _named(docs, "Secret", secret)["data"]
        out = {}
        for k in keys:
            out[k] = tmp_path / f"{secret}-{k}"
            out[k].write_bytes(base64.b64decode(data[k]))
        return out

    server = files("foresight-keda-tls", ("tls.crt", "tls.key"))
    client_ca = files("foresight-keda-client-ca", ("ca.crt",))["ca.crt"]
    keda = files("foresight-keda-client", ("ca.crt", "tls.crt", "tls.key"))
    store = MemoryForecastStore()
    store.publish(sample_forecast())
    handle = start_keda_server(AdapterCore(AdapterSettings(), store), "127.0.0.1", 0, server["tls.crt"],
                               server["tls.key"], client_ca, allowed_names=["keda-operator"])
    name = [("grpc.ssl_target_name_override", "foresight-keda.foresight.svc")]
    try:
        creds = grpc.ssl_channel_credentials(keda["ca.crt"].read_bytes(), keda["tls.key"].read_bytes(),
                                             keda["tls.crt"].read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{handle.port}", creds, options=name) as ch:
            assert pb_grpc.ExternalScalerStub(ch).IsActive(ref(), timeout=10).result is True
        anonymous = grpc.ssl_channel_credentials(keda["ca.crt"].read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{handle.port}", anonymous, options=name) as ch:
            with pytest.raises(grpc.RpcError) as exc:
                pb_grpc.ExternalScalerStub(ch).IsActive(ref(), timeout=5)
            assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        handle.stop()


def test_the_values_file_of_docs_keda_md_renders_the_scaler_without_the_apiservice(helm, tmp_path):
    from tests.keda.test_docs_recipe import recipe_docs

    values = next(d for d in recipe_docs() if "keda" in d and "adapter" in d)
    f = tmp_path / "values-keda.yaml"
    import yaml

    f.write_text(yaml.safe_dump(values))
    kinds = _kinds(render(helm, "-f", str(f)))
    assert {("Service", "foresight-keda"), ("ClusterTriggerAuthentication", "foresight-keda")} <= kinds
    assert ("APIService", "v1beta1.external.metrics.k8s.io") not in kinds
