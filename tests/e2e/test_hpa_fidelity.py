"""HPA fidelity: the real HPA controller and replay/hpa.py, fed the same script, scale alike.

Each scenario is a Deployment (pods request 500m CPU) with an autoscaling/v2 HPA on CPU
utilization (target 50%), and a script of steps: total CPU demand, how many of the newest pods
are not Ready, how many ready pods report no metrics. The real kube-controller-manager runs the
HPA (sync every 2 s) against the metrics-server stand-in and the kubelet stand-in. replay/hpa.py
replays the same script in closed loop (its own replica count, its own stabilization and rate
state) at the instants the real controller synced (each sync is one pod-metrics request, logged
by the stand-in), with the not-ready pod count the stand-in reported at that sync. The replica
counts at the end of every step, and the sequence of counts over all syncs, must agree.

Windows and policy periods (9, 11, 17 s) lie between multiples of the sync spacing (2.0 to
2.1 s in practice: the controller re-queues 2 s after it finishes a sync), so that no decision
hinges on milliseconds. Where one still does (the controller stamps its records when it
decides, the replay when the metrics were fetched, some milliseconds earlier), the two differ
by one sync; such syncs are listed in the table and the sequences of counts must still agree.

The table is written to $FORESIGHT_FIDELITY_OUT (bench/results/hpa_fidelity.csv when run with
`make e2e`) and to the test's temp dir.
"""

from __future__ import annotations

import csv
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from replay.hpa import HPA, HPASpec, ScalingPolicy, ScalingRules, resource_utilization_proposal
from tests.cluster.controlplane import wait_for
from tests.cluster.metrics_standin import Script

pytestmark = [pytest.mark.e2e]

REQUEST_MILLI = 500
TARGET_PERCENT = 50


@dataclass
class Step:
    seconds: float
    demand_milli: int
    unready: int = 0
    missing: int = 0


@dataclass
class Scenario:
    name: str
    replicas: int
    spec: HPASpec
    steps: list[Step]
    covers: str
    real: list[tuple[float, int]] = field(default_factory=list)  # (t, spec.replicas) polled
    applied: list[tuple[float, int]] = field(default_factory=list)  # (t, step index) as the stand-ins got it
    t0: float = 0.0


def rules(window, select, *policies):
    return ScalingRules(window, select, tuple(ScalingPolicy(t, v, p) for t, v, p in policies))


SCENARIOS = [
    Scenario("tolerance", 4, HPASpec(1, 10, scale_up=rules(0, "Max", ("Pods", 4, 15), ("Percent", 100, 15)),
                                     scale_down=rules(0, "Max", ("Percent", 100, 15))),
             [Step(8, 1000), Step(8, 1090), Step(8, 1130), Step(8, 1130), Step(8, 1100), Step(8, 900), Step(8, 900),
              Step(8, 1330)],
             "tolerance band 0.9..1.1 on integer utilization, both directions"),
    Scenario("rate-policies", 2, HPASpec(1, 20, scale_up=rules(0, "Max", ("Pods", 2, 11), ("Percent", 50, 11)),
                                         scale_down=rules(0, "Min", ("Pods", 3, 11), ("Percent", 30, 11))),
             [Step(40, 4500), Step(40, 600)],
             "scale-up Pods/Percent with selectPolicy Max, scale-down with selectPolicy Min, 11 s periods"),
    Scenario("stabilization", 3, HPASpec(1, 10, scale_up=rules(9, "Max", ("Pods", 10, 15)),
                                         scale_down=rules(17, "Max", ("Percent", 100, 15))),
             [Step(6, 750), Step(16, 1500), Step(30, 500), Step(4, 1500), Step(12, 500)],
             "9 s scale-up and 17 s scale-down stabilization windows; a spike shorter than the up window"),
    Scenario("unready-missing", 4, HPASpec(1, 12, scale_up=rules(0, "Max", ("Pods", 4, 15), ("Percent", 100, 15)),
                                           scale_down=rules(0, "Max", ("Percent", 100, 15))),
             [Step(8, 1000, unready=2), Step(10, 1400, unready=2), Step(10, 600, missing=1), Step(10, 1800, missing=1),
              Step(10, 400, unready=3)],
             "not-ready pods at 0% on scale-up, ignored on scale-down; missing pods at 100%/0%"),
    Scenario("disabled-down", 6, HPASpec(1, 10, scale_up=rules(0, "Max", ("Pods", 1, 11)),
                                         scale_down=ScalingRules(0, "Disabled", (ScalingPolicy("Pods", 1, 15),))),
             [Step(8, 400), Step(24, 2500)],
             "selectPolicy Disabled blocks scale-down; Pods 1 per 11 s scale-up"),
]


