"""charts/foresight with the real helm binary: lint, the values schema, and what it renders."""

from __future__ import annotations

import filecmp

import pytest
import yaml

from tests.chart.conftest import CHART, KUBE_VERSION, run_helm
from tests.cluster.controlplane import ROOT

pytestmark = [pytest.mark.e2e]

ALL_ON = ["--set", "warmpool.enabled=true", "--set", "scheduler.enabled=true"]


def render(helm, *args: str) -> list[dict]:
    out = run_helm(helm, "template", "foresight", str(CHART), "-n", "foresight", "--kube-version", KUBE_VERSION,
                   "--include-crds", *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.mark.parametrize("args", [[], ALL_ON, ["--set", "redis.enabled=false", "--set",
                                               "redis.externalURL=redis://redis.example:6379/0", "--set", "operator.enabled=false"]],
                         ids=["defaults", "warmpool+scheduler", "external-redis-no-operator"])
def test_helm_lint_strict_passes(helm, args):
    out = run_helm(helm, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *args).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out


@pytest.mark.parametrize("args, message", [
    (["--set", "adapter.replica=3"], "additional properties 'replica' not allowed"),
    (["--set", "redis.enabled=false"], "externalURL"),
    (["--set", "prometheus.url=localhost:9090"], "prometheus"),
    (["--set", "adapter.replicas=0"], "replicas"),
    (["--set", "logFormat=yaml"], "logFormat"),
], ids=["unknown-key", "external-redis-without-url", "bad-prometheus-url", "zero-replicas", "bad-log-format"])
def test_invalid_values_are_refused_by_the_values_schema(helm, args, message):
    r = run_helm(helm, "lint", str(CHART), "--kube-version", KUBE_VERSION, *args, check=False)
    assert r.returncode != 0
    assert message in r.stdout + r.stderr


def test_the_chart_installs_adapter_with_2_replicas_and_a_pdb_crds_and_the_optional_parts_only_when_asked(helm):
    docs = render(helm)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    dep = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert dep["foresight-adapter"]["spec"]["replicas"] == 2
    assert ("PodDisruptionBudget", "foresight-adapter") in kinds
    assert {("CustomResourceDefinition", "predictiveautoscalers.foresight.dev"),
            ("CustomResourceDefinition", "warmpools.foresight.dev")} <= kinds
    assert {"foresight-trainer", "foresight-operator", "foresight-redis"} <= set(dep)
    assert "foresight-warmpool" not in dep and "foresight-scheduler" not in dep
    on = {d["metadata"]["name"] for d in render(helm, *ALL_ON) if d["kind"] == "Deployment"}
    assert {"foresight-warmpool", "foresight-scheduler"} <= on
    # with the operator the trainer reads the operator's effective config; without, the user's
    vols = dep["foresight-trainer"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "config", "configMap": {"name": "foresight-trainer-config"}} in vols
    off = {d["metadata"]["name"]: d for d in render(helm, "--set", "operator.enabled=false") if d["kind"] == "Deployment"}
    assert {"name": "config", "configMap": {"name": "foresight-workloads"}} in off["foresight-trainer"]["spec"]["template"]["spec"]["volumes"]


def test_log_format_reaches_every_foresight_container(helm):
    def formats(*args):
        deps = [d for d in render(helm, *ALL_ON, *args) if d["kind"] == "Deployment"]
        out = {}
        for d in deps:
            for c in d["spec"]["template"]["spec"]["containers"]:
                if "foresight" in str(c.get("image", "")):
                    out[d["metadata"]["name"]] = [a for a in c.get("args", []) if str(a).startswith("--log-format")]
        return out

    assert {"foresight-adapter", "foresight-trainer", "foresight-operator", "foresight-warmpool"} <= set(formats())
    assert all(v == ["--log-format=text"] for v in formats().values()), formats()
    assert all(v == ["--log-format=json"] for v in formats("--set", "logFormat=json").values())


def test_the_trainer_config_in_the_chart_is_one_the_trainer_accepts(helm):
    from forecaster.config import parse_config

    cm = next(d for d in render(helm) if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "foresight-workloads")
    cfg = parse_config(yaml.safe_load(cm["data"]["workloads.yaml"]))
    assert cfg.store.url.startswith("rediss://trainer@foresight-redis.foresight.svc:6379/0")
    assert cfg.source.url == "prometheus://prometheus-operated.monitoring:9090"


def _redis_clients(docs: list[dict]) -> dict[str, tuple[str, dict]]:
    """Each client Deployment's store URL (flag or trainer config) and its redis-password volume."""
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "foresight-workloads")
    out = {"foresight-trainer": yaml.safe_load(cm["data"]["workloads.yaml"])["store"]["url"]}
    for d in docs:
        if d["kind"] != "Deployment":
            continue
        for c in d["spec"]["template"]["spec"]["containers"]:
            for a in c.get("args", []):
                if a.startswith("--store="):
                    out[d["metadata"]["name"]] = a.removeprefix("--store=")
    vols = {d["metadata"]["name"]: next((v for v in d["spec"]["template"]["spec"].get("volumes", []) if v["name"] == "redis-password"), None)
            for d in docs if d["kind"] == "Deployment"}
    return {name: (url, vols[name]) for name, url in out.items()}


