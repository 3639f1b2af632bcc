"""The adapter's serving certificate as the chart renders it (adapter.certificate), with the real
helm binary: the chart's own CA signs a certificate for the adapter's Service names and is the
APIService's caBundle; cert-manager and existing leave the Secret to others."""

from __future__ import annotations

import base64
import datetime as dt

from cryptography import x509

from tests.chart.conftest import CHART, KUBE_VERSION, run_helm
from tests.chart.test_chart_static import render


def _by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def test_helm_mode_makes_a_ca_signed_certificate_for_the_service_and_sets_the_ca_bundle(helm):
    docs = render(helm)
    (secret,) = [d for d in _by_kind(docs, "Secret") if d["metadata"]["name"] == "foresight-adapter-tls"]
    (api,) = _by_kind(docs, "APIService")
    assert api["spec"]["caBundle"] == secret["data"]["ca.crt"]
    assert "annotations" not in api["metadata"]  # no cert-manager injection asked for
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    assert cert.issuer == ca.subject
    ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes, *_verify_args(ca, cert))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "foresight-adapter.foresight.svc" in names
    assert cert.not_valid_after_utc > dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=365)
    # the adapter mounts exactly this Secret's pair
    (adapter,) = [d for d in _by_kind(docs, "Deployment") if d["metadata"]["name"] == "foresight-adapter"]
    vols = {v["name"]: v for v in adapter["spec"]["template"]["spec"]["volumes"]}
    assert vols["serving-cert"]["secret"]["secretName"] == "foresight-adapter-tls"


def _verify_args(ca, cert):
    from cryptography.hazmat.primitives.asymmetric import padding

    return (padding.PKCS1v15(), cert.signature_hash_algorithm)


def test_cert_manager_mode_renders_no_secret_and_asks_for_ca_injection(helm):
    docs = render(helm, "--set", "adapter.certificate=cert-manager")
    assert not [d for d in _by_kind(docs, "Secret") if d["metadata"]["name"] == "foresight-adapter-tls"]
    (api,) = _by_kind(docs, "APIService")
    assert api["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "foresight/foresight-adapter-tls"
    assert "caBundle" not in api["spec"]


def test_existing_mode_needs_a_ca_bundle(helm):
    r = run_helm(helm, "lint", str(CHART), "--kube-version", KUBE_VERSION, "--set", "adapter.certificate=existing",
                 check=False)
    assert r.returncode != 0 and "caBundle" in r.stdout + r.stderr
    docs = render(helm, "--set", "adapter.certificate=existing", "--set", "adapter.caBundle=Q0E=")
    assert _by_kind(docs, "APIService")[0]["spec"]["caBundle"] == "Q0E="
    assert not [d for d in _by_kind(docs, "Secret") if d["metadata"]["name"] == "foresight-adapter-tls"]
