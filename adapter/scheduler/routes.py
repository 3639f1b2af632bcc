"""HTTP routes: the kube-scheduler extender verbs and the placement debugging API.

- ``POST /scheduler/filter``      ExtenderArgs -> ExtenderFilterResult
- ``POST /scheduler/prioritize``  ExtenderArgs -> HostPriorityList
- ``GET  /api/v1/placement``      node and zone scores with reasons (people debugging placement);
  ``?memory_request=512Mi`` adds what a pod of that size would be scored and filtered

Handlers read the in-process snapshot only (``SnapshotCache``); the store is read by a
background rebuild. A malformed body is a 400 with ``{"error": ...}``; anything else that
goes wrong inside is logged and answered *permissively* (all nodes pass, neutral scores),
because an extender error fails the pod's scheduling cycle unless ``ignorable: true``.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import asdict
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from adapter.scheduler.answers import filter_answer, prioritize_answer
from adapter.scheduler.podrequest import POD_SCHEMA, QUANTITY_PATTERN, parse_memory, pod_memory_request
from adapter.scheduler.protocol import (
    BadExtenderArgs,
    ExtenderArgs,
    error_body,
    filter_result,
    parse_extender_args,
)
from adapter.scheduler.settings import SchedulerSettings
from adapter.scheduler.snapshot import PlacementSnapshot, SnapshotCache
from core.store import ForecastStore
from forecaster.nodes import (
    NEUTRAL_SCORE,
    filter_reason,
    memory_series_id,
    node_series_id,
    preferred_node_affinity,
    score_for_pod,
)

log = logging.getLogger(__name__)

JSON = "application/json"
OFFLOAD_BODY_BYTES = 512 * 1024  # above this, parse and answer in a worker thread
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

_NODE_SCHEMA = {
    "type": "object",
    "description": "v1.Node; only metadata.name is read",
    "required": ["metadata"],
    "properties": {
        "metadata": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}}},
    },
}
_ARGS_SCHEMA = {
    "type": "object",
    "description": (
        "ExtenderArgs (k8s.io/kube-scheduler/extender/v1): NodeNames when the extender is "
        "nodeCacheCapable, Nodes otherwise; at least one of them is set. Keys also match "
        "case-insensitively like Go's encoding/json: Pod|pod, Nodes|nodes, NodeNames|nodenames."
    ),
    "properties": {
        "Pod": POD_SCHEMA,
        "Nodes": {
            "type": ["object", "null"],
            "properties": {"items": {"type": ["array", "null"], "items": _NODE_SCHEMA}},
        },
        "NodeNames": {"type": ["array", "null"], "items": {"type": "string"}},
    },
    "anyOf": [
        {"required": ["NodeNames"], "properties": {"NodeNames": {"type": "array"}}},
        {"required": ["Nodes"], "properties": {"Nodes": {"type": "object"}}},
    ],
}
_ERROR_SCHEMA = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}


def _openapi(summary: str, ok_schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "summary": summary,
        "requestBody": {"required": True, "content": {JSON: {"schema": _ARGS_SCHEMA}}},
        "responses": {
            "200": {"description": "OK", "content": {JSON: {"schema": ok_schema}}},
            "400": {"description": "Malformed ExtenderArgs", "content": {JSON: {"schema": _ERROR_SCHEMA}}},
            "413": {"description": "Body larger than max_body_bytes", "content": {JSON: {"schema": _ERROR_SCHEMA}}},
        },
    }


_FILTER_SCHEMA = {
    "type": "object",
    "properties": {
        "nodes": {"type": ["object", "null"]},
        "nodenames": {"type": ["array", "null"], "items": {"type": "string"}},
        "failedNodes": {"type": "object", "additionalProperties": {"type": "string"}},
        "failedAndUnresolvableNodes": {"type": "object", "additionalProperties": {"type": "string"}},
        "error": {"type": "string"},
    },
}
_PRIORITY_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"host": {"type": "string"}, "score": {"type": "integer", "minimum": 0, "maximum": 10}},
        "required": ["host", "score"],
    },
}


class SchedulerExtender:
    """The extender's logic over a ``SnapshotCache``; routes are thin wrappers around it."""

    def __init__(self, store: ForecastStore, settings: SchedulerSettings | None = None, clock=time.time) -> None:
        self.settings = settings or SchedulerSettings()
        self.scoring = self.settings.scoring()
        self.cache = SnapshotCache(store, self.settings, clock=clock)

    # -- verbs (bytes in, bytes out; raise BadExtenderArgs on malformed input) -------------

    def filter(self, body: bytes) -> bytes:
        args = parse_extender_args(body)
        request = pod_memory_request(args.pod)  # a malformed quantity is the caller's 400
        try:
            return filter_answer(self.cache.get(), args, request)
        except Exception:  # never block scheduling on our own failure
            log.exception("scheduler filter failed; letting every node pass")
            return filter_result(args, list(args.node_names), {})

    def prioritize(self, body: bytes) -> bytes:
        args = parse_extender_args(body)
        return self.prioritize_args(args)

    def prioritize_args(self, args: ExtenderArgs) -> bytes:
        request = pod_memory_request(args.pod)
        try:
            return prioritize_answer(self.cache.get(), args.node_names, request)
        except Exception:
            log.exception("scheduler prioritize failed; neutral scores")
            return prioritize_answer(None, args.node_names, 0.0)

    # -- placement API ---------------------------------------------------------------------

    def placement(self, namespace: str | None = None, node: str | None = None, zone: str | None = None,
                  memory_request_bytes: float | None = None) -> dict[str, Any]:
        snap: PlacementSnapshot = self.cache.get()
        loads = [nl for nl in snap.loads.values() if (node is None or nl.node == node) and (zone is None or nl.zone == zone)]
        loads.sort(key=lambda nl: (-nl.score, nl.node))
        zone_scores = snap.zone_scores()
        nodes = [
            {**asdict(nl), "filtered": nl.hot, "series_id": node_series_id(nl.node),
             "memory_series_id": memory_series_id(nl.node)}
            for nl in loads
        ]
        if memory_request_bytes is not None:  # what a pod of that size would be told
            for row, nl in zip(nodes, loads):
                row["pod_score"] = score_for_pod(nl, memory_request_bytes)
                row["pod_filter_reason"] = filter_reason(nl, self.scoring, memory_request_bytes)
        basis: dict[str, int] = {}
        for nl in snap.loads.values():
            basis[nl.basis] = basis.get(nl.basis, 0) + 1
        zones = [
            {"zone": z, "load": round(v, 4), "score": zone_scores[z],
             "nodes": sum(1 for nl in snap.loads.values() if nl.zone == z)}
            for z, v in sorted(snap.zones.items(), key=lambda kv: (kv[1], kv[0]))
            if zone is None or z == zone
        ]
        all_scores = {nl.node: nl.score for nl in sorted(snap.loads.values(), key=lambda nl: nl.node)}
        out: dict[str, Any] = {
            "namespace": namespace,
            "snapshot_built_at": snap.built_at,
            "snapshot_age_seconds": round(max(0.0, self.cache.clock() - snap.built_at), 3),
            "settings": asdict(self.settings),
            "nodes": nodes,
            "zones": zones,
            "hot_nodes": sorted(nl.node for nl in snap.loads.values() if nl.hot),
            "preferred_node_affinity": preferred_node_affinity(
                all_scores,
                top_n=self.settings.affinity_top_n,
                zone_scores=zone_scores,
                avoid=[nl.node for nl in snap.loads.values() if nl.hot],
            ),
            "unknown_node_score": NEUTRAL_SCORE,
            # how many nodes were scored on what; "cpu" = no fresh memory forecast (CPU only)
            "score_basis": dict(sorted(basis.items())),
        }
        if memory_request_bytes is not None and math.isfinite(memory_request_bytes):  # JSON has no inf
            out["memory_request_bytes"] = memory_request_bytes
        if namespace is not None:
            out["workloads"] = [w for w in snap.workloads if w.startswith(namespace + "/")]
            out["note"] = "node and zone scores are cluster-wide; namespace selects the workloads listed"
        if snap.error:
            out["store_error"] = snap.error
        return out