def test_the_bundled_redis_speaks_only_tls_and_every_client_verifies_it_with_the_charts_ca(helm):
    docs = render(helm, *ALL_ON)
    redis = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "foresight-redis")
    args = redis["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--port") + 1] == "0" and args[args.index("--tls-port") + 1] == "6379"
    secret = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "foresight-redis-tls")
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    clients = _redis_clients(docs)
    assert {"foresight-trainer", "foresight-adapter", "foresight-operator", "foresight-warmpool"} <= set(clients)
    for name, (url, vol) in clients.items():
        assert url.startswith("rediss://") and "ca_file=/var/run/secrets/redis/ca.crt" in url, (name, url)
        srcs = {s["secret"]["name"]: s["secret"]["items"] for s in vol["projected"]["sources"]}
        assert srcs["foresight-redis-tls"] == [{"key": "ca.crt", "path": "ca.crt"}], name
    plain = render(helm, *ALL_ON, "--set", "redis.tls=false")
    assert not any(d["kind"] == "Secret" and d["metadata"]["name"] == "foresight-redis-tls" for d in plain)
    for name, (url, vol) in _redis_clients(plain).items():
        assert url.startswith("redis://") and "ca_file" not in url, (name, url)
        assert [s["secret"]["name"] for s in vol["projected"]["sources"]] == ["foresight-redis-users"], name


def test_the_charts_crds_are_the_ones_in_manifests():
    for f in (CHART / "crds").glob("*.yaml"):
        assert filecmp.cmp(f, ROOT / "manifests" / "crds" / f.name, shallow=False), f.name


def _container_args(docs: list[dict], deployment: str) -> list[str]:
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == deployment)
    return [str(a) for a in dep["spec"]["template"]["spec"]["containers"][0]["args"]]


@pytest.mark.parametrize("args", [[], ALL_ON], ids=["defaults", "warmpool+scheduler"])
def test_the_rendered_commands_pass_the_clis_own_refusals(helm, args):
    # foresight serve and warmpool run refuse an unauthenticated or clear-text listener at start:
    # the chart's arguments must get past the same checks, or its pods crash-loop
    from adapter.cli import anonymous_scheduler_port, unauthenticated_bind
    from foresight.cli import build_parser
    from warmpool.cli import _check_transport

    docs = render(helm, *args)
    serve = build_parser().parse_args(_container_args(docs, "foresight-adapter"))
    assert unauthenticated_bind(serve) is None and anonymous_scheduler_port(serve) is None
    assert bool(serve.scheduler_port) == bool(args) and bool(serve.scheduler_client_ca) == bool(args)
    if args:
        _check_transport(build_parser().parse_args(_container_args(docs, "foresight-warmpool")))
        config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "foresight-scheduler-config")
        tls = yaml.safe_load(config["data"]["config.yaml"])["extenders"][0]["tlsConfig"]
        secret = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "foresight-scheduler-client-tls")
        assert tls["certFile"].endswith("tls.crt") and {"tls.crt", "tls.key", "ca.crt"} <= set(secret["data"])
        role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "foresight-warmpool")
        assert any("subjectaccessreviews" in r["resources"] for r in role["rules"])


def test_the_trainers_checkpoints_can_live_on_a_claim_that_outlives_the_pod_and_the_release(helm):
    def trainer_volume(docs):
        dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "foresight-trainer")
        return next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "checkpoints")

    assert "emptyDir" in trainer_volume(render(helm))
    docs = render(helm, "--set", "trainer.checkpoints.persistence=true", "--set", "trainer.checkpoints.size=5Gi",
                  "--set", "trainer.checkpoints.storageClassName=fast")
    assert trainer_volume(docs) == {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "foresight-trainer-checkpoints"}}
    pvc = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    assert pvc["spec"]["resources"]["requests"]["storage"] == "5Gi" and pvc["spec"]["storageClassName"] == "fast"
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    r = run_helm(helm, "lint", str(CHART), "--kube-version", KUBE_VERSION, "--set", "trainer.checkpoints.size=lots", check=False)
    assert r.returncode != 0 and "size" in r.stdout + r.stderr


def test_network_policies_are_rendered_only_when_asked_and_never_without_the_api_servers_addresses(helm):
    assert not [d for d in render(helm) if d["kind"] == "NetworkPolicy"]
    r = run_helm(helm, "template", "foresight", str(CHART), "--kube-version", KUBE_VERSION,
                 "--set", "networkPolicy.enabled=true", check=False)
    assert r.returncode != 0 and "networkPolicy.apiServerCIDRs" in r.stderr
    docs = render(helm, "--set", "networkPolicy.enabled=true", "--set", "networkPolicy.apiServerCIDRs={10.0.0.0/24}")
    pols = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    assert set(pols) == {"foresight-adapter", "foresight-redis"}
    sources = pols["foresight-adapter"]["ingress"][0]["from"]
    assert {"ipBlock": {"cidr": "10.0.0.0/24"}} in sources and len(pols["foresight-adapter"]["ingress"]) == 1  # no scheduler
    # every component that opens the store may reach Redis, nothing else
    comps = pols["foresight-redis"]["ingress"][0]["from"][0]["podSelector"]["matchExpressions"][0]["values"]
    stores = {d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] for d in docs
              if d["kind"] == "Deployment" and any("--store=" in str(a) for c in d["spec"]["template"]["spec"]["containers"]
                                                    for a in c.get("args") or [])}
    assert stores <= set(comps), (stores, comps)
