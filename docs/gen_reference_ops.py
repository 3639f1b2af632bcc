"""The reference pages read from the processes' source by AST: metrics.md (every Prometheus
metric they define) and reasons.md (the operator's condition and Event reasons, with what to do
about each, and the adapter's HTTP Status reasons). Used by gen_reference.py."""

from __future__ import annotations

import ast

from gen_reference_md import HEADER, ROOT, code, table

# Packages whose source defines what the processes export; scanned for metrics.
METRIC_PACKAGES = ("adapter", "warmpool", "core", "forecaster", "kubeoperator", "foresight")
METRIC_CALLS = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary",
                "GaugeMetricFamily": "gauge", "CounterMetricFamily": "counter",
                "HistogramMetricFamily": "histogram"}
# Where each package's metrics are served.
METRIC_ENDPOINTS = {
    "adapter": "`foresight serve` (and `foresight up`): `/metrics` on the HTTPS port, behind delegated authentication",
    "warmpool": "`foresight warmpool run`: `/metrics` on the warm-pool API port",
}

# What to do about each condition or Event reason. A reason the code gains without an entry here
# is still listed (with its message from the code); add its advice here.
ADVICE = {
    "InvalidWorkload": "The spec is one the trainer would refuse; the message names each field path. Fix the "
                       "fields (`kubectl describe pas NAME` shows the `InvalidSpec` Event too).",
    "StoreUnavailable": "The operator cannot read the forecast store (Redis). Check the Redis pod, its Service and "
                        "the operator's Redis password Secret; the HPA keeps serving from the adapter meanwhile.",
    "NoForecastYet": "The trainer has not published a forecast for this workload yet: wait one refresh interval "
                     "after the first history arrives. If it persists, check the trainer's logs for its demand "
                     "query and that Prometheus holds the series.",
    "Observing": "Observe mode: nothing to do. `status.observe` and the dashboard show what the HPA would have done.",
    "Serving": "Healthy: the HPA receives the predicted metrics.",
    "Fallback": "At least one metric is served from observed demand (the message says why: stale forecast, "
                "the live check fell back to persistence, short history). The HPA still scales reactively; "
                "see Troubleshooting, \"The autoscaler is Degraded/Fallback\".",
    "SpecNotApplied": "The workload is also listed by hand in the `foresight-workloads` ConfigMap, which wins. "
                      "Remove it from one of the two.",
    "ForecastServed": "Healthy: every metric is served from its forecast.",
    "InvalidPool": "The WarmPool's spec is one the controller would refuse; the message names each field.",
    "ControllerUnreachable": "The operator cannot reach the warm-pool controller's API. Check its pod and Service "
                             "(`warmpool.enabled` in the chart).",
    "NotInController": "The controller has not loaded this pool yet (its policy ConfigMap updates within about a "
                       "minute). If it persists, check the controller's logs for a refused policy.",
    "CreationFailing": "The controller keeps failing to create this pool's containers (the message has the "
                       "backend's error): image, RuntimeClass, quota or node capacity.",
    "Running": "Healthy: the pool runs in the warm-pool controller.",
    "ModelChanged": "Informational: the trainer chose another model at a retrain.",
    "InvalidSpec": "Emitted once per generation when the spec is refused; fix the named fields.",
    "ModeChanged": "Informational: `spec.mode` switched (Observe <-> Act); no retrain happens.",
    "WouldScale": "Observe mode: the replicas the predictive HPA would ask for changed.",
}
HTTP_ADVICE = {
    400: "A malformed request (a bad label selector or quantity); the message names the field.",
    401: "No valid credentials: a bearer token or the aggregator's front-proxy client certificate.",
    403: "The caller may not read this namespace or metric (SubjectAccessReview denied); grant it with RBAC.",
    404: "Unknown metric, namespace or workload.",
    429: "The warm pool's `max_cold_per_minute` was reached; retry after the `Retry-After` header.",
    503: "Nothing could be served: no forecast and no observed demand (Redis and Prometheus both down), "
         "or an authorization review could not be made. Discovery keeps working; the HPA keeps its CPU floor.",
}


# ---------------------------------------------------------------------------------------------- metrics

