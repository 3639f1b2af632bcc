"""manifests/ray: the RayCluster, the trainer's patch and the workload config agree on the
address, the port and the token."""

from __future__ import annotations

from pathlib import Path

import yaml

from forecaster.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
RAY = ROOT / "manifests" / "ray"


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((RAY / name).read_text()) if d]


def test_the_trainer_reaches_the_head_service_kuberay_creates_on_the_client_port():
    (cluster,) = [d for d in _docs("raycluster.yaml") if d["kind"] == "RayCluster"]
    name, ns = cluster["metadata"]["name"], cluster["metadata"]["namespace"]
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert {"containerPort": 10001, "name": "client"} in head["ports"]
    snippet = "\n".join(line.split("#", 1)[1][1:] for line in (RAY / "trainer-patch.yaml").read_text().splitlines()
                        if line.startswith("#   "))
    cfg = parse_config({**yaml.safe_load(snippet), "workloads": [{"namespace": "a", "name": "b"}]})
    assert cfg.training.engine == "ray"
    assert cfg.training.ray_address == f"ray://{name}-head-svc.{ns}:10001"


def test_the_trainer_and_the_cluster_share_one_token_secret():
    docs = _docs("raycluster.yaml")
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    (cluster,) = [d for d in docs if d["kind"] == "RayCluster"]
    # KubeRay reads the token from the Secret named like the cluster (KubeRay's CRD has no secretName)
    assert cluster["spec"]["authOptions"] == {"mode": "token"}
    assert secret["metadata"]["name"] == cluster["metadata"]["name"] and "auth_token" in secret["stringData"]
    (patch,) = _docs("trainer-patch.yaml")
    env = {e["name"]: e for e in patch["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["RAY_AUTH_MODE"]["value"] == "token"
    assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": secret["metadata"]["name"], "key": "auth_token"}


def test_fits_run_on_the_workers_not_the_head():
    (cluster,) = [d for d in _docs("raycluster.yaml") if d["kind"] == "RayCluster"]
    assert cluster["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    assert all(int(g["rayStartParams"]["num-cpus"]) >= 1 for g in cluster["spec"]["workerGroupSpecs"])
