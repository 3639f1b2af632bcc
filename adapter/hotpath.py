"""The pure ASGI layer in front of FastAPI (authentication, latency, /apis)."""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from urllib.parse import parse_qsl, unquote

from adapter.authz import Authenticator, Authorizer, KubeUnavailable, User, request_attributes
from adapter.core import AdapterCore
from adapter.responses import send_json, status_body
from forecaster.store import StoreError

log = logging.getLogger("foresight.adapter")


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
        name, groups, extra = None, [], {}
        for k, v in scope["headers"]:
            key = k.decode("latin-1").lower()
            if key in self.auth.username_headers and v and name is None:
                name = v.decode("latin-1")
            elif key in self.auth.group_headers and v:
                groups.append(v.decode("latin-1"))  # one header per group, as the aggregator sends them
            elif key.startswith(self.auth.extra_header_prefix) and len(key) > len(self.auth.extra_header_prefix):
                extra.setdefault(unquote(key[len(self.auth.extra_header_prefix):]), []).append(v.decode("latin-1"))
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
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            attrs = request_attributes(scope["method"], path, query)
            decision = await self.authorizer.authorize(user, attrs)
        except KubeUnavailable as exc:
            log.warning("cannot check %s: %s", path, exc)
            return 503, "authorization could not be checked (the API server did not answer); try again shortly"
        if decision.allowed:
            return None
        why = f": {decision.reason}" if decision.reason else ""
        return 403, f'forbidden: User "{user.name}" cannot {attrs.describe()}{why}'

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
            except Exception:  # noqa: BLE001 - in front of FastAPI: nothing else turns this into a Status
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
                except Exception:  # noqa: BLE001 - the HPA gets a Status, never a bare 500
                    log.exception("unhandled error while answering %s", path)
                    code, body = 500, status_body(500, "internal error; see the adapter's log")
                self.core.metrics.response(route, code)
                extra = [(b"allow", b"GET")] if code == 405 else []
                await send_json(send, code, body, scope["method"] == "HEAD", extra)
                return
            await self.app(scope, receive, self._counting(send, route))
        finally:
            self.latency[route].observe(time.perf_counter() - start)