def _behavior(r: ScalingRules) -> dict:
    return {"stabilizationWindowSeconds": r.stabilization_window_seconds, "selectPolicy": r.select_policy,
            "policies": [{"type": p.type, "value": p.value, "periodSeconds": p.period_seconds} for p in r.policies]}


def _deployment(name: str, replicas: int) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                                           "resources": {"requests": {"cpu": f"{REQUEST_MILLI}m"}}}]}}}}


def _hpa(sc: Scenario) -> dict:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": sc.name},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": sc.name},
                     "minReplicas": sc.spec.min_replicas, "maxReplicas": sc.spec.max_replicas,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                         "type": "Utilization", "averageUtilization": TARGET_PERCENT}}}],
                     "behavior": {"scaleUp": _behavior(sc.spec.scale_up), "scaleDown": _behavior(sc.spec.scale_down)}}}


def _ready_count(cp, ns, app) -> int:
    pods = cp.admin.json(f"/api/v1/namespaces/{ns}/pods", labelSelector=f"app={app}")["items"]
    return sum(1 for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                      for c in (p.get("status") or {}).get("conditions") or []))


def run_real(cp, metrics, sc: Scenario) -> None:
    ns = f"fid-{sc.name}"
    cp.ensure_namespace(ns)
    key = (ns, sc.name)
    first = sc.steps[0]
    metrics.scripts[key] = Script(demand_milli=first.demand_milli, missing=first.missing)
    cp.standin.unready[key] = first.unready
    r = cp.admin.post(f"/apis/apps/v1/namespaces/{ns}/deployments", _deployment(sc.name, sc.replicas))
    assert r.status_code == 201, r.text
    wait_for(f"{ns}: {sc.replicas - first.unready} ready pods",
             lambda: _ready_count(cp, ns, sc.name) == sc.replicas - first.unready, timeout=120)
    r = cp.admin.post(f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers", _hpa(sc))
    assert r.status_code == 201, r.text
    sc.t0 = time.time()
    sc.applied.append((0.0, 0))
    bounds = []
    acc = sc.t0
    for st in sc.steps:
        acc += st.seconds
        bounds.append((acc, st))
    k = 0
    path = f"/apis/apps/v1/namespaces/{ns}/deployments/{sc.name}"
    while True:
        now = time.time()
        if now >= bounds[-1][0] + 1.5:  # the last step's last decision is polled 1 s after its sync
            break
        while k + 1 < len(bounds) and now >= bounds[k][0]:
            k += 1
            st = bounds[k][1]
            metrics.scripts[key] = Script(demand_milli=st.demand_milli, missing=st.missing)
            cp.standin.unready[key] = st.unready
            sc.applied.append((time.time(), k))
        sc.real.append((time.time(), cp.admin.json(path)["spec"]["replicas"]))
        time.sleep(0.25)
    cp.admin.delete(f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/{sc.name}")


def replay(sc: Scenario, syncs: list) -> list[tuple[float, int]]:
    """replay/hpa.py in closed loop at the real controller's sync instants.

    Inputs per sync are what the stand-ins served to that sync: the script's demand and missing
    pods (the driver switches steps a fraction of a second after each boundary, so the clock
    alone would run ahead of them), and the not-ready pods (pods take a fraction of a second to
    turn Ready or to start after a scale-up; the real controller counts them as not ready
    meanwhile). The replica count, the recommendations and the scale events are the replay's own."""
    hpa = HPA(spec=sc.spec)
    S = sc.replicas
    out = []
    for f in syncs:
        t = f.t
        unready = min(f.unready, S)
        ready = S - unready
        reporting = max(0, ready - f.missing)
        missing = ready - reporting
        p = resource_utilization_proposal(sc.spec, S, f.demand_milli if reporting else 0, reporting, REQUEST_MILLI,
                                          TARGET_PERCENT, unready_pods=unready, missing_pods=missing)
        S = hpa.sync(t, S, [p]).desired
        out.append((t, S))
    return out


def _at(series: list[tuple[float, int]], t: float, default: int) -> int:
    v = default
    for ts, x in series:
        if ts > t:
            break
        v = x
    return v


def test_the_real_hpa_controller_and_replay_hpa_scale_alike(control_plane, metrics_server, tmp_path):
    cp = control_plane
    threads = [threading.Thread(target=run_real, args=(cp, metrics_server, sc), name=sc.name) for sc in SCENARIOS]
    errors: list[BaseException] = []

    def guard(fn):
        def inner(*a):
            try:
                fn(*a)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)
        return inner

    for t in threads:
        t._target = guard(t._target)  # type: ignore[attr-defined]
        t.start()
    for t in threads:
        t.join(600)
    if errors:
        raise errors[0]
    cp.check_alive()

    rows = []
    sequences: dict[str, tuple[list[int], list[int], int, int]] = {}
    disagreements: list[str] = []
    for sc in SCENARIOS:
        ns = f"fid-{sc.name}"
        fetches = [f for f in metrics_server.fetches if f.namespace == ns and f.t >= sc.t0 - 0.5]
        syncs = [f.t for f in fetches]
        assert len(syncs) >= sum(s.seconds for s in sc.steps) / 2 / 2, f"{sc.name}: only {len(syncs)} HPA syncs"
        rep = replay(sc, fetches)
        end = sc.t0
        for i, st in enumerate(sc.steps):
            end += st.seconds
            # The last decision of the step: the last sync before the step ended. The real count
            # is read 1 s after that sync (written within ~0.1 s, polled every 0.25 s; the next
            # sync comes 2 s after it).
            last = max((t for t in syncs if t <= end), default=sc.t0)
            real = _at(sc.real, last + 1.0, sc.replicas)
            ours = _at(rep, last, sc.replicas)
            rows.append({"scenario": sc.name, "step": i + 1, "t_end_s": round(end - sc.t0, 1),
                         "demand_millicores": st.demand_milli, "unready_pods": st.unready, "missing_pods": st.missing,
                         "real_replicas": real, "replay_replicas": ours, "match": real == ours, "covers": sc.covers})
        # Every sync, not only step ends: the replica count each side had written after it.
        per_sync = [(_at(sc.real, t + 1.0, sc.replicas), _at(rep, t, sc.replicas)) for t in syncs if t <= end]
        fetched = {f.t: f for f in metrics_server.fetches if f.namespace == ns}
        for t, (a, b) in zip([t for t in syncs if t <= end], per_sync):
            if a != b:
                f = fetched[t]
                disagreements.append(f"{sc.name} sync at {t - sc.t0:.1f} s: real {a}, replay {b} (the stand-in saw "
                                     f"{f.pods} pods, {f.ready} ready, {f.unready} not ready, {f.reported} reporting)")
        sequences[sc.name] = (_runs([a for a, _ in per_sync]), _runs([b for _, b in per_sync]),
                              sum(a == b for a, b in per_sync), len(per_sync))
    _write(rows, tmp_path / "hpa_fidelity.csv", sequences, disagreements)
    if os.environ.get("FORESIGHT_FIDELITY_OUT"):
        _write(rows, Path(os.environ["FORESIGHT_FIDELITY_OUT"]), sequences, disagreements)
    # each scenario must actually move, or it proves nothing
    for sc in SCENARIOS:
        assert len({r["real_replicas"] for r in rows if r["scenario"] == sc.name}) >= 2, sc.name
    diff = [r for r in rows if not r["match"]]
    assert not diff, "real HPA vs replay/hpa.py:\n" + "\n".join(map(str, diff))
    for name, (real_seq, replay_seq, same, n) in sequences.items():
        assert real_seq == replay_seq, f"{name}: real {real_seq} vs replay {replay_seq} ({same}/{n} syncs agree)"


def _runs(xs: list[int]) -> list[int]:
    """The sequence of distinct consecutive values (4, 4, 6, 6, 9 -> 4, 6, 9)."""
    return [x for i, x in enumerate(xs) if i == 0 or xs[i - 1] != x]


def _write(rows: list[dict], path: Path, sequences: dict, disagreements: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    md = path.with_suffix(".md")
    lines = ["| scenario | step | t end (s) | demand (m) | unready | missing | real HPA | replay/hpa.py | match |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['scenario']} | {r['step']} | {r['t_end_s']} | {r['demand_millicores']} | {r['unready_pods']} | "
                     f"{r['missing_pods']} | {r['real_replicas']} | {r['replay_replicas']} | {'yes' if r['match'] else 'NO'} |")
    covers = sorted({(r["scenario"], r["covers"]) for r in rows})
    md.write_text("# HPA fidelity: the real HPA controller (kube-controller-manager v1.35.4) vs replay/hpa.py\n\n"
                  "Produced by tests/e2e/test_hpa_fidelity.py. Pods request 500m CPU; target utilization 50%;\n"
                  "HPA sync every 2 s; replicas at the end of each step.\n\n"
                  + "\n".join(f"- **{s}**: {c}" for s, c in covers) + "\n\n" + "\n".join(lines) + "\n\n"
                  + "Replica sequences over every sync (consecutive repeats collapsed):\n\n"
                  "| scenario | real HPA | replay/hpa.py | syncs agreeing |\n|---|---|---|---|\n"
                  + "".join(f"| {k} | {' > '.join(map(str, a))} | {' > '.join(map(str, b))} | {same}/{n} |\n"
                            for k, (a, b, same, n) in sequences.items())
                  + "\nSyncs where the two disagreed for one sync period:\n\n"
                  + ("".join(f"- {d}\n" for d in disagreements) or "- none\n"))
