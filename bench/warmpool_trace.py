"""Warm-pool keep-alive policies on the Azure Functions 2019 trace (700 functions, one day),
all in one run, both demand models, with the measurement model of
shared/reference/warm-pools.md.

    .venv/bin/python bench/warmpool_trace.py [--limit N] [--no-sweep]

Policies: fixed keep-alive 5/10/20/60 min, the seed's decaying TTL alone, the hybrid histogram
(Shahrad et al.), the oracle, and ours ("foresight": per-function idle-time hazard, memory
priced to stay within 95% of fixed 10 min's memory, measured causally). With the sweep, ours
also runs at fixed memory prices to draw its cold-start vs memory frontier.

Targets (issue 5): single model <= 1.5% cold invoked minutes at <= 100% of fixed 10's wasted
memory (aim <= 1.2%); concurrency model <= 3.3% at <= 100%.

Data: $FORESIGHT_DATA_DIR/serverless (default <repo>/../shared/data/serverless).
Writes bench/results/warmpool_trace.{csv,json,png}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, data_dir, save_json  # noqa: E402

REFERENCE = {  # warm-pools.md, 700-function sample
    "single": {"fixed:5": (6.50, 76), "fixed:10": (3.45, 100), "fixed:20": (2.08, 125), "fixed:60": (0.84, 180),
               "seed": (19.52, 45), "hybrid": (0.90, 192), "oracle": (0.41, 0)},
    "concurrency": {"fixed:5": (11.34, 73), "fixed:10": (6.51, 100), "fixed:20": (3.87, 135), "fixed:60": (1.68, 235),
                    "seed": (28.53, 40), "hybrid": (7.75, 180), "oracle": (0.41, 0)},
}
HINDSIGHT = {"single": [(0.86, 112), (1.2, 100), (1.65, 76)], "concurrency": [(1.52, 106), (2.28, 68)]}
TARGET = {"single": (1.5, 100.0), "concurrency": (3.3, 100.0)}
SWEEP_PRICES = {"single": (3e-3, 1e-3, 3e-4), "concurrency": (3e-4, 1e-4, 3e-5)}


def _run(args):
    demand, limit, sweep = args
    from warmpool.keepalive import FixedKeepAlive, ForesightPolicy, make_policy
    from warmpool.tracesim import load_trace, replay_all

    trace = load_trace(data_dir() / "serverless", limit=limit)
    names = ["fixed:5", "fixed:10", "fixed:20", "fixed:60", "seed", "hybrid", "oracle", "foresight"]
    policies = [make_policy(n) for n in names]
    if sweep:
        policies += [ForesightPolicy(price=p, budget=None, name=f"foresight@price={p:g}") for p in SWEEP_PRICES[demand]]
    t0 = time.time()
    results = replay_all(trace, [demand], policies)
    assert isinstance(policies[1], FixedKeepAlive)
    return demand, [r.row() | {"cold_minutes": r.cold_minutes, "invoked_minutes": r.invoked_minutes} for r in results], time.time() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="only the first N functions (quick look)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the fixed-price frontier of ours")
    args = ap.parse_args()
    jobs = [(d, args.limit, not args.no_sweep) for d in ("single", "concurrency")]
    with ProcessPoolExecutor(2) as ex:  # the two demand models side by side
        out = list(ex.map(_run, jobs))
    rows = [r for _, rs, _ in out for r in rs]
    seconds = {d: round(s, 1) for d, _, s in out}

    import csv

    RESULTS.mkdir(parents=True, exist_ok=True)
    from warmpool.tracesim import CSV_COLUMNS

    with (RESULTS / "warmpool_trace.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(CSV_COLUMNS), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)

    print(f"{'policy':<26}{'demand':<13}{'cold%min':>9}{'cold%inv':>9}{'p75%':>8}{'GB-min':>11}{'vs f10':>8}   reference")
    for r in rows:
        ref = REFERENCE[r["demand"]].get(r["policy"])
        refs = f"{ref[0]:.2f}% / {ref[1]}%" if ref else ""
        print(f"{r['policy']:<26}{r['demand']:<13}{r['cold_pct_invoked_minutes']:>9.2f}{r['cold_pct_invocations']:>9.2f}"
              f"{r['p75_cold_rate_pct']:>8.1f}{r['wasted_gb_min']:>11.0f}{r['wasted_pct_of_fixed10']:>7.0f}%   {refs}")
    verdict = {}
    for d, (cold_max, mem_max) in TARGET.items():
        ours = next((r for r in rows if r["demand"] == d and r["policy"] == "foresight"), None)
        if ours is None:
            continue
        ok = ours["cold_pct_invoked_minutes"] <= cold_max and ours["wasted_pct_of_fixed10"] <= mem_max
        verdict[d] = {"cold_pct_invoked_minutes": ours["cold_pct_invoked_minutes"], "wasted_pct_of_fixed10": ours["wasted_pct_of_fixed10"],
                      "target": f"<= {cold_max}% at <= {mem_max:.0f}%", "met": ok}
        print(f"target {d}: <= {cold_max}% at <= {mem_max:.0f}% -> ours {ours['cold_pct_invoked_minutes']:.2f}% at "
              f"{ours['wasted_pct_of_fixed10']:.0f}%: {'MET' if ok else 'NOT MET'}")
    save_json("warmpool_trace", {"data": str(data_dir() / "serverless"), "limit": args.limit, "seconds": seconds,
                                 "rows": rows, "targets": verdict, "reference": REFERENCE, "hindsight_frontier": HINDSIGHT})
    _plot(rows)
    print(f"wrote {RESULTS / 'warmpool_trace.csv'}, .json and .png")
    return 0


def _plot(rows) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    for ax, d in zip(axes, ("single", "concurrency")):
        rs = [r for r in rows if r["demand"] == d]
        for r in rs:
            ours = r["policy"].startswith("foresight")
            ax.scatter(r["wasted_pct_of_fixed10"], r["cold_pct_invoked_minutes"], s=60 if r["policy"] == "foresight" else 30,
                       c="tab:red" if ours else "tab:blue", marker="*" if r["policy"] == "foresight" else "o")
            ax.annotate(r["policy"].replace("foresight@price=", "ours@"), (r["wasted_pct_of_fixed10"], r["cold_pct_invoked_minutes"]),
                        fontsize=7, xytext=(3, 3), textcoords="offset points")
        hx = [m for _, m in HINDSIGHT[d]]
        hy = [c for c, _ in HINDSIGHT[d]]
        ax.plot(hx, hy, "k--", lw=1, label="best static window per function (hindsight)")
        cold_max, mem_max = TARGET[d]
        ax.axhline(cold_max, color="tab:green", lw=0.8, ls=":")
        ax.axvline(mem_max, color="tab:green", lw=0.8, ls=":", label=f"target <= {cold_max}% at <= {mem_max:.0f}%")
        ax.set_yscale("log")
        ax.set_xlabel("wasted memory, % of fixed 10 min")
        ax.set_ylabel("cold starts, % of invoked minutes")
        ax.set_title(f"{d} demand model")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle("Azure Functions 2019, 700 functions, 1 day (60 s steps)")
    fig.tight_layout()
    fig.savefig(RESULTS / "warmpool_trace.png", dpi=120)


if __name__ == "__main__":
    sys.exit(main())
