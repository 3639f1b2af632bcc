"""Memory benchmark: the adapter's resident memory while a caller asks for names that do not
exist. The adapter's state must be bounded by what the trainer publishes, never by what callers
ask for (issue 41): its cache keeps the published forecasts plus a fixed-size negative cache.

A real Redis on loopback holds N published workloads (the forecasts adapter_load.py publishes);
the adapter's own read path (``AdapterCore`` as ``foresight serve`` builds it, its cache
refresher running) lists and caches them, then answers M lookups of unknown names, alternating
the REST lookup (``/api/v1/forecasts/<ns>/<name>``) and an external-metrics request with a
``workload=<name>`` selector. RSS (``VmRSS``) is read before and after, after a garbage
collection each time, in this one process.

    .venv/bin/python bench/adapter_memory.py                 # 100,000 workloads, 1,000,000 unknown names
    .venv/bin/python bench/adapter_memory.py --quick         # 2,000 and 20,000, negative cache 1,000 (tests/bench)

Saves bench/results/adapter_memory.json (--quick: a temporary folder or --out).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import add_quick_args, results_dir, save_json, stop_on_sigterm  # noqa: E402

NS = "bench"  # bench/adapter_load.py's namespace: its publisher writes the forecasts
EXT = "/apis/external.metrics.k8s.io/v1beta1"
FLAT_WITHIN = 0.10  # the target: RSS within 10 % while the unknown names arrive


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def rss_mb() -> float:
    """This process' resident set (Linux /proc), after a full collection."""
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise SystemExit("no VmRSS in /proc/self/status: this benchmark needs Linux")


def ask_unknown(core, start: int, count: int) -> dict[str, int]:
    """``count`` lookups of names nobody published, half REST, half external metrics."""
    codes: dict[str, int] = {}
    for i in range(start, start + count):
        name = f"nope-{i}"
        if i % 2:
            fc, down = core.lookup(f"{NS}/{name}")
            code = 503 if down else (200 if fc is not None else 404)
        else:
            code, _ = core.answer_apis("GET", f"{EXT}/namespaces/{NS}/predicted_cpu_cores",
                                       f"labelSelector=workload%3D{name}".encode())
        codes[str(code)] = codes.get(str(code), 0) + 1
    return codes


def publish(url: str, workloads: int, threads: int = 4) -> None:
    """adapter_load.py's forecasts, written by a few threads (each publish is one round trip)."""
    from concurrent.futures import ThreadPoolExecutor

    from bench.adapter_load import publish_forecasts
    from core.store import RedisForecastStore

    writer = RedisForecastStore(url, ttl_seconds=24 * 3600)
    now = time.time()
    bounds = [workloads * k // threads for k in range(threads + 1)]
    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda k: publish_forecasts(writer, bounds[k], bounds[k + 1], now), range(threads)))
    finally:
        writer.close()


def run(workloads: int, unknown: int, negative_max: int) -> dict:
    from adapter.app import create_app
    from adapter.settings import AdapterSettings, CacheSettings
    from core.store import RedisForecastStore
    from tests import stack

    warmup = 2 * negative_max  # past the negative cache's maximum: what follows is its steady state
    redis = stack.start_redis()
    try:
        log(f"publishing {workloads:,} forecasts into Redis")
        publish(redis.url, workloads)
        store = RedisForecastStore(redis.url, ttl_seconds=24 * 3600)
        core = create_app(AdapterSettings(cache=CacheSettings(negative_max_entries=negative_max)), store).state.core
        cache = core.cache
        base = rss_mb()
        log("the adapter lists and caches every published forecast")
        cache.refresh_index(force=True)
        cache.start()  # the refresher revalidates in the background, as in `foresight serve`
        try:
            indexed = rss_mb()
            log(f"{warmup:,} unknown names first (fills the bounded negative cache)")
            ask_unknown(core, 0, warmup)
            before = rss_mb()
            log(f"{unknown:,} more unknown names")
            t0 = time.perf_counter()
            codes = ask_unknown(core, warmup, unknown)
            seconds = time.perf_counter() - t0
            after = rss_mb()
            health = cache.health()
            entries = len(cache._entries)
        finally:
            cache.stop()
            store.close()
    finally:
        redis.stop()
    growth = (after - before) / before
    return {
        "workloads": workloads,
        "unknown_names": unknown,
        "warmup_unknown_names": warmup,
        "rss_mb": {"empty_adapter": round(base, 1), "after_index": round(indexed, 1),
                   "before_unknown": round(before, 1), "after_unknown": round(after, 1)},
        "rss_growth_fraction": round(growth, 4),
        "flat_within": FLAT_WITHIN,
        "flat": abs(growth) <= FLAT_WITHIN,
        "cache_entries": entries,
        "negative_cache_entries": health["negative_cache_entries"],
        "negative_cache_max": core.settings.cache.negative_max_entries,
        "answers": codes,
        "lookups_per_second": round(unknown / seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", type=int, default=100_000, help="published workloads (default 100,000)")
    ap.add_argument("--unknown", type=int, default=1_000_000, help="unknown names asked for (default 1,000,000)")
    add_quick_args(ap, "2,000 workloads, 20,000 unknown names, a negative cache of 1,000")
    args = ap.parse_args(argv)
    stop_on_sigterm()
    from adapter.settings import CacheSettings

    negative_max = CacheSettings().negative_max_entries
    if args.quick:  # the same mechanism at a tenth of the sizes: seconds, not minutes
        args.workloads, args.unknown, negative_max = 2_000, 20_000, negative_max // 10
    if args.workloads < 1 or args.unknown < 1:
        raise SystemExit("--workloads and --unknown must be at least 1")
    out = results_dir(args)
    res = run(args.workloads, args.unknown, negative_max)
    r = res["rss_mb"]
    print(f"adapter RSS: {r['empty_adapter']} MB empty, {r['after_index']} MB with {res['workloads']:,} forecasts "
          f"cached, {r['before_unknown']} MB before and {r['after_unknown']} MB after {res['unknown_names']:,} unknown "
          f"names ({res['rss_growth_fraction']:+.1%}; {'flat' if res['flat'] else 'NOT flat'} within "
          f"{FLAT_WITHIN:.0%}); cache entries {res['cache_entries']:,}, negative cache "
          f"{res['negative_cache_entries']:,} of {res['negative_cache_max']:,}; answers {res['answers']}; "
          f"{res['lookups_per_second']:,.0f} lookups/s", flush=True)
    path = save_json("adapter_memory", res, out)
    print(f"saved {path}", flush=True)
    return 0 if res["flat"] else 1


if __name__ == "__main__":
    sys.exit(main())
