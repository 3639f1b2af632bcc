"""The plots of bench/replay_all.py that need only its results: the cost-vs-risk frontier of
the totals and the per-series comparison at equal cost."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


def plot_frontier(tot: pd.DataFrame, path: Path, headline: str, part: str = "replayed") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    react = tot[tot.index.str.startswith("reactive")]
    for sd, color, what in (("300", "tab:red", "Kubernetes' 300 s"), ("sd", "tab:orange", "the shipped predictive")):
        re = react[react.index.str.contains(" sd") == (sd == "sd")].sort_values("cost_x")
        ax.plot(re["cost_x"], re["slo_x"], "o-", color=color, label=f"reactive HPA, targets 0.4-0.7, {what} scale-down window")
        for name, row in re.iterrows():
            ax.annotate(name.split()[1], (row["cost_x"], row["slo_x"]), textcoords="offset points", xytext=(4, 4), fontsize=7, color=color)
    ours = tot[~tot.index.str.startswith("reactive") & (tot.index != "oracle")]
    pred = ours.sort_values("cost_x")
    ax.plot(pred["cost_x"], pred["slo_x"], "s", color="tab:blue", label="foresight predictive (variants)")
    for i, (name, row) in enumerate(ours.sort_values("slo_x", ascending=False).iterrows()):  # stacked: variants lie close
        ax.annotate(name, (row["cost_x"], row["slo_x"]), textcoords="offset points", xytext=(40, 10 - 14 * i), fontsize=8,
                    color="tab:blue", arrowprops={"arrowstyle": "-", "color": "tab:blue", "lw": 0.5})
    o = tot.loc["oracle"]
    ax.plot([o["cost_x"]], [o["slo_x"]], "*", ms=14, color="black", label="oracle")
    ax.axvline(1.10, color="gray", lw=0.6, ls=":")  # the targets: <= 0.18x SLO at <= 1.10x cost
    ax.axhline(0.18, color="gray", lw=0.6, ls=":")
    ax.annotate("target", (1.10, 0.18), textcoords="offset points", xytext=(-36, -12), fontsize=8, color="gray")
    ax.set_xlabel("replica-minutes / reactive 70% (cost)")
    ax.set_ylabel("SLO-violation minutes / reactive 70% (risk)")
    ax.set_title(f"Cost vs risk, totals over the {part} series")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_equal_cost(rows: list[dict], path: Path, name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    x = np.array([r["reactive_equal_cost_slo"] for r in rows]) + 1
    y = np.array([r["ours_slo"] for r in rows]) + 1
    col = ["tab:green" if a < b else ("tab:gray" if a == b else "tab:red") for a, b in zip(y, x)]
    ax.scatter(x, y, c=col, s=18)
    lim = [1, max(x.max(), y.max()) * 1.2]
    ax.plot(lim, lim, "k--", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("reactive HPA retuned to the same cost: SLO-violation minutes + 1")
    ax.set_ylabel(f"{name}: SLO-violation minutes + 1")
    ax.set_title("Per series at equal cost (green: ours better, red: worse)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_populations(df: pd.DataFrame, path: Path, variant: str = "ours") -> None:
    """One point per series: its cost against the oracle's (x) and its SLO-violation minutes
    against reactive 0.7's (y, +1 minute so a series with none still shows), by population."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    piv = df.pivot_table(index="series_id", columns="variant", values=["replica_minutes", "slo_violation_minutes"])
    pop = df.groupby("series_id").population.first()
    x = piv["replica_minutes"][variant] / piv["replica_minutes"]["oracle"]
    y = (piv["slo_violation_minutes"][variant] + 1) / (piv["slo_violation_minutes"]["reactive t0.70"] + 1)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for name, color in (("daily", "tab:green"), ("bursty", "tab:purple")):
        m = pop.reindex(x.index) == name
        ax.scatter(x[m], y[m], s=22, color=color, alpha=0.8, label=f"{name} ({int(m.sum())} series)")
    ax.axvline(1.10, color="grey", lw=0.8, ls="--")
    ax.axhline(0.10, color="grey", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xlabel(f"{variant}: replica-minutes / the oracle's")
    ax.set_ylabel("(SLO-violation minutes + 1) / reactive 0.7's (+1), log")
    ax.set_title("Per series, by population: cost against the oracle, SLO against a reactive HPA")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
