"""The one Kubernetes client (core/kubeclient.py): a kubeconfig is read by the official
library's loader, so an ``exec`` credential plugin's token is what the API server sees, and the
inline certificate data it writes to files is gone when the process ends."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from adapter.tls import ensure_serving_cert
from core.errors import UserError
from core.kubeclient import KubeClient, KubeGone, KubeUnavailable
from tests.adapter.kube_double import KubeDouble, Policy

ROOT = Path(__file__).resolve().parents[2]


def _exec_kubeconfig(tmp_path: Path, server: str, ca: Path) -> Path:
    plugin = tmp_path / "credential-plugin.sh"
    # what `aws eks get-token` or `gke-gcloud-auth-plugin` print: an ExecCredential with a token
    plugin.write_text("#!/bin/sh\n" + "echo '" + json.dumps({
        "apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
        "status": {"token": "token-from-exec-plugin", "expirationTimestamp": "2099-01-01T00:00:00Z"}}) + "'\n")
    plugin.chmod(0o755)
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(textwrap.dedent(f"""\
        apiVersion: v1
        kind: Config
        current-context: managed
        clusters:
        - name: managed
          cluster:
            server: {server}
            certificate-authority-data: {base64.b64encode(ca.read_bytes()).decode()}
        contexts:
        - name: managed
          context: {{cluster: managed, user: plugin-user}}
        users:
        - name: plugin-user
          user:
            exec:
              apiVersion: client.authentication.k8s.io/v1beta1
              command: {plugin}
              interactiveMode: Never
        """))
    return cfg


@pytest.fixture
def https_double(tmp_path):
    crt, key = ensure_serving_cert(tmp_path / "pki")
    double = KubeDouble(Policy(tokens={"alice-token": ("alice", ["dev"])}), tls=(str(crt), str(key))).start()
    yield double, crt
    double.stop()


def test_an_exec_credential_plugins_token_reaches_the_api_server_over_tls_verified_by_the_inline_ca(
        https_double, tmp_path):
    import asyncio

    double, crt = https_double
    kube = KubeClient.from_kubeconfig(str(_exec_kubeconfig(tmp_path, double.url, crt)))
    assert kube.server == double.url and kube.authorization() == "Bearer token-from-exec-plugin"
    status = asyncio.run(kube.token_review("alice-token"))
    assert status["authenticated"] and status["user"]["username"] == "alice"
    assert double.bearer_seen == ["Bearer token-from-exec-plugin"]
    kube.close()


def test_no_file_of_the_inline_certificate_data_is_left_after_the_process_ends(https_double, tmp_path):
    double, crt = https_double
    cfg = _exec_kubeconfig(tmp_path, double.url, crt)
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    script = textwrap.dedent(f"""\
        import asyncio, os, sys
        from core.kubeclient import KubeClient
        kube = KubeClient.from_kubeconfig({str(cfg)!r})
        print(asyncio.run(kube.token_review("alice-token"))["authenticated"])
        # while the client lives, the CA written from certificate-authority-data is a real file
        print(sorted(os.path.join(d, f) for d, _, fs in os.walk({str(tmp)!r}) for f in fs))
        """)
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    authenticated, during = out.stdout.strip().splitlines()
    assert authenticated == "True"
    assert "foresight-kube-" in during  # the test can see the file it expects to be removed
    assert list(tmp.iterdir()) == []


def test_a_bad_kubeconfig_or_no_cluster_is_a_user_error_naming_the_fix(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="no such file"):
        KubeClient.from_kubeconfig(str(tmp_path / "missing"))
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\ncurrent-context: nowhere\nclusters: []\ncontexts: []\nusers: []\n")
    with pytest.raises(UserError, match="current-context"):
        KubeClient.from_kubeconfig(str(bad))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(UserError, match="--kubeconfig"):
        KubeClient.in_cluster()


def test_an_api_server_that_refuses_or_is_gone_is_retryable_with_its_status():
    double = KubeDouble(Policy()).start()
    try:
        kube = KubeClient.for_server(double.url, token="sa", timeout_seconds=5)
        double.pods.expire_continue = True
        with pytest.raises(KubeGone) as err:  # a continue token older than the server keeps
            kube.list_pods_page(continue_token="1000:500")
        assert err.value.status == 410 and isinstance(err.value, KubeUnavailable)
        assert kube.read_workload("shop", "Deployment", "gone") is None  # 404: no such workload
    finally:
        double.stop()
    with pytest.raises(KubeUnavailable) as err:
        kube.token_review_sync("x")  # nothing listens any more
    assert err.value.status is None
