"""One bad object harms no one (kubeoperator/runner.py), without a control plane: the runner
talks to a fake of the operator's own API wrapper (kubeoperator.kube.KubeApi's methods, plain
dicts), the forecast store is the real memory store. An invalid PredictiveAutoscaler or WarmPool
gets its Ready condition and one Event; every valid one is reconciled in the same pass; an
unexpected exception costs its object only; run() survives a pass that raises."""

from __future__ import annotations

import copy
import threading

import yaml

from core.store import MemoryForecastStore
from kubeoperator.kube import KubeError
from kubeoperator.runner import Operator, OperatorSettings

NOW = 1_700_000_000.0
BASE = {"apiVersion": "foresight/v1alpha1", "kind": "WorkloadConfig",
        "source": {"url": "prometheus://prometheus:9090"}, "store": {"url": "redis://redis:6379/0"}, "workloads": []}


def pa(name: str, ns: str = "shop", query: str = 'sum(rate(http_requests_total{job="%s"}[2m]))', **spec) -> dict:
    body = {"scaleTargetRef": {"name": name}, "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{"name": "cpu", "type": "Resource", "cpuRequestCores": 0.5},
                        {"name": "rps", "type": "Demand", "query": query.replace("%s", name), "capacityPerReplica": 40}]}
    body.update(spec)
    return {"apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler",
            "metadata": {"name": name, "namespace": ns, "uid": f"u-{ns}-{name}", "generation": 1}, "spec": body}


def wp(name: str, ns: str = "shop", **spec) -> dict:
    body = {"workload": name, "backend": "sim", "minWarm": 0, "maxWarm": 3, **spec}
    return {"apiVersion": "foresight.dev/v1alpha1", "kind": "WarmPool",
            "metadata": {"name": name, "namespace": ns, "generation": 2}, "spec": body}


class FakeKube:
    """The operator's API wrapper, in memory: what was written is kept to be asserted on."""

    def __init__(self, objects: dict[str, list[dict]], base: dict | None = None, fail_apply_for: str = "",
                 crash_apply_for: str = "", fail_list: Exception | None = None):
        self.objects = objects
        self.configmaps = {("foresight", "foresight-workloads"): {
            "metadata": {"uid": "cm-1"}, "data": {"workloads.yaml": yaml.safe_dump(base or BASE)}}}
        self.applied: dict[tuple[str, str, str], dict] = {}
        self.statuses: dict[tuple[str, str, str], dict] = {}
        self.events: list[tuple[str, str, str, str]] = []  # kind, namespace/name, type, reason
        self.fail_apply_for, self.crash_apply_for, self.fail_list = fail_apply_for, crash_apply_for, fail_list

    def list(self, kind: str, api_version: str = "") -> list[dict]:
        if self.fail_list is not None:
            raise self.fail_list
        return copy.deepcopy(self.objects.get(kind, []))

    def get_configmap(self, namespace: str, name: str) -> dict | None:
        return self.configmaps.get((namespace, name))

    def replicas(self, namespace, kind, name, api_version="apps/v1"):
        return 2, 2

    def apply(self, body: dict) -> dict:
        md = body["metadata"]
        if md["name"] == self.crash_apply_for:
            raise RuntimeError("a bug in the apply path")
        if md["name"] == self.fail_apply_for:
            raise KubeError(f"apply {body['kind']}", 500, "etcd timeout")
        self.applied[(body["kind"], md.get("namespace", ""), md["name"])] = body
        return body

    def delete_owned_hpa(self, namespace, name, owner_uid) -> bool:
        return False

    def patch_status(self, kind: str, namespace: str, name: str, status: dict) -> None:
        self.statuses[(kind, namespace, name)] = status

    def annotate_pod_template(self, namespace, deployment, key, value) -> bool:
        return True

    def emit_event(self, obj: dict, event, now: float) -> None:
        md = obj["metadata"]
        self.events.append((obj["kind"], f"{md['namespace']}/{md['name']}", event.type, event.reason))
        assert event.message  # an Event says why

    def watch(self, kind, on_change, stop, api_version=""):
        stop.wait()


def ready(api: FakeKube, kind: str, ns: str, name: str) -> dict:
    return next(c for c in api.statuses[(kind, ns, name)]["conditions"] if c["type"] == "Ready")


def operator(api: FakeKube, **settings) -> Operator:
    s = OperatorSettings(**{"warmpool_configmap": None, **settings})
    return Operator(api, MemoryForecastStore(), s, clock=lambda: NOW)


