"""Who may claim: bearer-token authentication of the warm-pool API.

Three sources, any of them (``foresight warmpool run --token-file F`` / ``--token-review`` /
``--client-ca CA``):
- a token file (a mounted Secret), re-read when it changes, compared in constant time against
  every line. A line is ``TOKEN`` or, as in kube-apiserver's static token file,
  ``TOKEN,USER[,UID[,"GROUP1,GROUP2"]]``. Each token is its own identity: ``USER`` when given,
  else ``token-file:<first 12 hex digits of the token's SHA-256>`` (never the token itself), so
  one token's caller cannot renew or release another's claims;
- a Kubernetes TokenReview (the caller's ServiceAccount token), done by the API server, with
  the answer cached for ``cache_seconds`` (keyed by the token's SHA-256, never the token) and,
  optionally, only some users or groups allowed (``allow``);
- a client certificate the TLS layer verified against ``--client-ca``: the user is its subject's
  common name and its groups the subject's organizations (Kubernetes' x509 convention).

Only ``/healthz`` stays open (probes); ``/metrics`` and every other path need an identity
(401 with a message saying what was wrong), and ``/metrics`` shows a caller only the pools it
may read (``warmpool.api``).
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

from core.errors import UserError

OPEN_PATHS = frozenset({"/healthz"})
TOKEN_FILE_USER = "token-file"  # the prefix of a bare token's identity: token-file:<fingerprint>
# Where the TLS layer puts the verified client certificate's identity for the request
# (warmpool.wiring: per connection, in the ASGI state every request of it starts from).
PEER_STATE_KEY = "foresight_peer_user"


class Unauthenticated(Exception):
    """401: no credentials, or credentials nobody vouches for."""


class Forbidden(Exception):
    """403: a valid identity the API does not serve (not in ``allow``)."""


class ReviewUnavailable(Exception):
    """A TokenReview could not be done right now (API server down): 503, retryable."""


def token_user(token: bytes, name: str = "", groups: tuple[str, ...] = ()):
    """The identity of one token-file line (a name that never reveals the token)."""
    from core.accessreview import User

    return User(name or f"{TOKEN_FILE_USER}:{hashlib.sha256(token).hexdigest()[:12]}", groups)


def _parse_token_line(path: Path, lineno: int, line: str):
    """``TOKEN`` or ``TOKEN,USER[,UID[,"GROUP1,GROUP2"]]`` -> (token bytes, User)."""
    import csv

    fields = next(csv.reader([line]))
    token = fields[0].strip()
    if not token:
        raise UserError(f"--token-file {path}: line {lineno} has an empty token; write TOKEN or TOKEN,USER[,UID[,GROUPS]]")
    name = fields[1].strip() if len(fields) > 1 else ""
    if len(fields) > 1 and not name:
        raise UserError(f"--token-file {path}: line {lineno} names no user after the token; write TOKEN,USER or just TOKEN")
    groups = tuple(g.strip() for g in fields[3].split(",") if g.strip()) if len(fields) > 3 else ()
    return token.encode(), token_user(token.encode(), name, groups)


class TokenFile:
    """Tokens from a file, re-read when its mtime or size changes (Secret rotation)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[float, int] | None = None
        self._tokens: tuple[tuple[bytes, object], ...] = ()
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
        try:
            self._tokens = tuple(_parse_token_line(self.path, i, s.strip()) for i, s in enumerate(lines, 1)
                                 if s.strip() and not s.strip().startswith("#"))
        except UserError:
            if self._stamp is None:
                raise
            return  # a bad rotation keeps the last good tokens (the start refused a bad file)
        self._stamp = stamp

    def lookup(self, token: str):
        """The identity of ``token`` (``core.accessreview.User``), or None."""
        with self._lock:
            self._load()
            tokens = self._tokens
        given = token.encode()
        found = None
        for t, user in tokens:  # no early exit: the time taken does not say which line matched
            if hmac.compare_digest(t, given):
                found = user
        return found

    def check(self, token: str) -> bool:
        return self.lookup(token) is not None


def certificate_user(peercert: dict | None):
    """The identity in a verified client certificate (``ssl.SSLSocket.getpeercert()``): the
    subject's commonName as the user, its organizationNames as the groups; None without one."""
    from core.accessreview import User

    if not peercert:
        return None
    attrs = [kv for rdn in peercert.get("subject", ()) for kv in rdn]
    names = [v for k, v in attrs if k == "commonName"]
    if not names or not names[0]:
        return None
    return User(names[0], tuple(v for k, v in attrs if k == "organizationName"))


@dataclass
class Authenticator:
    token_file: TokenFile | None = None
    token_review: Callable[[str], dict | None] | None = None
    allow: tuple[str, ...] = ()  # usernames or groups a reviewed token must carry (empty: any)
    cache_seconds: float = 10.0
    clock: Callable[[], float] = time.monotonic
    client_certificates: bool = False  # a verified client certificate identifies its caller (mTLS)

    def __post_init__(self) -> None:
        if self.token_file is None and self.token_review is None and not self.client_certificates:
            raise UserError("authentication needs a token file, TokenReview or client certificates")
        self._cache: dict[str, tuple[float, dict | None]] = {}
        self._lock = threading.Lock()

    def describe(self) -> str:
        parts = ((["client certificate"] if self.client_certificates else [])
                 + (["token file"] if self.token_file else []) + (["TokenReview"] if self.token_review else []))
        return " or ".join(parts)

    def authenticate(self, authorization: str | None) -> str:
        """The caller's user name for an ``Authorization`` header value; raises Unauthenticated,
        Forbidden or ReviewUnavailable."""
        return self.identify(authorization).name

    def identify(self, authorization: str | None, peer=None):
        """The caller (``core.accessreview.User``: name and groups, what a SubjectAccessReview asks
        about): the bearer token's identity when one is sent, else the verified client
        certificate's (``peer``, see ``certificate_user``) when those are accepted."""
        from core.accessreview import User

        if not authorization:
            if self.client_certificates and peer is not None:
                return peer
            how = "present a client certificate signed by --client-ca or send 'Authorization: Bearer <token>'" \
                if self.client_certificates else "send 'Authorization: Bearer <token>'"
            raise Unauthenticated(f"authentication required: {how} ({self.describe()})")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
        if self.token_file is not None:
            known = self.token_file.lookup(token)
            if known is not None:
                return known
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
                        allow: Iterable[str] = (), cache_seconds: float = 10.0,
                        client_certificates: bool = False) -> Authenticator | None:
    if not token_file and token_review is None and not client_certificates:
        return None
    return Authenticator(TokenFile(token_file) if token_file else None, token_review, tuple(allow), cache_seconds,
                         client_certificates=client_certificates)
