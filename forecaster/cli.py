"""``foresight history``: pull metric history from Prometheus/Thanos into the canonical CSV."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "history",
        help="read a range query from Prometheus/Thanos and write the canonical long CSV",
        description=(
            "Range-query a PromQL expression over any span (split into chunks of at most "
            "11,000 points per series) and write series_id,timestamp,value."
        ),
    )
    p.add_argument("--source", required=True, help="prometheus://HOST:PORT or http(s)://thanos-query:10902")
    p.add_argument("--query", required=True, help="PromQL expression")
    p.add_argument("--start", required=True, help="RFC 3339 or Unix seconds")
    p.add_argument("--end", required=True, help="RFC 3339 or Unix seconds")
    p.add_argument("--step", default="60s", help="resolution step, e.g. 60s, 5m (default 60s)")
    p.add_argument("--out", required=True, help="output CSV path ('-' for stdout; .gz compresses)")
    p.add_argument("--series-id", help="name for the result when the query returns one series")
    p.add_argument("--bearer-token-file")
    p.add_argument("--ca-file", help="CA bundle to verify an HTTPS source")
    p.add_argument("--max-source-resolution", help="Thanos: auto, 0s, 5m or 1h")
    p.add_argument("--partial-response", choices=["true", "false"], help="Thanos partial_response")
    p.add_argument("--dedup", choices=["true", "false"], help="Thanos dedup")
    p.add_argument("--timeout", type=float, default=30.0, help="per-request timeout in seconds")
    p.set_defaults(func=run_history)

    n = sub.add_parser(
        "nodes",
        help="forecast node and zone CPU utilization for the scheduler extender",
        description=(
            "Every interval: read node-exporter CPU and kube-state-metrics node labels from "
            "Prometheus, forecast per node (node/<name>) and per zone (zone/<zone>), publish to "
            "the store that `foresight serve` reads."
        ),
    )
    n.add_argument("--source", required=True, help="prometheus://HOST:PORT or http(s)://thanos-query:10902")
    n.add_argument("--store", default="memory://", help="redis://HOST:PORT/DB (memory:// only for a dry run)")
    n.add_argument("--interval", type=float, default=60.0, help="seconds between cycles")
    n.add_argument("--once", action="store_true", help="run one cycle and exit")
    n.add_argument("--bearer-token-file")
    n.add_argument("--ca-file")
    n.set_defaults(func=run_nodes)


def run_history(args: argparse.Namespace) -> int:
    from forecaster.sources.csv import write_long_csv
    from forecaster.sources.prometheus import PrometheusSource, parse_time

    thanos = {}
    if args.max_source_resolution:
        thanos["max_source_resolution"] = args.max_source_resolution
    if args.partial_response:
        thanos["partial_response"] = args.partial_response == "true"
    if args.dedup:
        thanos["dedup"] = args.dedup == "true"
    src = PrometheusSource(
        args.source,
        bearer_token_file=args.bearer_token_file,
        ca_file=args.ca_file,
        thanos=thanos,
        timeout_seconds=args.timeout,
    )
    frame = src.fetch(args.query, parse_time(args.start), parse_time(args.end), args.step, series_id=args.series_id)
    if frame.empty:
        print("foresight history: the query returned no series in that range", file=sys.stderr)
        return 1
    n_series = frame["series_id"].nunique()
    n_nan = int(frame["value"].isna().sum())
    write_long_csv(frame, sys.stdout if args.out == "-" else args.out)
    print(
        f"wrote {len(frame)} points ({n_series} series, {n_nan} gaps) in {src.requests_made} request(s) to {args.out}",
        file=sys.stderr,
    )
    return 0


def run_nodes(args: argparse.Namespace) -> int:
    from core.store import open_store
    from forecaster.nodes import NodeForecastSettings, run_nodes_schedule, train_nodes_once
    from forecaster.sources.prometheus import PrometheusSource

    src = PrometheusSource(args.source, bearer_token_file=args.bearer_token_file, ca_file=args.ca_file)
    store = open_store(args.store)
    try:
        if args.once:
            rep = train_nodes_once(src, store, settings=NodeForecastSettings())
            print(f"published {len(rep.nodes)} node and {len(rep.zones)} zone forecasts "
                  f"({len(rep.fallbacks)} on fallback, {len(rep.unresolved)} unresolved instances)")
            return 0 if rep.nodes else 1
        run_nodes_schedule(src, store, NodeForecastSettings(), interval_seconds=args.interval)
    finally:
        store.close()
    return 0