def trainer_config(api: FakeKube) -> dict:
    return yaml.safe_load(api.applied[("ConfigMap", "foresight", "foresight-trainer-config")]["data"]["workloads.yaml"])


def test_an_autoscaler_reading_another_namespace_is_refused_and_every_valid_one_is_reconciled():
    objs = [pa("a-good"), pa("b-spy", query='sum(rate(http_requests_total{namespace="bank"}[2m]))'),
            pa("c-broken", maxReplicas="ten"), pa("d-good", ns="bank")]
    api = FakeKube({"PredictiveAutoscaler": objs})
    rep = operator(api).step()
    assert (rep.autoscalers, rep.refused, rep.crashed, rep.errors) == (2, 2, 0, [])
    # the valid ones: their HPAs, their workloads in the trainer config, each query in its own namespace
    assert {k for k in api.applied if k[0] == "HorizontalPodAutoscaler"} == {
        ("HorizontalPodAutoscaler", "shop", "a-good"), ("HorizontalPodAutoscaler", "bank", "d-good")}
    cfg = trainer_config(api)
    assert [(w["namespace"], w["name"]) for w in cfg["workloads"]] == [("bank", "d-good"), ("shop", "a-good")]
    assert [w["metrics"][0]["query"] for w in cfg["workloads"]] == [
        'sum(rate(http_requests_total{job="d-good",namespace="bank"}[2m]))',
        'sum(rate(http_requests_total{job="a-good",namespace="shop"}[2m]))']
    assert "b-spy" not in yaml.safe_dump(cfg)  # a refused query never reaches the trainer
    # the refused ones: Ready False with the field path and the fix, and one Warning Event each
    spy = ready(api, "PredictiveAutoscaler", "shop", "b-spy")
    assert (spy["status"], spy["reason"]) == ("False", "QueryNotConfined")
    assert spy["message"].startswith("spec.metrics[1].query: ") and 'set namespace="shop"' in spy["message"]
    broken = ready(api, "PredictiveAutoscaler", "shop", "c-broken")
    assert (broken["status"], broken["reason"]) == ("False", "InvalidSpec")
    assert broken["message"] == "spec.maxReplicas: must be an integer, got str 'ten'"
    assert sorted(e for e in api.events if e[2] == "Warning") == [
        ("PredictiveAutoscaler", "shop/b-spy", "Warning", "QueryNotConfined"),
        ("PredictiveAutoscaler", "shop/c-broken", "Warning", "InvalidSpec")]


def test_a_refused_object_is_told_once_per_generation_not_every_pass():
    api = FakeKube({"PredictiveAutoscaler": [pa("spy", query='x{namespace=~".*"}')]})
    op = operator(api)
    op.step()
    assert len(api.events) == 1
    api.objects["PredictiveAutoscaler"][0]["status"] = api.statuses[("PredictiveAutoscaler", "shop", "spy")]
    op.step()
    assert len(api.events) == 1  # the condition keeps saying it
    api.objects["PredictiveAutoscaler"][0]["metadata"]["generation"] = 2  # edited, still wrong
    op.step()
    assert [e[3] for e in api.events] == ["QueryNotConfined", "QueryNotConfined"]


def test_an_unexpected_exception_costs_its_object_only_and_step_does_not_raise():
    api = FakeKube({"PredictiveAutoscaler": [pa("a"), pa("b"), pa("c")]}, crash_apply_for="b", fail_apply_for="c")
    rep = operator(api).step()
    assert (rep.autoscalers, rep.crashed) == (1, 1)
    assert ("HorizontalPodAutoscaler", "shop", "a") in api.applied
    assert any("shop/b: unexpected RuntimeError" in e for e in rep.errors)
    assert any(e.startswith("shop/c: apply HorizontalPodAutoscaler: 500") for e in rep.errors)


def test_an_object_without_usable_metadata_is_counted_and_skipped():
    no_meta = pa("x")
    no_meta["metadata"] = "garbage"
    api = FakeKube({"PredictiveAutoscaler": [no_meta, pa("good"), ["not", "an", "object"]]})
    rep = operator(api).step()
    assert rep.autoscalers == 1 and rep.refused == 2
    assert ("HorizontalPodAutoscaler", "shop", "good") in api.applied
    assert len(rep.errors) == 2 and all("cannot be written" in e for e in rep.errors)