def _str_of(node: ast.AST, consts: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _str_of(node.left, consts), _str_of(node.right, consts)
        return a + b if a is not None and b is not None else None
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    return None


def metric_definitions() -> list[dict]:
    """Every metric family a process defines: name as scraped, type, labels, help, package."""
    found = {}
    for pkg in METRIC_PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(f.read_text(), str(f))
            consts = {n.targets[0].id: n.value.value for n in ast.walk(tree)
                      if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                      and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if fn not in METRIC_CALLS:
                    continue
                name = _str_of(node.args[0], consts)
                if not name or not name.startswith("foresight_"):
                    continue
                kind = METRIC_CALLS[fn]
                help_ = _str_of(node.args[1], consts) if len(node.args) > 1 else ""
                labels_node = node.args[2] if len(node.args) > 2 else next(
                    (k.value for k in node.keywords if k.arg in ("labels", "labelnames")), None)
                labels = [e.value for e in labels_node.elts] if isinstance(labels_node, (ast.List, ast.Tuple)) else []
                scraped = name + "_total" if kind == "counter" and not name.endswith("_total") else name
                found[scraped] = {"name": scraped, "type": kind, "labels": labels, "help": help_ or "",
                                  "package": pkg, "file": str(f.relative_to(ROOT))}
    return [found[k] for k in sorted(found)]


def page_metrics() -> str:
    out = [HEADER, "# Metrics\n\n",
           "Every Prometheus metric foresight's processes export, found in their source. Counters are "
           "listed with the `_total` suffix they are scraped with; histograms add `_bucket`, `_count` and "
           "`_sum`. Alerts on them: [Alerts and dashboards](../operations/alerts.md).\n\n"]
    defs = metric_definitions()
    for pkg in sorted({d["package"] for d in defs}):
        out.append(f"## {pkg}\n\n")
        if pkg in METRIC_ENDPOINTS:
            out.append(f"Served by {METRIC_ENDPOINTS[pkg]}.\n\n")
        rows = [[code(d["name"]), d["type"], ", ".join(f"`{x}`" for x in d["labels"]), d["help"], code(d["file"])]
                for d in defs if d["package"] == pkg]
        out.append(table(["metric", "type", "labels", "what it counts", "defined in"], rows))
        out.append("\n")
    return "".join(out)


# ---------------------------------------------------------------------------------------------- reasons

KIND_OF_FILE = {"reconcile.py": "PredictiveAutoscaler", "pools.py": "WarmPool"}
CONDITION_VARS = {"ready": "Ready", "degraded": "Degraded"}


def operator_reasons() -> tuple[list[dict], list[dict]]:
    """(conditions, events) set by kubeoperator, found by AST: ``ready = (status, reason, message)``
    tuples and ``Event(type, reason, message)`` calls."""
    conds, events = {}, {}
    for f in sorted((ROOT / "kubeoperator").glob("*.py")):
        tree = ast.parse(f.read_text(), str(f))
        kind = KIND_OF_FILE.get(f.name, "PredictiveAutoscaler")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id in CONDITION_VARS and isinstance(node.value, ast.Tuple)
                    and len(node.value.elts) == 3):
                status, reason, msg = node.value.elts
                if isinstance(status, ast.Constant) and isinstance(reason, ast.Constant):
                    key = (kind, CONDITION_VARS[node.targets[0].id], reason.value)
                    conds[key] = {"kind": kind, "type": key[1], "status": status.value, "reason": reason.value,
                                  "message": _str_of(msg, {}) or "(from the cause)"}
            if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Event" and len(node.args) >= 2
                    and all(isinstance(a, ast.Constant) for a in node.args[:2])):
                key = (kind, node.args[1].value)
                events[key] = {"kind": kind, "type": node.args[0].value, "reason": node.args[1].value,
                               "message": _str_of(node.args[2], {}) if len(node.args) > 2 else ""}
    return [conds[k] for k in sorted(conds)], [events[k] for k in sorted(events)]


def page_reasons() -> str:
    from adapter.responses import _REASONS

    conds, events = operator_reasons()
    out = [HEADER, "# Conditions, Events and error codes\n\n",
           "What `kubectl describe` and the APIs can say, and what to do about it. Conditions and Events "
           "are read from `kubeoperator/`; the HTTP Status reasons from `adapter/responses.py`.\n\n",
           "## Conditions\n\n",
           "`kubectl get pas -o wide` shows the `Ready` reason; `kubectl describe` shows every condition "
           "with its message.\n\n"]
    rows = [[c["kind"], code(c["type"]), code(c["status"]), code(c["reason"]), c["message"], ADVICE.get(c["reason"], "")]
            for c in conds]
    out.append(table(["resource", "condition", "status", "reason", "message (from the code)", "what to do"], rows))
    out.append("\n## Events\n\n`kubectl get events --field-selector involvedObject.kind=PredictiveAutoscaler`.\n\n")
    rows = [[e["kind"], code(e["type"]), code(e["reason"]), e["message"] or "", ADVICE.get(e["reason"], "")] for e in events]
    out.append(table(["resource", "type", "reason", "message (from the code)", "what to do"], rows))
    out.append("\n## HTTP error codes\n\n"
               "The adapter answers every error as a Kubernetes `Status` object (`kind: Status`, `reason`, "
               "`code`, a `message` naming the field), as kube-apiserver does.\n\n")
    rows = [[str(c), code(r), HTTP_ADVICE.get(c, "")] for c, r in sorted(_REASONS.items())]
    out.append(table(["code", "reason", "what it means"], rows))
    return "".join(out)
