"""One pod watch per replica (adapter/podshare.py): of the workers sharing a directory, one lists
and watches pods; the others serve its counts and forward the workloads they are asked about."""

from __future__ import annotations

import pytest

from tests.adapter.test_readypods import _api_pod, _wait_for, pod_api  # noqa: F401 - the fixture


def _worker(double, share_dir, workloads=None, **kw):
    from adapter.podshare import SharedPodWatch
    from adapter.readypods import PodWatch
    from core.kubeclient import KubeClient

    kube = KubeClient.for_server(double.url, token="sa", timeout_seconds=10)
    wl = workloads or {"shop/api": ("shop", "Deployment", "api")}
    return SharedPodWatch(PodWatch(kube, workloads=lambda: dict(wl), page_size=500), share_dir,
                          publish_seconds=0.05, **kw)


def test_of_two_workers_one_lists_and_watches_pods_and_the_other_serves_its_counts(pod_api, tmp_path):  # noqa: F811
    a = _worker(pod_api, tmp_path).start()
    b = _worker(pod_api, tmp_path).start()
    try:
        assert a.leader and not b.leader
        _wait_for(lambda: b.count("shop/api") == 201, "the follower's count from the leader's snapshot")
        assert b.cpu_request("shop/api") == pytest.approx(0.25) and not b.warming()
        assert len(pod_api.pods.lists()) == 3  # one paged list (three pages), not one per worker
        pod_api.pods.emit("ADDED", _api_pod("new", "shop", "api"))
        _wait_for(lambda: b.count("shop/api") == 202, "a watch event reaching the follower")
        assert len(pod_api.pods.watches()) == 1
    finally:
        pod_api.pods.closing = True
        b.stop()
        a.stop()


def test_a_workload_only_the_follower_is_asked_about_reaches_the_leaders_resolver(pod_api, tmp_path):  # noqa: F811
    pod_api.pods.workloads["/apis/apps/v1/namespaces/bank/deployments/ledger"] = {
        "kind": "Deployment", "spec": {"selector": {"matchLabels": {"app": "api"}}}}
    a = _worker(pod_api, tmp_path).start()
    b = _worker(pod_api, tmp_path).start()
    try:
        _wait_for(lambda: b.count("shop/api") is not None, "the first snapshot")
        assert b.count("bank/ledger", {"namespace": "bank", "kind": "Deployment", "workload": "ledger"}) is None
        _wait_for(lambda: b.count("bank/ledger") == 401, "the forwarded workload's count")  # every bank pod is Ready
        assert a.count("bank/ledger") == 401
    finally:
        pod_api.pods.closing = True
        b.stop()
        a.stop()


def test_when_the_leader_stops_a_follower_takes_over_and_a_silent_leader_is_not_trusted(pod_api, tmp_path):  # noqa: F811
    now = [1000.0]  # one clock for both workers, as one machine's
    a = _worker(pod_api, tmp_path, clock=lambda: now[0]).start()
    b = _worker(pod_api, tmp_path, clock=lambda: now[0]).start()
    try:
        _wait_for(lambda: b.count("shop/api") == 201, "the follower's count")
        now[0] += 60  # the leader's last word is a minute old: not trusted, the published count serves
        assert b.count("shop/api") is None and b.cpu_request("shop/api") is None
        now[0] -= 60
        pod_api.pods.closing = True
        a.stop()  # its process ends: the lock is free
        pod_api.pods.closing = False
        _wait_for(lambda: b.leader, "the follower to take over")
        _wait_for(lambda: b.count("shop/api") == 201, "the new leader's own list")
        assert len(pod_api.pods.lists()) == 6  # each leader listed once, in pages
    finally:
        pod_api.pods.closing = True
        b.stop()
        a.stop()


@pytest.mark.slow
def test_foresight_serve_with_two_workers_lists_and_watches_pods_once(pod_api, tmp_path):  # noqa: F811
    from tests.adapter.helpers import ServeProcess
    from tests.stack import free_port

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{pod_api.url}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\nusers: [{name: u, user: {token: sa}}]\n")
    port = free_port()
    proc = ServeProcess(["--store", "memory://", "--plain-http", "--kubeconfig", str(kubeconfig), "--workers", "2"],
                        port, tmp_path / "serve.log")
    autoscaler_lists = lambda: [p for p, _ in pod_api.pods.gets if p.endswith("/predictiveautoscalers")]  # noqa: E731
    try:
        proc.wait_ready(scheme="http", timeout=60)
        # Each worker lists the autoscalers when it starts and every 15 s (adapter/observemode.py):
        # after its second list, a worker that were to watch pods too would have listed them long
        # since (a pod list starts with the worker; without the shared watch this sees 6 and 2).
        _wait_for(lambda: len(autoscaler_lists()) >= 4, "both workers' second autoscaler list", timeout=90)
        assert len(pod_api.pods.lists()) == 3 and len(pod_api.pods.watches()) == 1
    finally:
        pod_api.pods.closing = True
        proc.stop()
    assert "Traceback" not in (tmp_path / "serve.log").read_text()
