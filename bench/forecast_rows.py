"""The benchmark-only rows of ``auto`` in bench/forecast_accuracy.py (bench-side names, not
settings a user sees) and the tables that compare them: median MASE at the guard horizons, the
h=1 tail against persistence (at the origins, and at every sample the trainer served), where the
live check served persistence, and the fit cost of each candidate set."""

from __future__ import annotations

import numpy as np
import pandas as pd

# the lead-step guard's history: no guard, the first guard, the guard before seasonal support, and
# the shipped guard alone (auto's selection without the trainer's live check)
BEFORE_GUARD, FIRST_GUARD, NO_LIVE = "auto_before_guard", "auto_guard_e4b3f37", "auto_no_live_check"
NO_SEASON = "auto_guard_no_season"
# the row of ``models: [auto, lstm, prophet]`` (auto choosing among its default candidates plus
# the global LSTM and Prophet), scored when both run as models of their own
WITH_GLOBAL, WITH_GLOBAL_MODELS = "auto_with_lstm_prophet", ("auto", "lstm", "prophet")
GUARD_HORIZONS = (1, 2, 3, 6, 12)

# --guard-grid: the lead-guard settings the defaults are chosen from (on --part tune), as
# (lead_evidence_z, lead_max_move); every point is scored on the same candidate fits
GUARD_GRID = tuple((z, m) for z in (3.0, 4.0, 6.0, 8.0) for m in (2.0, 3.0, 4.0))


def grid_name(z: float, move: float) -> str:
    return f"auto_grid_z{z:g}_move{move:g}"


def auto_rows(cands, grid: bool = False, with_global: bool = False):
    """The benchmark-only rows of auto (bench/auto_rows.py); with ``grid`` also one row per
    point of GUARD_GRID, with ``with_global`` the WITH_GLOBAL row (its candidates as the trainer
    expands ``models: [auto, lstm, prophet]``)."""
    from bench.auto_rows import AutoRows, Row, fixed_z_lead_guard
    from forecaster.selection import SelectionSettings
    from forecaster.training import expand_models

    rows = (Row(BEFORE_GUARD, SelectionSettings(candidates=cands, lead_guard=False)),
            Row(FIRST_GUARD, SelectionSettings(candidates=cands), fixed_z_lead_guard),
            Row(NO_SEASON, SelectionSettings(candidates=cands), seasonal_support=False),
            Row(NO_LIVE, SelectionSettings(candidates=cands)))
    if with_global:
        rows += (Row(WITH_GLOBAL, SelectionSettings(candidates=expand_models(WITH_GLOBAL_MODELS)[0])),)
    if grid:
        rows += tuple(Row(grid_name(z, m), SelectionSettings(candidates=cands, lead_evidence_z=z, lead_max_move=m))
                      for z, m in GUARD_GRID)
    return AutoRows(rows)


def h1_ratios(rows: pd.DataFrame, model: str = "auto") -> pd.DataFrame:
    """Per series: ``model``'s and persistence's MAE at h=1 (over the origins) and their ratio
    (1.0 when both are exact, inf when only persistence is)."""
    h1 = rows[rows.h == 1].pivot_table(index="series_id", columns="model", values="mae")
    out = pd.DataFrame({"mae_auto": h1[model], "mae_persistence": h1["persistence"]}).dropna()
    with np.errstate(divide="ignore", invalid="ignore"):
        r = out["mae_auto"] / out["mae_persistence"]
    r[(out["mae_persistence"] == 0) & (out["mae_auto"] == 0)] = 1.0
    out["ratio"] = r
    return out.sort_values("ratio", ascending=False)


def live_fallbacks(forecasts: dict) -> dict:
    """The origins where ``auto`` served persistence because of the trainer's live check."""
    hits = [(sid, int(o.origin)) for sid, origins in forecasts.items() for o in origins if o.live_fallback]
    total = sum(len(origins) for origins in forecasts.values())
    refits = sum(o.refits for origins in forecasts.values() for o in origins)
    return {"origins": total, "fallbacks": len(hits), "share": len(hits) / total if total else 0.0,
            "series": sorted({sid for sid, _ in hits}), "at": [{"series_id": sid, "origin": o} for sid, o in hits],
            "refits_between_origins": refits}


