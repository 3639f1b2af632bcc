"""bench/real_node.py in its quick mode, as a user runs it: a subprocess that starts its own
control plane and node, starts 10 pods per runtime class (runc, crun, gvisor) and image (busybox,
foresight's app) and saves the latencies to Ready and to the first answered request, then claims warm
and cold pods through the warm-pool API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cluster import nodenet
from tests.node.conftest import _need_root

ROOT = Path(__file__).resolve().parents[2]


def test_the_real_node_bench_quick_times_pod_starts_per_runtime_class_and_cleans_up(tmp_path):
    _need_root()
    r = subprocess.run([sys.executable, "-m", "bench.real_node", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    doc = json.loads((tmp_path / "real_node.json").read_text())
    assert set(doc["runtime_classes"]) == {"runc", "crun", "gvisor"}
    for handler, by_image in doc["runtime_classes"].items():
        assert set(by_image) == {"busybox", "app"}  # a minimal image and foresight's own
        for image, m in by_image.items():
            for what in ("ready", "served"):
                s = m[what]
                assert s["pods"] == 10
                assert 0 < s["p50_s"] <= s["p90_s"] <= s["p99_s"] <= s["max_s"], (handler, image, what, s)
            assert f"{handler:6s} {image:7s}   10 pods  Ready p50" in r.stdout
    assert doc["seed_ms"]["crun"] == {"p50": 82.0, "p90": 136.0, "p99": 214.0}  # the model's seed, beside them
    # warm claims and cold starts through the warm-pool API, timed to the first answer at the pod and through a Service
    assert set(doc["claims"]) == {"runc", "crun"}  # gVisor's claims only in the full run (bench/real_node.py)
    for handler, by_kind in doc["claims"].items():
        for where in ("pod", "served"):
            warm, cold = by_kind["warm"][where], by_kind["cold"][where]
            assert warm["pods"] == cold["pods"] == 3 and 0 < warm["p50_s"] and 0 < cold["p50_s"], (handler, where)
        warm, cold = by_kind["warm"]["pod"], by_kind["cold"]["pod"]
        assert warm["p50_s"] < cold["p50_s"], (handler, warm, cold)  # at the claim's endpoint a warm pod answers sooner
        # Through the Service both wait for the endpoint to reach kube-proxy (about a second here),
        # which outlasts a crun cold start (full run: warm 1.125 s, cold 1.134 s p50), so only
        # runc's cold start is long enough to order them there.
        if handler == "runc":
            assert by_kind["warm"]["served"]["p50_s"] < by_kind["cold"]["served"]["p50_s"], by_kind
        assert f"{handler:6s} warm claims   3  -> pod answering p50" in r.stdout
        assert doc["warm_claim_to_cold_start_p50"][handler] > 0
    assert doc["node_start_seconds"] > 0 and doc["control_plane_start_seconds"] > 0
    assert doc["images"]["app"]["archive_bytes"] > 10_000_000 and doc["images"]["pause"]["archive_bytes"] > 0
    md = (tmp_path / "real_node.md").read_text()
    assert "| runc | busybox | 10 |" in md and "| gvisor | app | 10 |" in md and "| kata (seed) | 487 |" in md
    assert nodenet.leftovers() == []
