"""Real crun containers: 200 claims from a warm pool vs 200 cold starts (create + start),
through the controller's claim path, side by side in alternating batches of 20 so machine
load hits both alike. Also runc at a smaller count for reference.

    .venv/bin/python bench/warmpool_crun.py [--n 200] [--runc-n 50]
    .venv/bin/python bench/warmpool_crun.py --quick   # smoke run: 4 crun + 2 runc of each, temp folder

Warm claim = pick the soonest-expiring warm container + ``crun start`` (pre-warm was ``crun
create``). Cold = bundle + ``crun create`` (through the unshare/umount wrapper on hosts with
hybrid cgroups) + ``crun start``. Target (issue 5): warm claim p50 <= 30% of cold p50.
Writes bench/results/warmpool_crun.{json,png} (--quick: a temporary folder or --out).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.common import add_quick_args, results_dir, save_json  # noqa: E402

BATCH = 20


def measure(runtime: str, n: int):
    from tqdm import tqdm

    from core.store import MemoryForecastStore
    from warmpool.backends.crun import CrunBackend, probe
    from warmpool.controller import Controller
    from warmpool.policy import parse_policy

    ok, why, _ = probe(runtime)
    if not ok:
        raise SystemExit(f"{runtime} cannot run here: {why}")

    def policy(min_warm):
        return parse_policy({"apiVersion": "foresight/v1alpha1", "kind": "WarmPoolPolicy", "pools": [{
            "name": "bench", "workload": {"namespace": "bench", "name": "bench"}, "backend": runtime, "runtime_class": runtime,
            "min_warm": min_warm, "max_warm": max(min_warm, 1), "template": {"command": ["sleep", "600"]}}]})

    state = Path(tempfile.mkdtemp(prefix=f"foresight-bench-{runtime}-"))
    backend = CrunBackend(state, runtime)
    warm_ms, cold_ms, prewarm_ms = [], [], []
    try:
        bar = tqdm(total=2 * n, desc=runtime)
        done = 0
        while done < n:
            k = min(BATCH, n - done)
            # warm: pre-warm k (create), then k claims (start)
            ctl = Controller(policy(k), MemoryForecastStore(), {runtime: backend})
            t0 = time.perf_counter()
            ctl.step()
            prewarm_ms.append((time.perf_counter() - t0) * 1000 / k)
            for _ in range(k):
                r = ctl.claim("bench", allow_cold=False)
                warm_ms.append(r.latency_seconds * 1000)
                bar.update()
            # cold: an empty pool, k claims that create + start
            ctl_cold = Controller(policy(0), MemoryForecastStore(), {runtime: backend})
            for _ in range(k):
                r = ctl_cold.claim("bench", allow_cold=True)
                assert r.cold_start
                cold_ms.append(r.latency_seconds * 1000)
                bar.update()
            for cid in backend.container_ids():
                backend.delete(ctl.policy.pools[0], cid)
            done += k
        bar.close()
    finally:
        for cid in backend.container_ids():
            subprocess.run([backend.binary, "--root", str(backend.root), "delete", "-f", cid], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(state, ignore_errors=True)
    return np.array(warm_ms), np.array(cold_ms), np.array(prewarm_ms)


def stats(a: np.ndarray) -> dict:
    return {"n": int(len(a)), "p50_ms": float(np.percentile(a, 50)), "p90_ms": float(np.percentile(a, 90)),
            "p99_ms": float(np.percentile(a, 99)), "mean_ms": float(a.mean())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--runc-n", type=int, default=50)
    add_quick_args(ap, "4 crun and 2 runc claims of each kind")
    args = ap.parse_args()
    if args.quick:
        args.n, args.runc_n = 4, 2
    path = results_dir(args)
    out = {}
    samples = {}
    for runtime, n in (("crun", args.n), ("runc", args.runc_n)):
        if n <= 0:
            continue
        warm, cold, pre = measure(runtime, n)
        samples[runtime] = (warm, cold)
        out[runtime] = {"warm_claim": stats(warm), "cold_start": stats(cold), "prewarm_create_per_container_ms": float(np.median(pre)),
                        "warm_p50_pct_of_cold_p50": 100.0 * float(np.percentile(warm, 50) / np.percentile(cold, 50))}
        w, c = out[runtime]["warm_claim"], out[runtime]["cold_start"]
        print(f"{runtime}: warm claim p50 {w['p50_ms']:.2f} ms p99 {w['p99_ms']:.2f} ms | cold create+start p50 {c['p50_ms']:.2f} ms "
              f"p99 {c['p99_ms']:.2f} ms | warm p50 = {out[runtime]['warm_p50_pct_of_cold_p50']:.1f}% of cold p50")
    crun = out.get("crun")
    if crun:
        met = crun["warm_p50_pct_of_cold_p50"] <= 30.0
        out["target"] = {"rule": "crun warm claim p50 <= 30% of cold p50", "met": met}
        print(f"target: warm claim p50 <= 30% of cold p50 -> {crun['warm_p50_pct_of_cold_p50']:.1f}%: {'MET' if met else 'NOT MET'}")
    save_json("warmpool_crun", out, path)
    _plot(samples, path / "warmpool_crun.png")
    print(f"wrote {path / 'warmpool_crun.json'} and .png")
    return 0


def _plot(samples, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for runtime, (warm, cold) in samples.items():
        for name, a, ls in (("warm claim", warm, "-"), ("cold create+start", cold, "--")):
            x = np.sort(a)
            ax.plot(x, np.arange(1, len(x) + 1) / len(x), ls, label=f"{runtime} {name} (n={len(x)})")
    ax.set_xscale("log")
    ax.set_xlabel("latency seen by the claimer (ms, log)")
    ax.set_ylabel("CDF")
    ax.set_title("Warm pool claim vs cold start, real containers")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
