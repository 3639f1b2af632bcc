"""``foresight serve``: the external metrics adapter over HTTPS.

Light module: argparse only at import; FastAPI/uvicorn are imported when the command runs.
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from adapter.factory import DEFAULT_STORE, build_app, build_settings
from core.errors import UserError
from forecaster.timing import TIMING

log = logging.getLogger("foresight.adapter")



def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve forecasts to the HPA (external metrics API), REST and the dashboard over HTTPS",
        description="Serve predicted_cpu_load_ratio / predicted_cpu_cores to HPA v2 as a Kubernetes "
        "external metrics API server, plus /api/v1/forecasts, a dashboard at / and /metrics. "
        "Reads only the forecast store (it never trains or queries history).",
    )
    p.add_argument("--store", help=f"forecast store URL (default: the config's store.url, else {DEFAULT_STORE})")
    p.add_argument("--config", help="workloads YAML (labels and static capacity of workloads)")
    p.add_argument("--host", default="0.0.0.0", help="listen address (default 0.0.0.0; a non-loopback address "
                   "needs authentication: --requestheader-ca, --token-file or --delegated-auth, or --insecure)")
    p.add_argument("--insecure", action="store_true",
                   help="serve without authentication on a non-loopback --host anyway: anyone who reaches the "
                   "port reads every workload's metrics")
    p.add_argument("--port", type=int, default=8443, help="listen port (default 8443)")
    p.add_argument("--cert", help="serving certificate (PEM); with --key")
    p.add_argument("--key", help="serving private key (PEM)")
    p.add_argument("--cert-dir", default="apiserver.local.config/certificates",
                   help="where a self-signed pair is generated when --cert/--key are not given")
    p.add_argument("--plain-http", action="store_true", help="serve plain HTTP (local debugging only)")
    p.add_argument("--requestheader-ca", help="CA of the aggregator's front-proxy client certificate "
                   "(kube-system/extension-apiserver-authentication: requestheader-client-ca-file)")
    p.add_argument("--allowed-names", default="", help="comma-separated allowed CNs of that certificate "
                   "(requestheader-allowed-names; empty: any name the CA signed); @FILE reads them from a "
                   "file holding a JSON list or comma-separated names")
    p.add_argument("--token-file", help="file holding a bearer token that is also accepted")
    p.add_argument("--delegated-auth", action="store_true",
                   help="check bearer tokens with TokenReview and every request with a SubjectAccessReview "
                   "(cached --review-cache-seconds), as Kubernetes' aggregated API servers do; in-cluster "
                   "service account unless --kubeconfig")
    p.add_argument("--kubeconfig", help="kubeconfig of the API server that answers the reviews")
    p.add_argument("--ready-pods", choices=("auto", "watch", "published"), default="auto",
                   help="what predicted_cpu_load_ratio is divided by: watch = the pods of each workload's scale "
                   "target that are Running and Ready now, as the HPA counts them (a pod watch: in-cluster "
                   "service account, or --kubeconfig); published = the count the trainer saw at its last "
                   "refresh (up to a refresh old: right after a scale-up the HPA over-shoots); auto (default) "
                   "= watch when those credentials exist")
    p.add_argument("--review-cache-seconds", type=float, default=10.0,
                   help="how long a TokenReview or SubjectAccessReview answer is reused (10 s)")
    p.add_argument("--scheduler-port", type=int, default=0,
                   help="serve the kube-scheduler extender on this port only (0: not served); kube-scheduler "
                   "sends no credentials, so its paths never share the port that serves workload data")
    p.add_argument("--scheduler-client-ca", help="with --scheduler-port: require a client certificate signed by this "
                   "CA (the scheduler's tlsConfig certFile/keyFile); needed beyond loopback unless --insecure")
    p.add_argument("--keda-port", type=int, default=0,
                   help="serve KEDA's external scaler (gRPC, externalscaler.ExternalScaler) on this port (0: off), "
                   "with the serving certificate; the same served value, for clusters where KEDA owns the "
                   "external metrics APIService (docs/tasks/beside-keda.md)")
    p.add_argument("--keda-client-ca", help="with --keda-port: require a client certificate signed by this CA (the "
                   "TriggerAuthentication's tlsClientCert); needed beyond loopback unless --insecure")
    p.add_argument("--keda-cert", help="with --keda-port: the scaler's own serving certificate (PEM; with --keda-key), "
                   "for the name KEDA dials (the scaler's Service); default: the HTTPS pair")
    p.add_argument("--keda-key", help="its private key (PEM)")
    p.add_argument("--keda-allowed-names", default="", help="with --keda-client-ca: comma-separated common names "
                   "of the client certificates allowed to call (empty: any the CA signed)")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default 1)")
    p.add_argument("--lead-seconds", type=float, default=TIMING.lead_seconds,
                   help=f"lead window: pod start-up + one HPA sync ({TIMING.lead_seconds:g})")
    p.add_argument("--quantile", default="p90", help="published quantile to serve (p90; 'mean' allowed)")
    p.add_argument("--max-forecast-age", type=float, default=TIMING.max_forecast_age_seconds,
                   help=f"older forecasts are stale ({TIMING.max_forecast_age_seconds:g} s)")
    p.add_argument("--no-observed-floor", action="store_true", help="serve the prediction even below observed demand")
    p.add_argument("--cache-ttl", type=float, default=2.0, help="per-process cache TTL over the store (2 s)")
    p.add_argument("--cache-max-stale", type=float, default=30.0,
                   help="with the store down, serve cached forecasts this long, then 503 (30 s)")
    p.add_argument("--observed-direct-ttl", type=float, default=TIMING.observed_read_seconds,
                   help="observed demand is read from the config's Prometheus with each workload's demand query "
                   f"and reused this long ({TIMING.observed_read_seconds:g} s): the served floor, and what is "
                   "served with the store down")
    p.add_argument("--no-observed-direct", action="store_true",
                   help="never read Prometheus: a store outage becomes a 503 once the cache is too old")
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.set_defaults(func=run)


def _read_file(path: str | None, what: str) -> str | None:
    if not path:
        return None
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot read it ({exc.strerror}); pass an existing readable file") from exc


def parse_allowed_names(value: str) -> list[str]:
    """``a,b`` or ``@file`` (JSON list as in extension-apiserver-authentication, or a,b)."""
    if value.startswith("@"):
        text = _read_file(value[1:], "--allowed-names") or ""
        if text.startswith("["):
            try:
                names = json.loads(text)
            except ValueError as exc:
                raise UserError(f"--allowed-names {value}: not a JSON list ({exc})") from exc
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise UserError(f"--allowed-names {value}: must be a JSON list of strings")
            return [n.strip() for n in names if n.strip()]
        value = text
    return [n.strip() for n in value.split(",") if n.strip()]


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost; every other address (0.0.0.0, ::, a name) may be reachable."""
    import ipaddress

    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def unauthenticated_bind(args: argparse.Namespace) -> str | None:
    """Why serving workload data to anyone on the network is refused (None: it is not)."""
    authenticated = bool(args.requestheader_ca or args.token_file or args.delegated_auth or args.kubeconfig)
    if authenticated or args.insecure or is_loopback(args.host):
        return None
    return (f"--host {args.host}: a non-loopback address with no authentication would let anyone who reaches the "
            "port read every workload's metrics; configure authentication (--requestheader-ca CA "
            "[--allowed-names N], --token-file FILE, or --delegated-auth), listen on loopback only "
            "(--host 127.0.0.1), or pass --insecure to serve unauthenticated anyway")


