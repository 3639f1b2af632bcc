"""The table, CSVs and PNG of one predictive-against-reactive run on the node (bench.real_node_autoscale).

Per copy: p99 latency and the share of requests over the SLO per minute and in total (a
request over the SLO: not answered 2xx within it), SLO breach minutes (more than BREACH_SHARE of
a minute's requests over it), replica-minutes (the Deployment's replicas) and Ready-pod-minutes
over the live segment, and, relative to the start of the demand's rise: when the HPA first
raised desired replicas above its first value, when the first added pod was Ready, and when the
Ready pods first reached what the peak needs at the HPA target (70% of the CPU request).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from bench.real_node_autoscale import COPIES, CORES_PER_RPS, CPU_MS_PER_REQUEST, CPU_REQUEST, PEAK_RPS


def _first(rows: list[dict], key: str, pred) -> float | None:
    return next((r["t"] for r in rows if r.get(key) is not None and pred(r[key])), None)


def _integral_minutes(rows: list[dict], key: str, t0: float, t1: float) -> float:
    """Step integral of a polled count over [t0, t1], in count-minutes."""
    pts = [(r["t"], r[key]) for r in rows if r.get(key) is not None]
    total = 0.0
    for (ta, va), (tb, _) in zip(pts, pts[1:] + [(t1, None)]):
        a, b = max(ta, t0), min(tb, t1)
        if b > a:
            total += va * (b - a)
    return total / 60.0


def added_pod_starts(doc: dict) -> list[float]:
    """Create -> Ready of every pod added after the live start, all copies, sorted."""
    return sorted(v for c in doc["copies"].values() for v in c.get("added_pods_create_to_ready_s", ()))


def summarise(raw: dict) -> dict:
    from foresight.loaddriver import summarise as per_minute

    live, rise = raw["live_unix"], raw["rise_unix"]
    end = live + raw["plan"].segment.length_s
    rows = [r for r in raw["rows"] if "error" not in r]
    need = math.ceil(PEAK_RPS * CORES_PER_RPS / (0.7 * CPU_REQUEST))
    copies = {}
    for n in COPIES:
        minutes, total = per_minute(raw["records"][n], raw["slo_ms"])
        first_desired = next((r[f"{n}_desired"] for r in rows if r.get(f"{n}_desired") is not None), 1)
        first_ready = next((r[f"{n}_ready"] for r in rows if r["t"] >= live), 1)
        raise_t = _first([r for r in rows if r["t"] >= live - 60], f"{n}_desired", lambda v: v > first_desired)
        added_t = _first([r for r in rows if r["t"] >= live - 60], f"{n}_ready", lambda v: v > first_ready)
        peak_t = _first([r for r in rows if r["t"] >= live - 60], f"{n}_ready", lambda v: v >= need)
        def rel(t):
            return None if t is None else round(t - rise, 1)
        copies[n] = {
            "requests": total["requests"], "ok": total["ok"], "p50_ms": total["p50_ms"], "p99_ms": total["p99_ms"],
            "over_slo": total["over_slo"], "over_slo_share": total["over_slo_share"],
            "breach_minutes": sum(1 for m in minutes if m["over_slo_share"] > raw["breach_share"]),
            "replica_minutes": round(_integral_minutes(rows, f"{n}_replicas", live, end), 2),
            "ready_pod_minutes": round(_integral_minutes(rows, f"{n}_ready", live, end), 2),
            "max_replicas": max((r[f"{n}_replicas"] or 0) for r in rows),
            "first_raise_after_rise_s": rel(raise_t), "first_added_ready_after_rise_s": rel(added_t),
            "peak_pods_ready_after_rise_s": rel(peak_t), "per_minute": minutes,
            "added_pods_create_to_ready_s": sorted(round(ready - created, 1) for app, ready, created in raw["pod_ready"].values()
                                                   if app == n and created >= live),
        }
    return {"series": raw["series"], "segment_start": raw["segment_start"], "segment_minutes": raw["segment_minutes"],
            "quick": raw["quick"], "peak_rps_per_copy": PEAK_RPS, "slo_ms": raw["slo_ms"], "breach_share": raw["breach_share"],
            "cpu_ms_per_request": CPU_MS_PER_REQUEST, "cpu_request_cores": CPU_REQUEST, "pods_needed_at_peak": need,
            "hpa_sync_seconds": raw["hpa_sync_seconds"], "lead_seconds": raw["lead_seconds"],
            "rise_after_live_start_s": round(rise - live, 1),
            "first_forecast_before_rise_s": round(rise - raw["first_forecast"]["published_unix"], 1),
            "first_forecast": raw["first_forecast"], "trainer_started_before_live_s": round(live - raw["trainer_started_unix"], 1),
            "setup_seconds": round(raw["setup_seconds"], 1), "backfill": raw["backfill"], "behavior": raw["behavior"],
            "forecasts": [{**f, "generated_after_live_s": round(f["generated_at"] - live, 1)} for f in raw["forecasts"]],
            "pa_status": raw["pa_status"], "observer_gaps": sum(1 for r in raw["rows"] if "error" in r),
            "cleanup_errors": raw["cleanup_errors"], "copies": copies, "observe": observe_against_act(raw, rows),
            "ratios": {"breach_minutes_pred_over_reactive": _ratio(copies["predictive"]["breach_minutes"], copies["reactive"]["breach_minutes"]),
                       "replica_minutes_pred_over_reactive": _ratio(copies["predictive"]["replica_minutes"], copies["reactive"]["replica_minutes"])}}


def observe_against_act(raw: dict, rows: list[dict]) -> dict | None:
    """The Observe-mode autoscaler's would-have replicas (on the reactive copy) against what the
    predictive copy's HPA asked for on the same demand, both polled together every POLL_SECONDS
    over the live segment."""
    live, rise = raw["live_unix"], raw["rise_unix"]
    end = live + raw["plan"].segment.length_s
    pairs = [(r["t"], int(r["observe_would_have"]), int(r["predictive_desired"])) for r in rows
             if live <= r["t"] <= end and r.get("observe_would_have") is not None and r.get("predictive_desired") is not None]
    if not pairs:
        return None
    diff = [abs(w - a) for _, w, a in pairs]

    def first_raise(k: int):
        return next((p[0] - rise for p in pairs if p[k] > pairs[0][k]), None)

    st = raw.get("observe_status") or {}
    return {"polls": len(pairs), "equal_share": round(sum(d == 0 for d in diff) / len(diff), 3),
            "within_one_share": round(sum(d <= 1 for d in diff) / len(diff), 3), "max_abs_difference": max(diff),
            "would_have_replica_minutes": round(_integral_minutes([{"t": t, "w": w} for t, w, _ in pairs], "w", live, end), 2),
            "predictive_desired_replica_minutes": round(_integral_minutes([{"t": t, "a": a} for t, _, a in pairs], "a", live, end), 2),
            "first_would_have_raise_after_rise_s": None if first_raise(1) is None else round(first_raise(1), 1),
            "first_predictive_raise_after_rise_s": None if first_raise(2) is None else round(first_raise(2), 1),
            "under_capacity_minutes": st.get("underCapacityMinutes")}


def _ratio(a: float, b: float) -> float | None:
    return None if not b else round(a / b, 3)


def timeline(raw: dict) -> list[dict]:
    live = raw["live_unix"]
    p = raw["plan"]
    out = []
    for r in raw["rows"]:
        if "error" in r:
            continue
        off = r["t"] - live
        row = {"t_s": round(off, 1), "demand_rps": round(p.rps(off), 2) if 0 <= off <= p.segment.length_s else 0.0}
        row.update({k: v for k, v in r.items() if k != "t"})
        out.append(row)
    return out


def write_csvs(doc: dict, tl: list[dict], out: Path, name: str) -> list[Path]:
    p1, p2 = out / f"{name}.csv", out / f"{name}_timeline.csv"
    with open(p1, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["copy", "minute_start_s", "requests", "ok", "p50_ms", "p99_ms", "over_slo", "over_slo_share"])
        for n, c in doc["copies"].items():
            for m in c["per_minute"]:
                w.writerow([n, m["minute_start_s"], m["requests"], m["ok"], m["p50_ms"], m["p99_ms"], m["over_slo"],
                            round(m["over_slo_share"], 4)])
            w.writerow([n, "total", c["requests"], c["ok"], c["p50_ms"], c["p99_ms"], c["over_slo"], round(c["over_slo_share"], 4)])
    with open(p2, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(tl[0]) if tl else ["t_s"])
        w.writeheader()
        w.writerows(tl)
    return [p1, p2]


def plot(doc: dict, tl: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(COPIES), 1, figsize=(10, 8), sharex=True)
    rise = doc["rise_after_live_start_s"] / 60
    t = [r["t_s"] / 60 for r in tl]
    for ax, n in zip(axes, COPIES):
        c = doc["copies"][n]
        ax.step(t, [r[f"{n}_replicas"] for r in tl], where="post", label="replicas (Deployment)")
        ax.step(t, [r[f"{n}_ready"] for r in tl], where="post", label="Ready pods")
        ax.step(t, [r[f"{n}_desired"] for r in tl], where="post", ls=":", label="HPA desired")
        would = [r.get("observe_would_have") for r in tl]
        if n == "reactive" and any(v not in (None, "") for v in would):
            # the Observe-mode PredictiveAutoscaler on this copy: what it would have scaled to
            ax.step(t, [float("nan") if v in (None, "") else v for v in would],
                    where="post", color="purple", lw=1.0, label="Observe: would have")
            ax.legend(fontsize=7, loc="upper left")
        ax.axvline(rise, color="gray", ls="--", lw=0.8)
        ax.set_ylabel("pods")
        ax.set_title(f"{n}: {c['breach_minutes']} SLO-breach min, {c['over_slo_share']:.1%} requests over {doc['slo_ms']:.0f} ms, "
                     f"{c['replica_minutes']:.1f} replica-min", fontsize=9)
        d = ax.twinx()
        d.plot(t, [r["demand_rps"] for r in tl], color="black", lw=0.8, label="demand (req/s)")
        d.set_ylabel("req/s")
        if n == COPIES[0]:
            h1, l1 = ax.get_legend_handles_labels()
            h2, l2 = d.get_legend_handles_labels()
            ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left")
    axes[-1].set_xlabel("minutes from the live start (dashed: the demand's rise)")
    where = f" from {doc['segment_start']}" if doc.get("segment_start") else ""
    fig.suptitle(f"{doc['series']}{where} on the real node, same demand for each copy", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(doc: dict) -> str:
    def s(v, fmt="{:+.0f}"):
        return "-" if v is None else fmt.format(v)

    lines = [f"{'copy':17s} {'p99 ms':>7s} {'over SLO':>8s} {'breach min':>10s} {'replica-min':>11s} {'ready-pod-min':>13s} "
             f"{'raise s':>8s} {'+1 Ready s':>10s} {'peak Ready s':>12s}"]
    for n, c in doc["copies"].items():
        lines.append(f"{n:17s} {s(c['p99_ms'], '{:.0f}'):>7s} {c['over_slo_share']:>8.1%} {c['breach_minutes']:>10d} "
                     f"{c['replica_minutes']:>11.1f} {c['ready_pod_minutes']:>13.1f} {s(c['first_raise_after_rise_s']):>8s} "
                     f"{s(c['first_added_ready_after_rise_s']):>10s} {s(c['peak_pods_ready_after_rise_s']):>12s}")
    lines.append(f"times relative to the demand's rise ({doc['rise_after_live_start_s']:.0f} s after the live start); "
                 f"SLO {doc['slo_ms']:.0f} ms; first forecast {doc['first_forecast_before_rise_s']:.0f} s before the rise "
                 f"(model {doc['first_forecast']['model']}, served source {doc['first_forecast']['source']})")
    added = added_pod_starts(doc)
    if added:
        lines.append(f"added pods' create -> Ready: p50 {added[len(added) // 2]:.1f} s, {added[0]:.1f}-{added[-1]:.1f} s ({len(added)} pods)")
    o = doc.get("observe")
    if o:
        lines.append(f"Observe mode on the reactive copy: would-have = the predictive HPA's desired replicas at {o['equal_share']:.0%} "
                     f"of {o['polls']} polls (within one {o['within_one_share']:.0%}, at most {o['max_abs_difference']} apart); "
                     f"replica-min would-have {o['would_have_replica_minutes']:.1f} vs desired {o['predictive_desired_replica_minutes']:.1f}; "
                     f"first raise {s(o['first_would_have_raise_after_rise_s'])} s vs {s(o['first_predictive_raise_after_rise_s'])} s; "
                     f"under-capacity minutes {o['under_capacity_minutes']}")
    return "\n".join(lines)
