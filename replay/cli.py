"""``foresight replay``: what would the HPA have done on this traffic, reactive vs foresight?"""

from __future__ import annotations

import argparse

from forecaster.errors import UserError

DEFAULT_MODES = "reactive,predictive,predictive+warm,oracle"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="replay a CPU trace through a simulated HPA v2: reactive vs predictive vs warm pool vs oracle",
        description=(
            "Turn each series into the CPU demand of one workload (its p99 needs --pods-at-p99 pods at "
            "70%), train on the first --train-days, then replay the rest (at most --replay-days) through "
            "the HPA v2 algorithm every 15 s in each mode. Writes DIR/summary.csv, "
            "DIR/forecast_error.csv and DIR/report.html (plots embedded)."
        ),
    )
    p.add_argument("--data", required=True, help="long CSV (series_id,timestamp,value; .csv or .csv.gz) on a 5-minute grid")
    p.add_argument("--series", nargs="+", metavar="ID", help="only these series (default: all)")
    p.add_argument("--modes", default=DEFAULT_MODES, help=f"comma-separated (default {DEFAULT_MODES})")
    p.add_argument("--startup-s", type=float, default=60.0, help="median pod start-up seconds (default 60)")
    p.add_argument("--startup-dist", choices=["lognormal", "constant"], default="lognormal",
                   help="start-up distribution around the median (default lognormal, sigma 0.35; constant = the reference)")
    p.add_argument("--delay-s", type=float, default=90.0, help="metric pipeline delay of the observed CPU (default 90)")
    p.add_argument("--target", type=float, default=0.7, help="HPA target: CPU utilization of the reactive mode, Value of the others (default 0.7)")
    p.add_argument("--lead-s", type=float, default=75.0, help="how far ahead the predicted metric looks (default 75 = start-up + one sync)")
    p.add_argument("--model", default="auto",
                   help="forecasting model for the predictive modes: auto (per-series selection, forecaster.selection) "
                        "or a registered model (ar, moving_average, recurrence, ...); default auto")
    p.add_argument("--quantile", default="p50", help="forecast quantile served (default p50, with the adaptive margin)")
    p.add_argument("--margin-lambda", type=float, default=75.0,
                   help="adaptive margin: pods a violation is worth when choosing each day's margin (and source) from the "
                        "last 3 days, walk-forward (default 75; 0 = no margin, serve the quantile as is)")
    p.add_argument("--served-min-margin", type=float, default=0.95,
                   help="lowest daily margin of the served headroom (default 0.95: on calm days serve 0.95 x demand; "
                        "1.0 never serves below max(forecast, observed): more per-series wins, higher total cost)")
    p.add_argument("--headroom", choices=["served", "quantile", "auto"], default="served",
                   help="shape of the adaptive margin: served = the day's margin lowers the HPA target Value (headroom "
                        "proportional to the served value, forecast or observed floor); quantile = it scales the forecast "
                        "quantile only; auto = each day the cheaper of both (default served)")
    p.add_argument("--headroom-sources", default="model,persistence",
                   help="comma-separated forecast sources the daily choice may use: model, persistence (a flat path at the "
                        "last sample: ignores the model that day); default model,persistence")
    p.add_argument("--pods-at-p99", type=float, default=20.0, help="pods the trace's p99 needs at 70%% (default 20)")
    p.add_argument("--max-replicas", type=int, default=100)
    p.add_argument("--min-replicas", type=int, default=1)
    p.add_argument("--train-days", type=float, default=14.0)
    p.add_argument("--replay-days", type=float, default=14.0)
    p.add_argument("--warm-pool-size", type=int, default=None, help="warm pods kept at least for predictive+warm (default 1; plus 10%% of replicas)")
    p.add_argument("--seed", type=int, default=0, help="seed of the start-up time draws")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.set_defaults(func=run_replay)


def _config(args):
    from replay.simulate import ReplayConfig, StartupModel

    problems = []
    for name in ("startup_s", "delay_s", "lead_s"):
        v = getattr(args, name)
        if not (v >= 0):
            problems.append(f"--{name.replace('_', '-')} {v} must be >= 0")
    if not (0 < args.target <= 1.5):
        problems.append(f"--target {args.target} must be in (0, 1.5] (e.g. 0.7)")
    if not (args.pods_at_p99 > 0):
        problems.append(f"--pods-at-p99 {args.pods_at_p99} must be > 0")
    if not (1 <= args.max_replicas) or args.min_replicas < 1 or args.min_replicas > args.max_replicas:
        problems.append(f"--min-replicas {args.min_replicas} / --max-replicas {args.max_replicas}: need 1 <= min <= max")
    if not (0 < args.served_min_margin <= 2.5):
        problems.append(f"--served-min-margin {args.served_min_margin} must be in (0, 2.5] (e.g. 0.95 or 1.0)")
    if not (args.margin_lambda >= 0):
        problems.append(f"--margin-lambda {args.margin_lambda} must be >= 0")
    sources = tuple(x.strip() for x in str(args.headroom_sources).split(",") if x.strip())
    bad = [x for x in sources if x not in ("model", "persistence")]
    if bad or not sources:
        problems.append(f"--headroom-sources {args.headroom_sources!r}: each must be model or persistence (e.g. model,persistence)")
    if args.train_days <= 0 or args.replay_days <= 0:
        problems.append("--train-days and --replay-days must be > 0")
    if problems:
        raise UserError("; ".join(problems))
    kw = {}
    if args.warm_pool_size is not None:
        if args.warm_pool_size < 0:
            raise UserError(f"--warm-pool-size {args.warm_pool_size} must be >= 0")
        kw["warm_pool_size"] = args.warm_pool_size
    return ReplayConfig(
        delay_seconds=args.delay_s,
        lead_seconds=args.lead_s,
        target=args.target,
        startup=StartupModel(args.startup_dist, args.startup_s),
        model=args.model,
        quantile=args.quantile,
        margin_lambda=args.margin_lambda,
        headroom=args.headroom,
        headroom_sources=sources,
        served_min_margin=args.served_min_margin,
        margin_grid=tuple(sorted({0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.15, 1.2, 1.27, 1.33, 1.4, 1.5, 1.6, 1.75, 2.0, 2.5, args.served_min_margin})),
        pods_at_p99=args.pods_at_p99,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        train_days=args.train_days,
        replay_days=args.replay_days,
        seed=args.seed,
        **kw,
    )


