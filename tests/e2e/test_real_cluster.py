"""Checks that also run against a user's own cluster.

By default they run against the suite's own control plane (tests/cluster). To point them at
your cluster instead (read-only apart from the dry run):

    FORESIGHT_E2E_KUBECONFIG=~/.kube/config .venv/bin/pytest tests/e2e/test_real_cluster.py

1. Every manifest under manifests/ is accepted by the API server (server-side dry run:
   admission and schema validation, nothing is persisted).
2. When foresight's APIService is installed and Available, the aggregated external metrics
   API answers discovery through the API server (the path an HPA takes).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]


def _docs():
    for f in sorted((ROOT / "manifests").rglob("*.yaml")):
        for d in yaml.safe_load_all(f.read_text()):
            if isinstance(d, dict) and d.get("kind"):
                yield f.relative_to(ROOT), d


@pytest.fixture(scope="module")
def api_client(request):
    from kubernetes import config

    kubeconfig = os.environ.get("FORESIGHT_E2E_KUBECONFIG")
    if not kubeconfig:
        request.getfixturevalue("foresight_adapter")  # our cluster, with foresight registered
        kubeconfig = str(request.getfixturevalue("control_plane").admin_kubeconfig)
    return config.new_client_from_config(config_file=kubeconfig)


def test_every_manifest_passes_server_side_dry_run(api_client):
    from kubernetes import dynamic
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    dyn = dynamic.DynamicClient(api_client)
    problems = []
    for path, doc in _docs():
        try:
            res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        except ResourceNotFoundError:
            if doc["kind"] in ("KubeSchedulerConfiguration",):  # a file format, not an API object
                continue
            problems.append(f"{path}: {doc['kind']} {doc['apiVersion']} unknown to this cluster")
            continue
        ns = doc.get("metadata", {}).get("namespace") if res.namespaced else None
        try:
            res.create(body=doc, namespace=ns, query_params=[("dryRun", "All")])
        except Exception as exc:  # noqa: BLE001 - collect every problem
            status = getattr(exc, "status", None)
            if status == 409:  # already exists: fine for a dry run
                continue
            if status == 404 and ns:  # namespace not created (dry run does not persist it)
                continue
            problems.append(f"{path}: {doc['kind']}/{doc['metadata'].get('name')}: {exc}")
    assert problems == []


def test_external_metrics_discovery_through_the_aggregator(api_client):
    from kubernetes import client

    try:
        svc = client.ApiregistrationV1Api(api_client).read_api_service("v1beta1.external.metrics.k8s.io")
    except client.ApiException as exc:
        pytest.skip(f"no external metrics APIService installed ({exc.status})")
    if not svc.spec.service or svc.spec.service.namespace != "foresight":
        pytest.skip(f"external.metrics.k8s.io is served by {svc.spec.service}, not foresight")
    import json

    method, url, hp, body, post = api_client.param_serialize(
        "GET", "/apis/external.metrics.k8s.io/v1beta1", header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    resp = api_client.call_api(method, url, header_params=hp, body=body, post_params=post, _request_timeout=10)
    resp.read()
    assert resp.status == 200
    names = {r["name"] for r in json.loads(resp.data)["resources"]}
    assert {"predicted_cpu_load_ratio", "predicted_cpu_cores"} <= names
