"""PNG of one forecast against the observed demand (``?format=png``), matplotlib Agg."""

from __future__ import annotations

import io
import threading
from datetime import datetime, timezone

from core.store import Forecast

_LOCK = threading.Lock()  # pyplot state is global


def forecast_png(fc: Forecast, summary: dict | None = None) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def dt(ts):
        return datetime.fromtimestamp(ts, tz=timezone.utc)

    with _LOCK:
        fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
        try:
            if fc.observed:
                ax.plot([dt(t) for t, _ in fc.observed], [v for _, v in fc.observed], color="#1f77b4", lw=2, label="observed")
            ts = [dt(t) for t in fc.timestamps()]
            keys = sorted(fc.quantiles, key=lambda k: float(k[1:]) if k[1:].replace(".", "", 1).isdigit() else 0)
            if len(keys) >= 2:
                ax.fill_between(ts, fc.quantiles[keys[0]], fc.quantiles[keys[-1]], color="#ff7f0e", alpha=0.4,
                                label=f"{keys[0]}..{keys[-1]}")
            elif keys:
                ax.plot(ts, fc.quantiles[keys[0]], color="#ff7f0e", label=keys[0])
            if ts:
                ax.plot(ts, fc.mean, color="#d62728", ls="--", label="mean")
            title = f"{fc.series_id} ({fc.model}, {fc.status})"
            if summary:
                sv = summary.get("served", {}).get("predicted_cpu_load_ratio", {})
                if sv.get("value") is not None:
                    title += f" · HPA gets {sv['value']:.3f} ({sv.get('source')})"
            ax.set_title(title, fontsize=9)
            ax.set_ylabel("CPU cores")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=8, loc="upper left")
            fig.autofmt_xdate()
            buf = io.BytesIO()
            fig.savefig(buf, format="png", bbox_inches="tight")
            return buf.getvalue()
        finally:
            plt.close(fig)
