"""Builds what the controller needs from a policy: the backends its pools name, a state
directory, a threaded HTTP server. Shared by ``foresight warmpool run`` and ``foresight up``."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Callable

from core.errors import UserError
from warmpool.policy import BACKENDS, Policy

log = logging.getLogger(__name__)


def default_state_dir() -> Path:
    env = os.environ.get("FORESIGHT_WARMPOOL_STATE_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/foresight/warmpool")
    return Path.home() / ".local" / "state" / "foresight" / "warmpool"


class Backends(Mapping):
    """The backends by name, each built the first time a pool needs it: the policy a controller
    starts with may name none of the backends a reloaded one needs (the chart's controller starts
    before any WarmPool exists). A backend that cannot run here raises UserError when asked for."""

    def __init__(self, make: Callable[[str], object]):
        self._make, self._built, self._lock = make, {}, threading.Lock()

    def __getitem__(self, name: str):
        with self._lock:
            if name not in self._built:
                if name not in BACKENDS:
                    raise KeyError(name)
                self._built[name] = self._make(name)
            return self._built[name]

    def __iter__(self):  # the backends built so far (the controller's orphan sweep walks these)
        return iter(list(self._built))

    def __len__(self) -> int:
        return len(self._built)


def build_backends(policy: Policy, state_dir: str | Path, clock: Callable[[], float] = time.time, kubeconfig: str | None = None, coldstart=None,
                   store=None, owner=None) -> Backends:
    """The backends, built on first use; those the starting policy names are built (and so
    checked) up front."""
    def make(name: str):
        if name in ("crun", "runc"):
            from warmpool.backends.crun import CrunBackend, probe

            ok, why, _ = probe(name)
            if not ok:
                raise UserError(f"backend {name} cannot run containers here: {why}; use backend: sim to simulate")
            return CrunBackend(Path(state_dir) / name, runtime=name)
        if name == "kubernetes":
            from warmpool.backends.kubernetes import KubernetesBackend

            in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not kubeconfig
            affinity = None
            if store is not None:  # warm pods prefer nodes predicted to stay cool (same scores as the extender)
                from forecaster.nodes import placement_affinity

                affinity = lambda: placement_affinity(store)  # noqa: E731
            return KubernetesBackend(kubeconfig=kubeconfig or os.environ.get("KUBECONFIG"), in_cluster=in_cluster,
                                     affinity_provider=affinity, owner=owner)
        from warmpool.backends.sim import SimBackend  # the policy checker refuses every other name

        return SimBackend(clock, coldstart)

    out = Backends(make)
    for name in sorted({p.backend for p in policy.pools}):
        out[name]  # built now: a backend that cannot run here stops the start, naming why
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


def _peer_identity_protocol():
    """uvicorn's h11 protocol that hands each request its connection's verified client
    certificate identity (``warmpool.auth.certificate_user``) in the ASGI state, under
    ``warmpool.auth.PEER_STATE_KEY``: uvicorn itself does not expose the peer certificate."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from warmpool.auth import PEER_STATE_KEY, certificate_user

    class PeerIdentityProtocol(H11Protocol):
        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            # a copy per connection: every request of this connection starts from it
            self.app_state = {**self.app_state, PEER_STATE_KEY: certificate_user(transport.get_extra_info("peercert"))}

    return PeerIdentityProtocol


class HttpServer:
    """uvicorn in a daemon thread; ``stop()`` waits for it to finish."""

    def __init__(self, app, host: str, port: int, tls: "TLSFiles | None" = None):
        import uvicorn

        kw: dict = {}
        if tls is not None:
            import ssl

            kw = {"ssl_certfile": tls.cert, "ssl_keyfile": tls.key}
            if tls.client_ca:  # mTLS: no client certificate signed by this CA, no connection
                kw.update(ssl_ca_certs=tls.client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED, http=_peer_identity_protocol())
        from core.logs import uvicorn_log_config

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