def run_replay(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm import tqdm

    from forecaster.frames import series_arrays
    from forecaster.sources.csv import read_long_csv
    from replay import report
    from replay.simulate import MODES, make_world, run_mode, walk_forward_forecasts

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise UserError(f"--modes: unknown mode(s) {bad}; choose from {', '.join(MODES)}")
    cfg = _config(args)
    if any(m.startswith("predictive") for m in modes):
        from forecaster.models import available_models

        from replay.models import register

        register()
        if cfg.model != "auto" and cfg.model not in available_models():
            raise UserError(f"--model {cfg.model!r} is unknown; known: {', '.join(available_models())}")
        if not (cfg.quantile == "mean" or cfg.quantile.startswith("p")):
            raise UserError(f"--quantile {cfg.quantile!r} must be like p90 or 'mean'")
    try:
        frame = read_long_csv(args.data)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"--data {args.data}: {exc}") from exc
    series = list(series_arrays(frame))
    if args.series:
        want = set(args.series)
        missing = sorted(want - {s for s, _, _ in series})
        if missing:
            raise UserError(f"--series: not in {args.data}: {', '.join(missing)}")
        series = [s for s in series if s[0] in want]
    if not series:
        raise UserError(f"--data {args.data} has no series")
    q = cfg.quantile
    quantiles = (0.5, 0.75, 0.9, 0.95, 0.99)
    if q not in ("mean",) and q not in {f"p{int(x * 100)}" for x in quantiles}:
        try:
            quantiles = tuple(sorted(set(quantiles) | {float(q[1:]) / 100}))
        except ValueError:
            raise UserError(f"--quantile {q!r} must be like p90") from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, errors, figures, worlds = [], [], [], []
    bar = tqdm(total=len(series) * len(modes), desc="replay", unit="run")
    for sid, ts, v in series:
        try:
            world = make_world(sid, ts.astype("int64"), v, cfg)
        except ValueError as exc:
            raise UserError(f"{exc} (use --train-days/--replay-days for shorter traces)") from exc
        fc = None
        results = {}
        for mode in modes:
            bar.set_postfix_str(f"{sid} {mode}")
            if mode.startswith("predictive") and fc is None:
                fc = walk_forward_forecasts(world, cfg, quantiles=quantiles)
                errors.append({"series_id": sid, "model": cfg.model, "refits": fc.refits, **fc.error(world)})
            r = run_mode(world, mode, cfg, fc if mode.startswith("predictive") else None)
            results[mode] = r
            rows.append(r.row())
            bar.update(1)
        if len(figures) < 2 * 12:  # plots for the first 12 series
            figures.append((f"{sid}: whole replay", report.series_figure(world, results)))
            figures.append((f"{sid}: zoom on 6 hours", report.series_figure(world, results, zoom_hours=6)))
    bar.close()
    figures.insert(0, ("Cost vs risk over all series", report.scatter_figure(rows)))
    report.write_summary(rows, out / "summary.csv")
    report.write_forecast_errors(errors, out / "forecast_error.csv")
    settings = {
        "data": args.data, "series": len(series), "modes": ", ".join(modes), "target": cfg.target,
        "metric delay (s)": cfg.delay_seconds, "lead (s)": cfg.lead_seconds,
        "pod start-up": f"{cfg.startup.kind}, median {cfg.startup.median_seconds:g} s",
        "model / quantile / margin": f"{cfg.model} / {cfg.quantile} / "
        + (f"adaptive (lambda {cfg.margin_lambda:g}, headroom {cfg.headroom}, sources {'+'.join(cfg.headroom_sources)})" if cfg.margin_lambda > 0 else f"x{cfg.margin:g}"), "train / replay days": f"{cfg.train_days:g} / {cfg.replay_days:g}",
        "replicas": f"{cfg.min_replicas}-{cfg.max_replicas}", "warm pool size": cfg.warm_pool_size,
        "demand": f"linear between samples; p99 needs {cfg.pods_at_p99:g} pods of {cfg.cpu_request_cores:g} core at 70%",
    }
    report.write_report(out / "report.html", rows, figures, settings, errors)
    print(f"wrote {out / 'summary.csv'}, {out / 'forecast_error.csv'} and {out / 'report.html'}")
    for m in modes:
        slo = sum(r["slo_violation_minutes"] for r in rows if r["mode"] == m)
        rm = sum(r["replica_minutes"] for r in rows if r["mode"] == m)
        print(f"  {m:16s} SLO-violation min {slo:10.1f}   replica-min {rm:12.0f}")
    return 0
