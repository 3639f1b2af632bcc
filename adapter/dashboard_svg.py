"""One workload's chart: demand and replicas over the last hours and the forecast ahead, on one
labelled time axis.

Top panel (CPU cores): the observed demand, the forecast band (lowest..highest published
quantile) and mean, and the value served to the HPA (now, and ahead while no newer forecast
arrives), all as the production rule gives them (the caller passes them in). Bottom panel
(replicas, when any are known): the pods ready now, the replicas the HPA heads for on the
served value (now and ahead) and, in Observe mode, the would-have line beside the actual
replicas. Clock labels carry ``data-t`` (Unix seconds); the page's script rewrites them into
the viewer's local time, and the server writes UTC as a fallback.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from core.store import Forecast

OBSERVED_COLOR = "#1f77b4"
BAND_COLOR = "#ff7f0e"
MEAN_COLOR = "#d62728"
SERVED_COLOR = "#059669"
WOULD_COLOR = "#7c3aed"
ACTUAL_COLOR = "#111827"
READY_COLOR = "#6b7280"
DESIRED_COLOR = "#0891b2"
BAND_OPACITY = 0.55

W, LEFT, RIGHT = 460, 44, 10
TOP_H, GAP, REP_H, AXIS_H = 140, 26, 64, 30
TICK_STEPS = (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


@dataclass
class ChartInput:
    fc: Forecast | None
    now: float
    served_now: float | None = None  # predicted_cpu_cores as AdapterCore serves it now
    served_ahead: Sequence[tuple[float, float]] = ()  # the same rule at the forecast's steps
    served_stale_at: float | None = None  # where the served value ahead falls back (the forecast is too old)
    ready_now: Any = None
    desired: Sequence[tuple[float, int]] = ()  # the HPA's proposal on the served value, now first (routes/dashboard.py)
    observe: Mapping[str, Any] | None = None
    legend: list[tuple[str, str, str]] = field(default_factory=list)  # filled by render: (class, colour, text)


# series the node forecaster publishes (forecaster/nodes) are shares of a node's capacity, not cores
_NODE_UNITS = {"Node": "share of the node's CPU", "Zone": "share of the zone's CPU",
               "NodeMemory": "share of allocatable memory"}


def unit_of(fc: Forecast | None) -> str:
    kind = (fc.meta or {}).get("kind") if fc is not None else None
    return _NODE_UNITS.get(str(kind), "CPU cores")


def utc_clock(t: float) -> str:
    return time.strftime("%H:%M", time.gmtime(t))


def clock_text(t: float, x: float, y: float, anchor: str = "middle") -> str:
    return (f'<text class="clock" data-t="{t:.0f}" x="{x:.1f}" y="{y:.1f}" font-size="10" '
            f'text-anchor="{anchor}" fill="#444">{utc_clock(t)}</text>')


def _quantile_keys(fc: Forecast) -> list[str]:
    return sorted(fc.quantiles, key=lambda k: float(k[1:]) if k[1:].replace(".", "", 1).isdigit() else 0)


def _nice_top(v: float) -> float:
    if v <= 0:
        return 1.0
    import math

    e = 10 ** math.floor(math.log10(v))
    for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * e >= v:
            return m * e
    return 10 * e


def _pts(pairs, X, Y) -> str:
    return " ".join(f"{X(t):.1f},{Y(v):.1f}" for t, v in pairs)


def chart_svg(c: ChartInput) -> str:
    fc, obs = c.fc, list(c.fc.observed) if c.fc is not None else []
    ob_line = list((c.observe or {}).get("line") or [])
    if fc is None or (not obs and not fc.mean):
        return f'<svg class="chart" width="{W}" height="60"><text x="10" y="20">no forecast or observation yet</text></svg>'
    ts = list(fc.timestamps())
    keys = _quantile_keys(fc)
    hi = fc.quantiles[keys[-1]] if keys else fc.mean
    lo = fc.quantiles[keys[0]] if len(keys) > 1 else tuple(min(a, b) for a, b in zip(fc.mean, hi))
    xs = [t for t, _ in obs] + ts + [p["t"] for p in ob_line] + [c.now] + [t for t, _ in c.served_ahead]
    xs += [t for t, _ in c.desired]
    x0, x1 = min(xs), max(xs)
    ys = [v for _, v in obs] + list(hi) + list(lo) + list(fc.mean) + [v for _, v in c.served_ahead]
    ys += [c.served_now] if c.served_now is not None else []
    y1 = _nice_top(max(ys) * 1.05 if ys else 1.0)
    reps = bool(ob_line) or bool(c.desired) or isinstance(c.ready_now, (int, float))
    rep_top = TOP_H + GAP
    rep_h = REP_H if ob_line or c.desired else REP_H // 2  # the pods ready now alone: one point, a thin strip
    height = (rep_top + rep_h if reps else TOP_H) + AXIS_H

    def X(t):
        return LEFT + (t - x0) / ((x1 - x0) or 1) * (W - LEFT - RIGHT)

    def Y(v):
        return TOP_H - v / y1 * (TOP_H - 12)

    parts = [f'<svg class="chart" width="{W}" height="{height}" viewBox="0 0 {W} {height}" '
             'style="width:100%;height:auto" role="img" font-family="system-ui,sans-serif">']
    # the value axis of the demand panel: 0, half, top, in the series' unit
    for v in (0.0, y1 / 2, y1):
        parts.append(f'<line x1="{LEFT}" y1="{Y(v):.1f}" x2="{W-RIGHT}" y2="{Y(v):.1f}" stroke="#eee"/>'
                     f'<text x="{LEFT-4}" y="{Y(v)+3:.1f}" font-size="10" text-anchor="end" fill="#444">{v:.3g}</text>')
    parts.append(f'<text class="axis-label" x="{LEFT}" y="10" font-size="10" fill="#444">{html.escape(unit_of(fc))}</text>')
    legend = c.legend
    if ts:
        start = [(fc.origin, obs[-1][1])] if obs else []
        up, down = start + list(zip(ts, hi)), start + list(zip(ts, lo))
        parts.append(f'<polygon class="band" points="{_pts(up, X, Y)} {_pts(reversed(down), X, Y)}" fill="{BAND_COLOR}" '
                     f'fill-opacity="{BAND_OPACITY}" stroke="{BAND_COLOR}" stroke-width="2"/>')
        band = f"{keys[0]}..{keys[-1]}" if len(keys) > 1 else (f"mean..{keys[0]}" if keys else "mean")
        legend.append(("band", BAND_COLOR, f"forecast band {band}"))
        parts.append(f'<polyline class="mean" fill="none" stroke="{MEAN_COLOR}" stroke-width="1.5" '
                     f'stroke-dasharray="4 2" points="{_pts(start + list(zip(ts, fc.mean)), X, Y)}"/>')
        legend.append(("mean", MEAN_COLOR, "forecast mean"))
    if obs:
        parts.append(f'<polyline class="observed" fill="none" stroke="{OBSERVED_COLOR}" stroke-width="2.5" '
                     f'points="{_pts(obs, X, Y)}"/>')
        legend.append(("observed", OBSERVED_COLOR, "observed demand"))
    parts.append(_served_line(c, X, Y, legend))
    if reps:
        parts.append(_replicas_panel(c, ob_line, X, rep_top, rep_h, legend))
    parts.append(_time_axis(c, X, x0, x1, height - AXIS_H))
    parts.append("</svg>")
    return "".join(parts)


def _served_line(c: ChartInput, X, Y, legend: list) -> str:
    """The value served to the HPA: a dot now, a step line ahead, a mark where it stops being the forecast."""
    if c.served_now is None and not c.served_ahead:
        return ""
    parts: list[str] = []
    line = ([(c.now, c.served_now)] if c.served_now is not None else []) + [p for p in c.served_ahead if p[0] > c.now]
    if len(line) > 1:  # a step line: the HPA holds each value until the next sync
        steps = [line[0]] + [q for a, b in zip(line, line[1:]) for q in ((b[0], a[1]), b)]
        parts.append(f'<polyline class="served" fill="none" stroke="{SERVED_COLOR}" stroke-width="2" '
                     f'stroke-dasharray="1 2" points="{_pts(steps, X, Y)}"/>')
    if c.served_stale_at is not None:
        xs_ = X(c.served_stale_at)
        parts.append(f'<line class="stale-at" x1="{xs_:.1f}" y1="14" x2="{xs_:.1f}" y2="{TOP_H}" stroke="{SERVED_COLOR}" '
                     f'stroke-width="0.8" stroke-dasharray="3 3"/><text x="{xs_ + (3 if xs_ < W - 160 else -3):.1f}" y="22" '
                     f'font-size="9" text-anchor="{"start" if xs_ < W - 160 else "end"}" fill="{SERVED_COLOR}">forecast too old: served observed</text>')
    if c.served_now is not None:
        parts.append(f'<circle class="served-now" cx="{X(c.now):.1f}" cy="{Y(c.served_now):.1f}" r="4" '
                     f'fill="{SERVED_COLOR}"/>')
    legend.append(("served", SERVED_COLOR, "served to the HPA (now ●, ahead if no newer forecast ┈)"))
    return "".join(parts)


def _time_axis(c: ChartInput, X, x0: float, x1: float, bottom: float) -> str:
    """One time axis for both panels (clock ticks, the viewer's zone), with a "now" line through them."""
    parts = [f'<line x1="{LEFT}" y1="{bottom}" x2="{W-RIGHT}" y2="{bottom}" stroke="#999"/>']
    step = next((s for s in TICK_STEPS if (x1 - x0) / s <= 5), TICK_STEPS[-1])
    t = (x0 // step + 1) * step
    while t < x1:
        parts.append(f'<line x1="{X(t):.1f}" y1="{bottom}" x2="{X(t):.1f}" y2="{bottom+4}" stroke="#999"/>'
                     + clock_text(t, X(t), bottom + 15))
        t += step
    parts.append(f'<line class="now" x1="{X(c.now):.1f}" y1="12" x2="{X(c.now):.1f}" y2="{bottom}" stroke="#888" '
                 f'stroke-dasharray="2 2"/><text x="{X(c.now):.1f}" y="{bottom+27}" font-size="10" '
                 'text-anchor="middle" fill="#222">now</text>')
    parts.append(f'<text class="axis-label" x="{W-RIGHT}" y="{bottom+27}" font-size="10" text-anchor="end" '
                 'fill="#444"><tspan class="tz">UTC</tspan> time →</text>')
    return "".join(parts)


def _replicas_panel(c: ChartInput, line: list, X, top: float, h: float, legend: list) -> str:
    vals = [v for p in line for v in (p.get("would_have"), p.get("actual")) if v is not None]
    ready = c.ready_now if isinstance(c.ready_now, (int, float)) else None
    vals += [ready] if ready is not None else []
    vals += [n for _, n in c.desired]
    y1 = _nice_top(max(vals) * 1.1 if vals and max(vals) > 0 else 1.0)

    def Y(v):
        return top + h - v / y1 * (h - 10)

    parts = [f'<text class="axis-label" x="{LEFT}" y="{top+4}" font-size="10" fill="#444">replicas</text>']
    for v in (0.0, y1):
        parts.append(f'<line x1="{LEFT}" y1="{Y(v):.1f}" x2="{W-RIGHT}" y2="{Y(v):.1f}" stroke="#eee"/>'
                     f'<text x="{LEFT-4}" y="{Y(v)+3:.1f}" font-size="10" text-anchor="end" fill="#444">{v:.3g}</text>')

    def poly(key, color, dash):
        seg = [(p["t"], p[key]) for p in line if p.get(key) is not None]
        return (f'<polyline class="{key.replace("_", "-")}" fill="none" stroke="{color}" stroke-width="2" {dash}'
                f'points="{_pts(seg, X, Y)}"/>') if seg else ""

    if line:
        parts.append(poly("actual", ACTUAL_COLOR, ""))
        parts.append(poly("would_have", WOULD_COLOR, 'stroke-dasharray="5 3" '))
        legend.append(("actual", ACTUAL_COLOR, "actual replicas"))
        legend.append(("would-have", WOULD_COLOR, "would have (Observe mode, predictive HPA)"))
    if c.desired:
        d = list(c.desired)
        steps = [d[0]] + [q for a, b in zip(d, d[1:]) for q in ((b[0], a[1]), b)]  # held until the next value
        parts.append(f'<polyline class="desired" fill="none" stroke="{DESIRED_COLOR}" stroke-width="2" '
                     f'points="{_pts(steps, X, Y)}"/>')
        legend.append(("desired", DESIRED_COLOR, f"desired: the HPA heads for {d[0][1]} now (its rule on the served value)"))
    if ready is not None:
        parts.append(f'<circle class="ready-now" cx="{X(c.now):.1f}" cy="{Y(ready):.1f}" r="4" fill="{READY_COLOR}"/>')
        legend.append(("ready", READY_COLOR, f"ready pods now ({ready:g})"))
    return "".join(parts)


def legend_html(entries: list[tuple[str, str, str]]) -> str:
    e = html.escape
    return '<div class="legend">' + "".join(
        f'<span class="lg-{e(cls)}"><i style="background:{col}"></i>{e(text)}</span>' for cls, col, text in entries
    ) + "</div>"
