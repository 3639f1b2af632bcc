"""A small async client of the Kubernetes API's TokenReview and SubjectAccessReview.

Aggregated API servers delegate both checks to the API server (that is what the
``system:auth-delegator`` ClusterRoleBinding in manifests/adapter/rbac.yaml grants). This module
only speaks the two endpoints; caching and the decisions live in forecaster/accessreview.py.
On the ground floor because the adapter (its API) and the warm pool (its claim API) both
authorize with it, and neither imports the other.

Credentials, in order: a kubeconfig (``--authentication-kubeconfig``; server, CA, and a token
or a client certificate), or the in-cluster service account (projected token re-read as
kubelet rotates it).
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any

from forecaster.errors import UserError

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class KubeUnavailable(RuntimeError):
    """The API server could not answer a review (refused, timeout, 5xx): retryable."""


class KubeAPI:
    """TokenReview and SubjectAccessReview over HTTPS (async; one pooled connection)."""

    def __init__(
        self,
        server: str,
        *,
        token: str | None = None,
        token_file: str | None = None,
        ca_file: str | None = None,
        client_cert: tuple[str, str] | None = None,
        timeout_seconds: float = 5.0,
    ) -> None:
        self.server = server.rstrip("/")
        self._token = token
        self._token_file = token_file
        self._token_read_at = 0.0
        ctx = ssl.create_default_context(cafile=ca_file) if self.server.startswith("https") else None
        if ctx is not None:
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            if client_cert:
                ctx.load_cert_chain(*client_cert)
        self._ssl = ctx
        self.timeout = timeout_seconds
        self._client: Any = None

    @classmethod
    def in_cluster(cls, **kw: Any) -> "KubeAPI":
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host or not (SA_DIR / "token").is_file():
            raise UserError("not running in a cluster (no KUBERNETES_SERVICE_HOST or service account token); "
                            "pass --authentication-kubeconfig")
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", token_file=str(SA_DIR / "token"), ca_file=str(SA_DIR / "ca.crt"), **kw)

    @classmethod
    def from_kubeconfig(cls, path: str, **kw: Any) -> "KubeAPI":
        """Server, CA and credentials of the current context (inline *-data is written to
        private temporary files, since ssl loads certificates from files)."""
        import yaml

        try:
            cfg = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise UserError(f"kubeconfig {path}: cannot read it ({exc})") from exc
        try:
            ctx_name = cfg.get("current-context") or cfg["contexts"][0]["name"]
            ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
            cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
            user = next((u["user"] for u in cfg.get("users", []) if u["name"] == ctx.get("user")), {}) or {}
        except (KeyError, IndexError, StopIteration, TypeError) as exc:
            raise UserError(f"kubeconfig {path}: no usable current context ({exc!r})") from exc
        base = Path(path).parent

        def file_of(key: str, where: dict) -> str | None:
            if where.get(f"{key}-data"):
                fd, name = tempfile.mkstemp(prefix="foresight-kube-")
                os.write(fd, base64.b64decode(where[f"{key}-data"]))
                os.close(fd)
                return name
            value = where.get(key)
            return str(base / value) if value and not os.path.isabs(value) else value

        cert, key = file_of("client-certificate", user), file_of("client-key", user)
        return cls(
            cluster["server"],
            token=user.get("token"),
            token_file=user.get("tokenFile"),
            ca_file=file_of("certificate-authority", cluster),
            client_cert=(cert, key) if cert and key else None,
            **kw,
        )

    def _bearer(self) -> str | None:
        if self._token_file and time.monotonic() - self._token_read_at > 60:
            try:
                self._token = Path(self._token_file).read_text().strip()
                self._token_read_at = time.monotonic()
            except OSError as exc:
                raise KubeUnavailable(f"service account token {self._token_file}: {exc.strerror}") from exc
        return self._token

    async def _post(self, path: str, body: dict) -> dict:
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(verify=self._ssl if self._ssl is not None else False, timeout=self.timeout)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            r = await self._client.post(self.server + path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise KubeUnavailable(f"{self.server}{path}: {exc.__class__.__name__}: {exc}") from exc
        if r.status_code >= 500 or r.status_code == 429:
            raise KubeUnavailable(f"{self.server}{path} answered {r.status_code}")
        if r.status_code >= 400:
            # 401/403 here means the adapter's own credentials lack system:auth-delegator.
            raise KubeUnavailable(
                f"{self.server}{path} answered {r.status_code}: {r.text[:300]}; does the adapter's service "
                "account have the system:auth-delegator ClusterRole?"
            )
        try:
            return r.json()
        except ValueError as exc:
            raise KubeUnavailable(f"{self.server}{path} did not answer JSON") from exc

    async def token_review(self, token: str, audiences: list[str] | None = None) -> dict:
        """The TokenReview ``status`` (authenticated, user{username, uid, groups, extra})."""
        spec: dict[str, Any] = {"token": token}
        if audiences:
            spec["audiences"] = audiences
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        return (await self._post(TOKEN_REVIEW_PATH, body)).get("status") or {}

    async def subject_access_review(self, spec: dict) -> dict:
        """The SubjectAccessReview ``status`` (allowed, denied, reason)."""
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        return (await self._post(SAR_PATH, body)).get("status") or {}

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
