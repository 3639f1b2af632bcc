"""Reloads the policy file of a running controller when its content changes."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from core.errors import ConfigError
from warmpool.policy import load_policy

if TYPE_CHECKING:
    from warmpool.controller import Controller

log = logging.getLogger(__name__)


class PolicyWatcher:
    """An invalid file keeps the old policy running and reports the problems in
    ``controller.policy_error``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._digest = self._read_digest()

    def _read_digest(self) -> str:
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return ""

    def check(self, controller: "Controller") -> bool:
        digest = self._read_digest()
        if digest == self._digest or not digest:
            return False
        self._digest = digest
        try:
            policy = load_policy(self.path)
        except ConfigError as exc:
            controller.policy_error = str(exc)
            log.error("policy reload rejected, keeping the previous policy: %s", exc)
            return False
        controller.policy_error = ""
        controller.set_policy(policy)
        log.info("policy reloaded from %s", self.path)
        return True
