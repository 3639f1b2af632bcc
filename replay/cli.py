"""``foresight replay``: what would the HPA have done on this traffic, reactive vs foresight?"""

from __future__ import annotations

import argparse

from core.errors import UserError
from forecaster.engine import add_engine_arguments, engine_from_args
from forecaster.timing import TIMING

DEFAULT_MODES = "reactive,predictive,oracle"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="replay a CPU trace through a simulated HPA v2: reactive vs predictive vs oracle",
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
    p.add_argument("--delay-s", type=float, default=TIMING.metric_delay_seconds,
                   help=f"metric pipeline delay of the observed CPU (default {TIMING.metric_delay_seconds:g})")
    p.add_argument("--target", type=float, default=TIMING.hpa_target,
                   help=f"HPA target: CPU utilization of the reactive mode, Value of the others (default {TIMING.hpa_target:g})")
    p.add_argument("--lead-s", type=float, default=TIMING.lead_seconds,
                   help=f"how far ahead the predicted metric looks (default {TIMING.lead_seconds:g} = start-up + one sync)")
    p.add_argument("--config", metavar="WORKLOADS.yaml",
                   help="take the training: and serving: sections from this workload config (the settings your "
                        "deployment runs); default: a default deployment's")
    p.add_argument("--models", default=None,
                   help="override training.models for the predictive modes, comma-separated (auto, ar, ...)")
    p.add_argument("--violation-worth-minutes", type=float, default=None,
                   help="override serving.violation_worth_minutes: what one SLO-violation minute is worth, in minutes "
                        "of running the whole workload")
    p.add_argument("--slo-minutes-per-day", type=float, default=None,
                   help="override serving.slo_minutes_per_day: the SLO each workload's serving policy meets on its "
                        "own history (minutes a day above serving.slo_utilization of ready capacity)")
    p.add_argument("--pods-at-p99", type=float, default=20.0, help="pods the trace's p99 needs at 70%% (default 20)")
    p.add_argument("--max-replicas", type=int, default=100)
    p.add_argument("--min-replicas", type=int, default=1)
    p.add_argument("--train-days", type=float, default=14.0)
    p.add_argument("--replay-days", type=float, default=14.0)
    p.add_argument("--seed", type=int, default=0, help="seed of the start-up time draws")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    add_engine_arguments(p, jobs=True)
    p.set_defaults(func=run_replay)


def _pipeline(args):
    """The production trainer/serving settings: a default deployment's, or the --config file's,
    with the two documented overrides."""
    from dataclasses import replace

    from core.store import quantile_key
    from forecaster.config import TrainingConfig, load_config
    from forecaster.serving import ServingSettings
    from forecaster.training import expand_models
    from replay.pipeline import PipelineConfig

    training, serving = TrainingConfig(), ServingSettings()
    if args.config:
        cfg = load_config(args.config)
        training, serving = cfg.training, cfg.serving
    if args.models:
        models = tuple(m.strip() for m in args.models.split(",") if m.strip())
        try:
            expand_models(models)
        except Exception as exc:  # noqa: BLE001 - unknown model names
            raise UserError(f"--models {args.models!r}: {exc}") from exc
        training = replace(training, models=models)
    if args.violation_worth_minutes is not None:
        serving = replace(serving, violation_worth_minutes=args.violation_worth_minutes)
    if args.slo_minutes_per_day is not None:
        serving = replace(serving, slo_minutes_per_day=args.slo_minutes_per_day)
    problems = serving.problems("serving", published=[quantile_key(q) for q in training.quantiles])
    if problems:
        raise UserError("; ".join(problems).replace("serving.slo_minutes_per_day", "--slo-minutes-per-day")
                        .replace("serving.violation_worth_minutes", "--violation-worth-minutes"))
    return PipelineConfig(training=training, serving=serving)


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
    if args.train_days <= 0 or args.replay_days <= 0:
        problems.append("--train-days and --replay-days must be > 0")
    if problems:
        raise UserError("; ".join(problems))
    return ReplayConfig(
        delay_seconds=args.delay_s,
        lead_seconds=args.lead_s,
        target=args.target,
        startup=StartupModel(args.startup_dist, args.startup_s),
        pipeline=_pipeline(args),
        pods_at_p99=args.pods_at_p99,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        train_days=args.train_days,
        replay_days=args.replay_days,
        seed=args.seed,
    )