def anonymous_scheduler_port(args: argparse.Namespace) -> str | None:
    """Why a scheduler extender port anyone can call is refused (None: it is not). kube-scheduler
    sends no token, so on that port a client certificate is the only credential there is."""
    if not args.scheduler_port or args.scheduler_client_ca or args.insecure or is_loopback(args.host):
        return None
    return (f"--scheduler-port {args.scheduler_port} on --host {args.host}: without --scheduler-client-ca anyone who reaches "
            "the port could call the extender; give --scheduler-client-ca CA (the CA of the certificate in the "
            "scheduler's extender tlsConfig certFile/keyFile), listen on loopback only, or pass --insecure")


def keda_problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with the --keda-* flags (empty: nothing). The scaler answers with workload
    data, so beyond loopback its only credential, a client certificate, is required."""
    problems = []
    if not (args.keda_port == 0 or 0 < args.keda_port < 65536) or (
            args.keda_port and args.keda_port in (args.port, args.scheduler_port)):
        problems.append(f"--keda-port {args.keda_port}: must be 1-65535 and differ from --port and --scheduler-port "
                        "(0: off)")
    if (args.keda_client_ca or args.keda_allowed_names) and not args.keda_port:
        problems.append("--keda-client-ca and --keda-allowed-names need --keda-port")
    if args.keda_client_ca and args.plain_http:
        problems.append("--keda-client-ca needs TLS (a client certificate is a TLS handshake): drop --plain-http")
    if args.keda_allowed_names and not args.keda_client_ca:
        problems.append("--keda-allowed-names needs --keda-client-ca (names are read from verified certificates)")
    if args.keda_port and not args.keda_client_ca and not args.insecure and not is_loopback(args.host):
        problems.append(f"--keda-port {args.keda_port} on --host {args.host}: without --keda-client-ca anyone who "
                        "reaches the port reads every workload's served value; give --keda-client-ca CA (the CA of "
                        "KEDA's tlsClientCert), listen on loopback only, or pass --insecure")
    if bool(args.keda_cert) != bool(args.keda_key):
        problems.append("--keda-cert and --keda-key go together: give both, or neither to use the HTTPS pair")
    if args.keda_cert and not args.keda_port:
        problems.append("--keda-cert and --keda-key need --keda-port")
    for flag, path in (("--keda-client-ca", args.keda_client_ca), ("--keda-cert", args.keda_cert),
                       ("--keda-key", args.keda_key)):
        if path and not Path(path).is_file():
            problems.append(f"{flag} {path}: no such file")
    return problems


def start_keda_port(app: Any, opts: dict[str, Any], host: str, certfile: str | None, keyfile: str | None):
    """KEDA's external scaler in a thread of this process, reading ``app``'s core (its cache and
    observed-demand reader), or a core of its own when workers serve the HTTPS port."""
    from adapter.keda.server import start_keda_server

    if app is None:
        from adapter.factory import build_app

        app = build_app(opts)
        app.state.core.cache.start()
    if opts.get("keda_cert"):
        certfile, keyfile = opts["keda_cert"], opts["keda_key"]
    return start_keda_server(app.state.core, host, int(opts["keda_port"]), certfile, keyfile, opts.get("keda_client_ca"),
                             allowed_names=opts.get("keda_allowed_names") or ())


def options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Validated, JSON-able options (sent to worker processes through the environment)."""
    problems = []
    if not (0 < args.port < 65536):
        problems.append(f"--port {args.port}: must be 1-65535")
    if not (args.scheduler_port == 0 or 0 < args.scheduler_port < 65536) or args.scheduler_port == args.port:
        problems.append(f"--scheduler-port {args.scheduler_port}: must be 1-65535 and differ from --port (0: off)")
    if args.scheduler_client_ca and not args.scheduler_port:
        problems.append("--scheduler-client-ca needs --scheduler-port")
    if args.scheduler_client_ca and args.plain_http:
        problems.append("--scheduler-client-ca needs HTTPS (a client certificate is a TLS handshake): drop --plain-http")
    refused = anonymous_scheduler_port(args)
    if refused:
        problems.append(refused)
    problems += keda_problems(args)
    if not args.review_cache_seconds >= 0:
        problems.append(f"--review-cache-seconds {args.review_cache_seconds}: must be >= 0")
    if not args.observed_direct_ttl > 0:
        problems.append(f"--observed-direct-ttl {args.observed_direct_ttl}: must be > 0 seconds")
    if args.workers < 1:
        problems.append(f"--workers {args.workers}: must be >= 1")
    if bool(args.cert) != bool(args.key):
        problems.append("--cert and --key go together: give both, or neither to generate a self-signed pair")
    for flag, path in (("--cert", args.cert), ("--key", args.key), ("--requestheader-ca", args.requestheader_ca),
                       ("--config", args.config), ("--kubeconfig", args.kubeconfig),
                       ("--scheduler-client-ca", args.scheduler_client_ca)):
        if path and not Path(path).is_file():
            problems.append(f"{flag} {path}: no such file")
    if problems:
        raise UserError("; ".join(problems))
    token = _read_file(args.token_file, "--token-file")
    if args.token_file and not token:
        raise UserError(f"--token-file {args.token_file}: the file is empty; put the bearer token in it")
    return {
        "store": args.store,
        "config": args.config,
        "lead_seconds": args.lead_seconds,
        "quantile": args.quantile,
        "max_forecast_age_seconds": args.max_forecast_age,
        "observed_floor": not args.no_observed_floor,
        "cache_ttl_seconds": args.cache_ttl,
        "cache_max_stale_seconds": args.cache_max_stale,
        "requestheader_ca_file": args.requestheader_ca,
        "allowed_names": parse_allowed_names(args.allowed_names),
        "token": token,
        "delegated_auth": bool(args.delegated_auth or args.kubeconfig),
        "kubeconfig": args.kubeconfig,
        "ready_pods": args.ready_pods,
        "review_cache_seconds": args.review_cache_seconds,
        "scheduler_port": args.scheduler_port,
        "scheduler_client_ca": args.scheduler_client_ca,
        "keda_port": args.keda_port,
        "keda_client_ca": args.keda_client_ca,
        "keda_cert": args.keda_cert,
        "keda_key": args.keda_key,
        "keda_allowed_names": [n.strip() for n in args.keda_allowed_names.split(",") if n.strip()],
        "observed_direct": not args.no_observed_direct,
        "observed_direct_ttl_seconds": args.observed_direct_ttl,
    }


