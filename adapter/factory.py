"""The adapter built from ``foresight serve``'s validated options: settings, the observed-demand
reader, authentication/authorization and the app. Used by the CLI (one process) and by each
uvicorn worker process (``adapter.server.app_from_env``), so neither imports the other."""

from __future__ import annotations

from typing import Any

from core.errors import UserError
from forecaster.timing import TIMING

__all__ = ["DEFAULT_STORE", "build_app", "build_auth", "build_demand", "build_ready_pods", "build_settings"]

DEFAULT_STORE = "redis://127.0.0.1:6379/0"  # without --store and without a config's store.url


def build_settings(opts: dict[str, Any]):
    """(AdapterSettings, store URL) from options."""
    from adapter.settings import AdapterSettings, AuthSettings, CacheSettings
    from forecaster.served import MetricSettings

    labels: dict[str, dict[str, str]] = {}
    capacity: dict[str, dict[str, float]] = {}
    metrics: dict[str, dict[str, float]] = {}
    store_url = opts.get("store")
    if opts.get("config"):
        from forecaster.config import load_config

        cfg = load_config(opts["config"])
        for w in cfg.workloads:
            labels[w.series_id] = w.all_labels()
            cap = {}
            if w.capacity.cpu_request_cores is not None:
                cap["cpu_request_cores"] = w.capacity.cpu_request_cores
            if w.capacity.ready_pods is not None:
                cap["ready_pods"] = w.capacity.ready_pods
            if cap:
                capacity[w.series_id] = cap
            if w.metrics:
                metrics[w.series_id] = {m.name: m.capacity_per_replica for m in w.metrics}
        store_url = store_url or cfg.store.url
    try:
        metric = MetricSettings(
            lead_seconds=float(opts.get("lead_seconds", TIMING.lead_seconds)),
            quantile=str(opts.get("quantile", "p90")),
            max_forecast_age_seconds=float(opts.get("max_forecast_age_seconds", TIMING.max_forecast_age_seconds)),
            observed_floor=bool(opts.get("observed_floor", True)),
        )
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    settings = AdapterSettings(
        metric=metric,
        cache=CacheSettings(
            ttl_seconds=float(opts.get("cache_ttl_seconds", 2.0)),
            max_stale_seconds=float(opts.get("cache_max_stale_seconds", 30.0)),
        ),
        auth=AuthSettings(
            requestheader_ca_file=opts.get("requestheader_ca_file"),
            allowed_names=tuple(opts.get("allowed_names") or ()),
            token=opts.get("token"),
        ),
        workload_labels=labels,
        workload_capacity=capacity,
        workload_metrics=metrics,
    )
    return settings, store_url or DEFAULT_STORE


def build_demand(opts: dict[str, Any]):
    """(DemandReader, ObservedDirectSettings) over the config's Prometheus, or (None, None)
    without a config, with a CSV source, or when turned off."""
    from adapter.settings import ObservedDirectSettings
    from forecaster.timing import TIMING

    if not opts.get("config") or not opts.get("observed_direct", True):
        return None, None
    from adapter.fallback import PrometheusDemandReader
    from forecaster.config import load_config

    cfg = load_config(opts["config"])
    if cfg.source.url.startswith(("csv://", "file://")):
        return None, None  # a file holds no live demand
    od = ObservedDirectSettings(ttl_seconds=float(opts.get("observed_direct_ttl_seconds") or TIMING.observed_read_seconds))
    from forecaster.sources.prometheus import PrometheusSource

    src = PrometheusSource(
        cfg.source.url, bearer_token_file=cfg.source.bearer_token_file, ca_file=cfg.source.ca_file,
        thanos=cfg.source.thanos, timeout_seconds=od.timeout_seconds, retries=0,
    )
    return PrometheusDemandReader(src, cfg.series()), od  # the declared metrics' own queries too


def build_auth(opts: dict[str, Any]):
    """(TokenReview authenticator, SubjectAccessReview authorizer), or (None, None)."""
    if not opts.get("delegated_auth"):
        return None, None
    from adapter.authz import SubjectAccessReviewAuthorizer, TokenReviewAuthenticator
    from core.kubeclient import KubeClient

    kube = KubeClient.connect(opts.get("kubeconfig"))
    ttl = float(opts.get("review_cache_seconds", 10.0))
    return TokenReviewAuthenticator(kube, cache_seconds=ttl), SubjectAccessReviewAuthorizer(kube, cache_seconds=ttl)


def build_ready_pods(opts: dict[str, Any]):
    """(KubeClient, configured workloads, the directory the replica's workers share the watch
    through or None) for the ready-pod watch, or None to divide by the
    trainer's published ``meta.ready_pods``. ``ready_pods``: ``watch`` (required: the
    kubeconfig or the in-cluster service account), ``published``, or ``auto`` (the default:
    watch when either credential is there)."""
    mode = opts.get("ready_pods", "auto")
    if mode == "published":
        return None
    from core.kubeclient import KubeClient

    if opts.get("kubeconfig"):
        kube = KubeClient.from_kubeconfig(opts["kubeconfig"])
    else:
        try:
            kube = KubeClient.in_cluster()
        except UserError as exc:
            if mode == "watch":
                raise UserError(f"--ready-pods watch: {exc}") from exc
            return None
    configured: dict[str, tuple[str, str, str]] = {}
    if opts.get("config"):
        from forecaster.config import load_config

        for w in load_config(opts["config"]).workloads:
            configured[w.series_id] = (w.namespace, w.kind, w.name)
    return kube, configured, opts.get("pod_watch_dir")


def build_app(opts: dict[str, Any]):
    from adapter.app import create_app
    from core.store import open_store

    settings, url = build_settings(opts)
    demand, od = build_demand(opts)
    authn, authz = build_auth(opts)
    return create_app(settings, open_store(url), demand=demand, observed_direct=od, authenticator=authn,
                      authorizer=authz, scheduler_routes=not opts.get("scheduler_port"), pod_watch=build_ready_pods(opts))