def _served_steps(origins) -> np.ndarray | None:
    """The one-step rows the trainer served between a series' origins (sample t, the value at
    t + 1, auto's forecast of it, the value at t: persistence's), stacked, where the value at
    t + 1 is known; None when there are none."""
    parts = [o.steps for o in origins if o.steps is not None and len(o.steps)]
    if not parts:
        return None
    st = np.vstack(parts)
    st = st[np.isfinite(st[:, 1])]
    return st if len(st) else None


def _mae_ratio(auto: float, persistence: float) -> float:
    """auto's MAE over persistence's: 1 when both are exact, inf when only persistence is."""
    return 1.0 if auto == persistence == 0 else (auto / persistence if persistence > 0 else np.inf)


def every_step_ratios(forecasts: dict) -> pd.DataFrame:
    """Per series: the one-step forecast the trainer served at EVERY sample from the first
    origin to the last (about 1,900 per series; live check and drift refits included), its MAE and
    persistence's on the same samples: the h=1 tail as an autoscaler meets it, beside the 14
    origins of the protocol."""
    rows = {}
    for sid, origins in forecasts.items():
        st = _served_steps(origins)
        if st is None:
            continue
        ma, mp = float(np.mean(np.abs(st[:, 1] - st[:, 2]))), float(np.mean(np.abs(st[:, 1] - st[:, 3])))
        rows[sid] = {"mae_auto": ma, "mae_persistence": mp, "steps": len(st), "ratio": _mae_ratio(ma, mp)}
    return pd.DataFrame.from_dict(rows, orient="index").sort_values("ratio", ascending=False)


def origin_phase_tail(forecasts: dict, limit: float = 1.1) -> dict | None:
    """How much the tail at the protocol's origins is the origins' luck: the h=1 ratio per series
    at every shift of the origin grid (the samples 0, 1, ..., spacing - 1 after each origin;
    one forecast per origin at each shift, as at the origins themselves), from the one-step
    forecasts the trainer served at every sample. Returns, over the shifts, the mean and the
    range of the number of series above ``limit``, and that number at shift 0 (the origins)."""
    per_series = []
    for origins in forecasts.values():
        st = _served_steps(origins) if len(origins) >= 2 else None
        if st is None:
            continue
        st = st[np.isfinite(st[:, 3])]
        first, spacing = int(origins[0].origin), int(np.median(np.diff([o.origin for o in origins])))
        phase = (st[:, 0].astype(int) - first) % spacing
        ea, ep = np.abs(st[:, 1] - st[:, 2]), np.abs(st[:, 1] - st[:, 3])
        r = np.full(spacing, np.nan)
        for k in range(spacing):
            m = phase == k
            if m.any():
                a, b = ea[m].mean(), ep[m].mean()
                r[k] = _mae_ratio(a, b)
        per_series.append(r)
    if not per_series:
        return None
    n_series = len(per_series)
    width = min(len(r) for r in per_series)
    grid = np.vstack([r[:width] for r in per_series])
    counts = np.sum(grid > limit, axis=0)
    return {"series": n_series, "shifts": int(width), "limit": limit, "above_at_origins": int(counts[0]),
            "above_mean": float(counts.mean()), "above_min": int(counts.min()), "above_max": int(counts.max()),
            "shifts_with_none_above": float(np.mean(counts == 0)),
            "share_above_mean": float(counts.mean() / n_series)}


def live_report(forecasts: dict, ratios: pd.DataFrame | None) -> tuple[dict, dict | None]:
    """Prints where the live check served persistence at an origin, and the h=1 tail over every
    sample (added to ``ratios`` as ``every_step_ratio``); returns both for the JSON."""
    live = live_fallbacks(forecasts)
    print(f"\nlive check: auto served persistence at {live['fallbacks']} of {live['origins']} origins "
          f"({live['share']:.1%}), on {len(live['series'])} series: {', '.join(live['series']) or '-'}; "
          f"the trainer's drift check refit {live['refits_between_origins']} times between origins")
    steps = every_step_ratios(forecasts)
    if not len(steps):
        return live, None
    every_step = tail_stats(steps, worst=5)
    print(f"h=1 at every sample from the first origin to the last ({int(steps['steps'].sum())} one-step "
          f"forecasts): auto / persistence per series max {every_step['max']:.2f}x, median "
          f"{every_step['median']:.3f}x, {every_step['above_1.1']} of {every_step['series']} above 1.1x")
    phases = origin_phase_tail(forecasts)
    if phases:
        every_step["origin_shifts"] = phases
        print(f"h=1 at the origins shifted by 0..{phases['shifts'] - 1} samples (one forecast per origin at each): "
              f"series above 1.1x {phases['above_at_origins']} at the origins, {phases['above_mean']:.2f} on average "
              f"({phases['share_above_mean']:.1%}; {phases['above_min']}-{phases['above_max']}), none above at "
              f"{phases['shifts_with_none_above']:.0%} of the shifts")
    if ratios is not None:
        ratios["every_step_ratio"] = steps["ratio"].reindex(ratios.index)
    return live, every_step


