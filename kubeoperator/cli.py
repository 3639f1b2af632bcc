"""``foresight operator``: PredictiveAutoscaler and WarmPool resources (light module)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "operator",
        help="reconcile PredictiveAutoscaler and WarmPool resources (HPAs, status, trainer config)",
        description=(
            "Watches foresight.dev PredictiveAutoscalers and WarmPools. For each autoscaler it owns an HPA "
            "(predicted metrics plus the reactive CPU floor), adds its workloads to the trainer's config, and "
            "writes the status (model, served value and source, forecast age, Ready/Degraded) from the "
            "forecast store; WarmPools become pools of the warm-pool controller's policy."),
    )
    p.add_argument("--store", required=True, help="forecast store: redis://... (read-only user is enough)")
    p.add_argument("--kubeconfig", help="default: in-cluster service account, else ~/.kube/config")
    p.add_argument("--namespace", default="foresight", help="namespace of foresight's ConfigMaps and trainer")
    p.add_argument("--base-config-map", default="foresight-workloads", help="the user's trainer config (key workloads.yaml)")
    p.add_argument("--trainer-config-map", default="foresight-trainer-config", help="written: what the trainer mounts")
    p.add_argument("--trainer-deployment", default="", help="restarted when its config changes ('' = none, the default: "
                   "foresight train re-reads its file and takes a change in place, refitting only what changed)")
    p.add_argument("--adapter-deployment", default="", help="restarted too when that config changes: the adapter reads "
                   "its workloads (the observed-demand queries it serves while Redis is down) at start ('' = none)")
    p.add_argument("--warmpool-base-config-map", default="foresight-warmpool-base")
    p.add_argument("--warmpool-config-map", default="foresight-warmpool-policy", help="written ('' = WarmPools off)")
    p.add_argument("--warmpool-url", help="the warm-pool controller's API, e.g. https://foresight-warmpool:8091")
    p.add_argument("--warmpool-ca", default=None, help="the CA that signed the warm-pool API's certificate (PEM; default: "
                   "the system's trust store)")
    p.add_argument("--resync-seconds", type=float, default=15.0, help="a full pass at least this often")
    p.add_argument("--max-forecast-age", type=float, default=300.0, help="older forecasts count as stale (as the adapter)")
    p.add_argument("--lead-seconds", type=float, default=75.0, help="as the adapter's --lead-seconds")
    p.add_argument("--keda-scaler-address", default="foresight-keda.foresight.svc:9443",
                   help="host:port of foresight's KEDA scaler Service, written into the ScaledObjects of "
                   "autoscalers with spec.scaler KEDA")
    p.add_argument("--keda-auth-kind", default="ClusterTriggerAuthentication",
                   choices=("ClusterTriggerAuthentication", "TriggerAuthentication"),
                   help="kind of the KEDA authentication those ScaledObjects reference (the chart's)")
    p.add_argument("--keda-auth-name", default="foresight-keda", help="its name")
    p.add_argument("--once", action="store_true", help="one pass, print its report as JSON, exit")
    p.set_defaults(func=run)


def run(args) -> int:
    import json
    import signal
    import threading

    from core.store import open_store
    from forecaster.served import MetricSettings
    from kubeoperator.kube import KubeApi
    from kubeoperator.runner import Operator, OperatorSettings
    from kubeoperator.scaledobject import KedaTarget

    settings = OperatorSettings(
        namespace=args.namespace, base_configmap=args.base_config_map, effective_configmap=args.trainer_config_map,
        trainer_deployment=args.trainer_deployment or None, adapter_deployment=args.adapter_deployment or None,
        warmpool_base_configmap=args.warmpool_base_config_map or None,
        warmpool_configmap=args.warmpool_config_map or None, warmpool_url=args.warmpool_url,
        warmpool_ca=args.warmpool_ca, resync_seconds=args.resync_seconds,
        metrics=MetricSettings(lead_seconds=args.lead_seconds, max_forecast_age_seconds=args.max_forecast_age),
        keda=KedaTarget(scaler_address=args.keda_scaler_address, auth_kind=args.keda_auth_kind,
                        auth_name=args.keda_auth_name),
    )
    op = Operator(KubeApi(args.kubeconfig), open_store(args.store), settings)
    if args.once:
        rep = op.step()
        print(json.dumps(rep.__dict__))
        return 1 if rep.errors else 0
    stop = threading.Event()

    def _stop(*_):
        stop.set()
        op.wake()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    op.run(stop)
    return 0
