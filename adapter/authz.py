"""Who is calling, and may they: the adapter's authentication and delegated authorization.

As in Kubernetes' own aggregated API servers (k8s.io/apiserver's delegating authn/authz):
- the aggregator's front-proxy identity (X-Remote-User/-Group, trusted only from its verified
  client certificate) or a bearer token checked with a TokenReview says who calls;
- a SubjectAccessReview per request says whether they may: the HPA controller may read the
  metrics of every namespace, a person only those their RBAC allows.

Decisions are cached briefly (``cache_seconds``, kube's webhook default is 10 s) so the hot
path does not call the API server per request; denials are cached too. ``request_attributes``
maps each adapter path onto the attributes RBAC rules are written against.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from adapter.kube import KubeAPI, KubeUnavailable
from adapter.responses import GROUP, PREFIX, VERSION

FORECASTS_RESOURCE = "forecasts"  # RBAC resource name for the REST view and the dashboard


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
    group: str = GROUP
    version: str = VERSION
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
    kube: KubeAPI
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
    kube: KubeAPI
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


def _http_verb(method: str) -> str:
    return {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete"}.get(method, method.lower())


def request_attributes(method: str, path: str, query: dict[str, str]) -> Attributes:
    """The RBAC attributes of an adapter request.

    - ``/apis/external.metrics.k8s.io/v1beta1/namespaces/NS/METRIC``: get METRIC in NS (what
      the HPA controller's ClusterRole grants);
    - ``/api/v1/forecasts/NS/NAME``: get forecasts NAME in NS; ``/api/v1/forecasts`` and the
      dashboard ``/``: list forecasts (in ``?namespace=`` when given, else cluster-wide);
    - anything else (discovery, /metrics, /docs): a non-resource ``get`` of the path, as the
      API server authorizes its own discovery and /metrics.
    """
    verb = _http_verb(method)
    if path.startswith(PREFIX + "/namespaces/"):
        parts = path[len(PREFIX) + 1 :].split("/")
        if len(parts) == 3:
            return Attributes(verb=verb, resource=parts[2], namespace=parts[1])
    if path.startswith("/api/v1/forecasts"):
        parts = [p for p in path[len("/api/v1/forecasts") :].split("/") if p]
        if len(parts) == 2:
            return Attributes(verb=verb, resource=FORECASTS_RESOURCE, namespace=parts[0], name=parts[1])
        if not parts:
            return Attributes(verb="list" if verb == "get" else verb, resource=FORECASTS_RESOURCE,
                              namespace=query.get("namespace", ""))
    if path == "/":
        return Attributes(verb="list", resource=FORECASTS_RESOURCE, namespace=query.get("namespace", ""))
    return Attributes(verb=verb, path=path)


__all__ = [
    "Attributes",
    "Authenticator",
    "Authorizer",
    "Decision",
    "KubeUnavailable",
    "SubjectAccessReviewAuthorizer",
    "TokenReviewAuthenticator",
    "User",
    "request_attributes",
    "sar_spec",
]
