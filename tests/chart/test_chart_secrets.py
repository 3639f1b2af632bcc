"""Secrets that stay secret and stable: the checkpoints' signing key comes from a Secret mounted
apart from the checkpoints, and with the *ExistingSecret values set the chart renders no
generated material, so `helm template` (no `lookup`: what GitOps tools run) renders the same
bytes every time. The real helm binary (tests/cluster/build_helm.sh); no control plane."""

from __future__ import annotations

import pytest
import yaml

from tests.chart.conftest import CHART, KUBE_VERSION, run_helm

pytestmark = [pytest.mark.e2e]

ALL_ON = ["--set", "warmpool.enabled=true", "--set", "scheduler.enabled=true", "--set", "trainer.engine=ray",
          "--set", "monitoring.serviceMonitor.enabled=true"]
EXISTING = ["--set", "redis.createUsersSecret=false", "--set", "redis.usersSecret=my-redis-users",
            "--set", "redis.tlsExistingSecret=my-redis-tls", "--set", "warmpool.tlsExistingSecret=my-warmpool-tls",
            "--set", "scheduler.clientTLSExistingSecret=my-scheduler-client-tls",
            "--set", "trainer.checkpoints.keyExistingSecret=my-checkpoint-key",
            "--set", "adapter.certificate=existing", "--set", "adapter.tlsSecret=my-adapter-tls",
            "--set", "adapter.caBundle=Q0EK", "--set", "ray.cluster.createTokenSecret=false"]
GENERATED = {"foresight-redis-users", "foresight-redis-tls", "foresight-warmpool-tls", "foresight-scheduler-client-tls",
             "foresight-checkpoint-key", "foresight-adapter-tls", "foresight-ray"}


def template(helm, *args: str) -> str:
    return run_helm(helm, "template", "foresight", str(CHART), "-n", "foresight", "--kube-version", KUBE_VERSION,
                    *args).stdout


def docs_of(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def _key(d: dict) -> tuple[str, str]:
    return d["kind"], d["metadata"]["name"]


def test_with_existing_secrets_two_renders_are_identical_and_hold_no_generated_secret(helm):
    first, second = template(helm, *ALL_ON, *EXISTING), template(helm, *ALL_ON, *EXISTING)
    assert first == second
    secrets = {d["metadata"]["name"] for d in docs_of(first) if d["kind"] == "Secret"}
    assert not secrets & GENERATED, secrets
    mounted = {v["secret"]["secretName"] for d in docs_of(first) if d["kind"] == "Deployment"
               for v in d["spec"]["template"]["spec"].get("volumes", []) if "secret" in v}
    assert {"my-redis-tls", "my-warmpool-tls", "my-scheduler-client-tls", "my-checkpoint-key", "my-adapter-tls"} <= mounted
    assert not mounted & GENERATED


def test_without_them_only_the_generated_material_differs_between_renders(helm):
    # what the *ExistingSecret values are for: `helm template` cannot read back what it made
    a = {_key(d): d for d in docs_of(template(helm, *ALL_ON))}
    b = {_key(d): d for d in docs_of(template(helm, *ALL_ON))}
    assert a.keys() == b.keys()
    differing = {k for k in a if a[k] != b[k]}
    assert {("Secret", n) for n in ("foresight-redis-users", "foresight-checkpoint-key")} <= differing
    allowed = {("Secret", n) for n in GENERATED} | {("APIService", "v1beta1.external.metrics.k8s.io"),
                                                    ("Deployment", "foresight-redis")}  # caBundle, TLS checksum
    assert differing <= allowed, differing - allowed


def _trainer(docs):
    return next(d for d in docs if _key(d) == ("Deployment", "foresight-trainer"))["spec"]["template"]["spec"]


@pytest.mark.parametrize("persistence", ["false", "true"])
def test_the_checkpoint_key_comes_from_a_secret_mounted_apart_from_the_checkpoints(helm, persistence):
    docs = docs_of(template(helm, "--set", f"trainer.checkpoints.persistence={persistence}"))
    spec = _trainer(docs)
    c = spec["containers"][0]
    args = [str(a) for a in c["args"]]
    key_file = args[args.index("--checkpoint-key-file") + 1]
    ckpt_dir = args[args.index("--checkpoint-dir") + 1]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert not key_file.startswith(ckpt_dir.rstrip("/") + "/")
    key_mount = next(n for n, p in mounts.items() if key_file.startswith(p.rstrip("/") + "/"))
    volume = next(v for v in spec["volumes"] if v["name"] == key_mount)
    assert volume["secret"]["secretName"] == "foresight-checkpoint-key"
    secret = next(d for d in docs if _key(d) == ("Secret", "foresight-checkpoint-key"))
    assert len(secret["stringData"]["key"]) >= 32 and secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # the trainer's own CLI accepts what the chart passes (the key file needs the checkpoint dir)
    from foresight.cli import build_parser

    parsed = build_parser().parse_args(args)
    assert parsed.checkpoint_key_file == key_file and parsed.checkpoint_dir == ckpt_dir


def test_the_warm_pool_metrics_scrape_sends_prometheus_token_and_can_be_bound_to_read_every_pool(helm):
    base = ALL_ON + ["--set", "monitoring.serviceMonitor.prometheusServiceAccount.name=prometheus-k8s",
                     "--set", "monitoring.serviceMonitor.prometheusServiceAccount.namespace=monitoring"]
    docs = docs_of(template(helm, *base))
    sm = next(d for d in docs if _key(d) == ("ServiceMonitor", "foresight-warmpool"))
    assert sm["spec"]["endpoints"][0]["bearerTokenFile"].endswith("serviceaccount/token")
    role = next(d for d in docs if _key(d) == ("ClusterRole", "foresight-warmpool-metrics"))
    assert role["rules"] == [{"apiGroups": ["foresight.dev"], "resources": ["warmpools"], "verbs": ["get"]}]
    binding = next(d for d in docs if _key(d) == ("ClusterRoleBinding", "foresight-warmpool-metrics"))
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}]
    unbound = docs_of(template(helm, *ALL_ON))
    assert ("ClusterRoleBinding", "foresight-warmpool-metrics") not in {_key(d) for d in unbound}


@pytest.mark.parametrize("value", ["redis.tlsExistingSecret=Bad_Name", "trainer.checkpoints.keyExistingSecret=UPPER"])
def test_an_existing_secret_name_kubernetes_would_refuse_is_refused_by_the_schema(helm, value):
    r = run_helm(helm, "lint", str(CHART), "--kube-version", KUBE_VERSION, "--set", value, check=False)
    assert r.returncode != 0 and value.split("=")[0].split(".")[-1] in (r.stdout + r.stderr)


def test_helm_lint_strict_passes_with_every_existing_secret(helm):
    out = run_helm(helm, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *ALL_ON, *EXISTING).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out
