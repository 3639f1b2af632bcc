"""A pod's effective memory request, computed the way kube-scheduler's NodeResourcesFit does
(k8s.io/component-helpers resource.PodRequests):

- pod-level ``spec.resources.requests.memory``, when set, is the pod's request;
- otherwise the sum over ``containers``, plus every restartable init container (a sidecar,
  ``restartPolicy: Always``) since it runs beside them; each regular init container runs
  alone with the sidecars started before it, and the pod needs the largest of those peaks;
- plus ``spec.overhead.memory`` (RuntimeClass overhead).

A container without a memory request counts 0 (the API server has already copied limits into
missing requests by the time the scheduler sees the pod). Every part read here is checked
against ``POD_SCHEMA`` (the OpenAPI description of what we read); anything else in the pod is
ignored. ``null`` is allowed wherever Go marshals a nil slice or map.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from adapter.quantity import parse_quantity
from adapter.scheduler.protocol import BadExtenderArgs, _get

# The quantities Go's resource.Quantity marshals (canonical: "512Mi", "1G", "1500m", "1e3"), as
# a pattern the OpenAPI schema states and the parser checks: what matches always parses.
QUANTITY_PATTERN = r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
_QUANTITY = re.compile(QUANTITY_PATTERN)

_MEMORY = {"type": ["string", "null"], "pattern": QUANTITY_PATTERN}  # null: absent
_RESOURCES = {
    "type": ["object", "null"],
    "properties": {"requests": {"type": ["object", "null"], "properties": {"memory": _MEMORY}}},
}
_CONTAINERS = {"type": ["array", "null"], "items": {"type": "object", "properties": {"resources": _RESOURCES}}}
POD_SCHEMA: dict[str, Any] = {
    "type": ["object", "null"],
    "description": "v1.Pod; only the memory requests in spec are read",
    "properties": {
        "spec": {
            "type": ["object", "null"],
            "properties": {
                "containers": _CONTAINERS,
                "initContainers": _CONTAINERS,
                "resources": _RESOURCES,
                "overhead": {"type": ["object", "null"], "properties": {"memory": _MEMORY}},
            },
        },
    },
}


def parse_memory(raw: Any, where: str) -> float:
    """Bytes of one memory quantity string; BadExtenderArgs naming ``where`` otherwise."""
    if not isinstance(raw, str) or not _QUANTITY.match(raw):
        shown = repr(raw) if isinstance(raw, str) else type(raw).__name__
        raise BadExtenderArgs(f"{where}: {shown} is not a memory quantity (expected a string like '512Mi', '1G' or '1500M')")
    return float(parse_quantity(raw))  # float: an absurd exponent becomes inf, never an error


def _mapping(obj: Any, where: str) -> Mapping[str, Any] | None:
    if obj is None or isinstance(obj, Mapping):
        return obj
    raise BadExtenderArgs(f"{where} must be an object, got {type(obj).__name__}")


def _memory_in(holder: Mapping[str, Any] | None, key: str, where: str) -> float:
    """``holder[key].memory`` in bytes (0 when absent)."""
    values = _mapping(_get(holder, key) if holder is not None else None, f"{where}.{key}")
    raw = _get(values, "memory") if values is not None else None
    return 0.0 if raw is None else parse_memory(raw, f"{where}.{key}.memory")


def _requested(container: Any, where: str) -> float:
    if not isinstance(container, Mapping):
        raise BadExtenderArgs(f"{where} must be a container object, got {type(container).__name__}")
    resources = _mapping(_get(container, "resources"), f"{where}.resources")
    return _memory_in(resources, "requests", f"{where}.resources")


def _containers(spec: Mapping[str, Any], key: str) -> list[Any]:
    items = _get(spec, key)
    if items is None:
        return []
    if not isinstance(items, list):
        raise BadExtenderArgs(f"Pod.spec.{key} must be a list of containers, got {type(items).__name__}")
    return items


def pod_memory_request(pod: Mapping[str, Any] | None) -> float:
    """Bytes of memory the pod asks a node for (0 for a pod without requests or without spec)."""
    spec = _mapping(_get(pod, "spec") if pod is not None else None, "Pod.spec")
    if spec is None:
        return 0.0
    overhead = _memory_in(spec, "overhead", "Pod.spec")
    pod_resources = _mapping(_get(spec, "resources"), "Pod.spec.resources")
    pod_level = _memory_in(pod_resources, "requests", "Pod.spec.resources")
    containers = _containers(spec, "containers")
    total = sum(_requested(c, f"Pod.spec.containers[{i}]") for i, c in enumerate(containers))
    sidecars = 0.0
    init_peak = 0.0
    for i, c in enumerate(_containers(spec, "initContainers")):
        req = _requested(c, f"Pod.spec.initContainers[{i}]")
        if _get(c, "restartPolicy") == "Always":
            total += req
            sidecars += req
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, req + sidecars)
    if pod_level > 0:
        return pod_level + overhead
    return max(total, init_peak) + overhead
