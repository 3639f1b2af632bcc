"""The project's one client of the Kubernetes API (the official ``kubernetes`` library).

Every process that talks to the API server for reviews or reads gets a :class:`KubeClient`
from here: the adapter (TokenReview and SubjectAccessReview for its API, the ready-pod list and
watch, the PredictiveAutoscaler list of Observe mode) and the warm pool (claim reviews). On the
core because both authorize with it and neither imports the other. Nothing else in the
product imports ``kubernetes`` (an import-linter contract in pyproject.toml) except the two
modules that build typed objects with it (warmpool/backends/kubernetes.py,
kubeoperator/kube.py).

Credentials come from the library's own loaders, so a kubeconfig works the way ``kubectl``
reads it: ``exec`` credential plugins (EKS, GKE, AKS, OIDC helpers), ``auth-provider``, tokens,
token files, client certificates; and the in-cluster service account (its projected token is
re-read as the kubelet rotates it). Inline ``*-data`` keys must be files for TLS: they are
written to one private directory per process, removed when the process exits.

Reads return the API server's JSON as dicts (``_preload_content=False``): the pod list of a large
cluster is parsed once, not turned into model objects. Failures become :class:`KubeUnavailable`
(retryable; ``status`` None when the server could not be reached) or :class:`KubeGone` (a watch's
resourceVersion is too old: relist). The reviews are ``async`` for the request path and run the
blocking call in a thread, so the event loop never waits on the API server.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

from core.errors import UserError

# the ready-pod list's page size: kube-apiserver's own list pagers (client-go's pager) use 500
POD_PAGE_SIZE = 500
# what the adapter's workloads' selectors are read from (the HPA's scale targets)
WORKLOAD_READERS = {"Deployment": "read_namespaced_deployment", "StatefulSet": "read_namespaced_stateful_set",
                    "ReplicaSet": "read_namespaced_replica_set"}
AUTOSCALERS = ("foresight.dev", "v1alpha1", "predictiveautoscalers")


class KubeUnavailable(RuntimeError):
    """The API server did not answer a request (refused, timeout, an error status): retryable.
    ``status``: the HTTP status, or None when no answer came."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class KubeGone(KubeUnavailable):
    """410 Gone: a watch's resourceVersion is older than the API server keeps; list again."""


_tmp_lock = threading.Lock()
_tmp_dir: str | None = None


def _private_tmp() -> str:
    """The directory the library writes inline certificates and keys to: one per process, 0700,
    removed at exit (the library's own exit hook removes the files, this one the directory)."""
    global _tmp_dir
    with _tmp_lock:
        if _tmp_dir is None or not os.path.isdir(_tmp_dir):
            _tmp_dir = tempfile.mkdtemp(prefix="foresight-kube-")
            atexit.register(shutil.rmtree, _tmp_dir, True)
        return _tmp_dir