def _memory_request_bytes(memory_request: str | None) -> float | None:
    if memory_request is None:
        return None
    if len(memory_request) > 64:
        raise BadExtenderArgs("memory_request: longer than 64 characters; use a quantity like '512Mi'")
    return parse_memory(memory_request, "memory_request")


async def _read_body(request: Request, limit: int) -> bytes | Response:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        return Response(error_body(f"body of {length} bytes exceeds max_body_bytes={limit}"), status_code=413, media_type=JSON)
    body = await request.body()
    if len(body) > limit:
        return Response(error_body(f"body of {len(body)} bytes exceeds max_body_bytes={limit}"), status_code=413, media_type=JSON)
    return body


def register_scheduler_routes(app: FastAPI, store: ForecastStore, settings: SchedulerSettings | None = None) -> SchedulerExtender:
    """Add the extender verbs and the placement API to ``app``; returns the extender (also at
    ``app.state.scheduler_extender``). The snapshot is built once here (errors tolerated) so the
    first scheduling call does not wait for the store."""
    ext = SchedulerExtender(store, settings)
    app.state.scheduler_extender = ext
    ext.cache.refresh()
    limit = ext.settings.max_body_bytes

    async def verb(request: Request, fn) -> Response:
        body = await _read_body(request, limit)
        if isinstance(body, Response):
            return body
        try:
            if len(body) > OFFLOAD_BODY_BYTES:
                # whole v1.Node objects (nodeCacheCapable: false): ~0.3 s for 5,000 nodes; a
                # worker thread keeps the event loop (and the HPA's metric calls) responsive
                return Response(await run_in_threadpool(fn, body), media_type=JSON)
            return Response(fn(body), media_type=JSON)
        except BadExtenderArgs as exc:
            return Response(error_body(str(exc)), status_code=400, media_type=JSON)

    @app.post("/scheduler/filter", tags=["scheduler"], openapi_extra=_openapi("kube-scheduler extender filter", _FILTER_SCHEMA))
    async def scheduler_filter(request: Request) -> Response:
        return await verb(request, ext.filter)

    @app.post(
        "/scheduler/prioritize", tags=["scheduler"],
        openapi_extra=_openapi("kube-scheduler extender prioritize", _PRIORITY_SCHEMA),
    )
    async def scheduler_prioritize(request: Request) -> Response:
        return await verb(request, ext.prioritize)

    @app.get("/api/v1/placement", tags=["scheduler"], summary="Node and zone placement scores with reasons",
             responses={400: {"description": "namespace is not a DNS-1123 label, or memory_request is not a quantity",
                              "content": {JSON: {"schema": _ERROR_SCHEMA}}}})
    async def placement(
        # checked below (the answer names the field); the schema states the same rule
        namespace: str | None = Query(None, description="lists this namespace's workloads (a DNS-1123 label)",
                                      json_schema_extra={"maxLength": 63, "pattern": _DNS1123_LABEL.pattern}),
        node: str | None = None,
        zone: str | None = None,
        # checked below like namespace (the answer names the field); the schema states the rule
        memory_request: str | None = Query(None, description="a pod's memory request (Kubernetes quantity, e.g. 512Mi): "
                                           "adds each node's pod_score and pod_filter_reason for it",
                                           json_schema_extra={"maxLength": 64, "pattern": QUANTITY_PATTERN}),
    ) -> Response:
        if namespace is not None and (len(namespace) > 63 or not _DNS1123_LABEL.match(namespace)):
            return JSONResponse(
                {"error": f"namespace: {namespace!r} is not a valid namespace name "
                          "(lower-case DNS-1123 label, at most 63 characters)"},
                status_code=400,
            )
        try:
            request_bytes = _memory_request_bytes(memory_request)
        except BadExtenderArgs as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(ext.placement(namespace=namespace, node=node, zone=zone, memory_request_bytes=request_bytes))

    return ext
