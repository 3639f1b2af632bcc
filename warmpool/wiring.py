"""Builds what the controller needs from a policy: the backends its pools name, a state
directory, a threaded HTTP server. Shared by ``foresight warmpool run`` and ``foresight up``."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

from forecaster.errors import UserError
from warmpool.policy import Policy

log = logging.getLogger(__name__)


def default_state_dir() -> Path:
    env = os.environ.get("FORESIGHT_WARMPOOL_STATE_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/foresight/warmpool")
    return Path.home() / ".local" / "state" / "foresight" / "warmpool"


def build_backends(policy: Policy, state_dir: str | Path, clock: Callable[[], float] = time.time, kubeconfig: str | None = None, coldstart=None,
                   store=None, owner=None) -> dict:
    """One backend instance per backend name used by the policy (checked up front)."""
    out: dict = {}
    for name in sorted({p.backend for p in policy.pools}):
        if name in ("crun", "runc"):
            from warmpool.backends.crun import CrunBackend, probe

            ok, why, _ = probe(name)
            if not ok:
                raise UserError(f"backend {name} cannot run containers here: {why}; use backend: sim to simulate")
            out[name] = CrunBackend(Path(state_dir) / name, runtime=name)
        elif name == "kubernetes":
            from warmpool.backends.kubernetes import KubernetesBackend

            in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not kubeconfig
            affinity = None
            if store is not None:  # warm pods prefer nodes predicted to stay cool (same scores as the extender)
                from forecaster.nodes import placement_affinity

                affinity = lambda: placement_affinity(store)  # noqa: E731
            out[name] = KubernetesBackend(kubeconfig=kubeconfig or os.environ.get("KUBECONFIG"), in_cluster=in_cluster,
                                          affinity_provider=affinity, owner=owner)
        elif name == "sim":
            from warmpool.backends.sim import SimBackend

            out[name] = SimBackend(clock, coldstart)
        else:  # the policy checker already refuses this
            raise UserError(f"unknown backend {name!r}")
    return out


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost; every other address (0.0.0.0, ::, a name) may be reachable."""
    import ipaddress

    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class TLSFiles:
    """Serving certificate and key; with ``client_ca``, clients must present a certificate it signed."""

    def __init__(self, cert: str, key: str, client_ca: str | None = None):
        for flag, f in (("--tls-cert", cert), ("--tls-key", key), ("--client-ca", client_ca)):
            if f is not None and not Path(f).is_file():
                raise UserError(f"{flag} {f}: no such file")
        self.cert, self.key, self.client_ca = cert, key, client_ca


class HttpServer:
    """uvicorn in a daemon thread; ``stop()`` waits for it to finish."""

    def __init__(self, app, host: str, port: int, tls: "TLSFiles | None" = None):
        import uvicorn

        kw: dict = {}
        if tls is not None:
            import ssl

            kw = {"ssl_certfile": tls.cert, "ssl_keyfile": tls.key}
            if tls.client_ca:  # mTLS: no client certificate signed by this CA, no connection
                kw.update(ssl_ca_certs=tls.client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED)
        from forecaster.logs import uvicorn_log_config

        log_config = uvicorn_log_config()  # --log-format json: uvicorn's own lines as JSON too
        if log_config is not None:
            kw["log_config"] = log_config
        self.config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off", **kw)
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, name="warmpool-http", daemon=True)

    def start(self, timeout: float = 10.0) -> "HttpServer":
        self.thread.start()
        t_end = time.monotonic() + timeout
        while not self.server.started and time.monotonic() < t_end and self.thread.is_alive():
            time.sleep(0.02)
        if not self.server.started:
            raise UserError(f"the warm-pool API could not listen on {self.config.host}:{self.config.port}")
        return self

    @property
    def port(self) -> int:
        for s in self.server.servers:
            for sock in s.sockets:
                return sock.getsockname()[1]
        return self.config.port

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
