"""``foresight backtest`` and ``foresight train`` (light module: heavy imports run inside)."""

from __future__ import annotations

import logging
from pathlib import Path

from core.errors import UserError
from forecaster.engine import add_engine_arguments, engine_from_args

DEFAULT_BACKTEST_MODELS = "auto,persistence,seasonal_naive,moving_average,ets,ar,ar_log,prophet,lstm"
log = logging.getLogger(__name__)


def register(subparsers) -> None:
    b = subparsers.add_parser(
        "backtest",
        help="walk-forward backtest of forecasting models on a long CSV",
        description=(
            "Walk-forward backtest (last 7 days, origins every 12 h, <= 14 days of training, "
            "h = 1..H). Prints median MASE per model (auto = per-series selection made on "
            "data before each origin only, served as foresight train serves it: the previous "
            "origin's fit is refreshed at every sample up to the origin and checked live against "
            "persistence, and the origin's forecast is persistence's while that check has fallen "
            "back) and writes series_id,model,h,mae,mase,pinball_p90,coverage_p90 rows."
        ),
    )
    b.add_argument("--data", required=True, help="long CSV (series_id,timestamp,value), .csv or .csv.gz")
    b.add_argument("--series", nargs="+", action="extend", default=None, metavar="ID", help="only these series")
    b.add_argument("--models", default=DEFAULT_BACKTEST_MODELS, help=f"comma list (default {DEFAULT_BACKTEST_MODELS})")
    b.add_argument("--horizon", type=int, default=12, help="steps ahead (default 12)")
    b.add_argument("--out", default="backtest_results.csv", help="results CSV (default backtest_results.csv)")
    b.add_argument("--plot", metavar="DIR", default=None, help="draw forecast-vs-actual PNGs into DIR")
    b.add_argument("--eval-days", type=float, default=7.0)
    b.add_argument("--origin-every-hours", type=float, default=12.0)
    b.add_argument("--train-days", type=float, default=14.0)
    b.add_argument("--horizon-weights", default=None, help="comma list, one weight per h, for auto's selection")
    b.add_argument("--lstm-epochs", type=int, default=12)
    b.add_argument("--jobs", type=int, default=1, help="worker processes (one per core)")
    add_engine_arguments(b)
    b.add_argument("--no-progress", action="store_true")
    b.set_defaults(func=run_backtest_cmd)

    t = subparsers.add_parser(
        "train",
        help="fit models for the configured workloads and publish forecasts on a schedule",
        description=(
            "Pulls each workload's demand history through the configured source, selects and "
            "fits a model per series (every training.retrain_interval_seconds) and publishes "
            "fresh forecasts to the store every training.refresh_interval_seconds. Refreshes pull "
            "only the new samples and never wait for fits: fits run in a thread beside them, most "
            "due first (--once: fit what is due, then refresh, in one step)."
        ),
    )
    t.add_argument("--config", required=True, help="workloads YAML (see forecaster/config.py)")
    t.add_argument("--once", action="store_true", help="one train+publish step, then exit")
    t.add_argument("--store", default=None, help="override store.url (memory:// or redis://...)")
    t.add_argument("--iterations", type=int, default=None, help="stop after N refresh steps")
    t.add_argument("--now", type=float, default=None, metavar="UNIX_SECONDS",
                   help="with --once: run the step as of this instant (history up to it), e.g. to reproduce "
                        "what the trainer published at a past moment")
    t.add_argument("--engine", choices=["local", "ray"], default=None,
                   help="where the per-series fits run (default training.engine of the config, else local)")
    t.add_argument("--ray-address", default=None, metavar="ray://HOST:10001",
                   help="with --engine ray (default training.ray_address, else $RAY_ADDRESS)")
    t.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                   help="write each workload's fitted state here and restore it at start, so a restarted "
                        "trainer publishes at once instead of after refitting (the trainer's own volume)")
    t.add_argument("--checkpoint-key-file", default=None, metavar="FILE",
                   help="HMAC key for the checkpoints (e.g. a mounted Secret); default: a key kept in DIR")
    t.set_defaults(func=run_train_cmd)


