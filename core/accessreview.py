"""Delegated authentication and authorization, as Kubernetes' aggregated API servers do it
(k8s.io/apiserver's delegating authn/authz): a TokenReview says who a bearer token belongs to,
a SubjectAccessReview whether that user may do one thing (``Attributes``).

Decisions are cached briefly (``cache_seconds``, kube's webhook default is 10 s) so a hot path
does not call the API server per request; denials are cached too. Shared by the adapter
(adapter/authz.py maps its paths onto attributes) and the warm pool (warmpool/authz.py: who may
claim from which pool).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from core.kubeclient import KubeClient, KubeUnavailable


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Attributes:
    """What a request does, in SubjectAccessReview terms: a resource request (group, resource,
    namespace, name) or a non-resource one (path)."""

    verb: str
    resource: str = ""
    namespace: str = ""
    name: str = ""
    group: str = ""  # "" is the core API group
    version: str = ""
    path: str = ""  # set for non-resource requests only

    def describe(self) -> str:
        if self.path:
            return f'{self.verb} path "{self.path}"'
        where = f' in the namespace "{self.namespace}"' if self.namespace else " at the cluster scope"
        return f'{self.verb} resource "{self.resource}" in API group "{self.group}"{where}'


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


class Authenticator(Protocol):
    async def authenticate_token(self, token: str) -> User | None:
        """The user a bearer token belongs to, or None when it is not valid.
        Raises KubeUnavailable when that cannot be checked right now."""


class Authorizer(Protocol):
    async def authorize(self, user: User, attrs: Attributes) -> Decision:
        """Raises KubeUnavailable when that cannot be checked right now."""


class _TTLCache:
    def __init__(self, ttl_seconds: float, clock: Callable[[], float], max_entries: int = 10_000) -> None:
        self.ttl = ttl_seconds
        self.clock = clock
        self.max_entries = max_entries
        self._data: dict = {}

    def get(self, key):
        hit = self._data.get(key)
        if hit is not None and self.clock() - hit[1] <= self.ttl:
            return hit[0]
        return None

    def put(self, key, value) -> None:
        if len(self._data) >= self.max_entries:
            self._data.clear()  # bounded memory; a refill costs one review per caller
        self._data[key] = (value, self.clock())


@dataclass
class TokenReviewAuthenticator:
    kube: KubeClient
    cache_seconds: float = 10.0
    audiences: list[str] = field(default_factory=list)
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._cache = _TTLCache(self.cache_seconds, self.clock)

    async def authenticate_token(self, token: str) -> User | None:
        key = hashlib.sha256(token.encode()).hexdigest()  # never keep tokens in memory as keys
        hit = self._cache.get(key)
        if hit is not None:
            return hit or None
        status = await self.kube.token_review(token, self.audiences or None)
        user = None
        if status.get("authenticated"):
            u = status.get("user") or {}
            extra = tuple(sorted((k, tuple(v)) for k, v in (u.get("extra") or {}).items()))
            user = User(u.get("username", ""), tuple(u.get("groups") or ()), u.get("uid", ""), extra)
        self._cache.put(key, user or False)
        return user


@dataclass
class SubjectAccessReviewAuthorizer:
    kube: KubeClient
    cache_seconds: float = 10.0
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._cache = _TTLCache(self.cache_seconds, self.clock)

    async def authorize(self, user: User, attrs: Attributes) -> Decision:
        key = (user, attrs)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        status = await self.kube.subject_access_review(sar_spec(user, attrs))
        decision = Decision(bool(status.get("allowed")) and not status.get("denied"), status.get("reason", ""))
        self._cache.put(key, decision)
        return decision


def sar_spec(user: User, attrs: Attributes) -> dict:
    spec: dict = {"user": user.name, "groups": list(user.groups)}
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra}
    if attrs.path:
        spec["nonResourceAttributes"] = {"path": attrs.path, "verb": attrs.verb}
    else:
        ra = {"verb": attrs.verb, "group": attrs.group, "version": attrs.version, "resource": attrs.resource}
        if attrs.namespace:
            ra["namespace"] = attrs.namespace
        if attrs.name:
            ra["name"] = attrs.name
        spec["resourceAttributes"] = ra
    return spec


__all__ = [
    "Attributes",
    "Authenticator",
    "Authorizer",
    "Decision",
    "KubeUnavailable",
    "SubjectAccessReviewAuthorizer",
    "TokenReviewAuthenticator",
    "User",
    "sar_spec",
]
