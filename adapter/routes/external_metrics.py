"""The external metrics API as documented routes. Requests are answered by the HotPath
middleware before FastAPI sees them; these declarations give /docs and /openapi.json."""

from __future__ import annotations

from fastapi import FastAPI, Query, Request
from fastapi.responses import Response

from adapter.core import AdapterCore
from adapter.responses import PREFIX


def register(app: FastAPI, core: AdapterCore) -> None:
    def _apis(request: Request) -> Response:
        code, body = core.answer_apis(request.method, request.url.path, request.scope.get("query_string", b""))
        return Response(body, status_code=code, media_type="application/json")

    app.add_api_route("/apis", _apis, methods=["GET"], tags=["external metrics"], summary="API group list")
    app.add_api_route(PREFIX, _apis, methods=["GET"], tags=["external metrics"], summary="Discovery: served metrics")

    @app.get(PREFIX + "/namespaces/{namespace}/{metric}", tags=["external metrics"], summary="Metric values")
    def external_metric(
        request: Request,
        namespace: str,
        metric: str,
        labelSelector: str | None = Query(None, description="Kubernetes label selector"),  # noqa: N803
    ) -> Response:
        return _apis(request)
