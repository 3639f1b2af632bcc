"""charts/foresight's optional parts with the real helm binary: `trainer.engine: ray` (the
trainer's workload config, the Ray address and token, the KubeRay RayCluster) and the
Prometheus Operator objects (ServiceMonitor, PrometheusRule). The rendered chart with all of
them on passes a real kube-apiserver's validation against KubeRay's and the Prometheus
Operator's own CRDs, taken from their Go modules (tests/e2e/conftest.py OPERATOR_CRDS)."""

from __future__ import annotations

import pytest
import yaml

from tests.chart.conftest import CHART, KUBE_VERSION, run_helm
from tests.chart.test_chart_static import render
from tests.cluster.controlplane import ROOT, wait_for

pytestmark = [pytest.mark.e2e]

RAY = ["--set", "trainer.engine=ray"]
EXTERNAL_RAY = ["--set", "trainer.engine=ray", "--set", "ray.cluster.enabled=false",
                "--set", "ray.address=ray://ray-head.ray:10001", "--set", "ray.tokenSecret=my-ray-token"]
MONITORING = ["--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true",
              "--set", "monitoring.serviceMonitor.labels.release=kube-prometheus-stack"]
EVERYTHING = [*RAY, *MONITORING, "--set", "warmpool.enabled=true", "--set", "scheduler.enabled=true"]


def _by_kind(docs) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _trainer(docs) -> tuple[object, dict]:
    from forecaster.config import parse_config

    objs = _by_kind(docs)
    cfg = parse_config(yaml.safe_load(objs[("ConfigMap", "foresight-workloads")]["data"]["workloads.yaml"]))
    (container,) = objs[("Deployment", "foresight-trainer")]["spec"]["template"]["spec"]["containers"]
    return cfg, {e["name"]: e for e in container.get("env", [])}


@pytest.mark.parametrize("args", [RAY, EXTERNAL_RAY, MONITORING, EVERYTHING],
                         ids=["engine-ray", "engine-ray-external-cluster", "monitoring", "everything"])
def test_helm_lint_strict_passes_with_the_optional_parts(helm, args):
    out = run_helm(helm, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *args).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_engine_ray_sets_the_trainers_engine_and_address_and_renders_the_raycluster_with_its_token(helm):
    docs = render(helm, *RAY, "--set", "ray.cluster.workers.replicas=3")
    cfg, env = _trainer(docs)
    assert cfg.training.engine == "ray"
    assert cfg.training.ray_address == "ray://foresight-ray-head-svc.foresight:10001"  # the Service KubeRay creates
    objs = _by_kind(docs)
    rc = objs[("RayCluster", "foresight-ray")]
    assert rc["spec"]["authOptions"] == {"mode": "token"}
    (workers,) = rc["spec"]["workerGroupSpecs"]
    assert workers["replicas"] == 3 and workers["rayStartParams"]["num-cpus"] == "2"
    assert rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"].startswith("ghcr.io/foresight")
    # KubeRay reads the token from the Secret named like the RayCluster; the trainer from the same one
    assert len(objs[("Secret", "foresight-ray")]["stringData"]["auth_token"]) == 48
    assert env["RAY_AUTH_MODE"]["value"] == "token"
    assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "foresight-ray", "key": "auth_token"}


def test_engine_ray_on_a_cluster_of_your_own_renders_no_raycluster_and_uses_its_address_and_token(helm):
    docs = render(helm, *EXTERNAL_RAY)
    cfg, env = _trainer(docs)
    assert (cfg.training.engine, cfg.training.ray_address) == ("ray", "ray://ray-head.ray:10001")
    assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "my-ray-token"
    assert not [d for d in docs if d["kind"] == "RayCluster" or d["metadata"]["name"] == "foresight-ray"]


def test_the_default_engine_is_local_with_no_ray_objects_and_no_token(helm):
    docs = render(helm)
    cfg, env = _trainer(docs)
    assert (cfg.training.engine, cfg.training.ray_address) == ("local", None)
    assert "RAY_AUTH_TOKEN" not in env
    assert not [d for d in docs if d["kind"] in ("RayCluster", "ServiceMonitor", "PrometheusRule")]


