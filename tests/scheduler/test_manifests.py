"""The opt-in scheduler profile's manifests agree with each other, with the Go config types
(kubescheduler.config.k8s.io/v1 Extender json tags) and with the routes we serve."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from fastapi import FastAPI

from adapter.scheduler import register_scheduler_routes
from core.store import MemoryForecastStore

DIR = Path(__file__).resolve().parents[2] / "manifests" / "scheduler"

# json tags of kubescheduler.config.k8s.io/v1 Extender
EXTENDER_FIELDS = {
    "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb",
    "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable",
}
TLS_FIELDS = {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}
GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|ms|s|m|h))+$")


def docs(name):
    return [d for d in yaml.safe_load_all((DIR / name).read_text()) if d]


def by_kind(kind):
    return [d for f in sorted(DIR.glob("*.yaml")) for d in docs(f.name) if d.get("kind") == kind]


def scheduler_config():
    (cfg,) = docs("kube-scheduler-configuration.yaml")
    return cfg


def test_the_configmap_embeds_exactly_the_standalone_scheduler_configuration():
    (cm,) = docs("configmap.yaml")
    assert yaml.safe_load(cm["data"]["config.yaml"]) == scheduler_config()


def test_the_extender_uses_only_real_extender_fields_and_is_ignorable_with_a_timeout():
    cfg = scheduler_config()
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1" and cfg["kind"] == "KubeSchedulerConfiguration"
    (ext,) = cfg["extenders"]
    assert set(ext) <= EXTENDER_FIELDS, set(ext) - EXTENDER_FIELDS
    assert set(ext.get("tlsConfig", {})) <= TLS_FIELDS
    assert ext["ignorable"] is True and ext["nodeCacheCapable"] is True
    assert GO_DURATION.match(ext["httpTimeout"])
    assert isinstance(ext["weight"], int) and ext["weight"] > 0


def test_urlprefix_plus_each_verb_is_a_route_we_serve():
    (ext,) = scheduler_config()["extenders"]
    prefix_path = "/" + ext["urlPrefix"].split("://", 1)[1].split("/", 1)[1].strip("/")
    app = FastAPI()
    register_scheduler_routes(app, MemoryForecastStore())
    posts = {r.path for r in app.routes if "POST" in getattr(r, "methods", set())}
    for verb in (ext["filterVerb"], ext["prioritizeVerb"]):
        assert f"{prefix_path}/{verb}" in posts  # the scheduler POSTs urlPrefix + "/" + verb


def test_the_deployment_wires_config_identity_ca_and_leader_election_consistently():
    (dep,) = by_kind("Deployment")
    spec = dep["spec"]["template"]["spec"]
    (sa,) = by_kind("ServiceAccount")
    assert spec["serviceAccountName"] == sa["metadata"]["name"]
    (cm,) = by_kind("ConfigMap")
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    config_vol = next(n for n, v in volumes.items() if v.get("configMap", {}).get("name") == cm["metadata"]["name"])
    arg = next(a for a in spec["containers"][0]["command"] if a.startswith("--config="))
    assert arg == f"--config={mounts[config_vol]}/config.yaml"
    (ext,) = scheduler_config()["extenders"]
    ca_dir = ext["tlsConfig"]["caFile"].rsplit("/", 1)[0]
    assert ca_dir in mounts.values()
    assert not any(m != n and m.startswith(n + "/") for m in mounts.values() for n in mounts.values())  # no nested mounts
    le = scheduler_config()["leaderElection"]
    role = next(r for r in by_kind("Role") if r["metadata"]["name"].endswith("leader-election"))
    assert role["metadata"]["namespace"] == le["resourceNamespace"]
    assert any(le["resourceName"] in rule.get("resourceNames", []) for rule in role["rules"])
    for crb in by_kind("ClusterRoleBinding"):
        assert crb["subjects"][0]["name"] == sa["metadata"]["name"]


def test_the_example_pod_opts_into_the_profile_by_scheduler_name():
    (pod,) = docs("example-pod.yaml")
    names = [p["schedulerName"] for p in scheduler_config()["profiles"]]
    assert pod["spec"]["schedulerName"] in names
    assert "foresight-scheduler" in (DIR / "README.md").read_text()
