"""Warm pods on Kubernetes. The only module that imports the ``kubernetes`` client.

- pre-warm = create a pod with ``runtimeClassName`` and the pool's labels
  (``foresight.dev/pool=<pool>``, ``foresight.dev/state=warm``); it is not selected by the
  workload's Service yet;
- claim = patch the labels (``state=claimed`` plus the workload's ``app`` label, which moves
  the pod into the Service) with the pod's ``resourceVersion`` as a precondition: when two
  claimers race, the API server accepts one patch and answers 409 to the other (Fission's
  method), so a pod is never handed out twice, even across controller replicas;
- release = patch back to ``state=warm`` and drop the workload label;
- expire = delete.
Idle time, deadline and a claim's lease expiry ride along as annotations, so a restarted
controller adopts its pods and their leases.

A start here is a pod's (``start_kind = "pod"``): create -> Ready, seconds where a container
takes milliseconds. It is reported once the pod is Ready (``Container.start_ms``), from the
API server's ``creationTimestamp`` to the Ready condition's ``lastTransitionTime`` (written by
the kubelet). Both have 1-s resolution, so one start is off by less than a second either way
and the error averages out; on a multi-node cluster the kubelet's clock skew adds to it. The
controller's own times (create call -> first listed Ready) would need no clock but add up to
one reconcile interval of polling (5 s by default) to every start, always upward. A pod that
turned Ready, then unready, then Ready again before it was first listed reports the last
transition. The API call's own time is no start and is not reported.

Owner: with ``owner`` (``Owner``: the controller's own Deployment by default in the manifests,
or any object), pods in the owner's namespace carry an ownerReference to it (``controller:
true``, so no ReplicaSet adopts a claimed pod through its ``app`` label), and Kubernetes'
garbage collector removes them with it. Kubernetes forbids cross-namespace owners, so pods in
other namespaces carry ``foresight.dev/owner`` instead and rely on the controller's own orphan
collection (``list_orphans``: its own pods of pools no longer in the policy, across namespaces;
without an owner it collects nothing, since another controller's pods would look the same).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kubernetes import client as k8s, config as k8s_config
from kubernetes.client.exceptions import ApiException

from warmpool.backends.base import BackendError, ClaimConflict, CreateError
from warmpool.coldstart import POD
from warmpool.policy import PoolSpec
from warmpool.reconcile import Container

log = logging.getLogger(__name__)

POOL_LABEL = "foresight.dev/pool"
STATE_LABEL = "foresight.dev/state"
MANAGED_LABEL = "app.kubernetes.io/managed-by"
IDLE_ANN = "foresight.dev/idle-since"
DEADLINE_ANN = "foresight.dev/deadline"
CLAIMED_ANN = "foresight.dev/claimed-since-idle"
WORKLOAD_LABEL = "app"
OWNER_ANN = "foresight.dev/owner"
LEASE_ANN = "foresight.dev/lease-expires-at"
MANAGED_BY = "foresight-warmpool"


@dataclass(frozen=True)
class Owner:
    """The object warm pods are owned by; ``uid`` empty: looked up from the API server once."""

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str = ""

    def describe(self) -> str:
        return f"{self.kind}/{self.name} in {self.namespace}"


def _plural(kind: str) -> str:
    k = kind.lower()
    return k + ("es" if k.endswith("s") else "s")


def make_api(host: str | None = None, kubeconfig: str | None = None, in_cluster: bool = False):
    """A CoreV1Api for an explicit host (tests), a kubeconfig file, or the in-cluster config."""
    if host:
        cfg = k8s.Configuration(host=host)
        return k8s.CoreV1Api(k8s.ApiClient(cfg))
    if in_cluster:
        k8s_config.load_incluster_config()
        return k8s.CoreV1Api()
    api_client = k8s_config.new_client_from_config(config_file=kubeconfig)
    return k8s.CoreV1Api(api_client)


def _f(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _start_ms(pod) -> float | None:
    """A Ready pod's create -> Ready in ms (server timestamps, 1-s resolution); None before."""
    created = pod.metadata.creation_timestamp
    if created is None or pod.status is None:
        return None
    for cond in pod.status.conditions or ():
        if cond.type == "Ready" and cond.status == "True" and cond.last_transition_time is not None:
            ms = (cond.last_transition_time.timestamp() - created.timestamp()) * 1000.0
            return ms if ms >= 0 else None  # negative: the kubelet's clock is behind the API server's
    return None