class KubeClient:
    """One API client (its connection pool shared by every caller's threads)."""

    def __init__(self, configuration: Any, *, timeout_seconds: float = 5.0) -> None:
        from kubernetes import client as k8s

        # One attempt per call: the callers have their own retry (the watch's loop, the
        # review's next request); urllib3's default three silent retries would triple a timeout.
        configuration.retries = 0
        self.configuration = configuration
        self.timeout = float(timeout_seconds)
        self.api_client = k8s.ApiClient(configuration)
        self._k8s = k8s

    # --- construction -----------------------------------------------------------------
    @classmethod
    def in_cluster(cls, **kw: Any) -> "KubeClient":
        from kubernetes import client as k8s, config

        cfg = k8s.Configuration()
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException as exc:
            raise UserError(f"not running in a cluster ({exc}); pass --kubeconfig with a kubeconfig file"
                            ) from exc
        return cls(cfg, **kw)

    @classmethod
    def from_kubeconfig(cls, path: str, *, context: str | None = None, **kw: Any) -> "KubeClient":
        """The kubeconfig's current context (or ``context``), through the library's loader:
        exec plugins and auth providers run as kubectl runs them. The file is never written back."""
        from kubernetes import client as k8s, config

        if not Path(path).is_file():
            raise UserError(f"kubeconfig {path}: no such file; pass the path of a readable kubeconfig")
        cfg = k8s.Configuration()
        try:
            config.load_kube_config(config_file=path, context=context, client_configuration=cfg,
                                    persist_config=False, temp_file_path=_private_tmp())
        except (config.ConfigException, KeyError, ValueError, TypeError, OSError) as exc:
            raise UserError(f"kubeconfig {path}: no usable context ({exc.__class__.__name__}: {exc}); "
                            "check current-context and its cluster and user entries") from exc
        return cls(cfg, **kw)

    @classmethod
    def for_server(cls, server: str, *, token: str | None = None, ca_file: str | None = None,
                   **kw: Any) -> "KubeClient":
        """An explicit server and bearer token (tests, and tools that have no kubeconfig)."""
        from kubernetes import client as k8s

        cfg = k8s.Configuration(host=server.rstrip("/"))
        if token:
            # the configuration key is "BearerToken" in the newer clients (37 here) and "authorization" in older ones
            cfg.api_key["BearerToken"] = cfg.api_key["authorization"] = f"Bearer {token}"
        if ca_file:
            cfg.ssl_ca_cert = ca_file
        return cls(cfg, **kw)

    @classmethod
    def connect(cls, kubeconfig: str | None = None, **kw: Any) -> "KubeClient":
        """``kubeconfig`` when given, else the in-cluster service account."""
        return cls.from_kubeconfig(kubeconfig, **kw) if kubeconfig else cls.in_cluster(**kw)

    @property
    def server(self) -> str:
        return str(self.configuration.host).rstrip("/")

    def authorization(self) -> str | None:
        """The Authorization header the next request carries (an exec plugin's token is
        fetched again once it expires)."""
        return self.configuration.get_api_key_with_prefix("BearerToken", alias="authorization")

    def close(self) -> None:
        self.api_client.close()

    # --- calls ------------------------------------------------------------------------
    def _call(self, what: str, fn, *args: Any, **kw: Any) -> Any:
        """One API call with the raw response; errors as KubeUnavailable (or KubeGone)."""
        import urllib3

        ApiException = self._k8s.exceptions.ApiException
        kw.setdefault("_request_timeout", self.timeout)
        try:
            return fn(*args, _preload_content=False, **kw)
        except ApiException as exc:
            status = int(exc.status) if exc.status else None
            kind = KubeGone if status == 410 else KubeUnavailable
            raise kind(f"{what}: {self.server} answered {status} {str(exc.reason or '').strip()}", status) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeUnavailable(f"{what}: {self.server}: {exc.__class__.__name__}: {exc}") from exc

    def _json(self, what: str, fn, *args: Any, **kw: Any) -> dict:
        resp = self._call(what, fn, *args, **kw)
        try:
            return json.loads(resp.data)
        except ValueError as exc:
            raise KubeUnavailable(f"{what}: {self.server} did not answer JSON", resp.status) from exc

    def read_workload(self, namespace: str, kind: str, name: str) -> dict | None:
        """A Deployment, StatefulSet or ReplicaSet as JSON; None when it does not exist (or the
        kind is none of those)."""
        method = WORKLOAD_READERS.get(kind)
        if method is None:
            return None
        fn = getattr(self._k8s.AppsV1Api(self.api_client), method)
        try:
            return self._json(f"get {kind} {namespace}/{name}", fn, name, namespace)
        except KubeUnavailable as exc:
            if exc.status == 404:
                return None
            raise

    def list_pods_page(self, limit: int = POD_PAGE_SIZE, continue_token: str | None = None) -> dict:
        """One page of every namespace's pods (``metadata.continue`` names the next page)."""
        kw: dict[str, Any] = {"limit": int(limit)}
        if continue_token:
            kw["_continue"] = continue_token
        api = self._k8s.CoreV1Api(self.api_client)
        return self._json("list pods", api.list_pod_for_all_namespaces, **kw)

    def list_pods(self, limit: int = POD_PAGE_SIZE) -> tuple[list[dict], str]:
        """Every pod, page by page, and the list's resourceVersion (where a watch resumes).
        A continue token that expired mid-list (410) raises KubeGone: start the list again."""
        items: list[dict] = []
        token: str | None = None
        while True:
            page = self.list_pods_page(limit, token)
            items.extend(page.get("items") or ())
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    def watch_pods(self, resource_version: str, timeout_seconds: int) -> Iterator[dict]:
        """Watch events of every namespace's pods from ``resource_version`` (with bookmarks)
        until the server ends the stream after ``timeout_seconds``. KubeGone when that version
        is too old, at the start or as an ERROR event."""
        from kubernetes.watch.watch import iter_resp_lines

        api = self._k8s.CoreV1Api(self.api_client)
        resp = self._call("watch pods", api.list_pod_for_all_namespaces, watch=True,
                          resource_version=resource_version, allow_watch_bookmarks=True,
                          timeout_seconds=int(timeout_seconds),
                          _request_timeout=(self.timeout, timeout_seconds + 10.0))
        try:
            for line in iter_resp_lines(resp):
                if not line:
                    continue
                ev = json.loads(line)
                if ev.get("type") == "ERROR":
                    obj = ev.get("object") or {}
                    kind = KubeGone if obj.get("code") == 410 else KubeUnavailable
                    raise kind(f"watch pods: {obj.get('message') or obj}", obj.get("code"))
                yield ev
        finally:
            resp.release_conn()

    def list_autoscalers(self) -> dict | None:
        """Every PredictiveAutoscaler as JSON; None when the CRD is not installed."""
        api = self._k8s.CustomObjectsApi(self.api_client)
        try:
            return self._json("list PredictiveAutoscalers", api.list_cluster_custom_object, *AUTOSCALERS)
        except KubeUnavailable as exc:
            if exc.status == 404:
                return None
            raise

    # --- delegated authentication and authorization (core/accessreview.py) --------
    def _review(self, what: str, fn, body: Any) -> dict:
        try:
            return self._json(what, fn, body)
        except KubeUnavailable as exc:
            if exc.status in (401, 403):
                # here it means the process's own credentials lack system:auth-delegator
                raise KubeUnavailable(f"{exc}; does the service account have the system:auth-delegator "
                                      "ClusterRole?", exc.status) from exc
            raise

    def token_review_sync(self, token: str, audiences: list[str] | None = None) -> dict:
        k8s = self._k8s
        body = k8s.V1TokenReview(api_version="authentication.k8s.io/v1", kind="TokenReview",
                                 spec=k8s.V1TokenReviewSpec(token=token, audiences=audiences or None))
        api = k8s.AuthenticationV1Api(self.api_client)
        return self._review("TokenReview", api.create_token_review, body).get("status") or {}

    def subject_access_review_sync(self, spec: dict) -> dict:
        k8s = self._k8s
        ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        body = k8s.V1SubjectAccessReview(
            api_version="authorization.k8s.io/v1", kind="SubjectAccessReview",
            spec=k8s.V1SubjectAccessReviewSpec(
                user=spec.get("user"), groups=spec.get("groups"), uid=spec.get("uid"), extra=spec.get("extra"),
                resource_attributes=k8s.V1ResourceAttributes(**ra) if ra else None,
                non_resource_attributes=k8s.V1NonResourceAttributes(**nra) if nra else None))
        api = k8s.AuthorizationV1Api(self.api_client)
        return self._review("SubjectAccessReview", api.create_subject_access_review, body).get("status") or {}

    async def token_review(self, token: str, audiences: list[str] | None = None) -> dict:
        """The TokenReview ``status`` (authenticated, user{username, uid, groups, extra})."""
        return await asyncio.to_thread(self.token_review_sync, token, audiences)

    async def subject_access_review(self, spec: dict) -> dict:
        """The SubjectAccessReview ``status`` (allowed, denied, reason) for a wire-format ``spec``
        (core.accessreview.sar_spec)."""
        return await asyncio.to_thread(self.subject_access_review_sync, spec)


__all__ = ["POD_PAGE_SIZE", "KubeClient", "KubeGone", "KubeUnavailable"]