def run_replay(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm import tqdm

    from forecaster.frames import series_arrays
    from forecaster.sources.csv import read_long_csv
    from replay import report
    from replay.series import ReplayWork, replay_globals, replay_series, work_items
    from replay.simulate import MODES

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise UserError(f"--modes: unknown mode(s) {bad}; choose from {', '.join(MODES)}")
    cfg = _config(args)
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
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, errors, figures = [], [], []
    bar = tqdm(total=len(series), desc="replay", unit="series")
    engine = engine_from_args(args)
    try:  # one production feed per series: a series is the unit of work
        prototypes = replay_globals(cfg, series) if any(m.startswith("predictive") for m in modes) else {}
        done = engine.map(replay_series, work_items(series, plotted=12), context=ReplayWork(cfg, tuple(modes), prototypes),
                          progress=bar.update)
    finally:
        engine.close()
        bar.close()
    for one in done:
        if one.problem:
            raise UserError(f"{one.problem} (use --train-days/--replay-days for shorter traces)")
        rows.extend(one.rows)
        errors.extend([one.error] if one.error else [])
        figures.extend(one.figures)
    figures.insert(0, ("Cost vs risk over all series", report.scatter_figure(rows)))
    report.write_summary(rows, out / "summary.csv")
    report.write_forecast_errors(errors, out / "forecast_error.csv")
    settings = {
        "data": args.data, "series": len(series), "modes": ", ".join(modes), "target": cfg.target,
        "metric delay (s)": cfg.delay_seconds, "lead (s)": cfg.lead_seconds,
        "pod start-up": f"{cfg.startup.kind}, median {cfg.startup.median_seconds:g} s",
        "trainer (production)": f"models {','.join(cfg.pipeline.training.models)}, retrain every "
        f"{cfg.pipeline.training.retrain_interval_seconds / 3600:g} h on {cfg.pipeline.history_days:g} days, quantiles "
        f"{', '.join(f'{q:g}' for q in cfg.pipeline.training.quantiles)}",
        "serving policy (chosen per workload)": f"a violation minute worth {cfg.pipeline.serving.violation_worth_minutes:g} workload-minutes"
        f"{f', SLO {cfg.pipeline.serving.slo_minutes_per_day:g} minutes a day' if cfg.pipeline.serving.slo_minutes_per_day else ''}, "
        f"quantiles {'/'.join(cfg.pipeline.serving.quantiles)}, sources {'/'.join(cfg.pipeline.serving.sources)}",
        "train / replay days": f"{cfg.train_days:g} / {cfg.replay_days:g}",
        "replicas": f"{cfg.min_replicas}-{cfg.max_replicas}",
        "demand": f"linear between samples; p99 needs {cfg.pods_at_p99:g} pods of {cfg.cpu_request_cores:g} core at 70%",
    }
    report.write_report(out / "report.html", rows, figures, settings, errors)
    print(f"wrote {out / 'summary.csv'}, {out / 'forecast_error.csv'} and {out / 'report.html'}")
    pops = sorted({r["population"] for r in rows})
    for pop in (["all"] if len(pops) == 1 else ["all", *pops]):
        print(f"{pop}: {len({r['series_id'] for r in rows if pop == 'all' or r['population'] == pop})} series" +
              ("" if pop != "all" or len(pops) > 1 else f" ({pops[0]})"))
        for m in modes:
            mine = [r for r in rows if r["mode"] == m and (pop == "all" or r["population"] == pop)]
            slo = sum(r["slo_violation_minutes"] for r in mine)
            rm = sum(r["replica_minutes"] for r in mine)
            rises = sum(r.get("rises", 0) for r in mine)
            ready = (f"   Ready before {sum(r['rises'] * r['ready_in_time_share'] for r in mine if r.get('rises')) / rises:4.0%} "
                     f"of {rises} rises" if rises else "")
            print(f"  {m:16s} SLO-violation min {slo:10.1f}   replica-min {rm:12.0f}{ready}")
    return 0