def test_a_failing_phase_is_reported_and_the_warm_pools_still_reconcile():
    class Flaky(FakeKube):
        def list(self, kind, api_version=""):
            if kind == "PredictiveAutoscaler":
                raise TypeError("the client returned something unexpected")
            return super().list(kind, api_version)

    api = Flaky({"WarmPool": [wp("web")]})
    api.configmaps[("foresight", "foresight-warmpool-base")] = {"metadata": {}, "data": {"policy.yaml": "{}"}}
    rep = operator(api, warmpool_configmap="foresight-warmpool-policy").step()
    assert rep.crashed == 1 and rep.warmpools == 1
    assert any(e.startswith("PredictiveAutoscalers: unexpected TypeError") for e in rep.errors)


def test_a_warm_pool_following_another_namespace_is_refused_and_colliding_names_both_run():
    from warmpool.policy import parse_policy

    objs = [wp("b-c", ns="a"), wp("c", ns="a-b"), wp("spy", series="bank/payments"),
            wp("rate-spy", demand="requests", requestRate={"series": "bank/payments/rps", "concurrencyPerContainer": 5})]
    api = FakeKube({"WarmPool": objs})
    api.configmaps[("foresight", "foresight-warmpool-base")] = {"metadata": {}, "data": {"policy.yaml": "{}"}}
    rep = operator(api, warmpool_configmap="foresight-warmpool-policy").step()
    assert (rep.warmpools, rep.refused) == (2, 2)
    text = api.applied[("ConfigMap", "foresight", "foresight-warmpool-policy")]["data"]["policy.yaml"]
    pools = parse_policy(yaml.safe_load(text)).pools
    assert sorted(p.name for p in pools) == ["a-b.c", "a.b-c"]
    assert "bank" not in text
    spy = ready(api, "WarmPool", "shop", "spy")
    assert (spy["status"], spy["reason"]) == ("False", "InvalidSpec")
    assert spy["message"].startswith("spec.series: 'bank/payments' is a forecast of namespace 'bank'")
    assert ready(api, "WarmPool", "shop", "rate-spy")["message"].startswith("spec.requestRate.series: ")
    assert sorted(e[1] for e in api.events) == ["shop/rate-spy", "shop/spy"]


def test_run_survives_a_pass_that_raises_and_keeps_passing():
    api = FakeKube({"PredictiveAutoscaler": [pa("a")]})
    op = operator(api, resync_seconds=0.0)
    stop = threading.Event()
    passes = []

    def step():
        passes.append(1)
        if len(passes) == 3:
            stop.set()
        if len(passes) == 1:
            raise RuntimeError("a bug outside every per-object guard")
        return type(op).step(op)

    op.step = step
    worker = threading.Thread(target=op.run, args=(stop, False), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive() and len(passes) == 3
    assert ("HorizontalPodAutoscaler", "shop", "a") in api.applied  # the passes after the crash did their work


def test_a_warm_pool_the_policy_refuses_is_told_with_its_own_field_path_once():
    api = FakeKube({"WarmPool": [wp("web", minWarm=6, maxWarm=5), wp("ok")]})
    api.configmaps[("foresight", "foresight-warmpool-base")] = {"metadata": {}, "data": {"policy.yaml": "{}"}}
    op = operator(api, warmpool_configmap="foresight-warmpool-policy")
    rep = op.step()
    assert rep.warmpools == 2  # both get a status; only "ok" is in the policy
    bad = ready(api, "WarmPool", "shop", "web")
    assert (bad["status"], bad["reason"]) == ("False", "InvalidPool")
    assert bad["message"].startswith("spec.minWarm: 6 must be <= ")
    assert api.events == [("WarmPool", "shop/web", "Warning", "InvalidPool")]
    api.objects["WarmPool"][0]["status"] = api.statuses[("WarmPool", "shop", "web")]
    op.step()
    assert len(api.events) == 1  # the same generation: the condition keeps saying it


def test_a_pass_validates_each_autoscalers_workload_once_so_it_grows_linearly_with_the_fleet(monkeypatch):
    """Each entry used to be validated on top of every entry accepted before it: 1,000
    autoscalers cost half a million workload checks (a minute) per pass."""
    from kubeoperator import render

    checked = []

    def counting(data, source="<config>"):
        checked.append(len(data.get("workloads") or []))
        return real(data, source)

    real = render.parse_config
    monkeypatch.setattr(render, "parse_config", counting)
    n = 60
    api = FakeKube({"PredictiveAutoscaler": [pa(f"w{i}") for i in range(n)]})
    rep = operator(api).step()
    assert rep.autoscalers == n and len(trainer_config(api)["workloads"]) == n
    assert sum(checked) == n  # the base (no workloads) once, then each entry alone
