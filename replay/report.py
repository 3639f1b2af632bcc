"""Replay outputs: summary.csv (exact columns of the issue), forecast_error.csv and a
self-contained report.html with embedded PNG plots (matplotlib, Agg)."""

from __future__ import annotations

import base64
import csv
import html
import io
from pathlib import Path
from typing import Sequence

import numpy as np

from forecaster.timing import TIMING

SUMMARY_COLUMNS = [
    "series_id",
    "mode",
    "slo_violation_minutes",
    "underprovisioned_core_minutes",
    "replica_minutes",
    "scale_events",
    "population",  # replay.population: daily (a daily rhythm) or bursty
    "rises",  # the reactive HPA's raises where demand had outgrown its pods (replay.rises)
    "ready_in_time_share",  # the share of them this mode had more pods Ready for before that moment
    "median_lead_seconds",  # how long before (negative: after) the moment, median over the rises
]
TOTAL_COLUMNS = SUMMARY_COLUMNS[2:6]
MODE_COLORS = {"reactive": "tab:red", "predictive": "tab:blue", "oracle": "black"}


def write_summary(rows: Sequence[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=SUMMARY_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def write_forecast_errors(rows: Sequence[dict], path: Path) -> None:
    cols = ["series_id", "models", "fits", "median_headroom", "persistence_days", "mae_h1", "mae_persistence_h1", "skill_h1"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _downsample(t: np.ndarray, y: np.ndarray, every: int, how: str = "max"):
    n = len(t) // every * every
    if n == 0:
        return t, y
    tt = t[:n:every]
    yy = y[:n].reshape(-1, every)
    return tt, (yy.max(axis=1) if how == "max" else yy.min(axis=1))


def series_figure(world, results: dict, zoom_hours: float | None = None) -> str:
    """Demand, ready capacity and replicas over time, one panel per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(results)
    fig, axes = plt.subplots(len(modes), 1, figsize=(11, 2.1 * len(modes) + 0.6), sharex=True, squeeze=False)
    t_h = (world.t - world.t0) / 3600.0
    sl = slice(None)
    if zoom_hours:
        ref = results.get("reactive") or next(iter(results.values()))
        viol = world.demand > TIMING.slo_utilization * ref.ready
        # the 'zoom_hours' window with the most reactive violations
        w = int(zoom_hours * 3600 / max(1, int(world.t[1] - world.t[0])))
        if len(viol) > w:
            c = np.convolve(viol.astype(float), np.ones(w), "valid")
            start = int(np.argmax(c))
            sl = slice(start, start + w)
    every = 1 if zoom_hours else 8
    for ax, mode in zip(axes[:, 0], modes):
        r = results[mode]
        tt, d = _downsample(t_h[sl], world.demand[sl], every, "max")
        _, cap = _downsample(t_h[sl], r.ready[sl].astype(float), every, "min")
        _, rep = _downsample(t_h[sl], r.replicas[sl].astype(float), every, "max")
        ax.plot(tt, d, color="0.2", lw=0.8, label="demand (cores)")
        ax.step(tt, cap, where="post", color=MODE_COLORS.get(mode, "tab:purple"), lw=1.0, label="ready capacity")
        ax.step(tt, rep, where="post", color=MODE_COLORS.get(mode, "tab:purple"), lw=0.7, ls="--", alpha=0.7, label="replicas (all pods)")
        bad = d > TIMING.slo_utilization * cap
        if bad.any():
            ax.plot(tt[bad], d[bad], "o", ms=2, color="orange", label="SLO violation")
        ax.set_ylabel(mode, fontsize=9)
        ax.set_title(f"{mode}: {r.slo_violation_minutes:.0f} SLO-min, {r.replica_minutes / 1e3:.1f} k replica-min, {r.scale_events} scale events", fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7, loc="upper right", ncol=4)
    axes[-1, 0].set_xlabel("hours since replay start" + (" (window with the most reactive violations)" if zoom_hours else ""))
    fig.suptitle(world.series_id, fontsize=10)
    fig.tight_layout()
    return _png(fig)


def scatter_figure(rows: Sequence[dict]) -> str:
    """Cost vs risk over all series: each point one (series, mode), cost relative to reactive."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = {r["series_id"]: r for r in rows if r["mode"] == "reactive"}
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for mode in MODE_COLORS:
        pts = [r for r in rows if r["mode"] == mode]
        if not pts:
            continue
        if base:
            x = [r["replica_minutes"] / max(1e-9, base[r["series_id"]]["replica_minutes"]) for r in pts if r["series_id"] in base]
            y = [r["slo_violation_minutes"] + 1 for r in pts if r["series_id"] in base]
        else:
            x = [r["replica_minutes"] for r in pts]
            y = [r["slo_violation_minutes"] + 1 for r in pts]
        ax.scatter(x, y, s=16, color=MODE_COLORS[mode], label=mode, alpha=0.75)
    ax.set_yscale("log")
    ax.set_xlabel("replica-minutes / reactive" if base else "replica-minutes")
    ax.set_ylabel("SLO-violation minutes + 1 (log)")
    ax.set_title("Cost vs risk per series and mode")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


def write_report(path: Path, rows: Sequence[dict], figures: Sequence[tuple[str, str]], settings: dict, errors: Sequence[dict]) -> None:
    modes = sorted({r["mode"] for r in rows}, key=lambda m: list(MODE_COLORS).index(m) if m in MODE_COLORS else 9)
    tot = {m: {k: sum(r[k] for r in rows if r["mode"] == m) for k in TOTAL_COLUMNS} for m in modes}
    for m in modes:
        ours = [r for r in rows if r["mode"] == m and r.get("rises")]
        n = sum(r["rises"] for r in ours)
        tot[m]["rises"] = n
        tot[m]["in_time"] = sum(r["rises"] * r["ready_in_time_share"] for r in ours) / n if n else float("nan")
        tot[m]["lead"] = float(np.median([r["median_lead_seconds"] for r in ours])) if ours else float("nan")
    ref = tot.get("reactive")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>foresight replay</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
        "th{background:#f3f3f3}img{max-width:100%}code{background:#f3f3f3}</style></head><body>",
        "<h1>foresight replay</h1>",
        "<p>What the HPA v2 controller would have done on this traffic with a reactive CPU target, with "
        "foresight's predicted metric (same rule the adapter serves), and with perfect "
        "knowledge of the next minutes (oracle). SLO violation: demand above 90% of ready capacity. "
        "Ready before the rise: at every raise of the reactive HPA, whether the mode already had more pods Ready "
        "than the reactive HPA had when demand outgrew them (above 90% of their capacity), and by how long (the median over "
        "series of each series' median lead; capped at 30 minutes).</p>",
        "<h2>Settings</h2><table>" + "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in settings.items()) + "</table>",
        "<h2>Totals</h2><table><tr><th>mode</th><th>SLO-violation min</th><th>under-provisioned core-min</th><th>replica-min</th><th>scale events</th>"
        + ("<th>SLO vs reactive</th><th>cost vs reactive</th><th>Ready before the rise</th><th>median lead (s)</th>" if ref else "")
        + "</tr>",
    ]
    for m in modes:
        t = tot[m]
        cells = f"<td style='text-align:left'>{html.escape(m)}</td><td>{t['slo_violation_minutes']:.1f}</td><td>{t['underprovisioned_core_minutes']:.1f}</td><td>{t['replica_minutes']:.0f}</td><td>{t['scale_events']:.0f}</td>"
        if ref:
            s = t["slo_violation_minutes"] / ref["slo_violation_minutes"] if ref["slo_violation_minutes"] else float("nan")
            c = t["replica_minutes"] / ref["replica_minutes"] if ref["replica_minutes"] else float("nan")
            cells += f"<td>{s:.2f}x</td><td>{c:.2f}x</td>"
            cells += ("<td>-</td><td>-</td>" if m == "reactive" or not t["rises"] else
                      f"<td>{t['in_time']:.0%} of {t['rises']} rises</td><td>{t['lead']:.0f}</td>")
        parts.append(f"<tr>{cells}</tr>")
    parts.append("</table>")
    if errors:
        parts.append("<h2>Forecast error (5 minutes ahead, over the replay)</h2><table><tr><th>series</th><th>models chosen (fits)</th><th>median headroom</th><th>MAE</th><th>MAE persistence</th><th>skill</th></tr>")
        for e in errors:
            parts.append(f"<tr><td style='text-align:left'>{html.escape(e['series_id'])}</td><td>{html.escape(', '.join(f'{k} {v}' for k, v in e['models'].items()))}</td><td>{e['median_headroom']:.2f}</td><td>{e['mae_h1']:.3f}</td><td>{e['mae_persistence_h1']:.3f}</td><td>{e['skill_h1']:.2f}</td></tr>")
        parts.append("</table>")
    for title, b64 in figures:
        parts.append(f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' src='data:image/png;base64,{b64}'>")
    parts.append("<h2>Per series</h2><table><tr>" + "".join(f"<th>{c}</th>" for c in SUMMARY_COLUMNS) + "</tr>")
    for r in rows:
        parts.append("<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in SUMMARY_COLUMNS) + "</tr>")
    parts.append("</table></body></html>")
    Path(path).write_text("\n".join(parts))
