"""Who may claim: bearer-token authentication of the warm-pool API.

Two sources, either or both (``foresight warmpool run --token-file F`` / ``--token-review``):
- a token file (one token per line, ``#`` comments; a mounted Secret), re-read when it changes,
  compared in constant time against every line;
- a Kubernetes TokenReview (the caller's ServiceAccount token), done by the API server, with
  the answer cached for ``cache_seconds`` (keyed by the token's SHA-256, never the token) and,
  optionally, only some users or groups allowed (``allow``).

``/healthz`` and ``/metrics`` stay open (probes and Prometheus); every other path needs
``Authorization: Bearer <token>`` and answers 401 with a message saying what was wrong.
The review itself is an injected callable (``token -> {"username", "groups"} | None``), so this
module never imports the Kubernetes client (``warmpool.backends.kubernetes.token_reviewer``).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from forecaster.errors import UserError

OPEN_PATHS = frozenset({"/healthz", "/metrics"})
TOKEN_FILE_USER = "token-file"  # the one identity of every token-file caller (what a SubjectAccessReview is asked about)


class Unauthenticated(Exception):
    """401: no credentials, or credentials nobody vouches for."""


class Forbidden(Exception):
    """403: a valid identity the API does not serve (not in ``allow``)."""


class ReviewUnavailable(Exception):
    """A TokenReview could not be done right now (API server down): 503, retryable."""


class TokenFile:
    """Tokens from a file, re-read when its mtime or size changes (Secret rotation)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[float, int] | None = None
        self._tokens: tuple[bytes, ...] = ()
        self._load()
        if not self._tokens:
            raise UserError(f"--token-file {self.path}: holds no token (one per line)")

    def _load(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            if self._stamp is None:
                raise UserError(f"--token-file {self.path}: cannot be read ({exc.strerror})") from None
            return  # keep the last tokens while a Secret update swaps the file
        stamp = (st.st_mtime, st.st_size)
        if stamp == self._stamp:
            return
        lines = self.path.read_text().splitlines()
        self._tokens = tuple(s.strip().encode() for s in lines if s.strip() and not s.strip().startswith("#"))
        self._stamp = stamp

    def check(self, token: str) -> bool:
        with self._lock:
            self._load()
            tokens = self._tokens
        given = token.encode()
        ok = False
        for t in tokens:  # no early exit: the time taken does not say which line matched
            ok |= hmac.compare_digest(t, given)
        return ok


@dataclass
class Authenticator:
    token_file: TokenFile | None = None
    token_review: Callable[[str], dict | None] | None = None
    allow: tuple[str, ...] = ()  # usernames or groups a reviewed token must carry (empty: any)
    cache_seconds: float = 10.0
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if self.token_file is None and self.token_review is None:
            raise UserError("authentication needs a token file or TokenReview")
        self._cache: dict[str, tuple[float, dict | None]] = {}
        self._lock = threading.Lock()

    def describe(self) -> str:
        parts = (["token file"] if self.token_file else []) + (["TokenReview"] if self.token_review else [])
        return " or ".join(parts)

    def authenticate(self, authorization: str | None) -> str:
        """The caller's user name for an ``Authorization`` header value; raises Unauthenticated,
        Forbidden or ReviewUnavailable."""
        return self.identify(authorization).name

    def identify(self, authorization: str | None):
        """The caller (``forecaster.accessreview.User``: name and groups, what a SubjectAccessReview asks
        about). Every token-file caller is the one user ``token-file``."""
        from forecaster.accessreview import User

        if not authorization:
            raise Unauthenticated(f"authentication required: send 'Authorization: Bearer <token>' ({self.describe()})")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
        if self.token_file is not None and self.token_file.check(token):
            return User(TOKEN_FILE_USER)
        if self.token_review is None:
            raise Unauthenticated("invalid bearer token")
        user = self._reviewed(token)
        if user is None:
            raise Unauthenticated("invalid bearer token (the TokenReview did not authenticate it)")
        name = str(user.get("username") or "")
        if self.allow and not ({name, *user.get("groups", ())} & set(self.allow)):
            raise Forbidden(f"user {name!r} is authenticated but not allowed to use the warm-pool API (allowed: {', '.join(self.allow)})")
        return User(name, tuple(user.get("groups") or ()))

    def _reviewed(self, token: str) -> dict | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] <= self.cache_seconds:
                return hit[1]
        try:
            user = self.token_review(token)  # type: ignore[misc]
        except ReviewUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to review is "cannot tell now"
            raise ReviewUnavailable(f"cannot verify the token right now: {exc}") from exc
        with self._lock:
            if len(self._cache) >= 10_000:
                self._cache.clear()
            self._cache[key] = (now, user)
        return user


def build_authenticator(token_file: str | None, token_review: Callable[[str], dict | None] | None,
                        allow: Iterable[str] = (), cache_seconds: float = 10.0) -> Authenticator | None:
    if not token_file and token_review is None:
        return None
    return Authenticator(TokenFile(token_file) if token_file else None, token_review, tuple(allow), cache_seconds)
