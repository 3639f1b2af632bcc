"""The replay checked against the node: ``foresight replay``'s production code on the segment a
``bench.real_node autoscale`` run played, side by side with what the node did.

    .venv/bin/python -m bench.real_node_replay [--run bench/results/real_node_autoscale_quick.json]

Both sides on one yardstick, the replay's: a minute counts as an SLO violation when the demand
(the segment's request rate x the CPU a request costs on the node) exceeds 90% of the Ready pods'
CPU requests; replica-minutes are the Deployment's replicas (the node, polled every 2 s) or the
replay's replicas (every 15-s sync) over the segment. The node's latency-SLO breach minutes are
reported beside them.

The replay (replay.simulate: make_world, production_feed, run_mode: the production trainer on a
simulated clock and the adapter's served-value rule) is given the node's sizes (CPU request,
cores per trace unit, min/max replicas, the shipped behaviour for ``reactive`` and
``predictive``, Kubernetes' default for ``reactive-default``) and two timings:
- ``default``: the replay's defaults (pod start-up 60 s lognormal, metric delay 90 s);
- ``node``: the pod start-up measured on the node (``--startup-s``, default: the run's added
  pods' create -> Ready p50, else the app image's from bench/results/real_node.json) and the
  reactive path's metric delay read off the run itself (the reactive HPA's first raise after the demand crossed its
  threshold, less half a sync).
What the replay cannot copy: the node's trainer samples every 60 s (the chart's default) from a
history backfilled at 30 s, the replay's every 300 s, the traces' resolution.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import RESULTS, save_json
from bench.real_node_autoscale import CORES_PER_RPS, CPU_REQUEST, MAX_REPLICAS, PEAK_RPS, SERIES
from bench.real_node_report import added_pod_starts
from forecaster.timing import TIMING

MODES = {"predictive": ("predictive", None), "reactive": ("reactive", 30), "reactive-default": ("reactive", 300)}
SLO_UTILIZATION = TIMING.slo_utilization  # the replay's
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)  # the same yardstick at lower utilizations: where the node's latency breaks
SYNC_S = 15.0


def _load_timeline(run_json: Path) -> list[dict]:
    path = run_json.with_name(run_json.stem + "_timeline.csv")
    with open(path) as f:
        return [{k: (float(v) if v not in ("", "None") else None) for k, v in r.items()} for r in csv.DictReader(f)]


def node_side(doc: dict, rows: list[dict]) -> dict:
    """Per copy: replicas over time and the replay's yardstick on the node's Ready pods."""
    length = doc["segment_minutes"] * 60.0
    seg = [r for r in rows if 0 <= r["t_s"] <= length]
    out = {}
    for n in MODES:
        viol = {u: 0.0 for u in THRESHOLDS}
        rep = 0.0
        util_by_minute: dict[int, list[float]] = {}
        for a, b in zip(seg, seg[1:] + [{"t_s": length}]):
            dt = (min(b["t_s"], length) - a["t_s"]) / 60.0
            if dt <= 0 or a.get(f"{n}_ready") is None:
                continue
            util = a["demand_rps"] * CORES_PER_RPS / (max(a[f"{n}_ready"], 1) * CPU_REQUEST)
            for u in THRESHOLDS:
                viol[u] += dt * (util > u)
            rep += dt * (a[f"{n}_replicas"] or 0)
            util_by_minute.setdefault(int(a["t_s"] // 60), []).append(util)
        c = doc["copies"][n]
        # per minute: the mean utilization of the Ready pods' requests beside the latency SLO
        minutes = [{"minute": m["minute_start_s"] / 60, "utilization": round(float(np.mean(util_by_minute.get(int(m["minute_start_s"] // 60), [np.nan]))), 3),
                    "over_slo_share": round(m["over_slo_share"], 4), "breach": m["over_slo_share"] > doc["breach_share"]}
                   for m in c["per_minute"]]
        out[n] = {"slo_violation_minutes": round(viol[SLO_UTILIZATION], 2), "replica_minutes": round(rep, 2),
                  "violation_minutes_at": {str(u): round(v, 2) for u, v in viol.items()},
                  "latency_breach_minutes": c["breach_minutes"], "per_minute": minutes,
                  "t_s": [r["t_s"] for r in seg], "replicas": [r[f"{n}_replicas"] for r in seg], "ready": [r[f"{n}_ready"] for r in seg]}
    return out


def reactive_delay_s(doc: dict, rows: list[dict]) -> float | None:
    """The node's metric delay on the reactive path: from the demand crossing what makes the HPA
    add a pod (70% of one pod's request, past the 10% tolerance) to the reactive HPA's first
    raise, less half a sync (the raise waits for the next sync)."""
    raise_s = doc["copies"]["reactive"]["first_raise_after_rise_s"]
    if raise_s is None:
        return None
    raise_t = doc["rise_after_live_start_s"] + raise_s
    threshold = 0.7 * 1.1 * CPU_REQUEST / CORES_PER_RPS
    cross = next((r["t_s"] for r in rows if r["t_s"] >= 0 and r["demand_rps"] >= threshold), None)
    return None if cross is None else max(0.0, raise_t - cross - SYNC_S / 2)


def trace_rows(start: datetime, minutes_after: float, train_days: float, live_minutes: float):
    """The trace from ``train_days`` before ``start`` to ``minutes_after`` past it, and the top the
    node's driver scaled to ``PEAK_RPS`` (the live segment's own maximum, as ``Plan.rps`` takes it)."""
    from foresight.loaddriver import bundled_traces, load_segment

    t0 = start - timedelta(days=train_days)
    seg = load_segment(bundled_traces(), SERIES, t0.isoformat(), train_days * 1440 + minutes_after)
    ts = np.array([int(seg.start.timestamp() + o) for o in seg.offsets_s])
    return ts, np.array(seg.values), float(max(load_segment(bundled_traces(), SERIES, start.isoformat(), live_minutes).values))


def replay_trace(doc: dict):
    """The trace the replay plays (unix seconds, trace units) and its cores per trace unit: the
    node's own scaling of the segment, so both sides see the same demand."""
    start = datetime.fromisoformat(doc["segment_start"].replace("Z", "+00:00"))
    ts, vals, seg_top = trace_rows(start, 60.0, 14.0, doc["segment_minutes"])
    return ts, vals, PEAK_RPS * CORES_PER_RPS / seg_top


