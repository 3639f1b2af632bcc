"""Counting ready pods the way the HPA controller does (adapter/readypods.py); the watch itself
runs against the real kube-apiserver in tests/e2e/test_ready_pods.py."""

from __future__ import annotations

from adapter.readypods import label_selector_matches, pod_counts, running_and_ready


def _pod(ns, labels, phase="Running", ready=True):
    return {"metadata": {"namespace": ns, "labels": labels},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_a_selector_matches_labels_and_expressions_and_an_empty_one_matches_nothing():
    sel = {"matchLabels": {"app": "api"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]},
                                                                {"key": "canary", "operator": "DoesNotExist"}]}
    assert label_selector_matches(sel, {"app": "api", "tier": "web"})
    assert not label_selector_matches(sel, {"app": "api", "tier": "db"})
    assert not label_selector_matches(sel, {"app": "api", "tier": "web", "canary": "1"})
    assert not label_selector_matches({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["1"]}]}, {"x": "1"})
    assert label_selector_matches({"matchExpressions": [{"key": "x", "operator": "Exists"}]}, {"x": ""})
    assert not label_selector_matches({}, {"app": "api"}) and not label_selector_matches(None, {"app": "api"})


def test_only_running_and_ready_pods_of_the_workloads_own_selector_count():
    assert running_and_ready(_pod("a", {}))
    assert not running_and_ready(_pod("a", {}, phase="Pending"))
    assert not running_and_ready(_pod("a", {}, ready=False))
    pods = [_pod("shop", {"app": "api"}), _pod("shop", {"app": "api"}), _pod("shop", {"app": "api"}, ready=False),
            _pod("shop", {"app": "api-gateway"}),  # a sibling Deployment sharing the name prefix
            _pod("other", {"app": "api"})]  # the same labels in another namespace
    counts = pod_counts(pods, {"shop/api": ("shop", {"matchLabels": {"app": "api"}}),
                               "shop/api-gateway": ("shop", {"matchLabels": {"app": "api-gateway"}}),
                               "shop/idle": ("shop", {"matchLabels": {"app": "idle"}})})
    assert counts == {"shop/api": 2, "shop/api-gateway": 1, "shop/idle": 0}