def _parse_models(text: str) -> list[str]:
    from forecaster.models import available_models

    names = [m.strip() for m in text.split(",") if m.strip()]
    known = set(available_models()) | {"auto"}
    bad = [m for m in names if m not in known]
    if bad:
        raise UserError(f"--models: unknown model(s) {bad}; known: {sorted(known)}")
    if not names:
        raise UserError("--models: give at least one model, e.g. --models auto,persistence")
    return names


def run_backtest_cmd(args) -> int:

    from forecaster.evaluation import RESULT_COLUMNS, BacktestSettings, run_backtest
    from forecaster.selection import SelectionSettings
    from forecaster.sources.csv import read_long_csv

    models = _parse_models(args.models)
    if args.horizon < 1:
        raise UserError(f"--horizon must be >= 1 (got {args.horizon})")
    weights = None
    if args.horizon_weights:
        try:
            weights = tuple(float(x) for x in args.horizon_weights.split(","))
        except ValueError as exc:
            raise UserError(f"--horizon-weights {args.horizon_weights!r} must be comma-separated numbers") from exc
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise UserError("--horizon-weights must be >= 0 and not all 0")
    path = Path(args.data)
    if not path.exists():
        raise UserError(f"--data {path}: no such file")
    frame = read_long_csv(path)
    if args.series:
        known = set(frame["series_id"].unique())
        missing = [s for s in args.series if s not in known]
        if missing:
            raise UserError(f"--series: {missing} not in {path} (it has {len(known)} series, e.g. {sorted(known)[:3]})")
        frame = frame[frame["series_id"].isin(args.series)]
    settings = BacktestSettings(
        eval_days=args.eval_days,
        origin_every_hours=args.origin_every_hours,
        train_days=args.train_days,
        horizon=args.horizon,
        selection=SelectionSettings(horizon_weights=weights),
    )
    if args.jobs < 1:
        raise UserError(f"--jobs must be >= 1 (got {args.jobs})")
    engine = engine_from_args(args)
    try:
        run = run_backtest(frame, models, settings, progress=not args.no_progress,
                           lstm_params={"epochs": args.lstm_epochs}, jobs=args.jobs, engine=engine)
    finally:
        engine.close()
    if run.rows.empty:
        raise UserError(f"{path}: no series has enough history for the protocol (needs > {args.eval_days:g} days)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    run.rows[RESULT_COLUMNS].to_csv(out, index=False)
    print(format_summary(run.summary, args.horizon))
    print(f"\nwrote {len(run.rows)} rows to {out}")
    if args.plot:
        files = plot_forecasts(run, args.plot)
        print(f"drew {len(files)} plots into {args.plot}")
    return 0


def format_summary(summary, horizon: int = 12) -> str:
    """A plain-text table: median over series per model."""
    cols = [
        ("mase_h1_median", "MASE h1"),
        ("mase_h6_median", "MASE h6"),
        (f"mase_h{min(12, horizon)}_median", f"MASE h{min(12, horizon)}"),
        ("mean_mase_median", f"MASE 1-{horizon}"),
        ("mean_mase_mean", "mean/series"),
        ("skill_median", "skill"),
        ("coverage_p90_median", "p90 cover"),
    ]
    cols = [(c, n) for c, n in cols if c in summary.columns]
    order = summary.sort_values("mean_mase_median").index
    head = f"{'model':<24}" + "".join(f"{n:>12}" for _, n in cols)
    lines = ["median over series (skill = 1 - MAE/MAE_persistence)", head, "-" * len(head)]
    for m in order:
        vals = ""
        for c, _ in cols:
            v = summary.loc[m, c]
            vals += f"{v:>12.3f}" if v == v else f"{'-':>12}"
        lines.append(f"{m:<24}{vals}")
    return "\n".join(lines)


def plot_forecasts(run, out_dir, models: list[str] | None = None, max_series: int | None = None) -> list[Path]:
    """One PNG per series: the actual series over the evaluation window and each origin's
    forecast (mean line, p90 as a dashed line) for a few models."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for i, (sid, origins) in enumerate(sorted(run.forecasts.items())):
        if max_series is not None and i >= max_series:
            break
        if not origins:
            continue
        have = list(origins[0].forecasts)
        show = [m for m in (models or ["auto", "persistence", "ar"]) if m in have] or have[:3]
        fig, ax = plt.subplots(figsize=(12, 4))
        for j, o in enumerate(origins):
            rec = o.recent if o.recent is not None else np.zeros(0)
            x = o.origin + 1 - len(rec) + np.arange(len(rec) + len(o.actual))
            ax.plot(x, np.concatenate([rec, o.actual]), "-", color="black", lw=0.8, label="actual" if j == 0 else None)
            ax.axvline(o.origin + 0.5, color="0.85", lw=0.5)
        colors = {"auto": "tab:red", "persistence": "tab:gray", "ar": "tab:blue"}
        for m in show:
            for j, o in enumerate(origins):
                mean, q = o.forecasts[m]
                x = o.origin + 1 + np.arange(len(mean))
                c = colors.get(m)
                ax.plot(x, mean, "-", color=c, lw=1.2, label=m if j == 0 else None)
                if "p90" in q and m == show[0]:
                    ax.plot(x, q["p90"], "--", color=c, lw=0.8, label=f"{m} p90" if j == 0 else None)
        ax.set_title(f"{sid}: forecasts at each origin (h = 1..{len(origins[0].actual)})")
        ax.set_xlabel("point index (5-min steps); 3 h of context before each origin")
        ax.legend(loc="upper left", fontsize=8)
        fig.tight_layout()
        f = out / f"{_safe(sid)}.png"
        fig.savefig(f, dpi=90)
        plt.close(fig)
        files.append(f)
    return files


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def run_train_cmd(args) -> int:
    from core.store import open_store
    from forecaster.config import load_config
    from forecaster.schedule import run_schedule, train_once, trainer_from_config
    from forecaster.sources.prometheus import open_source

    config = load_config(args.config)
    key = None
    if args.checkpoint_key_file:
        if not args.checkpoint_dir:
            raise UserError("--checkpoint-key-file needs --checkpoint-dir")
        try:
            key = Path(args.checkpoint_key_file).read_bytes().strip()
        except OSError as exc:
            raise UserError(f"--checkpoint-key-file {args.checkpoint_key_file}: {exc.strerror}") from exc
        if len(key) < 16:
            raise UserError(f"--checkpoint-key-file {args.checkpoint_key_file}: the key has {len(key)} bytes; use at least 16")
    src = config.source
    source = open_source(
        src.url,
        bearer_token_file=src.bearer_token_file,
        ca_file=src.ca_file,
        thanos=dict(src.thanos),
        timeout_seconds=src.timeout_seconds,
    ) if not src.url.startswith(("csv://", "file://")) else open_source(src.url)
    store = open_store(args.store or config.store.url, ttl_seconds=config.store.ttl_seconds)
    engine = _train_engine(args, config)

    def report(out) -> None:
        for sid, r in sorted(out["results"].items()):
            if r.get("published"):
                print(f"{sid}: published {r['model']} ({r['status']}) {r['reason']}")
            else:
                print(f"{sid}: NOT published: {r.get('error')}")
        if "refresh_seconds" in out:
            print(f"refreshed {out['published']}/{len(out['results'])} in {out['refresh_seconds']:.1f} s; "
                  f"fits: {out['fits_done']} done since the last step, {out['fits_pending']} queued", flush=True)

    try:
        if args.now is not None and not args.once:
            raise UserError("--now needs --once (a schedule runs on the wall clock)")
        if args.once:
            trainer = trainer_from_config(config, store)
            if args.checkpoint_dir:
                from forecaster.checkpoint import attach

                attach(trainer, args.checkpoint_dir, [w.series_id for w in config.series()], key=key)
            out = train_once(config, source, store, now=args.now, trainer=trainer, engine=engine)
            report(out)
            ok = any(r.get("published") for r in out["results"].values())
            return 0 if ok else 1
        run_schedule(config, source, store, iterations=args.iterations, on_step=report, engine=engine, config_path=args.config,
                     checkpoint_dir=args.checkpoint_dir, checkpoint_key=key)
    finally:
        store.close()
        if engine is not None:
            engine.close()
    return 0


def _train_engine(args, config):
    """None (fits in this process, today's trainer) unless the flags or training.engine say ray."""
    from forecaster.engine import open_engine

    name = args.engine or config.training.engine
    address = args.ray_address or (config.training.ray_address if name == config.training.engine else None)
    if name == "local":
        if args.ray_address:
            raise UserError("--ray-address needs --engine ray")
        return None
    return open_engine(name, address=address)
