"""Forecast accuracy benchmark: the walk-forward protocol of ../shared/data/README.md over the
series in $FORESIGHT_DATA_DIR/cpu (115 series; by default the held-out half), all models side by
side in ONE run, plus the cost of refreshing 1,000 series' forecasts from new data.

``--part``: the series whose SHA-1(series id) is even (tune: the lead-guard defaults of
``auto`` were chosen on it) or odd (holdout, the default: the headline), as bench/replay_all.py
splits them. ``auto`` is what ships: the selection with its lead-step guard, served through the
trainer's live check (the previous origin's fit refreshed at every sample up to the origin and
scored against persistence; a fallback it triggers is kept by the refit, and the lead steps move
from the last value only as far as the live points support: forecaster/backtest_live.py).
The h=1 tail is also given at every shift of the origin grid (the 144 samples after each origin):
with 14 forecasts per series, how many series land above 1.1x at the protocol's origins is partly
their luck, and the average over the shifts says how much.
Four benchmark-only rows from the same candidate fits, none with the live check, show the
history: ``auto_before_guard`` (no guard), ``auto_guard_e4b3f37`` (the first guard: persistence at
h=1 unless the model wins by 3 standard errors), ``auto_guard_no_season`` (the shipped guard
without its seasonal support) and ``auto_no_live_check`` (the shipped guard alone); the guard
table gives each one's median MASE at h = 1, 2, 3, 6, 12 and its h=1 tail against persistence.
With ``lstm`` and ``prophet`` among the models, the row ``auto_with_lstm_prophet`` is the
selection ``models: [auto, lstm, prophet]`` makes (auto choosing among its default candidates
plus those two, from the same fits; without the live check, like the other benchmark-only rows),
with the fit seconds of both candidate sets per workload.

    .venv/bin/python bench/forecast_accuracy.py                 # full run (held-out half, all models)
    .venv/bin/python bench/forecast_accuracy.py --part tune     # the half the defaults were chosen on
    .venv/bin/python bench/forecast_accuracy.py --series 30     # a fixed random subset while iterating
    .venv/bin/python bench/forecast_accuracy.py --targets-only  # only auto and persistence: all
                                                                # the targets need, ~1/3 of the time
    .venv/bin/python bench/forecast_accuracy.py --quick         # smoke run: 2 bundled series, 2 origins

Writes bench/results/forecast_accuracy.{json,csv}, forecast_accuracy_summary.csv,
forecast_accuracy_h1_ratio.csv (per series: auto's 5-minute MAE over persistence's at the origins, and
``every_step_ratio``: the same over every sample between the first and the last origin) and
forecast_accuracy.png; prints the summary table and the targets with pass/fail.
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bench.common import add_quick_args, cpu_files, results_dir, save_json  # noqa: E402
from bench.forecast_rows import (  # noqa: E402
    BEFORE_GUARD, FIRST_GUARD, NO_LIVE, NO_SEASON, WITH_GLOBAL, WITH_GLOBAL_MODELS, auto_rows, candidate_set_costs,
    guard_table, guard_tables_by_population, h1_ratios, live_report, print_guard_table, tail_stats,
)
from bench.replay_all import in_part  # noqa: E402  (the one tune/holdout split of the benchmarks)

ALL_MODELS = "auto,persistence,seasonal_naive,moving_average,ets,ar,ar_log,prophet,lstm"
TARGET_MODELS = "auto,persistence"
TARGETS = {
    "auto_mean_mase_median_max": 0.70,
    # the guard's cost at the served horizons: auto's median MASE at h=1, 2 over before-guard's
    "guard_lead_median_cost_max": 1.10,
    # tail safety at the serving horizon: auto's h=1 MAE over persistence's, per series
    "h1_ratio_max": 1.5,
    "h1_ratio_above_1.1_share_max": 0.03,
    "auto_skill_min": 0.18,
    "auto_skill_h6_min": 0.08,
    "auto_skill_h12_min": 0.05,
    "coverage_p90_range": (0.85, 0.95),
    "full_run_minutes_max": 30.0,
    "refresh_1000_seconds_max": 5.0,
}


def load_all(n: int | None, seed: int = 0, quick: bool = False, part: str = "all") -> pd.DataFrame:
    from forecaster.sources.csv import read_long_csv

    files = cpu_files(quick)
    df = pd.concat([read_long_csv(f) for f in files], ignore_index=True)
    ids = sorted(s for s in df["series_id"].unique() if in_part(s, part))
    df = df[df["series_id"].isin(ids)]
    if n is not None and n < len(ids):
        pick = sorted(np.random.default_rng(seed).choice(ids, n, replace=False))
        df = df[df["series_id"].isin(pick)]
    return df


def refresh_benchmark(frame: pd.DataFrame, n_series: int = 1000, fit_series: int = 40) -> dict:
    """Fit ``fit_series`` real series with auto (the heavy step), replicate the fitted states to
    ``n_series`` ids, then time ONE refresh round of all of them from new data (one new
    point each, last 14 days of history passed in, published to the in-memory store)."""
    from forecaster.frames import regularize, series_arrays
    from core.store import MemoryForecastStore
    from forecaster.training import Trainer

    arrays = [(sid, ts[-4032:], v[-4032:]) for sid, ts, v in series_arrays(regularize(frame, 300))]
    arrays = arrays[:fit_series]
    store = MemoryForecastStore()
    tr = Trainer(store, models=("auto",))
    t0 = time.perf_counter()
    for sid, ts, v in arrays:
        tr.fit(sid, ts[:-1], v[:-1])
    fit_s = time.perf_counter() - t0
    data = {}
    for i in range(n_series):
        sid, ts, v = arrays[i % len(arrays)]
        key = f"fleet/{i:04d}-{sid}"
        tr._states[key] = copy.deepcopy(tr._states[sid])
        tr._states[key].series_id = key
        data[key] = (ts, v)
    # one refresh round from the new data, then time a second (steady state) round
    t0 = time.perf_counter()
    for key, (ts, v) in data.items():
        tr.refresh(key, ts[:-1], v[:-1])
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for key, (ts, v) in data.items():
        tr.refresh(key, ts, v)
    second = time.perf_counter() - t0
    models = pd.Series([tr._states[k].model_name for k in data]).value_counts().head(8).to_dict()
    return {
        "series": n_series,
        "fit_seconds_per_series": fit_s / len(arrays),
        "refresh_round_seconds": second,
        "refresh_first_round_seconds": first,
        "refresh_ms_per_series": 1000 * second / n_series,
        "published": len(store.list_series()),
        "models_in_fleet": models,
    }


def plot(summary: pd.DataFrame, rows: pd.DataFrame, path: Path, ratios: pd.DataFrame | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = summary.sort_values("mean_mase_median").index
    fig, axes = plt.subplots(1, 4 if ratios is not None and len(ratios) else 3, figsize=(21, 4.5))
    ax = axes[0]
    ax.barh(list(order), summary.loc[order, "mean_mase_median"], color=["tab:red" if m == "auto" else "tab:blue" for m in order])
    ax.axvline(TARGETS["auto_mean_mase_median_max"], color="k", ls="--", lw=1,
               label=f"target <= {TARGETS['auto_mean_mase_median_max']:g}")
    ax.set_xlabel("median over series of mean MASE (h = 1..12)")
    ax.invert_yaxis()
    ax.legend(fontsize=8)
    ax = axes[1]
    per_h = rows.groupby(["model", "h"])["mase"].median().unstack(0)
    for m in order:
        ax.plot(per_h.index, per_h[m], marker="o", ms=3, lw=2.5 if m == "auto" else 1, label=m)
    ax.set_xlabel("h (5-minute steps)")
    ax.set_ylabel("median MASE")
    ax.legend(fontsize=7, ncol=2)
    ax = axes[2]
    if "skill_median" in summary:
        ax.barh(list(order), summary.loc[order, "skill_median"], color=["tab:red" if m == "auto" else "tab:green" for m in order])
        ax.axvline(TARGETS["auto_skill_min"], color="k", ls="--", lw=1, label="target >= 18%")
        ax.set_xlabel("median skill vs persistence (1 - MAE/MAE_persistence), h = 1..12")
        ax.invert_yaxis()
        ax.legend(fontsize=8)
    if len(axes) > 3:
        ax = axes[3]
        r = np.sort(np.minimum(ratios["ratio"].to_numpy(), 10.0))[::-1]
        ax.plot(np.arange(1, len(r) + 1), r, marker=".", color="tab:red", label="auto (shipped)")
        for m, c in ((BEFORE_GUARD, "tab:grey"), (FIRST_GUARD, "tab:blue"), (NO_SEASON, "tab:purple"), (NO_LIVE, "tab:orange")):
            if m in set(rows["model"]):
                rv = np.sort(np.minimum(h1_ratios(rows, m)["ratio"].to_numpy(), 10.0))[::-1]
                ax.plot(np.arange(1, len(rv) + 1), rv, lw=1, color=c, label=m)
        ax.axhline(TARGETS["h1_ratio_max"], color="k", ls="--", lw=1, label=f"max {TARGETS['h1_ratio_max']:g}x")
        ax.axhline(1.1, color="grey", ls=":", lw=1, label="1.1x (<= 3% of series above)")
        ax.set_yscale("log")
        ax.set_xlabel("series, worst first")
        ax.set_ylabel("h=1 MAE / persistence h=1 MAE (capped at 10)")
        ax.legend(fontsize=8)
    fig.suptitle("Walk-forward backtest: last 7 days, origins every 12 h, <= 14 days training")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, default=None, help="random subset of N series (default: all of --part)")
    ap.add_argument("--part", default="holdout", choices=["all", "tune", "holdout"],
                    help="series by SHA-1(series id): tune (even; the guard defaults were chosen on it), "
                    "holdout (odd; the default, the headline) or all")
    ap.add_argument("--models", default=None, help=f"comma-separated (default {ALL_MODELS}; with --quick {TARGET_MODELS}); "
                    f"with auto, lstm and prophet also the {WITH_GLOBAL} row (models: [auto, lstm, prophet])")
    ap.add_argument("--targets-only", action="store_true",
                    help=f"run only {TARGET_MODELS} (what the targets need) instead of every model")
    ap.add_argument("--lstm-epochs", type=int, default=10)
    ap.add_argument("--name", default="forecast_accuracy", help="result file prefix in bench/results/")
    ap.add_argument("--refresh-series", type=int, default=1000)
    ap.add_argument("--no-refresh", action="store_true")
    ap.add_argument("--guard-grid", action="store_true",
                    help="also score every lead-guard setting of GUARD_GRID on the same fits (choose on --part tune)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes for the per-series backtests (default 2 = the 2 cores)")
    add_quick_args(ap, "auto and persistence on 2 bundled series, 2 origins, 3 days of training, 20 refreshes")
    args = ap.parse_args(argv)
    if args.targets_only or (args.quick and args.models is None):
        args.models = TARGET_MODELS
    args.models = args.models or ALL_MODELS
    if args.quick:
        args.series, args.refresh_series, args.jobs = 2, 20, 1
    out = results_dir(args)
    if "lstm" in args.models:
        import torch

        torch.set_num_threads(2)
    from forecaster.cli_models import format_summary
    from forecaster.evaluation import RESULT_COLUMNS, BacktestSettings, run_backtest
    from forecaster.selection import DEFAULT_CANDIDATES, SelectionSettings

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    frame = load_all(args.series, quick=args.quick, part=args.part)
    n_series = frame["series_id"].nunique()
    # auto as shipped; the WITH_GLOBAL row adds the global LSTM and Prophet as candidates
    cands = DEFAULT_CANDIDATES
    quick = {"eval_days": 1.0, "train_days": 3.0} if args.quick else {}
    with_global = set(WITH_GLOBAL_MODELS) <= set(models)
    extra = auto_rows(cands, args.guard_grid, with_global) if "auto" in models else None
    settings = BacktestSettings(selection=SelectionSettings(candidates=cands), extra_rows=extra, **quick)
    print(f"{n_series} series ({args.part}) from {', '.join(str(f) for f in cpu_files(args.quick))}; models: {', '.join(models)}; auto candidates: {', '.join(cands)}")
    t0 = time.perf_counter()
    run = run_backtest(frame, models, settings, progress=True, lstm_params={"epochs": args.lstm_epochs}, jobs=args.jobs)
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    peak_worker_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0  # largest worker

    run.rows[RESULT_COLUMNS].to_csv(out / f"{args.name}.csv", index=False)
    summary = run.summary.copy()
    for m, t in run.timings.items():
        if m in summary.index:
            summary.loc[m, "fit_predict_seconds_per_series"] = t["seconds_per_series"]
    summary.to_csv(out / f"{args.name}_summary.csv")
    ratios = h1_ratios(run.rows) if {"auto", "persistence"} <= set(models) else None
    plot(summary.drop(index=[m for m in summary.index if m.startswith("auto_grid_")]), run.rows,
         out / f"{args.name}.png", ratios)
    print()
    print(format_summary(summary))
    print()
    print("fit+predict seconds per series (all 14 origins):")
    for m, t in sorted(run.timings.items()):
        print(f"  {m:<24} {t.get('seconds_per_series', t.get('seconds', 0.0)):8.2f}")

    sets = candidate_set_costs(run, n_series) if WITH_GLOBAL in summary.index else None
    if sets:
        print(f"\nfit seconds per workload and fit (one origin), auto's candidate sets:")
        for m, d in sets.items():
            extra = (f" + {d['global_training_seconds_per_series']:.2f} s of global LSTM training per series "
                     f"({d['global_training_seconds']:.0f} s / {n_series})" if d.get("global_training_seconds") else "")
            print(f"  {m:<24} {d['seconds_per_fit']:6.2f} s per fit{extra}")

    refresh = None
    if not args.no_refresh:
        refresh = refresh_benchmark(frame, args.refresh_series, fit_series=2 if args.quick else 40)
        print(f"\nrefresh of {refresh['series']} series: {refresh['refresh_round_seconds']:.2f} s "
              f"({refresh['refresh_ms_per_series']:.2f} ms/series); fit {refresh['fit_seconds_per_series']:.2f} s/series")

    h1 = guards = by_pop = None
    if ratios is not None:
        h1 = tail_stats(ratios)
        print(f"\nh=1 MAE auto / persistence per series: max {h1['max']:.2f}x, median {h1['median']:.3f}x, "
              f"{h1['above_1.1']} of {h1['series']} above 1.1x ({h1['share_above_1.1']:.1%}), {h1['above_1.5']} above 1.5x")
        for w in h1["worst"][:5]:
            print(f"  {w['series_id']:<48} {w['ratio']:6.2f}x  (MAE {w['mae_auto']:.3g} vs {w['mae_persistence']:.3g})")
        guards = guard_table(run.rows)
        print_guard_table(guards)
        by_pop = guard_tables_by_population(run.rows, frame)
        for pop, t in by_pop.items():
            print_guard_table(t, f", {t['series']} series of population {pop} (replay.population)")
    live, every_step = live_report(run.forecasts, ratios) if "auto" in models else (None, None)
    if ratios is not None:
        ratios.to_csv(out / f"{args.name}_h1_ratio.csv")

    checks = {}
    if "auto" in summary.index:
        a = summary.loc["auto"]
        singles = summary.drop(index=[m for m in summary.index if m.startswith("auto")])
        checks = {
            f"auto_mean_mase_median<={TARGETS['auto_mean_mase_median_max']:g}": bool(a["mean_mase_median"] <= TARGETS["auto_mean_mase_median_max"]),
            "auto_below_every_single_model": bool((a["mean_mase_median"] < singles["mean_mase_median"]).all()),
            "auto_skill>=18%": bool(a.get("skill_median", np.nan) >= TARGETS["auto_skill_min"]),
            "auto_skill_h6>=8%": bool(a.get("skill_h6_median", np.nan) >= TARGETS["auto_skill_h6_min"]),
            "auto_skill_h12>=5%": bool(a.get("skill_h12_median", np.nan) >= TARGETS["auto_skill_h12_min"]),
            "auto_p90_coverage_in_0.85-0.95": bool(0.85 <= a["coverage_p90_median"] <= 0.95),
        }
    if h1 is not None:
        checks["h1_ratio_max<=1.5"] = h1["max"] <= TARGETS["h1_ratio_max"]
        checks["h1_ratio_above_1.1<=3%"] = h1["share_above_1.1"] <= TARGETS["h1_ratio_above_1.1_share_max"]
    if guards and BEFORE_GUARD in guards:
        for h in (1, 2):
            cost = guards["auto"][f"mase_h{h}_median"] / guards[BEFORE_GUARD][f"mase_h{h}_median"]
            checks[f"h{h}_median_within_10%_of_before_guard ({cost:.3f}x)"] = bool(cost <= TARGETS["guard_lead_median_cost_max"])
    daily = (by_pop or {}).get("daily", {})
    if BEFORE_GUARD in daily:
        for h in (1, 2):
            cost = daily["auto"][f"mase_h{h}_median"] / daily[BEFORE_GUARD][f"mase_h{h}_median"]
            checks[f"daily_rhythm_h{h}_median_within_10%_of_before_guard ({cost:.3f}x)"] = bool(cost <= TARGETS["guard_lead_median_cost_max"])
    if args.series is None and set(models) >= set(ALL_MODELS.split(",")):
        checks["full_run_under_30_min"] = wall / 60 <= TARGETS["full_run_minutes_max"]
    if refresh:
        checks["refresh_1000_under_5_s"] = refresh["refresh_round_seconds"] <= TARGETS["refresh_1000_seconds_max"]
    print(f"\nwall time {wall / 60:.1f} min, peak memory {peak_mb:.0f} MB (main), {peak_worker_mb:.0f} MB (largest worker)")
    if args.quick:
        print("  (quick mode: 2 series and 2 origins; the targets are the full run's, not judged here)")
    for k, v in checks.items():
        print(f"  {'PASS' if v else 'FAIL'}  {k}")
    try:
        import os

        load = os.getloadavg()
    except OSError:
        load = None
    save_json(
        args.name,
        {
            "command": "python bench/forecast_accuracy.py"
            + (" --targets-only" if args.targets_only else (f" --models {args.models}" if args.models != ALL_MODELS else ""))
            + (f" --series {args.series}" if args.series and not args.quick else "")
            + (f" --part {args.part}" if args.part != "holdout" else "") + (" --quick" if args.quick else "")
            + (" --guard-grid" if args.guard_grid else "") + (" --no-refresh" if args.no_refresh else "")
            + (f" --name {args.name}" if args.name != "forecast_accuracy" else ""),
            "part": args.part,
            "series": int(n_series),
            "models": models,
            "auto_candidates": list(cands),
            "protocol": f"last {settings.eval_days:g} days, origins every {settings.origin_every_hours:g} h, "
            f"<= {settings.train_days:g} days training per origin, h = 1..12 (5-60 min)",
            "summary": json.loads(summary.to_json(orient="index")),
            "timings": run.timings,
            "lstm_training": run.lstm_report,
            "wall_seconds": wall,
            "peak_memory_mb": peak_mb,
            "peak_memory_worker_mb": peak_worker_mb,
            "load_average_at_end": load,
            "refresh": refresh,
            "h1_ratio_vs_persistence": h1,
            "guard_comparison": guards,
            "guard_comparison_by_population": by_pop,
            "candidate_sets": sets,
            "live_check_fallbacks": live,
            "h1_every_step_vs_persistence": every_step,
            "targets": {k: list(v) if isinstance(v, tuple) else v for k, v in TARGETS.items()},
            "checks": checks,
        },
        out,
    )
    print(f"saved {out / args.name}.json, .csv, _summary.csv, _h1_ratio.csv, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
