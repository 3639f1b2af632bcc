"""The dashboard at ``/``: server-rendered HTML with one inline SVG chart per workload.

No front-end build. Per workload: demand and replicas over the last hours and the forecast
ahead on one labelled time axis (adapter/dashboard_svg.py), the value the HPA receives now as
adapter/core.py serves it, and the serving policy in one sentence (adapter/dashboard_text.py).
A few lines of inline script turn the clock labels into the viewer's local time and keep the
"3 min ago" texts current, counted on the adapter's clock (the page carries it); without the
script the server's UTC clock times and ages stay.
"""

from __future__ import annotations

import html
import time
from typing import Any, Mapping, Sequence

from adapter.dashboard_svg import BAND_COLOR, BAND_OPACITY, OBSERVED_COLOR, ChartInput, chart_svg, legend_html, unit_of
from adapter.dashboard_text import policy_sentence
from adapter.settings import METRIC_CORES, METRIC_LOAD_RATIO
from core.store import Forecast

__all__ = ["BAND_COLOR", "BAND_OPACITY", "OBSERVED_COLOR", "ago", "render_dashboard"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem;background:#fafafa;color:#222}
h1{font-size:1.4rem;margin:0 0 .3rem} .sub{color:#666;margin-bottom:1rem}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(460px,1fr));gap:1rem}
.card{background:#fff;border:1px solid #ddd;border-radius:8px;padding:.8rem}
.card h2{font-size:1rem;margin:0 0 .3rem} .badge{display:inline-block;padding:0 .4rem;border-radius:4px;font-size:.8rem}
.ok{background:#d4f4dd;color:#14532d} .fallback,.stale,.missing{background:#fde2e1;color:#7f1d1d}
.kv{font-size:.85rem;color:#333;margin:.3rem 0} .why{font-size:.8rem;color:#555}
.policy{font-size:.9rem;margin:.4rem 0} .big{font-size:1.05rem;font-weight:600}
.legend{font-size:.78rem;color:#333;margin:.2rem 0 .4rem}
.legend span{margin-right:.8rem;white-space:nowrap} .legend i{display:inline-block;width:.8rem;height:.5rem;margin-right:.25rem}
details{font-size:.78rem;color:#555} nav{margin-top:1rem}
"""

# the adapter's clock at render time (data-now) and the viewer's at load: every "ago" counts on the former
_SCRIPT = """
(function(){var now0=+document.body.dataset.now,t0=Date.now()/1000;
function adapterNow(){return now0+(Date.now()/1000-t0);}
function ago(s){s=Math.max(0,s);if(s<45)return 'just now';if(s<5400)return Math.round(s/60)+' min ago';
if(s<172800)return Math.round(s/3600)+' h ago';return Math.round(s/86400)+' days ago';}
var two=function(n){return (n<10?'0':'')+n;};
function clock(t){var d=new Date(t*1000);return two(d.getHours())+':'+two(d.getMinutes());}
var tz=(function(){try{return Intl.DateTimeFormat().resolvedOptions().timeZone||'local';}catch(e){return 'local';}})();
document.querySelectorAll('.clock').forEach(function(el){el.textContent=clock(+el.dataset.t);});
document.querySelectorAll('.tz').forEach(function(el){el.textContent=tz;});
document.querySelectorAll('.stamp').forEach(function(el){var d=new Date(+el.dataset.t*1000);
el.textContent=d.toLocaleString();el.title=d.toISOString();});
function tick(){document.querySelectorAll('.ago').forEach(function(el){el.textContent=ago(adapterNow()-(+el.dataset.t));});}
tick();setInterval(tick,15000);})();
"""


def ago(seconds: float) -> str:
    """The server's wording of an age (the page's script says the same, kept current)."""
    s = max(0.0, seconds)

    def r(x):  # half up, as the script's Math.round
        return int(x + 0.5)

    if s < 45:
        return "just now"
    if s < 5400:
        return f"{r(s / 60)} min ago"
    if s < 172800:
        return f"{r(s / 3600)} h ago"
    return f"{r(s / 86400)} days ago"


def _when(t: float | None, now: float) -> str:
    """"3 min ago (04:07)": the age, and the clock time in the viewer's zone."""
    if t is None:
        return "—"
    return (f'<span class="ago" data-t="{t:.0f}">{ago(now - t)}</span> '
            f'(<span class="clock" data-t="{t:.0f}">{time.strftime("%H:%M UTC", time.gmtime(t))}</span>)')


def _status_class(row: dict) -> str:
    if row["status"] in ("missing", "fallback"):
        return row["status"]
    if row.get("stale"):
        return "stale"
    return "ok"


def _num(v) -> str:
    return "—" if v is None else f"{v:.4g}"


def _served_html(row: dict, fc: Forecast | None) -> str:
    e = html.escape
    served = row["served"]
    cores, ratio = served.get(METRIC_CORES) or {}, served.get(METRIC_LOAD_RATIO) or {}
    out = []
    unit = unit_of(fc)
    if cores.get("value") is not None:
        src = str(cores.get("source"))
        head = (f'<span class="big">HPA gets {cores["value"]:.3g} cores</span>' if unit == "CPU cores"
                else f'<span class="big">serves {cores["value"]:.3g} ({e(unit)})</span>')
        if ratio.get("value") is not None:
            head += f" · load ratio {ratio['value']:.3g} of the pods' CPU request"
        out.append(f'<div class="kv served-now">{head} <span class="badge {"ok" if src == "forecast" else "fallback"}">'
                   f'{e("from the forecast" if src == "forecast" else src)}</span></div>')
    why = "".join(
        f'<div><b>{e(m)}</b> = {_num(sv.get("value"))} ({e(str(sv.get("source")))}): {e(str(sv.get("reason", "")))}</div>'
        for m, sv in served.items()
    )
    out.append(f"<details><summary>every served metric and why</summary>{why}</details>")
    return "".join(out)


def _card(row: dict, fc: Forecast | None, extra: Mapping[str, Any], settings: Any, now: float) -> str:
    e = html.escape
    cls = _status_class(row)
    cores = row["served"].get(METRIC_CORES) or {}
    pol = row.get("serving_policy")
    sentence = policy_sentence(pol, settings.metric.quantile, cores.get("headroom") if cores.get("source") == "forecast" else None)
    chart = ChartInput(fc, now, served_now=cores.get("value"), served_ahead=extra.get("served_ahead") or (),
                       served_stale_at=extra.get("served_stale_at"),
                       ready_now=extra.get("ready_now"), desired=extra.get("desired") or (),
                       observe=row.get("observe"))
    svg = chart_svg(chart)
    last_obs = fc.observed[-1][0] if fc is not None and fc.observed else None
    err = "—" if row["backtest_error"] is None else f"{row['backtest_error']:.3g}"
    times = (f'<div class="kv times">forecast published {_when(fc.generated_at if fc else None, now)} · '
             f'last observed {_when(last_obs, now)}</div>')
    model = (f'<details><summary>model {e(str(row["model"]))}, backtest error {e(err)}</summary>'
             + (f'<div>{e(str(row["fallback_reason"]))}</div>' if row["fallback_reason"] else "")
             + (f'<div>policy chosen because: {e(str(pol.get("reason", "")))}</div>' if pol else "") + "</details>")
    return (f'<div class="card" data-series="{e(row["series_id"])}"><h2>{e(row["series_id"])} '
            f'<span class="badge {cls}">{e(cls)}</span></h2>'
            + _served_html(row, fc) + _replicas_html(extra)
            + f'<div class="policy">{e(sentence)}</div>'
            + times + svg + legend_html(chart.legend) + _observe_html(row.get("observe")) + model + "</div>")


def _replicas_html(extra: Mapping[str, Any]) -> str:
    desired, ready = extra.get("desired") or (), extra.get("ready_now")
    if not desired:
        return ""
    peak = max(n for _, n in desired)
    ahead = f", up to {peak} on the forecast ahead" if peak > desired[0][1] else ""
    return (f'<div class="kv desired">replicas: the HPA heads for <b>{desired[0][1]}</b> now{ahead}; '
            f'{ready:g} ready</div>')


def _observe_html(ob: Mapping[str, Any] | None) -> str:
    if not ob:
        return ""
    e = html.escape
    under = ob.get("under_capacity_minutes") or {}
    since = ob.get("since")
    return (f'<div class="kv observe">Observe mode: would have <b>{e(str(ob.get("would_have_replicas")))}</b> '
            f'replicas, has {e(str(ob.get("actual_replicas")))}'
            + (f', needs {e(str(ob["needed_replicas"]))}' if ob.get("needed_replicas") is not None else "")
            + f' · under capacity: would-have {e(str(under.get("wouldHave", 0)))} min, '
            f'actual {e(str(under.get("actual", 0)))} min since {_stamp(since)}</div>')


def _stamp(rfc3339: Any) -> str:
    """An RFC 3339 time as the viewer's local date and time (the script rewrites it)."""
    from datetime import datetime

    try:
        t = datetime.fromisoformat(str(rfc3339).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return html.escape(str(rfc3339))
    return f'<span class="stamp" data-t="{t:.0f}">{html.escape(str(rfc3339))}</span>'


def render_dashboard(
    rows: Sequence[tuple[dict, Forecast | None]],
    settings: Any,
    page: int,
    total: int,
    *,
    now: float | None = None,
    error: str | None = None,
    per_page: int = 24,
    extras: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """``extras``: per series id, ``served_ahead`` [(t, cores)] and ``ready_now`` as the route
    got them from AdapterCore."""
    e = html.escape
    now = time.time() if now is None else now
    ms = settings.metric
    cards = [_card(row, fc, (extras or {}).get(row["series_id"], {}), settings, now) for row, fc in rows]
    pages = max(1, -(-total // per_page))
    nav = []
    if page > 1:
        nav.append(f'<a href="/?page={page-1}">previous</a>')
    nav.append(f"page {page} of {pages}")
    if page < pages:
        nav.append(f'<a href="/?page={page+1}">next</a>')
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>foresight</title><style>{_CSS}</style></head>"
        f'<body data-now="{now:.3f}">'
        f"<h1>{e(settings.dashboard_title)}</h1>"
        f'<div class="sub">{total} workloads · serves the {e(ms.quantile)} forecast {ms.lead_seconds:g} s ahead unless '
        f"a workload's policy says otherwise · a forecast older than {ms.max_forecast_age_seconds:g} s is not served · "
        f'as of <span class="stamp" data-t="{now:.0f}">{time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))}</span> · '
        f'<a href="/docs">API docs</a> · <a href="/api/v1/forecasts">JSON</a></div>'
        + (f'<p class="badge fallback">{e(error)}</p>' if error else "")
        + ("<p>No forecasts yet: the trainer has not published any.</p>" if not rows and not error else "")
        + f'<div class="grid">{"".join(cards)}</div><nav>{" · ".join(nav)}</nav><script>{_SCRIPT}</script></body></html>'
    )
