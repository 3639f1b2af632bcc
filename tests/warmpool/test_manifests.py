"""The warm-pool manifests deserialise into the kubernetes client's models, and the policy in
the ConfigMap is a valid WarmPoolPolicy."""

from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from warmpool.policy import parse_policy

ROOT = Path(__file__).resolve().parents[2]
TYPES = {
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "Service"): "V1Service",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("node.k8s.io/v1", "RuntimeClass"): "V1RuntimeClass",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
}
DOCS = [
    (f"{f.name}#{i}", d)
    for f in sorted((ROOT / "manifests" / "warmpool").glob("*.yaml"))
    for i, d in enumerate(yaml.safe_load_all(f.read_text()))
    if d
]


def _normalise(x):
    """Quantities and int-or-string values come back as strings; compare loosely there."""
    if isinstance(x, dict):
        return {k: _normalise(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_normalise(v) for v in x]
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return str(x)
    return x


@pytest.mark.parametrize("where, doc", DOCS, ids=[d[0] for d in DOCS])
def test_every_warmpool_manifest_is_a_known_kubernetes_object(where, doc):
    import json

    api = k8s.ApiClient()
    model = TYPES[(doc["apiVersion"], doc["kind"])]
    obj = api.deserialize(json.dumps(doc), model, "application/json")
    assert obj.metadata.name
    # a misspelled field is dropped by the model: the round trip shows it
    assert _normalise(api.sanitize_for_serialization(obj)) == _normalise(doc), where


def test_runtime_classes_for_crun_and_kata_exist_with_their_handlers():
    rcs = {d["metadata"]["name"]: d for _, d in DOCS if d["kind"] == "RuntimeClass"}
    assert rcs["crun"]["handler"] == "crun" and rcs["kata"]["handler"] == "kata"
    assert "overhead" in rcs["kata"]


def test_the_controller_may_create_patch_and_delete_pods_and_reads_its_policy_configmap():
    [role] = [d for _, d in DOCS if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "foresight-warmpool"]
    pods = next(r for r in role["rules"] if "pods" in r["resources"])
    assert {"list", "create", "patch", "delete"} <= set(pods["verbs"])
    [cm] = [d for _, d in DOCS if d["kind"] == "ConfigMap"]
    policy = parse_policy(yaml.safe_load(cm["data"]["policy.yaml"]))
    assert {p.runtime_class for p in policy.pools} == {"crun", "kata"}
    [dep] = [d for _, d in DOCS if d["kind"] == "Deployment"]
    spec = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 1 and spec["serviceAccountName"] == "foresight-warmpool"
    assert "--policy=/etc/foresight/policy.yaml" in spec["containers"][0]["args"]
    assert spec["volumes"][0]["configMap"]["name"] == cm["metadata"]["name"]


def test_the_claim_api_is_authenticated_by_a_mounted_token_secret_and_token_reviews():
    [dep] = [d for _, d in DOCS if d["kind"] == "Deployment"]
    spec = dep["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"]
    assert "--insecure-no-auth" not in args and "--token-review" in args
    [tf] = [a.split("=", 1)[1] for a in args if a.startswith("--token-file=")]
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    [(name, path)] = [(n, p) for n, p in mounts.items() if tf.startswith(p + "/")]
    assert vols[name]["secret"]["secretName"] == "foresight-warmpool-tokens"
    assert tf == path + "/" + vols[name]["secret"]["items"][0]["path"]
    [role] = [d for _, d in DOCS if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "foresight-warmpool"]
    assert any("tokenreviews" in r["resources"] and "create" in r["verbs"] for r in role["rules"])


def test_metrics_readers_get_their_own_clusterrole_to_see_every_pool():
    [role] = [d for _, d in DOCS if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "foresight-warmpool-metrics"]
    assert role["rules"] and all("create" not in r["verbs"] and "delete" not in r["verbs"] for r in role["rules"])


def test_warm_pods_are_owned_by_the_controllers_own_deployment():
    [dep] = [d for _, d in DOCS if d["kind"] == "Deployment"]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert f"--owner-name={dep['metadata']['name']}" in c["args"] and "--owner-kind=Deployment" in c["args"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    [role] = [d for _, d in DOCS if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "foresight-warmpool"]
    assert any("deployments" in r["resources"] and r.get("resourceNames") == [dep["metadata"]["name"]] and "get" in r["verbs"]
               for r in role["rules"])
