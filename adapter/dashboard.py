"""The dashboard at ``/``: server-rendered HTML with one inline SVG chart per workload.

No front-end build, no script: every workload's status, the forecast band against the
observed demand, and the value the HPA currently receives with the reason.
"""

from __future__ import annotations

import html
import time
from typing import Any, Sequence

from adapter.observemode import replicas_svg
from forecaster.store import Forecast

OBSERVED_COLOR = "#1f77b4"
BAND_COLOR = "#ff7f0e"
MEAN_COLOR = "#d62728"
BAND_OPACITY = 0.55

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem;background:#fafafa;color:#222}
h1{font-size:1.4rem;margin:0 0 .3rem} .sub{color:#666;margin-bottom:1rem}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:1rem}
.card{background:#fff;border:1px solid #ddd;border-radius:8px;padding:.8rem}
.card h2{font-size:1rem;margin:0 0 .3rem} .badge{display:inline-block;padding:0 .4rem;border-radius:4px;font-size:.8rem}
.ok{background:#d4f4dd;color:#14532d} .fallback,.stale,.missing{background:#fde2e1;color:#7f1d1d}
.kv{font-size:.85rem;color:#333;margin:.3rem 0} .why{font-size:.8rem;color:#555}
.legend span{margin-right:.8rem;font-size:.8rem} nav{margin-top:1rem}
"""


def _svg(fc: Forecast | None, width: int = 400, height: int = 150) -> str:
    if fc is None or (not fc.observed and not fc.mean):
        return f'<svg class="chart" width="{width}" height="{height}"><text x="10" y="20">no data</text></svg>'
    obs = [(t, v) for t, v in fc.observed]
    ts = fc.timestamps()
    qkeys = sorted(fc.quantiles, key=lambda k: float(k[1:]) if k[1:].replace(".", "", 1).isdigit() else 0)
    lo = fc.quantiles[qkeys[0]] if qkeys else fc.mean
    hi = fc.quantiles[qkeys[-1]] if qkeys else fc.mean
    if len(qkeys) == 1:
        lo = tuple(min(a, b) for a, b in zip(fc.mean, hi))
    xs = [t for t, _ in obs] + list(ts)
    ys = [v for _, v in obs] + list(lo) + list(hi) + list(fc.mean)
    x0, x1 = min(xs), max(xs)
    y1 = max(ys) * 1.1 or 1.0
    pad = 30

    def X(t):
        return pad + (t - x0) / ((x1 - x0) or 1) * (width - pad - 5)

    def Y(v):
        return height - 18 - v / y1 * (height - 28)

    parts = [f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
             'style="width:100%;height:auto" role="img">']
    parts.append(f'<line x1="{pad}" y1="{height-18}" x2="{width-5}" y2="{height-18}" stroke="#999"/>')
    parts.append(f'<text x="2" y="14" font-size="10">{y1:.3g}</text><text x="2" y="{height-20}" font-size="10">0</text>')
    if ts:
        band_start = [(fc.origin, obs[-1][1])] if obs else []
        up = band_start + list(zip(ts, hi))
        down = band_start + list(zip(ts, lo))
        pts = " ".join(f"{X(t):.1f},{Y(v):.1f}" for t, v in up) + " " + " ".join(
            f"{X(t):.1f},{Y(v):.1f}" for t, v in reversed(down)
        )
        parts.append(f'<polygon class="band" points="{pts}" fill="{BAND_COLOR}" fill-opacity="{BAND_OPACITY}" stroke="{BAND_COLOR}" stroke-width="2"/>')
        mean = band_start + list(zip(ts, fc.mean))
        parts.append(
            '<polyline class="mean" fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="4 2" points="%s"/>'
            % (MEAN_COLOR, " ".join(f"{X(t):.1f},{Y(v):.1f}" for t, v in mean))
        )
    if obs:
        parts.append(
            '<polyline class="observed" fill="none" stroke="%s" stroke-width="2.5" points="%s"/>'
            % (OBSERVED_COLOR, " ".join(f"{X(t):.1f},{Y(v):.1f}" for t, v in obs))
        )
    parts.append(f'<line x1="{X(fc.origin):.1f}" y1="5" x2="{X(fc.origin):.1f}" y2="{height-18}" stroke="#bbb" stroke-dasharray="2 2"/>')
    parts.append("</svg>")
    return "".join(parts)


def _status_class(row: dict) -> str:
    if row["status"] == "missing":
        return "missing"
    if row["status"] == "fallback":
        return "fallback"
    if row.get("stale"):
        return "stale"
    return "ok"


def _headrooms(pol: dict, prefix: str = "") -> str:
    """x1.2, or per state of the gap below the recent peak: x1/1.2/1.5 by peak gap (<=0.05, <=0.3, more)."""
    ms, edges = pol.get(f"{prefix}headrooms") or [], pol.get("gap_edges") or []
    if not edges or len(ms) != len(edges) + 1:
        return f'x{pol.get(f"{prefix}headroom", 1):g}'
    return "x" + "/".join(f"{m:g}" for m in ms) + " by peak gap (" + ", ".join(f"<={x:.2g}" for x in edges) + ", more)"


def render_dashboard(
    rows: Sequence[tuple[dict, Forecast | None]],
    settings: Any,
    page: int,
    total: int,
    *,
    now: float | None = None,
    error: str | None = None,
    per_page: int = 24,
) -> str:
    e = html.escape
    now = time.time() if now is None else now
    ms = settings.metric
    cards = []
    for row, fc in rows:
        cls = _status_class(row)
        served = row["served"]
        lines = []
        for metric, sv in served.items():
            val = "—" if sv.get("value") is None else f"{sv['value']:.3f}"
            lines.append(
                f'<div class="kv"><b>{e(metric)}</b> = {e(val)} '
                f'<span class="badge {"ok" if sv.get("source") == "forecast" else "fallback"}">{e(str(sv.get("source")))}</span>'
                f'<div class="why">{e(str(sv.get("reason", "")))}</div></div>'
            )
        pol = row.get("serving_policy")
        if pol:
            what = "persistence" if pol.get("source") == "persistence" else pol.get("quantile")
            hold = f', hold {pol.get("hold", 1)}' if pol.get("hold", 1) != 1 else ""
            lines.append(f'<div class="kv policy"><b>serving policy</b> {e(str(what))} {e(_headrooms(pol))}{e(hold)} '
                         f'(fallback {e(_headrooms(pol, "fallback_"))})<div class="why">{e(str(pol.get("reason", "")))}</div></div>')
        age = "—" if row["age_seconds"] is None else f"{row['age_seconds']:.0f} s"
        err = "—" if row["backtest_error"] is None else f"{row['backtest_error']:.3g}"
        cards.append(
            f'<div class="card" data-series="{e(row["series_id"])}"><h2>{e(row["series_id"])} '
            f'<span class="badge {cls}">{e(cls)}</span></h2>'
            f'<div class="kv">model {e(str(row["model"]))} · backtest error {e(err)} · age {e(age)}'
            + (f' · {e(str(row["fallback_reason"]))}' if row["fallback_reason"] else "")
            + "</div>"
            + _svg(fc)
            + replicas_svg(row.get("observe"))
            + "".join(lines)
            + "</div>"
        )
    pages = max(1, -(-total // per_page))
    nav = []
    if page > 1:
        nav.append(f'<a href="/?page={page-1}">previous</a>')
    nav.append(f"page {page} of {pages}")
    if page < pages:
        nav.append(f'<a href="/?page={page+1}">next</a>')
    body = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>foresight</title><style>{_CSS}</style></head><body>"
        f"<h1>{e(settings.dashboard_title)}</h1>"
        f'<div class="sub">{total} workloads · quantile {e(ms.quantile)} · lead {ms.lead_seconds:g} s · '
        f"stale after {ms.max_forecast_age_seconds:g} s · {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(now))} · "
        f'<a href="/docs">API docs</a> · <a href="/api/v1/forecasts">JSON</a></div>'
        f'<div class="legend"><span style="color:{OBSERVED_COLOR}">━ observed demand (cores)</span>'
        f'<span style="color:{BAND_COLOR}">█ forecast band (lowest..highest quantile)</span>'
        f'<span style="color:{MEAN_COLOR}">┅ forecast mean</span></div>'
        + (f'<p class="badge fallback">{e(error)}</p>' if error else "")
        + ("<p>No forecasts yet: the trainer has not published any.</p>" if not rows and not error else "")
        + f'<div class="grid">{"".join(cards)}</div><nav>{" · ".join(nav)}</nav></body></html>'
    )
    return body
