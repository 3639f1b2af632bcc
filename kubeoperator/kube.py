"""The operator's only connection to the API server (the ``kubernetes`` client, dynamic API).

Everything above this module sees plain dicts. API errors become ``KubeError`` with what was
attempted; ``retryable`` tells a conflict or an unreachable server from a refusal.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Callable, Mapping

from kubeoperator.reconcile import Event, iso
from kubeoperator.spec import API_VERSION

log = logging.getLogger(__name__)
FIELD_MANAGER = "foresight-operator"


class KubeError(Exception):
    def __init__(self, what: str, status: int | None, detail: str):
        self.status = status
        self.retryable = status is None or status in (409, 429) or status >= 500
        super().__init__(f"{what}: {status or 'unreachable'} {detail}".strip())


class KubeApi:
    def __init__(self, kubeconfig: str | None = None):
        from kubernetes import config, dynamic
        from kubernetes.client import ApiClient

        if kubeconfig:
            api_client = config.new_client_from_config(config_file=kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api_client = ApiClient()
        self.dyn = dynamic.DynamicClient(api_client)
        self._resources: dict[tuple[str, str], Any] = {}

    def _res(self, api_version: str, kind: str):
        key = (api_version, kind)
        if key not in self._resources:
            self._resources[key] = self._call(f"discover {kind}", lambda: self.dyn.resources.get(api_version=api_version, kind=kind))
        return self._resources[key]

    @staticmethod
    def _call(what: str, fn: Callable[[], Any]) -> Any:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError

        try:
            return fn()
        except ResourceNotFoundError as exc:
            raise KubeError(what, 404, str(exc)) from exc
        except (ApiException, DynamicApiError) as exc:
            raise KubeError(what, getattr(exc, "status", None), str(getattr(exc, "reason", "")) or str(exc)) from exc
        except OSError as exc:  # refused, reset, TLS
            raise KubeError(what, None, repr(exc)) from exc
        except Exception as exc:  # urllib3 wraps connection failures in its own types
            if type(exc).__module__.startswith("urllib3"):
                raise KubeError(what, None, repr(exc)) from exc
            raise

    # -- reads
    def list(self, kind: str, api_version: str = API_VERSION) -> list[dict]:
        res = self._res(api_version, kind)
        return [i for i in self._call(f"list {kind}", lambda: res.get()).to_dict().get("items", [])]

    def get_configmap(self, namespace: str, name: str) -> dict | None:
        res = self._res("v1", "ConfigMap")
        try:
            return self._call(f"get configmap {namespace}/{name}", lambda: res.get(name=name, namespace=namespace)).to_dict()
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def replicas(self, namespace: str, kind: str, name: str, api_version: str = "apps/v1") -> tuple[int | None, int | None]:
        """(spec.replicas, status.readyReplicas) of a scale target; (None, None) when it does not exist."""
        res = self._res(api_version, kind)
        try:
            obj = self._call(f"get {kind} {namespace}/{name}", lambda: res.get(name=name, namespace=namespace)).to_dict()
        except KubeError as exc:
            if exc.status == 404:
                return None, None
            raise
        spec, st = obj.get("spec") or {}, obj.get("status") or {}
        return spec.get("replicas"), int(st.get("readyReplicas") or 0)

    # -- writes
    def delete_owned_hpa(self, namespace: str, name: str, owner_uid: str) -> bool:
        """Delete the HPA ``name`` only if this autoscaler (``owner_uid``) owns it: an HPA the
        user made for the workload stays theirs. True when one was deleted."""
        return self.delete_owned("autoscaling/v2", "HorizontalPodAutoscaler", namespace, name, owner_uid)

    def delete_owned(self, api_version: str, kind: str, namespace: str, name: str, owner_uid: str) -> bool:
        """Delete ``kind`` ``name`` only if ``owner_uid`` owns it (an HPA, or KEDA's ScaledObject);
        an absent object, or an absent kind (KEDA not installed), is nothing to delete."""
        try:
            res = self._res(api_version, kind)
            obj = self._call(f"get {kind} {namespace}/{name}", lambda: res.get(name=name, namespace=namespace)).to_dict()
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        owners = (obj.get("metadata") or {}).get("ownerReferences") or []
        if not any(o.get("uid") == owner_uid for o in owners):
            return False
        try:
            self._call(f"delete {kind} {namespace}/{name}", lambda: res.delete(name=name, namespace=namespace))
        except KubeError as exc:
            if exc.status != 404:
                raise
        return True

    def apply(self, body: Mapping[str, Any]) -> dict:
        """Server-side apply under the operator's field manager (it owns what it writes)."""
        res = self._res(body["apiVersion"], body["kind"])
        md = body["metadata"]
        return self._call(f"apply {body['kind']} {md.get('namespace', '')}/{md['name']}", lambda: res.server_side_apply(
            body=dict(body), name=md["name"], namespace=md.get("namespace"), field_manager=FIELD_MANAGER,
            force_conflicts=True)).to_dict()

    def patch_status(self, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        res = self._res(API_VERSION, kind).subresources["status"]
        self._call(f"update status of {kind} {namespace}/{name}", lambda: res.patch(
            body={"status": dict(status)}, name=name, namespace=namespace, content_type="application/merge-patch+json"))

    def annotate_pod_template(self, namespace: str, deployment: str, key: str, value: str) -> bool:
        """Set an annotation on a Deployment's pod template (a rolling restart when it changes);
        False when the Deployment does not exist."""
        res = self._res("apps/v1", "Deployment")
        body = {"spec": {"template": {"metadata": {"annotations": {key: value}}}}}
        try:
            self._call(f"annotate deployment {namespace}/{deployment}", lambda: res.patch(
                body=body, name=deployment, namespace=namespace, content_type="application/merge-patch+json"))
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def emit_event(self, obj: Mapping[str, Any], event: Event, now: float) -> None:
        md = obj["metadata"]
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{md['name']}.{uuid.uuid4().hex[:12]}", "namespace": md["namespace"]},
            "involvedObject": {"apiVersion": obj.get("apiVersion", API_VERSION), "kind": obj["kind"], "name": md["name"],
                               "namespace": md["namespace"], "uid": md.get("uid", "")},
            "type": event.type, "reason": event.reason, "message": event.message[:1024],
            "firstTimestamp": iso(now), "lastTimestamp": iso(now), "count": 1,
            "source": {"component": FIELD_MANAGER}, "reportingComponent": FIELD_MANAGER,
        }
        res = self._res("v1", "Event")
        self._call(f"create event {event.reason}", lambda: res.create(body=body, namespace=md["namespace"]))

    # -- watches
    def watch(self, kind: str, on_change: Callable[[], None], stop: threading.Event, api_version: str = API_VERSION) -> None:
        """Call ``on_change`` for every change of ``kind`` until ``stop``; re-watches after the
        server ends a watch or an error (the runner's resync covers anything missed meanwhile)."""
        while not stop.is_set():
            try:
                res = self._res(api_version, kind)
                for _ in res.watch(timeout=30):
                    on_change()
                    if stop.is_set():
                        return
            except Exception as exc:  # noqa: BLE001 - a watch never kills the operator
                log.warning("watch %s: %s; retrying in 2 s", kind, exc)
                stop.wait(2.0)