def replay_side(doc: dict, startup_s: float, delay_s: float, startup_kind: str) -> dict:
    """The replay's modes on the node's segment (an hour replayed: the replay's shortest; the
    first ``segment_minutes`` compared)."""
    from replay.simulate import ReplayConfig, StartupModel, make_world, production_feed, run_mode

    ts, vals, k = replay_trace(doc)
    length = doc["segment_minutes"] * 60.0
    out = {}
    feed = None
    for name, (mode, window) in MODES.items():
        cfg = ReplayConfig(delay_seconds=delay_s, cpu_request_cores=CPU_REQUEST, cores_per_unit=k, min_replicas=1,
                           max_replicas=MAX_REPLICAS, startup=StartupModel(kind=startup_kind, median_seconds=startup_s),
                           train_days=14.0, replay_days=1 / 24, scale_down_window_seconds=window)
        world = make_world(SERIES, ts, vals, cfg)
        if mode == "predictive":
            feed = production_feed(world, cfg)
        r = run_mode(world, mode, cfg, feed if mode == "predictive" else None)
        m = (world.t - world.t0) < length
        step = cfg.step_seconds / 60.0
        util = world.demand[m] / (np.maximum(r.ready[m], 1) * CPU_REQUEST)
        at = {str(u): round(float((util > u).sum() * step), 2) for u in THRESHOLDS}
        out[name] = {"slo_violation_minutes": at[str(SLO_UTILIZATION)], "violation_minutes_at": at,
                     "replica_minutes": round(float(r.replicas[m].sum() * step), 2),
                     "t_s": [float(x) for x in world.t[m] - world.t0], "replicas": [int(x) for x in r.replicas[m]],
                     "ready": [int(x) for x in r.ready[m]]}
    return out


def gaps(node: dict, replay: dict) -> dict:
    out = {}
    for n in MODES:
        a, b = node[n], replay[n]
        out[n] = {k: (None if not a[k] else round(b[k] / a[k] - 1.0, 3)) for k in ("slo_violation_minutes", "replica_minutes")}
    return out


