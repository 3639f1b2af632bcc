"""Replay every CPU series with >= 21 days through the HPA v2 simulator (replay/), side by side:
reactive at targets 0.4-0.7 with Kubernetes' 300 s scale-down window and with the shipped
predictive HPA's own window (its cost-vs-risk frontier: the honest baseline gets the same
behaviour), foresight as a default deployment runs it (the production trainer and serving
policy, replay/pipeline.py), named configurations of the same production code, and the
oracle. Prints and saves totals, medians, per-series ratios, the
per-series equal-cost comparison and plots to bench/results/replay_*.

    .venv/bin/python bench/replay_all.py [--part all|tune|holdout] [--every N [--offset K]] [--workers 2]
                                         [--variants main|costs|states|reference|windows|margins|candidates|sources] [--tag T] [--quick]

``--part``: the series whose SHA-1(series id) is even (tune: every global default of the serving
policy is chosen on it) or odd (holdout: the headline, never used to choose a default).

Data: $FORESIGHT_DATA_DIR/cpu (default <repo>/../shared/data/cpu).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bench.replay_plots import plot_equal_cost, plot_frontier, plot_populations  # noqa: E402
from forecaster.timing import TIMING  # noqa: E402

RESULTS = ROOT / "bench" / "results"
REACTIVE_TARGETS = (0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7)
# the reactive frontier's scale-down windows: Kubernetes' default and the shipped predictive HPA's
REACTIVE_WINDOWS = (300, None)


def _pipeline(training: dict | None = None, serving: dict | None = None):
    """A production PipelineConfig: the defaults, with workload-config overrides by name."""
    from forecaster.config import TrainingConfig
    from forecaster.serving import ServingSettings
    from replay.pipeline import PipelineConfig

    return PipelineConfig(training=TrainingConfig(**(training or {})), serving=ServingSettings(**(serving or {})))


# name -> (mode, training overrides, serving overrides): every variant is production code run
# with settings a user can put in the workload config; "ours" is a default deployment.
MAIN_VARIANTS = {
    "ours": ("predictive", {}, {}),
}
COST_VARIANTS = {  # serving.slo_minutes_per_day, the policy's SLO, and its cost_ceiling
    "ours slo 1.5": ("predictive", {}, {"slo_minutes_per_day": 1.5}),
}
PRICE_VARIANTS = {  # serving.violation_worth_minutes, and calibrated quantiles beyond p90 beside the headrooms
    "ours worth 30": ("predictive", {}, {"violation_worth_minutes": 30.0}),
    "ours worth 120": ("predictive", {}, {"violation_worth_minutes": 120.0}),
    "ours p95 p98": ("predictive", {"quantiles": (0.5, 0.9, 0.95, 0.98)}, {"quantiles": ("p50", "p90", "p95", "p98")}),
}
MARGIN_VARIANTS = {  # serving.model_margin: the share of persistence's avoidable cost the model must save
    "ours margin 0.3": ("predictive", {}, {"model_margin": 0.3}),
    "ours margin 0": ("predictive", {}, {"model_margin": 0.0}),
}
STATE_VARIANTS = {  # serving.peak_gap_states: 1 = one headroom at all times
    "ours one headroom": ("predictive", {}, {"peak_gap_states": 1}),
}
REFERENCE_VARIANTS = {  # the simple reference predictor (AR, p90, no headroom) run by the production code
    "simple AR p90": ("predictive", {"models": ("ar",)}, {"quantiles": ("p90",), "sources": ("model",), "headrooms": (1.0,)}),
}
SOURCE_VARIANTS = {  # serving.sources / serving.holds: what the chooser may serve instead of the model
    "ours model only": ("predictive", {}, {"sources": ("model",)}),
    "ours holds 1-3": ("predictive", {}, {"holds": (1, 2, 3)}),
}
CANDIDATE_VARIANTS = {  # training.models: auto's candidates plus the global LSTM and Prophet
    "ours +lstm +prophet": ("predictive", {"models": ("auto", "lstm", "prophet")}, {}),
}
WINDOW_VARIANTS = {  # the HPA's scale-down stabilization window (behavior in the HPA manifest)
    "ours sd60": ("predictive", {}, {}, {"scale_down_window_seconds": 60}),
    "ours sd120": ("predictive", {}, {}, {"scale_down_window_seconds": 120}),
    "ours sd0": ("predictive", {}, {}, {"scale_down_window_seconds": 0}),
    "r70 sd60 (reactive, not on the frontier)": ("reactive", None, None, {"scale_down_window_seconds": 60}),
}


def in_part(series_id: str, part: str) -> bool:
    """``tune``: SHA-1(series id) even; ``holdout``: odd; ``all``: every series."""
    if part == "all":
        return True
    return (int(hashlib.sha1(series_id.encode()).hexdigest()[:8], 16) % 2 == 0) == (part == "tune")


def load_series(min_days: float = 21.0, part: str = "all", quick: bool = False):
    from bench.common import cpu_files
    from forecaster.frames import series_arrays
    from forecaster.sources.csv import read_long_csv

    out = []
    for f in cpu_files(quick):
        for sid, ts, v in series_arrays(read_long_csv(f)):
            if ts[-1] - ts[0] >= min_days * 86400 and in_part(sid, part):
                out.append((sid, ts.astype("int64"), v))
    return out


def reactive_name(target: float, window: int | None) -> str:
    """``reactive t0.70`` (Kubernetes' 300 s window) or ``reactive t0.70 sd30`` (the shipped one)."""
    from replay.simulate import PREDICTIVE_SCALE_DOWN_WINDOW_SECONDS

    return f"reactive t{target:.2f}" + ("" if window == 300 else f" sd{PREDICTIVE_SCALE_DOWN_WINDOW_SECONDS}")


def _base(startup_kind: str, replay_days: float | None):
    from replay.simulate import ReplayConfig, StartupModel

    return ReplayConfig(startup=StartupModel(startup_kind, TIMING.pod_startup_seconds), **({"replay_days": replay_days} if replay_days else {}))


def train_fleet_globals(series, variants: dict, startup_kind: str, replay_days: float | None) -> tuple[dict, dict]:
    """Per predictive variant whose models include a global one (the LSTM): those models trained
    once across the replayed series (``replay.series.replay_globals``, what ``foresight replay``
    does), and the process CPU seconds it took."""
    from dataclasses import replace

    from replay.series import replay_globals

    base = _base(startup_kind, replay_days)
    out, seconds = {}, {}
    for name, (mode, tr, sv, *rest) in variants.items():
        if mode == "reactive":
            continue
        t0 = time.process_time()
        got = replay_globals(replace(base, pipeline=_pipeline(tr, sv)), series)
        if got:
            out[name], seconds[name] = got, time.process_time() - t0
    return out, seconds


def _replay_one(args):
    sid, ts, v, variants, startup_kind, replay_days, globals_by_variant = args
    import torch  # noqa: F401  (pin threads if a model uses it)

    torch.set_num_threads(1)
    from dataclasses import replace

    from replay.simulate import make_world, production_feed, run_mode

    from replay.simulate import PREDICTIVE_SCALE_DOWN_WINDOW_SECONDS

    from replay.population import daily_strength, population
    from replay.rises import rise_readiness, summarize_leads

    base = _base(startup_kind, replay_days)
    world = make_world(sid, ts, v, base)
    pop = {"population": population(v), "daily_strength": round(daily_strength(v), 4)}
    rows = []
    ref = None
    for window in REACTIVE_WINDOWS:
        for tg in REACTIVE_TARGETS:
            w = PREDICTIVE_SCALE_DOWN_WINDOW_SECONDS if window is None else window
            r = run_mode(world, "reactive", replace(base, target=tg, scale_down_window_seconds=w))
            rows.append({**r.row(), **pop, "variant": reactive_name(tg, window), "target": tg, "window": w})
            if tg == 0.7 and window == 300:
                ref = r

    def readiness(r) -> dict:
        """The rises of the reference reactive HPA (0.7, 300 s) and this mode's ready pods at them."""
        return summarize_leads(rise_readiness(world.t, world.demand, ref.replicas, r.ready, base.cpu_request_cores,
                                                  base.slo_threshold))

    r = run_mode(world, "oracle", base)
    rows.append({**r.row(), **pop, **readiness(r), "variant": "oracle", "target": 0.7})
    feeds = {}
    for name, (mode, tr, sv, *rest) in variants.items():
        if mode == "reactive":  # a reactive variant with other HPA settings (not on the frontier)
            r = run_mode(world, "reactive", replace(base, **rest[0]))
            rows.append({**r.row(), **pop, "variant": name, "target": base.target})
            continue
        cfg = replace(base, pipeline=_pipeline(tr, sv), **(rest[0] if rest else {}))
        key = (repr(sorted(tr.items())), repr(sorted(sv.items())))
        if key not in feeds:  # variants of the HPA alone read the same publications
            feeds[key] = production_feed(world, cfg, globals_by_variant.get(name))
        feed = feeds[key]
        r = run_mode(world, mode, cfg, feed)
        info = feed.summary()
        rows.append({**r.row(), **pop, **readiness(r), "variant": name, "target": cfg.target, **feed.error(world.sample_ts, world.sample_cores, world.t0),
                     "median_headroom": info["median_headroom"], "persistence_days": info["persistence_days"],
                     "fits": info["fits"], "fit_cpu_seconds": info["fit_cpu_seconds"],
                     "refresh_cpu_seconds": info["refresh_cpu_seconds"], "models": json.dumps(info["models"]), **{f"src_{k}": n for k, n in r.extra.get("served_sources", {}).items()}})
    return rows


def trainer_cost(df: pd.DataFrame, global_seconds: dict) -> dict:
    """Per predictive variant with its own trainer: process CPU per fit and of the refreshes per
    series, and the global models' fleet training (total and per series)."""
    out = {}
    if "fit_cpu_seconds" not in df:
        return out
    n = max(1, df.series_id.nunique())
    for v, g in df[df.fit_cpu_seconds.notna()].groupby("variant"):
        fits = float(g.fits.sum())
        glob = float(global_seconds.get(v, 0.0))
        out[v] = {"fits_per_series": fits / n, "fit_cpu_seconds_per_fit": float(g.fit_cpu_seconds.sum()) / max(1.0, fits),
                  "refresh_cpu_seconds_per_series": float(g.refresh_cpu_seconds.sum()) / n,
                  "global_training_cpu_seconds": glob, "global_training_cpu_seconds_per_series": glob / n}
    return out


def pareto(front: pd.DataFrame) -> pd.DataFrame:
    """The reactive settings no other setting beats on both cost and SLO (sorted by cost)."""
    f = front.sort_values(["replica_minutes", "slo_violation_minutes"])
    keep, best = [], np.inf
    for i, slo in zip(f.index, f["slo_violation_minutes"]):
        if slo < best:
            keep.append(i)
            best = slo
    return f.loc[keep]


def equal_cost(front: pd.DataFrame, cost: float) -> tuple[float, str]:
    """Reactive SLO-minutes at ``cost`` on this series' own reactive frontier over targets and
    scale-down windows (linear interpolation between its efficient settings); outside the
    frontier: the nearest end and a flag."""
    f = pareto(front)
    x, y = f["replica_minutes"].to_numpy(), f["slo_violation_minutes"].to_numpy()
    if cost < x[0]:
        return float(y[0]), "below"  # we are cheaper than reactive 0.7: compare with 0.7
    if cost > x[-1]:
        return float(y[-1]), "above"  # we cost more than reactive 0.4
    return float(np.interp(cost, x, y)), "inside"


def analyse(df: pd.DataFrame, headline: str) -> dict:
    df = df.copy()
    tot = df.groupby("variant")[["slo_violation_minutes", "underprovisioned_core_minutes", "replica_minutes", "scale_events"]].sum()
    med = df.groupby("variant")[["slo_violation_minutes", "underprovisioned_core_minutes", "replica_minutes", "scale_events"]].median()
    ref = tot.loc["reactive t0.70"]
    same = tot.loc[reactive_name(0.7, None)]  # the reactive HPA with the shipped predictive behaviour
    orc = tot.loc["oracle"]
    tot["slo_x"] = tot["slo_violation_minutes"] / ref["slo_violation_minutes"]
    tot["cost_x"] = tot["replica_minutes"] / ref["replica_minutes"]
    tot["slo_x_same_behaviour"] = tot["slo_violation_minutes"] / same["slo_violation_minutes"]
    tot["cost_x_same_behaviour"] = tot["replica_minutes"] / same["replica_minutes"]
    gap = ref["slo_violation_minutes"] - orc["slo_violation_minutes"]
    tot["gap_closed"] = (ref["slo_violation_minutes"] - tot["slo_violation_minutes"]) / gap if gap > 0 else np.nan
    per = {}
    series = sorted(df["series_id"].unique())
    for v in [x for x in tot.index if not x.startswith("reactive") and x != "oracle"]:
        wins = ties = losses = 0
        above = 0
        ratios, eq_rows = [], []
        for sid in series:
            s = df[df.series_id == sid]
            front = s[s.variant.str.startswith("reactive")]
            o = s[s.variant == v].iloc[0]
            r70 = s[s.variant == "reactive t0.70"].iloc[0]
            eq, where = equal_cost(front, o["replica_minutes"])
            above += where == "above"
            ours = o["slo_violation_minutes"]
            if ours < eq - 1e-9:
                wins += 1
            elif abs(ours - eq) <= 1e-9:
                ties += 1
            else:
                losses += 1
            ratios.append((ours + 1) / (r70["slo_violation_minutes"] + 1))
            eq_rows.append({"series_id": sid, "ours_slo": ours, "ours_cost": o["replica_minutes"], "reactive_equal_cost_slo": eq, "where": where,
                            "cost_x_r70": o["replica_minutes"] / r70["replica_minutes"], "slo_r70": r70["slo_violation_minutes"]})
        n = len(series)
        per[v] = {
            "wins": wins, "ties": ties, "losses": losses, "n": n, "win_fraction": wins / n,
            "win_fraction_of_decided": wins / max(1, wins + losses), "beyond_reactive_0.4_cost": above,
            "median_slo_ratio_vs_r70_plus1": float(np.median(ratios)),
            "median_cost_ratio_vs_r70": float(np.median([r["cost_x_r70"] for r in eq_rows])),
            "equal_cost_total_ratio": float(sum(r["ours_slo"] for r in eq_rows) / max(1e-9, sum(r["reactive_equal_cost_slo"] for r in eq_rows))),
            "rows": eq_rows,
        }
    return {"totals": tot, "medians": med, "per_series": per}


POPULATIONS = ("all", "daily", "bursty")


def by_population(df: pd.DataFrame, variant: str = "ours") -> dict:
    """The headline of ``variant`` for every population (``replay.population``): totals against
    reactive 0.7 (300 s) and the oracle, per-series cost ranges, equal-cost wins, scale events
    and the rises it had pods Ready in time for."""
    out = {}
    for pop in POPULATIONS:
        d = df if pop == "all" else df[df.population == pop]
        if variant not in set(d.variant):
            continue
        tot = d.groupby("variant")[["slo_violation_minutes", "replica_minutes", "scale_events"]].sum()
        r70, orc, ours = tot.loc["reactive t0.70"], tot.loc["oracle"], tot.loc[variant]
        per = analyse(d, variant)["per_series"][variant]
        piv = d.pivot_table(index="series_id", columns="variant", values="replica_minutes")
        cost_each = piv[variant] / piv["reactive t0.70"]
        most = piv[[c for c in piv.columns if c.startswith("reactive")]].max(axis=1)
        rises = d[d.variant == variant][["rises", "ready_in_time_share", "median_lead_seconds"]].dropna(subset=["rises"])
        o_rises = d[d.variant == "oracle"][["rises", "ready_in_time_share"]]
        n_r = float(rises.rises.sum())
        out[pop] = {
            "series": int(d.series_id.nunique()),
            "slo_x_r70": float(ours.slo_violation_minutes / max(r70.slo_violation_minutes, 1e-9)),
            "cost_x_r70": float(ours.replica_minutes / r70.replica_minutes),
            "cost_x_oracle": float(ours.replica_minutes / orc.replica_minutes),
            "oracle_cost_x_r70": float(orc.replica_minutes / r70.replica_minutes),
            "cost_x_r70_each_min": float(cost_each.min()), "cost_x_r70_each_max": float(cost_each.max()),
            "series_above_1.25x_cost": int((cost_each > 1.25).sum()),
            "series_above_most_expensive_reactive": int((piv[variant] > most + 1e-9).sum()),
            "equal_cost_win_fraction": per["win_fraction"],
            "scale_events_x_oracle": float(ours.scale_events / max(orc.scale_events, 1)),
            "rises": int(n_r),
            "ready_in_time_share": float((rises.rises * rises.ready_in_time_share).sum() / n_r) if n_r else float("nan"),
            "median_lead_seconds_of_series": float(rises.median_lead_seconds.median()) if len(rises) else float("nan"),
            "oracle_ready_in_time_share": float((o_rises.rises * o_rises.ready_in_time_share).sum() / max(float(o_rises.rises.sum()), 1)),
        }
    return out


def print_populations(pops: dict, variant: str) -> None:
    print(f"\nBY POPULATION ({variant}; daily rhythm: replay.population, F >= its DAILY_RHYTHM_MIN)")
    for pop, p in pops.items():
        print(f"  {pop:7s} {p['series']:3d} series: SLO {p['slo_x_r70']:.3f}x reactive(0.7, 300 s) at {p['cost_x_r70']:.3f}x its "
              f"replica-minutes ({p['cost_x_r70_each_min']:.2f}-{p['cost_x_r70_each_max']:.2f}x each, {p['series_above_1.25x_cost']} above 1.25x; "
              f"oracle {p['oracle_cost_x_r70']:.3f}x; ours {p['cost_x_oracle']:.3f}x the oracle's); "
              f"equal-cost wins {p['equal_cost_win_fraction']:.0%}; above the most expensive reactive {p['series_above_most_expensive_reactive']}; "
              f"scale events {p['scale_events_x_oracle']:.2f}x the oracle's; pods Ready before the load outgrew the "
              f"capacity on {p['ready_in_time_share']:.0%} of {p['rises']} rises (oracle {p['oracle_ready_in_time_share']:.0%}), "
              f"median lead {p['median_lead_seconds_of_series']:.0f} s (median of series)")


def plot_examples(df: pd.DataFrame, per: dict, series, variants: dict, startup_kind: str, tag: str, results: Path) -> list[str]:
    """Re-run the series where ours loses worst at equal cost (and the one it wins best) and
    draw demand / ready capacity / replicas for reactive 70%, the reactive target closest to
    our cost, ours and the oracle."""
    from dataclasses import replace

    from replay import report
    from replay.simulate import ReplayConfig, StartupModel, make_world, run_mode
    import base64

    rows = pd.DataFrame(per["ours"]["rows"])
    rows["excess"] = rows["ours_slo"] - rows["reactive_equal_cost_slo"]
    pick = list(rows.sort_values("excess", ascending=False).head(3).series_id) + list(rows.sort_values("excess").head(1).series_id)
    by_id = {sid: (ts, v) for sid, ts, v in series}
    base = ReplayConfig(startup=StartupModel(startup_kind, TIMING.pod_startup_seconds))
    mode, tr, sv = variants["ours"][:3]
    out = []
    for sid in pick:
        ts, v = by_id[sid]
        world = make_world(sid, ts, v, base)
        s = df[df.series_id == sid]
        ours_cost = float(s[s.variant == "ours"].replica_minutes.iloc[0])
        front = s[s.variant.str.startswith("reactive")]
        near = front.iloc[int(np.argmin(np.abs(front.replica_minutes - ours_cost)))]
        res = {"reactive": run_mode(world, "reactive", base)}
        res[f"reactive t{near.target:.2f}"] = run_mode(world, "reactive", replace(base, target=float(near.target)))
        res["predictive"] = run_mode(world, mode, replace(base, pipeline=_pipeline(tr, sv)))
        res["oracle"] = run_mode(world, "oracle", base)
        for zoom, suffix in ((None, "full"), (6, "zoom")):
            b64 = report.series_figure(world, res, zoom_hours=zoom)
            name = f"replay_series_{sid}_{suffix}{tag}.png"
            (results / name).write_bytes(base64.b64decode(b64))
            out.append(name)
    return out


def main(argv=None) -> int:
    from bench.common import add_quick_args, results_dir

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--every", type=int, default=1, help="replay every N-th series (tuning)")
    ap.add_argument("--offset", type=int, default=0, help="start the every-N-th selection at this series (a second tuning subset)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--population", default="all", choices=POPULATIONS,
                    help="replay only the series of this population (replay.population: daily rhythm or bursty)")
    ap.add_argument("--part", default="all", choices=["all", "tune", "holdout"],
                    help="tune: the series whose SHA-1(id) is even (defaults are chosen on them); holdout: the others (the headline)")
    add_quick_args(ap, "one bundled series, two replayed days, one worker, no example plots")
    ap.add_argument("--variants", default="main", choices=["main", "costs", "prices", "states", "reference", "windows", "margins",
                                                          "candidates", "sources"],
                    help="main: ours (a default deployment); costs: main plus serving.slo_minutes_per_day 1.5; "
                         "prices: main plus two serving.violation_worth_minutes and the p95/p98 quantiles; states: main plus one headroom at all times "
                         "(serving.peak_gap_states: 1) and the 60 s scale-down window; reference: main plus "
                         "the simple AR predictor; windows: the scale-down window; margins: main plus two "
                         "serving.model_margin settings; candidates: main plus training.models "
                         "[auto, lstm, prophet] (the global LSTM trained once across the replayed series); "
                         "sources: main plus serving.sources [model] and serving.holds [1, 2, 3]")
    ap.add_argument("--startup", default="constant", choices=["constant", "lognormal"], help="pod start-up model (constant 60 s = the reference)")
    ap.add_argument("--tag", default="", help="suffix for the result files")
    args = ap.parse_args(argv)
    from tqdm import tqdm

    variants = {"main": MAIN_VARIANTS, "costs": {**MAIN_VARIANTS, **COST_VARIANTS},
                "prices": {**MAIN_VARIANTS, **PRICE_VARIANTS},
                "states": {**MAIN_VARIANTS, **STATE_VARIANTS, "ours sd60": WINDOW_VARIANTS["ours sd60"]},
                "reference": {**MAIN_VARIANTS, **REFERENCE_VARIANTS},
                "windows": {"ours": MAIN_VARIANTS["ours"], **WINDOW_VARIANTS},
                "margins": {**MAIN_VARIANTS, **MARGIN_VARIANTS},
                "candidates": {**MAIN_VARIANTS, **CANDIDATE_VARIANTS},
                "sources": {**MAIN_VARIANTS, **SOURCE_VARIANTS}}[args.variants]
    series = load_series(part=args.part, quick=args.quick)
    if args.population != "all":
        from replay.population import population

        series = [x for x in series if population(x[2]) == args.population]
    series = series[args.offset :: args.every]
    replay_days = None
    if args.quick:
        series, replay_days, args.workers = series[:1], 2.0, 1
    results = results_dir(args)
    print(f"replaying {len(series)} series with {len(variants)} predictive variants, {len(REACTIVE_TARGETS)} reactive targets, oracle")
    t_start = time.time()
    fleet, global_seconds = train_fleet_globals(series, variants, args.startup, replay_days)
    for name, sec in global_seconds.items():
        print(f"{name}: global models {', '.join(fleet[name])} trained across "
              f"{len(series)} series in {sec:.0f} s of CPU")
    jobs = [(sid, ts, v, variants, args.startup, replay_days, fleet) for sid, ts, v in series]
    rows = []
    if args.workers > 1:
        import multiprocessing as mp

        # spawned: a forked child of a process that ran torch (the fleet's LSTM) can deadlock
        with mp.get_context("spawn").Pool(args.workers) as pool:
            for r in tqdm(pool.imap_unordered(_replay_one, jobs), total=len(jobs), desc="series"):
                rows.extend(r)
    else:
        for j in tqdm(jobs, desc="series"):
            rows.extend(_replay_one(j))
    elapsed = time.time() - t_start
    df = pd.DataFrame(rows)
    results.mkdir(parents=True, exist_ok=True)
    tag = "".join(f"_{t}" for t in (args.part if args.part != "all" else "", args.population if args.population != "all" else "", args.tag, "quick" if args.quick else "") if t)
    df.to_csv(results / f"replay_per_series{tag}.csv", index=False)
    res = analyse(df, "ours")
    tot, med, per = res["totals"], res["medians"], res["per_series"]
    pd.set_option("display.width", 200)
    print("\nTOTALS over", df.series_id.nunique(), "series")
    print(tot.round(3).to_string())
    print("\nMEDIANS per series")
    print(med.round(2).to_string())
    print("\nPER SERIES vs reactive retuned to equal cost (frontier: targets 0.4-0.7 x scale-down windows 300 s and the shipped one)")
    summary = {}
    for v, p in per.items():
        print(f"  {v:16s} wins {p['wins']:3d} ties {p['ties']:3d} losses {p['losses']:3d} of {p['n']}  "
              f"(win {p['win_fraction']:.0%}, of decided {p['win_fraction_of_decided']:.0%}); beyond reactive-0.4 cost: {p['beyond_reactive_0.4_cost']}; "
              f"median SLO ratio vs r70 {p['median_slo_ratio_vs_r70_plus1']:.2f}, median cost ratio {p['median_cost_ratio_vs_r70']:.2f}")
        summary[v] = {k: x for k, x in p.items() if k != "rows"}
        pd.DataFrame(p["rows"]).to_csv(results / f"replay_equal_cost_{v.replace(' ', '_').replace('+', 'plus')}{tag}.csv", index=False)
    pops = {v: by_population(df, v) for v in per}
    for v, p in pops.items():
        print_populations(p, v)
    cost = trainer_cost(df, global_seconds)
    print("\nTRAINER CPU per workload (the production trainer's steps; process CPU seconds)")
    for v, c in cost.items():
        print(f"  {v:24s} {c['fit_cpu_seconds_per_fit']:6.2f} s per fit ({c['fits_per_series']:.1f} fits per series), "
              f"refreshes {c['refresh_cpu_seconds_per_series']:6.1f} s per series"
              + (f", global training {c['global_training_cpu_seconds']:.0f} s ({c['global_training_cpu_seconds_per_series']:.1f} s per series)"
                 if c["global_training_cpu_seconds"] else ""))
    plot_frontier(tot, results / f"replay_frontier{tag}.png", "ours", args.part if args.part != "all" else "replayed")
    if "ours" in per:
        plot_equal_cost(per["ours"]["rows"], results / f"replay_equal_cost{tag}.png", "ours")
        plot_populations(df, results / f"replay_populations{tag}.png", "ours")
    examples = plot_examples(df, per, series, variants, args.startup, tag, results) if "ours" in per and not args.quick else []
    errs = df[df.variant == "ours"][["mae_h1", "mae_persistence_h1", "skill_h1"]] if "ours" in set(df.variant) else pd.DataFrame()
    out = {
        "series": int(df.series_id.nunique()),
        "part": args.part,
        "quick": bool(args.quick),
        "elapsed_seconds": round(elapsed, 1),
        "startup": args.startup,
        "variants": {k: list(v) for k, v in variants.items()},
        "totals": json.loads(tot.to_json(orient="index")),
        "medians": json.loads(med.to_json(orient="index")),
        "per_series_equal_cost": summary,
        "by_population": pops,
        "trainer_cpu": cost,
        "forecast_error_ours_median": json.loads(errs.median().to_json()) if len(errs) else {},
        "forecast_error_ours_mean": json.loads(errs.mean().to_json()) if len(errs) else {},
        "example_plots": examples,
    }
    (results / f"replay_all{tag}.json").write_text(json.dumps(out, indent=2))
    print(f"\nsaved {results}/replay_all{tag}.json, replay_per_series{tag}.csv, replay_frontier{tag}.png ({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
