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


def test_watch_events_keep_the_counts_a_full_recount_would_give():
    # the incremental path (one pod's namespace per event) against counting every pod again
    import random

    from adapter.readypods import PodWatch, _slim

    rnd = random.Random(3)
    w = PodWatch(kube=None, workloads=dict)
    w._st.selectors = {"a/api": ("a", {"matchLabels": {"app": "api"}}), "a/gw": ("a", {"matchLabels": {"app": "gw"}}),
                       "b/api": ("b", {"matchLabels": {"app": "api"}})}
    w._recount()
    for _ in range(2000):
        uid = f"u{rnd.randrange(40)}"
        if rnd.random() < 0.2:
            w._apply(uid, None)
            continue
        ready = rnd.random() < 0.6
        pod = {"metadata": {"namespace": rnd.choice("ab"), "labels": {"app": rnd.choice(["api", "gw", "db"])}},
               "status": {"phase": rnd.choice(["Running", "Running", "Pending"]),
                          "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
        w._apply(uid, _slim(pod))
    assert w._st.counts == pod_counts(w._st.pods.values(), w._st.selectors)
    assert sum(w._st.counts.values()) > 0