def plot(doc: dict, node: dict, replays: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(MODES), 1, figsize=(10, 8), sharex=True)
    for ax, n in zip(axes, MODES):
        ax.step(np.array(node[n]["t_s"]) / 60, node[n]["replicas"], where="post", color="black", label="node: replicas")
        ax.step(np.array(node[n]["t_s"]) / 60, node[n]["ready"], where="post", color="black", ls=":", label="node: Ready pods")
        for (label, rep), color in zip(replays.items(), ("tab:blue", "tab:orange")):
            ax.step(np.array(rep[n]["t_s"]) / 60, rep[n]["replicas"], where="post", color=color, label=f"replay ({label}): replicas")
        ax.axvline(doc["rise_after_live_start_s"] / 60, color="gray", ls="--", lw=0.8)
        ax.set_ylabel("pods")
        ax.set_title(f"{n}: SLO-violation min node {node[n]['slo_violation_minutes']:.1f}, "
                     + ", ".join(f"replay {k} {v[n]['slo_violation_minutes']:.1f}" for k, v in replays.items()), fontsize=9)
    axes[0].legend(fontsize=7, loc="upper left")
    axes[-1].set_xlabel("minutes from the segment's start (dashed: the demand's rise)")
    fig.suptitle(f"{doc['series']} from {doc['segment_start']}: the replay against the real node", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_startup_p50(doc: dict) -> float | None:
    """The run's own added pods' create -> Ready p50 (every copy), if it recorded them."""
    added = added_pod_starts(doc)
    return added[len(added) // 2] if added else None


def app_startup_p50(results: Path = RESULTS / "real_node.json") -> float | None:
    """The app image's create -> Ready p50 on the node's default runtime (runc), if measured."""
    try:
        d = json.loads(results.read_text())
        return float(d["runtime_classes"]["runc"]["app"]["ready"]["p50_s"])
    except (OSError, KeyError, TypeError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, default=RESULTS / "real_node_autoscale_quick.json", help="a bench.real_node autoscale result")
    ap.add_argument("--startup-s", type=float, help="pod start-up on the node (default: the run's added pods' create -> Ready p50, "
                    "else the app image's p50 in bench/results/real_node.json)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    doc = json.loads(args.run.read_text())
    rows = _load_timeline(args.run)
    node = node_side(doc, rows)
    startup = args.startup_s if args.startup_s is not None else run_startup_p50(doc) or app_startup_p50()
    delay = reactive_delay_s(doc, rows)
    if startup is None or delay is None:
        ap.error(f"no node timing: start-up {startup}, reactive delay {delay} (give --startup-s, or run bench.real_node first)")
    replays = {"default": replay_side(doc, 60.0, 90.0, "lognormal"), "node": replay_side(doc, startup, delay, "constant")}
    res = {"run": str(args.run), "series": doc["series"], "segment_start": doc["segment_start"], "segment_minutes": doc["segment_minutes"],
           "node_timing": {"startup_s": round(startup, 2), "reactive_metric_delay_s": round(delay, 1)},
           "node": {n: {k: v for k, v in c.items() if k not in ("t_s", "replicas", "ready")} for n, c in node.items()},
           "thresholds": list(THRESHOLDS),
           "replay": {lab: {n: {k: v for k, v in c.items() if k not in ("t_s", "replicas", "ready")} for n, c in r.items()}
                      for lab, r in replays.items()},
           "replay_over_node_minus_one": {lab: gaps(node, r) for lab, r in replays.items()}}
    name = "real_node_replay" + ("_quick" if doc.get("quick") else "")
    p = save_json(name, res, args.out)
    plot(doc, node, replays, args.out / f"{name}.png")
    print(f"node timing: pod start-up {startup:.1f} s, reactive metric delay {delay:.0f} s")
    print(f"{'mode':17s} {'':>8s} {'SLO-viol min':>12s} {'replica-min':>11s} {'latency-breach min':>18s}")
    for n in MODES:
        print(f"{n:17s} {'node':>8s} {node[n]['slo_violation_minutes']:>12.1f} {node[n]['replica_minutes']:>11.1f} "
              f"{node[n]['latency_breach_minutes']:>18d}")
        for lab, r in replays.items():
            g = res["replay_over_node_minus_one"][lab][n]
            fmt = lambda x: "n/a" if x is None else f"{x:+.0%}"  # noqa: E731
            print(f"{'':17s} {'replay ' + lab:>8s} {r[n]['slo_violation_minutes']:>12.1f} {r[n]['replica_minutes']:>11.1f}"
                  f"   (vs node: {fmt(g['slo_violation_minutes'])}, {fmt(g['replica_minutes'])})")
    print("violation minutes by the utilization taken as the SLO's limit (" + ", ".join(str(u) for u in THRESHOLDS) + "):")
    for n in MODES:
        print(f"  {n:17s} node " + " / ".join(f"{node[n]['violation_minutes_at'][str(u)]:.1f}" for u in THRESHOLDS)
              + "".join(f";  replay {lab} " + " / ".join(f"{r[n]['violation_minutes_at'][str(u)]:.1f}" for u in THRESHOLDS)
                        for lab, r in replays.items()))
    print("node, per minute: utilization of the Ready pods' requests -> latency-SLO breach (all copies):")
    pts = sorted((m["utilization"], m["breach"]) for n in MODES for m in node[n]["per_minute"] if np.isfinite(m["utilization"]))
    for lo, hi in ((0, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 0.9), (0.9, 9)):
        b = [br for u, br in pts if lo <= u < hi]
        if b:
            print(f"  utilization {lo:.1f}-{hi if hi < 9 else 'up':}: {sum(b)} of {len(b)} minutes breached")
    print(f"saved {p}, {args.out / (name + '.png')}")
    return 0 if all(math.isfinite(node[n]["replica_minutes"]) for n in MODES) else 1


if __name__ == "__main__":
    sys.exit(main())
