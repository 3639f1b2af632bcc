"""Wire formats shared by the adapter's routes: metav1.Status errors, RFC 3339 timestamps,
compact JSON, and a raw ASGI JSON send for the hot path."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from fastapi.responses import Response

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
PREFIX = f"/apis/{GROUP_VERSION}"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}
JSON_HEADERS = [(b"content-type", b"application/json")]


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()


def status_body(code: int, message: str) -> bytes:
    """A metav1.Status failure, as the API server writes it."""
    return dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": _REASONS.get(code, "Unknown"),
            "code": code,
        }
    )


def status_response(code: int, message: str, headers: dict | None = None) -> Response:
    return Response(status_body(code, message), status_code=code, media_type="application/json", headers=headers)


_LAST_TS: list = [None, ""]


def rfc3339(ts: float) -> str:
    sec = int(ts)
    if _LAST_TS[0] != sec:  # one format per second on the hot path
        _LAST_TS[1] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(sec))
        _LAST_TS[0] = sec
    return _LAST_TS[1]



async def send_json(send, code: int, body: bytes, head: bool = False, extra=()) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": code,
            "headers": [*JSON_HEADERS, (b"content-length", str(len(body)).encode()), *extra],
        }
    )
    await send({"type": "http.response.body", "body": b"" if head else body})