@pytest.mark.parametrize("args, message", [
    (["--set", "trainer.engine=spark"], "/trainer/engine"),
    (["--set", "trainer.engine=ray", "--set", "ray.cluster.enabled=false"], "ray.address: trainer.engine is ray"),
    (["--set", "ray.address=http://ray:8265"], "/ray/address"),
    (["--set", "ray.cluster.workers.cpus=0"], "/ray/cluster/workers/cpus"),
    (["--set", "monitoring.serviceMonitor.interval=soon"], "/monitoring/serviceMonitor/interval"),
    (["--set", "monitoring.prometheusRule.enable=true"], "additional properties 'enable' not allowed"),
], ids=["unknown-engine", "ray-without-cluster-or-address", "dashboard-url-not-client", "zero-cpus", "bad-interval",
        "misspelt-key"])
def test_invalid_ray_and_monitoring_values_are_refused_with_the_value_path(helm, args, message):
    # `helm template` (and install) run the schema and the chart's own checks; lint reports a
    # template's `fail` as INFO only
    r = run_helm(helm, "template", "foresight", str(CHART), "--kube-version", KUBE_VERSION, *args, check=False)
    assert r.returncode != 0
    assert message in r.stdout + r.stderr


def test_monitoring_renders_the_manifests_alerts_and_a_servicemonitor_per_component(helm):
    objs = _by_kind(render(helm, *MONITORING))
    rule = objs[("PrometheusRule", "foresight")]
    want = yaml.safe_load((ROOT / "manifests/monitoring/prometheusrule.yaml").read_text())
    assert rule["spec"] == want["spec"]  # Prometheus's {{ $value }} templates survive helm untouched
    assert "{{ $value | humanizePercentage }}" in str(rule["spec"])
    sm = objs[("ServiceMonitor", "foresight-adapter")]
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (ep,) = sm["spec"]["endpoints"]
    assert (ep["port"], ep["scheme"], ep["path"]) == ("https", "https", "/metrics")
    assert ep["tlsConfig"]["ca"]["secret"] == {"name": "foresight-adapter-tls", "key": "ca.crt"}
    assert ep["tlsConfig"]["serverName"] == "foresight-adapter.foresight.svc"
    # the adapter's Service has the port the ServiceMonitor scrapes
    assert "https" in {p["name"] for p in objs[("Service", "foresight-adapter")]["spec"]["ports"]}
    assert ("ServiceMonitor", "foresight-warmpool") not in objs  # no warm pool, nothing to scrape
    on = _by_kind(render(helm, *MONITORING, "--set", "warmpool.enabled=true"))
    (wp,) = on[("ServiceMonitor", "foresight-warmpool")]["spec"]["endpoints"]
    assert wp["port"] in {p["name"] for p in on[("Service", "foresight-warmpool")]["spec"]["ports"]}


def test_the_rendered_chart_with_ray_and_monitoring_passes_the_api_servers_validation(helm, control_plane):
    from tests.e2e.conftest import operator_crds

    cp = control_plane
    out = run_helm(helm, "template", "foresight", str(CHART), "-n", "foresight", "--kube-version", KUBE_VERSION,
                   *EVERYTHING).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    kinds = {d["kind"] for d in docs}
    assert {"RayCluster", "ServiceMonitor", "PrometheusRule"} <= kinds
    crds = operator_crds(kinds)
    assert len(crds) == 3, crds
    cp.kubectl("apply", "--server-side", "-f", str(CHART / "crds"), *[a for p in crds for a in ("-f", str(p))])
    names = ["crd/predictiveautoscalers.foresight.dev"] + [
        f"crd/{p.stem.partition('_')[2]}.{p.stem.partition('_')[0]}" for p in crds]
    wait_for("CRDs Established", lambda: cp.kubectl("wait", "--for=condition=Established", "--timeout=30s", *names,
                                                     check=False).returncode == 0, timeout=90)
    cp.ensure_namespace("foresight")
    # the install test's release (helm, same names) may already own these objects in the shared
    # control plane: a server-side dry run validates every object and changes none of them
    r = cp.kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-", input=out, check=False)
    assert r.returncode == 0, r.stderr
    applied = [line for line in r.stdout.splitlines() if "serverside-applied (server dry run)" in line]
    assert len(applied) == len(docs)
    assert any(line.startswith("raycluster.ray.io/foresight-ray") for line in applied), applied
