"""The trainer's workloads file, watched: what may change in place and what needs a new trainer."""

from __future__ import annotations

import hashlib
import logging

log = logging.getLogger("forecaster.schedule")

__all__ = ["ConfigWatch", "fleet_settings"]


def fleet_settings(config) -> tuple:
    """What every series' fit depends on; a change needs a new trainer (all refit)."""
    return (config.source, config.store, config.training, config.serving)


class ConfigWatch:
    """The trainer's workloads file, re-read at every step: a changed file (content hash; a
    ConfigMap volume swaps a symlink) is parsed, and an invalid one is logged and ignored (the
    trainer keeps its last good configuration)."""

    def __init__(self, path: str, config) -> None:
        self.path, self.config = path, config
        self._digest = self._read()[1]

    def _read(self) -> tuple[bytes | None, str | None]:
        try:
            data = open(self.path, "rb").read()
        except OSError as exc:
            log.warning("workloads file %s unreadable: %s; keeping the last configuration", self.path, exc)
            return None, None
        return data, hashlib.sha256(data).hexdigest()

    def changed(self):
        """The new Config when the file changed and parses, else None."""
        from core.errors import UserError
        from forecaster.config import load_config

        data, digest = self._read()
        if digest is None or digest == self._digest:
            return None
        self._digest = digest
        try:
            self.config = load_config(self.path)
        except UserError as exc:
            log.warning("workloads file %s changed but is refused; keeping the last configuration: %s", self.path, exc)
            return None
        return self.config
