"""Run a warm pool inside another process (``foresight up``).

    handle = start_embedded(store, "warmpool/examples/local.yaml", port=8091)
    print(handle.describe()["mode"])   # "crun: real containers ..." or "sim: ..."
    ...
    handle.stop()                      # deletes the containers it made

Real crun containers when crun works on this machine (root, crun and busybox-static
installed), the sim backend otherwise; the reason is logged at start and kept in
``describe()["mode"]``. Every pool of the policy runs on that one local backend.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import threading
import time
from pathlib import Path

from warmpool.policy import Policy, load_policy

log = logging.getLogger(__name__)

EXAMPLE_POLICY = Path(__file__).parent / "examples" / "local.yaml"


class EmbeddedPool:
    def __init__(self, controller, backend, mode: str, server=None, thread=None, stop_event=None, state_dir=None):
        self.controller = controller
        self.backend = backend
        self.mode = mode
        self.server = server
        self._thread = thread
        self._stop = stop_event
        self._state_dir = state_dir

    @property
    def url(self) -> str | None:
        return f"http://127.0.0.1:{self.server.port}" if self.server else None

    def describe(self) -> dict:
        d = self.controller.describe()
        d["mode"] = self.mode
        d["backend"] = self.backend.name
        d["url"] = self.url
        return d

    def stop(self, cleanup: bool = True) -> None:
        """Stop the loop and the API; with ``cleanup`` delete every container it made."""
        if self._stop is not None:
            self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.server is not None:
            self.server.stop()
        if cleanup:
            for spec in self.controller.policy.pools:
                try:
                    for c in self.backend.list(spec):
                        self.backend.delete(spec, c.id)
                except Exception as exc:  # noqa: BLE001 - best effort at shutdown; logged
                    log.warning("warm pool %s: cleanup failed: %s", spec.name, exc)
            if self._state_dir is not None:  # a temporary state dir we made ourselves
                import shutil

                shutil.rmtree(self._state_dir, ignore_errors=True)


def start_embedded(store, policy_path: str | Path | None = None, port: int | None = None, *, state_dir: str | Path | None = None, interval_seconds: float = 2.0, force_sim: bool = False) -> EmbeddedPool:
    from warmpool.api import create_app
    from warmpool.coldstart import ColdStartModel
    from warmpool.controller import Controller, ControllerSettings
    from warmpool.wiring import HttpServer

    policy = load_policy(policy_path or EXAMPLE_POLICY)
    coldstart = ColdStartModel(policy.runtime_classes)
    backend = None
    temp_dir = None
    mode = ""
    if not force_sim:
        from warmpool.backends.crun import CrunBackend, probe

        ok, why, _ = probe("crun")
        if ok:
            temp_dir = None if state_dir else Path(tempfile.mkdtemp(prefix="foresight-warmpool-"))
            sd = Path(state_dir) if state_dir else temp_dir
            backend = CrunBackend(sd / "crun", "crun")
            mode = f"crun: real containers ({why}; state in {sd})"
        else:
            mode = f"sim: simulated containers, because {why}"
    else:
        mode = "sim: simulated containers (asked for)"
    if backend is None:
        from warmpool.backends.sim import SimBackend

        backend = SimBackend(time.time, coldstart)
    local = Policy(
        pools=tuple(dataclasses.replace(p, backend=backend.name) for p in policy.pools),
        runtime_classes=policy.runtime_classes,
    )
    log.info("warm pool: %s", mode)
    ctl = Controller(local, store, {backend.name: backend}, settings=ControllerSettings(reconcile_interval_seconds=interval_seconds), coldstart=coldstart)
    stop = threading.Event()
    thread = threading.Thread(target=ctl.run, args=(stop,), name="warmpool-controller", daemon=True)
    thread.start()
    server = None
    if port is not None:
        server = HttpServer(create_app(ctl), "127.0.0.1", port).start()
    return EmbeddedPool(ctl, backend, mode, server, thread, stop, state_dir=temp_dir)