class KubernetesBackend:
    name = "kubernetes"
    start_kind = POD

    def __init__(self, api=None, *, host: str | None = None, kubeconfig: str | None = None, in_cluster: bool = False,
                 timeout_seconds: float = 10.0, affinity_provider: Callable[[], Mapping[str, Any] | None] | None = None,
                 affinity_ttl_seconds: float = 10.0, owner: Owner | None = None):
        self.api = api or make_api(host, kubeconfig, in_cluster)
        self.owner = owner
        self._owner_uid = owner.uid if owner else ""
        self.timeout = timeout_seconds
        # Node-load forecasts steer warm pods: the provider returns a V1NodeAffinity-shaped dict
        # (forecaster.nodes.placement_affinity, the same scores as the scheduler extender).
        self.affinity_provider = affinity_provider
        self.affinity_ttl_seconds = affinity_ttl_seconds
        self._affinity: tuple[float, Mapping[str, Any] | None] = (-1e18, None)

    def node_affinity(self) -> Mapping[str, Any] | None:
        """Cached affinity preferences; a failing provider means no preferences, never a failed create."""
        if self.affinity_provider is None:
            return None
        t, aff = self._affinity
        if time.monotonic() - t < self.affinity_ttl_seconds:
            return aff
        try:
            aff = self.affinity_provider() or None
        except Exception as exc:  # noqa: BLE001 - placement is a preference, creation goes on
            log.warning("node placement preferences unavailable: %s", exc)
            aff = None
        self._affinity = (time.monotonic(), aff)
        return aff

    def owner_reference(self) -> dict | None:
        """The ownerReference for pods in the owner's namespace (uid resolved once)."""
        o = self.owner
        if o is None:
            return None
        if not self._owner_uid:
            if "/" not in o.api_version:
                raise CreateError(f"the pods' owner {o.describe()} is in the core API group: give its uid (--owner-uid)")
            group, version = o.api_version.split("/", 1)
            try:
                obj = k8s.CustomObjectsApi(self.api.api_client).get_namespaced_custom_object(
                    group, version, o.namespace, _plural(o.kind), o.name, _request_timeout=self.timeout)
            except (ApiException, OSError) as exc:
                raise CreateError(f"the pods' owner {o.describe()} cannot be read: {getattr(exc, 'status', '')} {getattr(exc, 'reason', exc)}") from exc
            self._owner_uid = str((obj.get("metadata") or {}).get("uid") or "")
            if not self._owner_uid:
                raise CreateError(f"the pods' owner {o.describe()} has no uid")
        return {"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": self._owner_uid,
                "controller": True, "blockOwnerDeletion": False}

    def _pod_body(self, pool: PoolSpec, cid: str, state: str, now: float, deadline: float,
                  lease_expires_at: float | None = None) -> dict:
        res = dict(pool.template.resources)
        container: dict[str, Any] = {"name": "main", "image": pool.template.image, "command": list(pool.template.command)}
        if res:
            container["resources"] = {"requests": res, "limits": res}
        labels = {POOL_LABEL: pool.name, STATE_LABEL: state, MANAGED_LABEL: MANAGED_BY}
        if state == "claimed":
            labels[WORKLOAD_LABEL] = pool.workload
        spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Always"}
        if pool.runtime_class:
            spec["runtimeClassName"] = pool.runtime_class
        if state == "warm":
            aff = self.node_affinity()
            if aff:
                spec["affinity"] = {"nodeAffinity": dict(aff)}
        metadata: dict[str, Any] = {
            "name": cid,
            "labels": labels,
            "annotations": {IDLE_ANN: repr(now), DEADLINE_ANN: repr(deadline), CLAIMED_ANN: "true" if state == "claimed" else "false"},
        }
        if state == "claimed" and lease_expires_at is not None:
            metadata["annotations"][LEASE_ANN] = repr(float(lease_expires_at))
        if self.owner is not None:
            if self.owner.namespace == pool.namespace:
                metadata["ownerReferences"] = [self.owner_reference()]
            else:
                metadata["annotations"][OWNER_ANN] = self.owner.describe()
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    def _to_container(self, pool: PoolSpec, pod) -> Container | None:
        md = pod.metadata
        if md.deletion_timestamp is not None:
            return None
        labels = md.labels or {}
        ann = md.annotations or {}
        phase = (pod.status.phase if pod.status else None) or "Pending"
        state = labels.get(STATE_LABEL, "warm")
        if phase in ("Failed", "Succeeded", "Unknown"):
            state = "dead"
        elif phase == "Pending" and state == "warm":
            state = "creating"
        ip = pod.status.pod_ip if pod.status else None
        created = md.creation_timestamp.timestamp() if md.creation_timestamp else time.time()
        return Container(
            id=md.name,
            pool=pool.name,
            state=state,
            created_at=created,
            idle_since=_f(ann.get(IDLE_ANN)) or created,
            deadline=_f(ann.get(DEADLINE_ANN)),
            endpoint=f"{ip}" if ip else f"pod://{pool.namespace}/{md.name}",
            claimed_since_idle=ann.get(CLAIMED_ANN) == "true",
            version=md.resource_version or "",
            lease_expires_at=_f(ann.get(LEASE_ANN)) if state == "claimed" else None,
            start_ms=_start_ms(pod),
        )

    def list(self, pool: PoolSpec) -> list[Container]:
        try:
            pods = self.api.list_namespaced_pod(pool.namespace, label_selector=f"{POOL_LABEL}={pool.name}", _request_timeout=self.timeout)
        except (ApiException, OSError) as exc:
            raise BackendError(f"listing pods of pool {pool.name} failed: {exc}") from exc
        out = []
        for pod in pods.items:
            c = self._to_container(pool, pod)
            if c is not None:
                out.append(c)
        return out

    def list_orphans(self, known_pools: set[str]) -> list[tuple[str, Container]]:
        """(namespace, container) of every pod of THIS controller (its ownerReference or its
        ``foresight.dev/owner`` annotation), in any namespace, whose pool is not in
        ``known_pools``. Without an owner nothing is collected: another controller's pods
        look the same."""
        if self.owner is None:
            return []
        if self.owner.namespace and not self._owner_uid:
            self.owner_reference()  # resolves the uid (a CreateError is a BackendError: retried next time)
        try:
            pods = self.api.list_pod_for_all_namespaces(label_selector=f"{MANAGED_LABEL}={MANAGED_BY}", _request_timeout=self.timeout)
        except (ApiException, OSError) as exc:
            raise BackendError(f"listing warm-pool pods failed: {exc}") from exc
        mine = self.owner.describe()
        out = []
        for pod in pods.items:
            md = pod.metadata
            name = (md.labels or {}).get(POOL_LABEL, "")
            if name in known_pools:
                continue
            owned = (md.annotations or {}).get(OWNER_ANN) == mine or any(
                r.uid == self._owner_uid and r.kind == self.owner.kind and r.name == self.owner.name
                for r in (md.owner_references or []) if self._owner_uid)
            if not owned:
                continue
            c = self._to_container(PoolSpec(name=name, namespace=md.namespace, workload="", series=""), pod)
            if c is not None:
                out.append((md.namespace, c))
        return out

    def delete_orphan(self, namespace: str, container_id: str) -> None:
        self.delete(PoolSpec(name="", namespace=namespace, workload="", series=""), container_id)

    def create(self, pool: PoolSpec, container_id: str, now: float, deadline: float) -> tuple[Container, Mapping[str, float]]:
        try:
            pod = self.api.create_namespaced_pod(pool.namespace, self._pod_body(pool, container_id, "warm", now, deadline), _request_timeout=self.timeout)
        except (ApiException, OSError) as exc:
            # a failed create leaves nothing behind; a half-made pod would be listed and reaped
            raise CreateError(f"creating pod {container_id} failed: {getattr(exc, 'status', '')} {getattr(exc, 'reason', exc)}") from exc
        c = self._to_container(pool, pod)
        assert c is not None
        return c, {}  # the start is measured once the pod is Ready (start_ms)

    def _patch(self, pool: PoolSpec, container: Container, labels: dict, annotations: dict):
        body: dict[str, Any] = {"metadata": {"labels": labels, "annotations": annotations}}
        if container.version:
            body["metadata"]["resourceVersion"] = container.version
        try:
            return self.api.patch_namespaced_pod(container.id, pool.namespace, body, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 409:
                raise ClaimConflict(f"pod {container.id} changed under us (claimed elsewhere)") from exc
            if exc.status == 404:
                raise BackendError(f"pod {container.id} is gone") from exc
            raise BackendError(f"patching pod {container.id} failed: {exc.status} {exc.reason}") from exc
        except OSError as exc:
            raise BackendError(f"patching pod {container.id} failed: {exc}") from exc

    def claim(self, pool: PoolSpec, container: Container, now: float, lease_expires_at: float | None = None) -> Container:
        ann = {CLAIMED_ANN: "true", LEASE_ANN: None if lease_expires_at is None else repr(float(lease_expires_at))}
        pod = self._patch(pool, container, {STATE_LABEL: "claimed", WORKLOAD_LABEL: pool.workload}, ann)
        c = self._to_container(pool, pod)
        if c is None:
            raise BackendError(f"pod {container.id} is being deleted")
        return c

    def renew(self, pool: PoolSpec, container: Container, lease_expires_at: float) -> Container:
        # no resourceVersion precondition: the kubelet's status updates bump it all the time,
        # and a lease annotation on a pod that was released meanwhile is ignored (warm pods have none)
        pod = self._patch(pool, container.replace(version=""), {}, {LEASE_ANN: repr(float(lease_expires_at))})
        c = self._to_container(pool, pod)
        if c is None or c.state != "claimed":
            raise BackendError(f"pod {container.id} is {'being deleted' if c is None else c.state}, not claimed")
        return c

    def release(self, pool: PoolSpec, container: Container, now: float, deadline: float) -> Container:
        # no resourceVersion precondition either: the controller let only the claimer release,
        # and a cold-started pod's version is its creation's, which the kubelet's status updates
        # have long moved on from (found on the node: every cold claim's release was a 409)
        pod = self._patch(
            pool, container.replace(version=""), {STATE_LABEL: "warm", WORKLOAD_LABEL: None},
            {IDLE_ANN: repr(now), DEADLINE_ANN: repr(deadline), CLAIMED_ANN: "false", LEASE_ANN: None},
        )
        c = self._to_container(pool, pod)
        if c is None:
            raise BackendError(f"pod {container.id} is being deleted")
        return c

    def delete(self, pool: PoolSpec, container_id: str) -> None:
        try:
            self.api.delete_namespaced_pod(container_id, pool.namespace, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status != 404:
                raise BackendError(f"deleting pod {container_id} failed: {exc.status} {exc.reason}") from exc
        except OSError as exc:
            raise BackendError(f"deleting pod {container_id} failed: {exc}") from exc

    def cold_start(self, pool: PoolSpec, container_id: str, now: float,
                   lease_expires_at: float | None = None) -> tuple[Container, Mapping[str, float]]:
        body = self._pod_body(pool, container_id, "claimed", now, now, lease_expires_at)
        try:
            pod = self.api.create_namespaced_pod(pool.namespace, body, _request_timeout=self.timeout)
        except (ApiException, OSError) as exc:
            raise CreateError(f"creating pod {container_id} failed: {getattr(exc, 'status', '')} {getattr(exc, 'reason', exc)}") from exc
        c = self._to_container(pool, pod)
        assert c is not None
        return c.replace(state="claimed"), {}


def token_reviewer(*, host: str | None = None, kubeconfig: str | None = None, in_cluster: bool = False,
                   audiences: tuple[str, ...] = (), timeout_seconds: float = 5.0):
    """``token -> {"username", "groups"} | None`` by a TokenReview (for ``warmpool.auth``), through
    the project's one client (core/kubeclient.py: exec and auth-provider kubeconfigs work);
    raises ``ReviewUnavailable`` when the API server cannot answer."""
    import os

    from core.kubeclient import KubeClient, KubeUnavailable
    from warmpool.auth import ReviewUnavailable

    if host:
        kube = KubeClient.for_server(host, timeout_seconds=timeout_seconds)
    elif in_cluster:
        kube = KubeClient.in_cluster(timeout_seconds=timeout_seconds)
    else:  # as kubectl: the given file, else ~/.kube/config
        kube = KubeClient.from_kubeconfig(kubeconfig or os.path.expanduser("~/.kube/config"),
                                          timeout_seconds=timeout_seconds)

    def review(token: str) -> dict | None:
        try:
            st = kube.token_review_sync(token, list(audiences) or None)
        except KubeUnavailable as exc:
            raise ReviewUnavailable(f"TokenReview failed: {exc}") from exc
        user = st.get("user") or {}
        if not st.get("authenticated") or not user:
            return None
        return {"username": user.get("username") or "", "groups": list(user.get("groups") or [])}

    return review
