"""The OpenAPI document tells the truth: every error status a route can answer is documented
with the body it really has (a metav1.Status), and FastAPI's default 422 (which this app never
sends: invalid input is a 400 naming the field) is dropped. ``schemathesis run --checks all``
holds the app to it (tests/adapter/test_fuzz.py)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

STATUS_SCHEMA = {
    "type": "object",
    "description": "metav1.Status",
    "properties": {
        "kind": {"type": "string", "enum": ["Status"]},
        "apiVersion": {"type": "string"},
        "metadata": {"type": "object"},
        "status": {"type": "string"},
        "message": {"type": "string"},
        "reason": {"type": "string"},
        "code": {"type": "integer"},
    },
    "required": ["kind", "status", "message", "reason", "code"],
}

_WHY = {
    "400": "Invalid input; the message names the field and how to fix it",
    "401": "No valid credentials (when authentication is configured)",
    "403": "RBAC does not allow this caller (when delegated authorization is configured)",
    "404": "No such metric, namespace, workload or forecast",
    "503": "Nothing can be served right now (store and demand source both unavailable, or the "
           "authorization check could not be made); retry",
}
ANONYMOUS = ("/healthz", "/livez", "/readyz")


def _errors_for(path: str) -> tuple[str, ...]:
    """The statuses a route answers besides 400 (input) and 401/403/503 (any protected route)."""
    if path.startswith("/apis/external.metrics.k8s.io/v1beta1/namespaces/") or path.startswith("/api/v1/forecasts/"):
        return ("404",)
    return ()


def _response(code: str) -> dict[str, Any]:
    return {"description": _WHY[code], "content": {"application/json": {"schema": STATUS_SCHEMA}}}


def document_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """Rewrite the generated document's responses in place (and return it)."""
    for path, ops in schema.get("paths", {}).items():
        for op in ops.values():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            responses = op["responses"]
            responses.pop("422", None)
            codes = list(_errors_for(path))
            if op.get("parameters") or op.get("requestBody"):
                codes.append("400")
            if path not in ANONYMOUS:
                codes += ["401", "403", "503"]
            for code in codes:
                responses.setdefault(code, _response(code))
    schema.get("components", {}).get("schemas", {}).pop("HTTPValidationError", None)
    schema.get("components", {}).get("schemas", {}).pop("ValidationError", None)
    return schema


def install(app: FastAPI) -> None:
    """Serve the corrected document at /openapi.json (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_errors(get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
