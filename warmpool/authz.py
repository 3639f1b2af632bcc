"""Who may claim which pool, and whose claim is whose.

Authorization reuses the adapter's delegated authorization (``core.accessreview``): a
SubjectAccessReview per (caller, pool), cached ``cache_seconds``, asks whether the caller may

- ``claim`` (a custom RBAC verb) the ``warmpools`` resource named after the pool, in API group
  ``foresight.dev``, in the pool's namespace (``workload.namespace``; a pool without one is
  checked at the cluster scope, so only a ClusterRoleBinding grants it) to claim, renew or
  release there;
- ``get`` the same resource to read the pool's state (``GET /api/v1/pools[/{pool}]``: the list
  shows only the pools the caller may get).

RBAC that lets ``system:serviceaccount:shop:web`` claim from pools in ``shop``::

    rules: [{apiGroups: [foresight.dev], resources: [warmpools], verbs: [claim, get]}]

Ownership: the API remembers which authenticated user made each claim (``Holders``) and
refuses a renew or release from anyone else. The holder is kept in the controller's memory
only: after a controller restart an adopted claim has no known holder, so nobody may renew or
release it and it ends at its lease expiry (fail closed).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from core.accessreview import Attributes, Decision, SubjectAccessReviewAuthorizer, User

GROUP = "foresight.dev"
VERSION = "v1alpha1"
RESOURCE = "warmpools"
CLAIM_VERB = "claim"
READ_VERB = "get"


def pool_attributes(verb: str, pool: str, namespace: str) -> Attributes:
    """The review of ``verb`` on the WarmPool object behind ``pool``: the operator names a pool
    ``<namespace>.<name>`` (``warmpool.policy.pool_id``), so RBAC's ``resourceNames`` read the
    WarmPool's own name; a pool of the admin's policy is reviewed under its own name."""
    name = pool[len(namespace) + 1:] if namespace and pool.startswith(namespace + ".") else pool
    return Attributes(verb=verb, resource=RESOURCE, namespace=namespace, name=name, group=GROUP, version=VERSION)


@dataclass
class PoolAuthorizer:
    """SubjectAccessReviews for pool access (``core.accessreview.SubjectAccessReviewAuthorizer``
    does the review and its cache). Raises ``core.kubeclient.KubeUnavailable`` when the API
    server cannot answer: the API turns that into a 503 with Retry-After."""

    reviewer: SubjectAccessReviewAuthorizer

    async def allowed(self, user: User, verb: str, pool: str, namespace: str) -> Decision:
        return await self.reviewer.authorize(user, pool_attributes(verb, pool, namespace))

    @staticmethod
    def denial(user: User, verb: str, pool: str, namespace: str) -> str:
        where = f'namespace "{namespace}"' if namespace else "the cluster scope (the pool names no namespace)"
        return (f'user "{user.name}" may not {verb} warm pool "{pool}": no RBAC rule grants verb "{verb}" on '
                f'resource "{RESOURCE}" in API group "{GROUP}" in {where}')


def build_pool_authorizer(kubeconfig: str | None, cache_seconds: float = 10.0) -> PoolAuthorizer:
    """In-cluster service account unless ``kubeconfig``; it needs ``create`` on
    ``subjectaccessreviews`` (manifests/warmpool/rbac.yaml)."""
    from core.kubeclient import KubeClient

    kube = KubeClient.connect(kubeconfig)
    return PoolAuthorizer(SubjectAccessReviewAuthorizer(kube, cache_seconds=cache_seconds))


class NotYours(Exception):
    """403: renewing or releasing a claim someone else holds (or whose holder is unknown)."""


class Holders:
    """Which user holds each claim, from the claim until its release or lease expiry."""

    PRUNE_ABOVE = 1024

    def __init__(self, lease_seconds: Callable[[str], float], clock: Callable[[], float] = time.monotonic):
        self._lease_seconds = lease_seconds  # pool -> its lease (an entry untouched for longer has expired)
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], tuple[str, float]] = {}

    def record(self, pool: str, container_id: str, user: str) -> None:
        now = self._clock()
        with self._lock:
            self._held[(pool, container_id)] = (user, now)
            if len(self._held) > self.PRUNE_ABOVE:
                self._prune(now)

    def check(self, pool: str, container_id: str, user: str) -> None:
        with self._lock:
            hit = self._held.get((pool, container_id))
        if hit is None:
            raise NotYours(f"pool {pool!r}: container {container_id!r} was not claimed by {user!r} through this controller "
                           "(claims made before a controller restart cannot be renewed or released; they end at their lease)")
        if hit[0] != user:
            raise NotYours(f"pool {pool!r}: container {container_id!r} is claimed by another caller; "
                           f"only the caller that claimed it may renew or release it")

    def touched(self, pool: str, container_id: str) -> None:
        with self._lock:
            hit = self._held.get((pool, container_id))
            if hit is not None:
                self._held[(pool, container_id)] = (hit[0], self._clock())

    def forget(self, pool: str, container_id: str) -> None:
        with self._lock:
            self._held.pop((pool, container_id), None)

    def _prune(self, now: float) -> None:
        for key, (_, at) in list(self._held.items()):
            try:
                lease = self._lease_seconds(key[0])
            except Exception:  # noqa: BLE001 - a pool gone from the policy: its claims are deleted
                lease = 0.0
            if now - at > lease:
                del self._held[key]

    def __len__(self) -> int:
        return len(self._held)