def start_scheduler_port(opts: dict[str, Any], host: str, certfile: str | None, keyfile: str | None):
    """The scheduler extender on its own port, in a thread of this (the supervising) process."""
    from adapter.app import create_scheduler_app
    from adapter.server import serve_in_thread
    from core.store import open_store

    settings, url = build_settings(opts)
    app = create_scheduler_app(settings, open_store(url))
    ca = opts.get("scheduler_client_ca")
    return serve_in_thread(app, host, int(opts["scheduler_port"]), certfile, keyfile, client_ca_file=ca,
                           require_client_cert=bool(ca))


def run(args: argparse.Namespace) -> int:
    from adapter.server import ENV_OPTIONS, run_config, tune_serving_process, uvicorn_config

    opts = options_from_args(args)
    settings, url = build_settings(opts)  # fail fast on bad config, before any worker starts
    refused = unauthenticated_bind(args)
    if refused:
        raise UserError(refused)
    certfile = keyfile = None
    if not args.plain_http:
        if args.cert:
            certfile, keyfile = args.cert, args.key
        else:
            from adapter.tls import ensure_serving_cert

            certfile, keyfile = (str(p) for p in ensure_serving_cert(args.cert_dir))
            log.info("serving with the self-signed certificate in %s", args.cert_dir)
    elif settings.auth.requestheader_ca_file:
        raise UserError("--requestheader-ca needs HTTPS: drop --plain-http")
    scheme = "http" if args.plain_http else "https"
    auth = ("on, delegated (TokenReview + SubjectAccessReview)" if opts["delegated_auth"] else "on") if (
        settings.auth.enabled or opts["delegated_auth"]) else "off (anyone who can reach the port can read)"
    from core.store import redact_url

    fallback = "observed-direct from the config's source" if opts["observed_direct"] and args.config else "none (503)"
    print(f"foresight serve: {scheme}://{args.host}:{args.port} store={redact_url(url)} workers={args.workers} "
          f"auth={auth} store-down={fallback}", flush=True)
    kw = dict(
        client_ca_file=settings.auth.requestheader_ca_file,
        workers=args.workers,
        # uvicorn sets its access logger to this level, and access lines are INFO: at "warning"
        # --access-log would log nothing
        log_level="debug" if getattr(args, "verbose", False) else "info" if args.access_log else "warning",
        access_log=args.access_log,
    )
    scheduler = None
    if args.scheduler_port:
        scheduler = start_scheduler_port(opts, args.host, certfile, keyfile)
        print(f"  scheduler extender: {scheduler.url}/scheduler/{{filter,prioritize}}"
              f"{' (client certificate required)' if args.scheduler_client_ca else ''}", flush=True)
    app = build_app(opts) if args.workers == 1 else None
    keda = None
    if args.keda_port:
        keda = start_keda_port(app, opts, args.host, certfile, keyfile)
        print(f"  KEDA external scaler: {args.host}:{keda.port} (gRPC, "
              f"{'client certificate required' if args.keda_client_ca else 'TLS' if certfile or args.keda_cert else 'plaintext'})",  # noqa: E501
              flush=True)
    try:
        if args.workers == 1:
            tune_serving_process()
            run_config(uvicorn_config(app, args.host, args.port, certfile, keyfile, **kw))
        else:
            if opts["ready_pods"] != "published":
                # one pod watch for the replica, not one per worker (adapter/podshare.py)
                share = tempfile.mkdtemp(prefix="foresight-podwatch-")
                atexit.register(shutil.rmtree, share, True)
                opts["pod_watch_dir"] = share
            os.environ[ENV_OPTIONS] = json.dumps(opts)
            run_config(uvicorn_config("adapter.server:app_from_env", args.host, args.port, certfile, keyfile,
                                      factory=True, **kw))
    finally:
        if scheduler is not None:
            scheduler.stop()
        if keda is not None:
            keda.stop()
    return 0
