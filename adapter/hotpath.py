"""The pure ASGI layer in front of FastAPI (authentication, latency, /apis)."""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from urllib.parse import parse_qsl, unquote

from adapter.authz import Attributes, Authenticator, Authorizer, KubeUnavailable, User, request_attributes
from adapter.core import AdapterCore
from adapter.responses import send_json, status_body
from core.store import StoreError

log = logging.getLogger("foresight.adapter")
_UNSEEN = object()


class HotPath:
    """Pure ASGI layer in front of FastAPI (``adapter.app.AdapterApp``): authentication,
    latency metrics, and /apis.

    The external metrics API is the HPA's hot path (every HPA, every 15 s); answering it
    here skips FastAPI's per-request machinery. ``app``: FastAPI's own ASGI call.
    """

    def __init__(self, app, core: AdapterCore, authenticator: Authenticator | None = None,
                 authorizer: Authorizer | None = None) -> None:
        self.app = app
        self.core = core
        self.auth = core.settings.auth
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.latency = {r: core.metrics.latency.labels(r) for r in ("apis", "rest", "other")}
        self._token = self.auth.token.encode() if self.auth.token else None
        # the front-proxy headers as ASGI gives them (names in lower case, bytes)
        self._user_headers = {h.lower().encode("latin-1") for h in self.auth.username_headers}
        self._group_headers = {h.lower().encode("latin-1") for h in self.auth.group_headers}
        self._extra_prefix = self.auth.extra_header_prefix.lower().encode("latin-1")
        # The aggregator sends the same few identities and the HPA the same few paths, every
        # sync: both are worked out once (bounded), not per request.
        self._users: dict[tuple, User | None] = {}
        self._attrs: dict[tuple[str, str], Attributes] = {}

    @property
    def enabled(self) -> bool:
        return self.auth.enabled or self.authenticator is not None or self.authorizer is not None

    def front_proxy_user(self, scope) -> User | None:
        """X-Remote-User/-Group, trusted only on a connection whose client certificate
        verified against the requestheader CA (and carries an allowed name)."""
        if not self.auth.requestheader_ca_file:
            return None
        tls = (scope.get("extensions") or {}).get("tls") or {}
        cn = tls.get("client_cert_cn")
        if not tls.get("client_cert_verified") or cn is None:
            return None
        if self.auth.allowed_names and cn not in self.auth.allowed_names:
            return None
        names, groups, prefix = self._user_headers, self._group_headers, self._extra_prefix
        said = tuple((k, v) for k, v in ((k.lower(), v) for k, v in scope["headers"])
                     if k in names or k in groups or k.startswith(prefix))
        user = self._users.get(said, _UNSEEN)
        if user is _UNSEEN:
            if len(self._users) >= 10_000:
                self._users.clear()
            user = self._users[said] = self._user_of(said)
        return user

    def _user_of(self, said: tuple[tuple[bytes, bytes], ...]) -> User | None:
        """The user the front-proxy headers name (in their order), or None without a name."""
        name, groups, extra = None, [], {}
        plen = len(self._extra_prefix)
        for k, v in said:
            if k in self._user_headers and v and name is None:
                name = v.decode("latin-1")
            elif k in self._group_headers and v:
                groups.append(v.decode("latin-1"))  # one header per group, as the aggregator sends them
            elif k.startswith(self._extra_prefix) and len(k) > plen:
                extra.setdefault(unquote(k[plen:].decode("latin-1")), []).append(v.decode("latin-1"))
        if not name:
            return None
        return User(name, tuple(groups), extra=tuple(sorted((k, tuple(v)) for k, v in extra.items())))

    async def authenticate(self, scope) -> User | None:
        """The caller, or None when the request is not authenticated."""
        user = self.front_proxy_user(scope)
        if user is not None:
            return user
        for k, v in scope["headers"]:
            if k == b"authorization" and v[:7].lower() == b"bearer ":
                token = v[7:].strip()
                if self._token and hmac.compare_digest(token, self._token):
                    return User("token-user", ("system:authenticated",))
                if self.authenticator is not None and token:
                    return await self.authenticator.authenticate_token(token.decode("latin-1"))
        return None

    async def check(self, scope) -> tuple[int, str] | None:
        """None when the request may proceed; else the refusal (code, message)."""
        path = scope["path"]
        if not self.enabled or path in self.auth.anonymous_paths:
            return None
        try:
            user = await self.authenticate(scope)
            if user is None:
                return 401, "Unauthorized"
            if self.authorizer is None:
                return None
            attrs = self.attributes(scope["method"], path, scope.get("query_string", b""))
            decision = await self.authorizer.authorize(user, attrs)
        except KubeUnavailable as exc:
            log.warning("cannot check %s: %s", path, exc)
            return 503, "authorization could not be checked (the API server did not answer); try again shortly"
        if decision.allowed:
            return None
        why = f": {decision.reason}" if decision.reason else ""
        return 403, f'forbidden: User "{user.name}" cannot {attrs.describe()}{why}'

    def attributes(self, method: str, path: str, query: bytes) -> Attributes:
        """``request_attributes``; under /apis the query plays no part, so they are kept per
        (method, path)."""
        if not path.startswith("/apis"):
            return request_attributes(method, path, dict(parse_qsl(query.decode("latin-1"))))
        attrs = self._attrs.get((method, path))
        if attrs is None:
            if len(self._attrs) >= 10_000:
                self._attrs.clear()
            attrs = self._attrs[(method, path)] = request_attributes(method, path, {})
        return attrs

    async def answer(self, method: str, path: str, query: bytes) -> tuple[int, bytes]:
        """``core.answer_apis`` without blocking the event loop: reads of observed demand
        that are not cached yet are awaited here (bounded), then the answer is rebuilt."""
        pending: list = []
        code, body = self.core.answer_apis(method, path, query, pending, final=False)
        if pending and self.core.observed is not None:
            await asyncio.wait([asyncio.wrap_future(f) for f in pending], timeout=self.core.observed.wait_seconds)
            code, body = self.core.answer_apis(method, path, query, [], final=True)
        return code, body

    def _counting(self, send, route: str):
        async def wrapped(message) -> None:
            if message["type"] == "http.response.start":
                self.core.metrics.response(route, message["status"])
            await send(message)

        return wrapped

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        path = scope["path"]
        route = "apis" if path.startswith("/apis") else "rest" if path.startswith("/api/") else "other"
        try:
            try:
                refused = await self.check(scope)
            except Exception:  # in front of FastAPI: nothing else turns this into a Status
                log.exception("unhandled error while checking %s", path)
                refused = 500, "internal error; see the adapter's log"
            if refused is not None:
                code, message = refused
                self.core.metrics.response(route, code)
                extra = [(b"www-authenticate", b'Bearer realm="foresight"')] if code == 401 else []
                await send_json(send, code, status_body(code, message), scope["method"] == "HEAD", extra)
                return
            if route == "apis" and (path == "/apis" or path.startswith("/apis/")):
                try:
                    code, body = await self.answer(scope["method"], path, scope.get("query_string", b""))
                except StoreError:
                    log.exception("store error while answering %s", path)
                    code, body = 503, status_body(503, "the forecast store could not be read; try again shortly")
                except Exception:  # the HPA gets a Status, never a bare 500
                    log.exception("unhandled error while answering %s", path)
                    code, body = 500, status_body(500, "internal error; see the adapter's log")
                self.core.metrics.response(route, code)
                extra = [(b"allow", b"GET")] if code == 405 else []
                await send_json(send, code, body, scope["method"] == "HEAD", extra)
                return
            await self.app(scope, receive, self._counting(send, route))
        finally:
            self.latency[route].observe(time.perf_counter() - start)

