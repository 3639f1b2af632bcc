"""``foresight warmpool`` sub-commands (light module: heavy imports inside the run functions).

  foresight warmpool run --policy F --store URL (--token-file F | --token-review | --client-ca CA | --insecure-no-auth)
                         [--tls-cert C --tls-key K | --plain-http] [--skip-pool-authorization]
                         [--port P] [--state-dir D] [--interval S]
  foresight warmpool validate F
  foresight warmpool simulate --trace DIR [--demand single|concurrency] [--policy NAME ...] [--policy-file P.yaml ...] --out F.csv
"""

from __future__ import annotations

import os
from pathlib import Path

from core.errors import UserError

DEFAULT_SIM_POLICIES = ["fixed:10", "oracle", "foresight"]


def register(subparsers) -> None:
    p = subparsers.add_parser("warmpool", help="warm pools of pre-started containers, driven by forecasts")
    sub = p.add_subparsers(dest="warmpool_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    r = sub.add_parser("run", help="run the warm-pool controller and its HTTP API")
    r.add_argument("--policy", required=True, help="WarmPoolPolicy YAML (reloaded when it changes)")
    r.add_argument("--store", required=True, help="forecast store URL: redis://HOST:PORT/DB or memory://")
    r.add_argument("--port", type=int, default=8091, help="HTTP port for claim/release and /metrics (default 8091)")
    r.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    r.add_argument("--state-dir", default=None, help="where local backends keep container state (adopted on restart)")
    r.add_argument("--interval", type=float, default=5.0, help="seconds between reconcile rounds (default 5)")
    r.add_argument("--kubeconfig", default=None, help="kubeconfig for the kubernetes backend (default: $KUBECONFIG or in-cluster)")
    r.add_argument("--token-file", default=None,
                   help="file of bearer tokens (one per line, e.g. a mounted Secret) the claim API accepts; re-read when it changes")
    r.add_argument("--token-review", action="store_true",
                   help="also accept Kubernetes ServiceAccount tokens, checked with a TokenReview (cached 10 s)")
    r.add_argument("--token-review-audience", action="append", default=[], metavar="AUD", help="audiences the TokenReview asks for (repeatable)")
    r.add_argument("--allow", action="append", default=[], metavar="USER_OR_GROUP",
                   help="with --token-review: only these usernames or groups may call (repeatable; default any authenticated caller)")
    r.add_argument("--owner-name", default=os.environ.get("FORESIGHT_WARMPOOL_OWNER_NAME"),
                   help="kubernetes backend: warm pods are owned by this object (ownerReferences; Kubernetes deletes them with it). "
                        "Default $FORESIGHT_WARMPOOL_OWNER_NAME; none: no owner")
    r.add_argument("--owner-kind", default="Deployment", help="the owner's kind (default Deployment)")
    r.add_argument("--owner-api-version", default="apps/v1", help="the owner's apiVersion (default apps/v1)")
    r.add_argument("--owner-namespace", default=os.environ.get("POD_NAMESPACE"),
                   help="the owner's namespace (default $POD_NAMESPACE, from the downward API); only pods there can be owned")
    r.add_argument("--owner-uid", default=os.environ.get("FORESIGHT_WARMPOOL_OWNER_UID", ""), help="the owner's uid (default: read from the API server)")
    r.add_argument("--tls-cert", default=None, help="serve the API over HTTPS with this certificate (PEM)")
    r.add_argument("--tls-key", default=None, help="the key of --tls-cert (PEM)")
    r.add_argument("--client-ca", default=None,
                   help="mTLS: only clients with a certificate signed by this CA connect (an authentication method on its own; "
                        "needs --tls-cert/--tls-key). /healthz and /metrics then answer on --probe-port")
    r.add_argument("--probe-port", type=int, default=None, help="plain-HTTP port for /healthz and /metrics only (with --client-ca)")
    r.add_argument("--insecure-no-auth", action="store_true", help="serve claim/release without authentication (development only)")
    r.add_argument("--skip-pool-authorization", action="store_true",
                   help="with --token-review or --client-ca: any authenticated caller (or --allow) may claim from every pool; by "
                        "default a SubjectAccessReview must allow verb 'claim' on resource 'warmpools' (foresight.dev) in the "
                        "pool's namespace (a certificate's user is its CN, its groups its O)")
    r.add_argument("--plain-http", action="store_true",
                   help="serve plain HTTP on a non-loopback --host (bearer tokens then cross the network in clear; development only)")
    r.set_defaults(func=_run)

    v = sub.add_parser("validate", help="check a policy file and print every problem with its path")
    v.add_argument("policy")
    v.set_defaults(func=_validate)

    s = sub.add_parser("simulate", help="replay warm-pool policies through the controller on an Azure Functions trace folder")
    s.add_argument("--trace", required=True, help="folder with azure2019_functions_{inv,run,mem}.csv.gz")
    s.add_argument("--demand", action="append", choices=["single", "concurrency"], help="demand model (repeatable; default both)")
    s.add_argument("--policy", action="append", metavar="NAME",
                   help="foresight (the shipped policy with the bundled example), seed, fixed:MINUTES, hybrid, oracle "
                        f"(repeatable; default: {', '.join(DEFAULT_SIM_POLICIES)})")
    s.add_argument("--policy-file", action="append", metavar="P.yaml", help="a WarmPoolPolicy run by the shipped policy; its first pool is every function's pool (repeatable)")
    s.add_argument("--limit", type=int, default=None, help="replay only the first N functions")
    s.add_argument("--out", required=True, help="CSV to write (one row per policy and demand model)")
    s.set_defaults(func=_simulate)


def _validate(args) -> int:
    from warmpool.coldstart import ColdStartModel
    from warmpool.policy import load_policy

    policy = load_policy(args.policy)  # raises ConfigError (a UserError) listing every problem
    model = ColdStartModel(policy.runtime_classes)
    for p in policy.pools:
        cold = model.estimate(p.start_kind, p.runtime_class)
        print(f"ok  pool {p.name}: {p.backend}/{p.runtime_class}, series {p.series}, warm {p.min_warm}..{p.max_warm}, "
              f"lead {p.lead_seconds:g}s, idle TTL {p.idle_ttl.initial_seconds:g}s x (1-{p.idle_ttl.decay:g})^k >= {p.idle_ttl.floor_seconds:g}s, "
              f"idle model {'on' if p.idle_model.enabled else 'off'} ({p.idle_model.bin_seconds:g}s bins), memory {p.memory_mb:g}Mi")
        print(f"    cold start ({p.start_kind}, {p.runtime_class}) p50/p90/p99 {'/'.join(f'{v / 1000:.3g}' for v in cold.total_ms)} s: "
              f"{cold.source}; the forecast window is lead + T_cold p90 = {p.lead_seconds + cold.total_ms[1] / 1000:.1f}s")
    b = policy.memory_budget
    print(f"ok  memory budget: idle memory <= {b.fraction:g} x a fixed {b.reference_keepalive_seconds:g}s keep-alive's")
    print(f"{args.policy}: valid ({len(policy.pools)} pool(s))")
    return 0


def _simulate(args) -> int:
    from tqdm import tqdm

    from warmpool.tracesim import format_table, load_trace, resolve_policy, simulate_all, write_csv

    names = list(args.policy or ([] if args.policy_file else DEFAULT_SIM_POLICIES))
    policies = [resolve_policy(s) for s in names] + [resolve_policy(f) for f in args.policy_file or []]
    trace = load_trace(args.trace, limit=args.limit)
    demands = args.demand or ["single", "concurrency"]
    results = simulate_all(trace, demands, policies, progress=lambda it: tqdm(it, leave=False, desc="minutes"))
    print(format_table(results))
    write_csv(results, args.out)
    print(f"wrote {args.out}")
    return 0


def _run(args) -> int:
    import signal
    import threading

    from core.store import open_store
    from warmpool.api import create_app, create_probe_app
    from warmpool.coldstart import ColdStartModel
    from warmpool.controller import Controller, ControllerSettings, PolicyWatcher
    from warmpool.policy import load_policy
    from warmpool.wiring import HttpServer, TLSFiles, build_backends, default_state_dir

    if bool(args.tls_cert) != bool(args.tls_key):
        raise UserError("--tls-cert and --tls-key go together")
    if args.client_ca and not args.tls_cert:
        raise UserError("--client-ca (mTLS) needs --tls-cert and --tls-key")
    tls = TLSFiles(args.tls_cert, args.tls_key, args.client_ca) if args.tls_cert else None
    _check_transport(args)
    auth = _authenticator(args)
    authorizer = _authorizer(args)
    policy = load_policy(args.policy)
    store = open_store(args.store)
    state_dir = Path(args.state_dir) if args.state_dir else default_state_dir()
    coldstart = ColdStartModel(policy.runtime_classes)
    backends = build_backends(policy, state_dir, kubeconfig=args.kubeconfig, coldstart=coldstart, store=store, owner=_owner(args))
    ctl = Controller(policy, store, backends, settings=ControllerSettings(reconcile_interval_seconds=args.interval), coldstart=coldstart)
    server = HttpServer(create_app(ctl, auth, authorizer), args.host, args.port, tls=tls).start()
    try:
        probes = HttpServer(create_probe_app(ctl), args.host, args.probe_port).start() if args.probe_port is not None else None
    except BaseException:
        server.stop()
        raise
    pools = (f"warm pools {', '.join(p.name for p in policy.pools)} on {', '.join(sorted(backends))}" if policy.pools
             else "no warm pools yet (the policy lists none; it is re-read when it changes)")
    print(f"{pools}; API on http{'s' if tls else ''}://{args.host}:{server.port} "
          f"({_auth_text(auth, tls, authorizer)})" + (f"; probes on http://{args.host}:{probes.port}" if probes else ""), flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        ctl.run(stop, PolicyWatcher(args.policy))
    finally:
        server.stop()
        if probes is not None:
            probes.stop()
    return 0


def _auth_text(auth, tls, authorizer=None) -> str:
    tokens = [n for n, on in (("token file", auth.token_file), ("TokenReview", auth.token_review)) if on] if auth else []
    parts = (["client certificates (mTLS)"] if tls is not None and tls.client_ca else []) + ([" or ".join(tokens)] if tokens else [])
    text = "authenticated by " + " and ".join(parts) if parts else "UNAUTHENTICATED"
    return text + ("; claims authorized per pool namespace by SubjectAccessReview" if authorizer is not None else "")


def _check_transport(args) -> None:
    from warmpool.wiring import is_loopback

    if args.tls_cert or args.plain_http or is_loopback(args.host):
        return
    raise UserError(f"--host {args.host}: a non-loopback address without TLS would send the callers' bearer tokens and "
                    "claims in clear; give --tls-cert CERT --tls-key KEY, listen on loopback (--host 127.0.0.1), "
                    "or pass --plain-http (development only)")


def _authorizer(args):
    """SubjectAccessReviews per pool whenever callers are Kubernetes identities (--token-review)."""
    # certificate subjects are Kubernetes identities too (CN user, O groups): without a review
    # any holder of a certificate from --client-ca would claim from every pool
    kube_identities = args.token_review or args.client_ca
    if not kube_identities or args.skip_pool_authorization:
        if args.skip_pool_authorization and not kube_identities:
            raise UserError("--skip-pool-authorization applies to --token-review or --client-ca identities; add one of them")
        return None
    from warmpool.authz import build_pool_authorizer

    kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG")
    if not kubeconfig and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        flag = "--token-review" if args.token_review else "--client-ca"
        raise UserError(f"{flag} authorizes claims with SubjectAccessReviews: give --kubeconfig (or $KUBECONFIG), "
                        "run in a cluster, or pass --skip-pool-authorization (every authenticated caller may then "
                        "claim from every pool)")
    return build_pool_authorizer(kubeconfig)


def _authenticator(args):
    from warmpool.auth import build_authenticator

    if not (args.token_file or args.token_review):
        if args.client_ca:  # the certificate's subject is the caller: claims are bound to it
            return build_authenticator(None, None, client_certificates=True)
        if args.insecure_no_auth:
            return None
        raise UserError("the claim API creates containers: give --token-file F and/or --token-review, or --client-ca for mTLS "
                        "(or --insecure-no-auth for development)")
    if args.allow and not args.token_review:
        raise UserError("--allow applies to --token-review identities; add --token-review")
    review = None
    if args.token_review:
        from warmpool.backends.kubernetes import token_reviewer

        kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG")
        in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not kubeconfig
        review = token_reviewer(kubeconfig=kubeconfig, in_cluster=in_cluster, audiences=tuple(args.token_review_audience))
    return build_authenticator(args.token_file, review, args.allow, client_certificates=bool(args.client_ca))


def _owner(args):
    if not args.owner_name:
        return None
    if not args.owner_namespace:
        raise UserError("--owner-name needs --owner-namespace (or $POD_NAMESPACE from the downward API)")
    from warmpool.backends.kubernetes import Owner

    return Owner(args.owner_api_version, args.owner_kind, args.owner_name, args.owner_namespace, args.owner_uid or "")