def tail_stats(ratios: pd.DataFrame, worst: int = 8) -> dict:
    r = ratios["ratio"]
    return {
        "series": int(len(r)),
        "max": float(r.max()),
        "median": float(r.median()),
        "above_1.1": int((r > 1.1).sum()),
        "share_above_1.1": float((r > 1.1).mean()),
        "above_1.5": int((r > 1.5).sum()),
        "worst": [{"series_id": sid, **{k: float(v) for k, v in row.items()}} for sid, row in ratios.head(worst).iterrows()],
    }


def guard_table(rows: pd.DataFrame) -> dict:
    """Per auto row (shipped and benchmark-only): median MASE at the guard horizons and over
    h = 1..12, and the h=1 tail against persistence."""
    out = {}
    present = set(rows.model)
    for m in ("auto", NO_LIVE, NO_SEASON, WITH_GLOBAL, BEFORE_GUARD, FIRST_GUARD) + tuple(sorted(x for x in present if x.startswith("auto_grid_"))):
        g = rows[rows.model == m]
        if not len(g):
            continue
        med = g.groupby("h")["mase"].median()
        t = tail_stats(h1_ratios(rows, m), worst=3)
        out[m] = {**{f"mase_h{h}_median": float(med.get(h, np.nan)) for h in GUARD_HORIZONS},
                  "mean_mase_median": float(g.groupby("series_id")["mase"].mean().median()),
                  **{f"h1_ratio_{k}": v for k, v in t.items()}}
    return out


def guard_tables_by_population(rows: pd.DataFrame, frame: pd.DataFrame) -> dict:
    """:func:`guard_table` for each population of ``replay.population`` (daily rhythm, bursty),
    judged on each series' whole history in ``frame``: a median over all series hides what the
    guard takes from the series with a daily rhythm, where a forecast should pay most."""
    from replay.population import population

    pops = frame.sort_values("timestamp").groupby("series_id")["value"].apply(lambda v: population(v.to_numpy()))
    out = {}
    for pop in ("daily", "bursty"):
        ids = set(pops.index[pops == pop])
        sub = rows[rows.series_id.isin(ids)]
        if len(sub):
            out[pop] = {"series": len(ids), **guard_table(sub)}
    return out


def print_guard_table(table: dict, title: str = "") -> None:
    cols = " ".join(f"{'h=' + str(h):>6}" for h in GUARD_HORIZONS)
    print(f"\nlead-step guard{title}: median MASE per horizon, and h=1 MAE over persistence's per series")
    print(f"  {'':<24} {cols} {'h1-12':>6}   {'worst h=1':>9} {'>1.1x':>9}")
    for m, d in table.items():
        if not isinstance(d, dict):
            continue
        vals = " ".join(f"{d[f'mase_h{h}_median']:6.3f}" for h in GUARD_HORIZONS)
        print(f"  {m:<24} {vals} {d['mean_mase_median']:6.3f}   {d['h1_ratio_max']:8.2f}x "
              f"{d['h1_ratio_above_1.1']:3d} ({d['h1_ratio_share_above_1.1']:.1%})")


def candidate_set_costs(run, n_series: int) -> dict:
    """Per row of auto with its own candidate set: fit seconds per workload and fit (one origin;
    the candidates' fits and validation forecasts plus the choice) and, for the row with the
    global LSTM, the fleet training's share per workload."""
    fits = sum(len(v) for v in run.forecasts.values()) or 1
    train = run.timings.get("lstm_global_training", {}).get("seconds", 0.0)
    out = {}
    for m, share in (("auto", 0.0), (WITH_GLOBAL, train)):
        if m in run.timings:
            out[m] = {"seconds_per_fit": run.timings[m]["seconds_total"] / fits, "fits": fits,
                      "global_training_seconds": share, "global_training_seconds_per_series": share / max(1, n_series)}
    return out
