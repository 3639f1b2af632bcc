"""Who is calling, and may they: the adapter's authentication and delegated authorization.

As in Kubernetes' own aggregated API servers (k8s.io/apiserver's delegating authn/authz):
- the aggregator's front-proxy identity (X-Remote-User/-Group, trusted only from its verified
  client certificate) or a bearer token checked with a TokenReview says who calls;
- a SubjectAccessReview per request says whether they may: the HPA controller may read the
  metrics of every namespace, a person only those their RBAC allows.

The reviews and their cache are shared with the warm pool (core/accessreview.py);
``request_attributes`` maps each adapter path onto the attributes RBAC rules are written against.
"""

from __future__ import annotations

from adapter.responses import GROUP, PREFIX, VERSION
from core.accessreview import (
    Attributes,
    Authenticator,
    Authorizer,
    Decision,
    KubeUnavailable,
    SubjectAccessReviewAuthorizer,
    TokenReviewAuthenticator,
    User,
    sar_spec,
)

FORECASTS_RESOURCE = "forecasts"  # RBAC resource name for the REST view and the dashboard


def _attrs(**kw) -> Attributes:
    return Attributes(group=GROUP, version=VERSION, **kw)


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
            return _attrs(verb=verb, resource=parts[2], namespace=parts[1])
    if path.startswith("/api/v1/forecasts"):
        parts = [p for p in path[len("/api/v1/forecasts") :].split("/") if p]
        if len(parts) == 2:
            return _attrs(verb=verb, resource=FORECASTS_RESOURCE, namespace=parts[0], name=parts[1])
        if not parts:
            return _attrs(verb="list" if verb == "get" else verb, resource=FORECASTS_RESOURCE,
                          namespace=query.get("namespace", ""))
    if path == "/":
        return _attrs(verb="list", resource=FORECASTS_RESOURCE, namespace=query.get("namespace", ""))
    return Attributes(verb=verb, path=path)  # non-resource: no group


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
    "FORECASTS_RESOURCE",
]
