"""MetricsServerStandIn: plays metrics-server (``metrics.k8s.io``) for the e2e suite, nothing else.

metrics-server reads usage from kubelets, and there are none here. This aggregated API server
serves ``PodMetricsList`` for pods that exist in the real API server, with CPU usage taken from
the test's script instead of cAdvisor, so the real HPA controller's Resource-metric path
(utilization, tolerance, unready and missing pods) runs against scripted, known numbers.

It is registered like metrics-server: an APIService with a caBundle, reached through the
aggregator, which must present the front-proxy client certificate (checked here against the
front-proxy CA, as any aggregated API server does). Every pod-metrics request is logged with
what it returned: each one is one HPA sync of one Resource metric.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

from tests.cluster.controlplane import ApiClient, free_port


@dataclass
class Script:
    """What the stand-in reports for one workload (namespace, ``app`` label)."""

    demand_milli: int = 0  # total CPU usage, split evenly over the ready pods that report
    missing: int = 0  # ready pods (oldest first) that report no metrics at all
    demand_fn: Callable[[float], float] | None = None  # cores at wall-clock t, overrides demand_milli


@dataclass
class Fetch:
    t: float
    namespace: str
    app: str
    pods: int  # pods matching the selector (not terminating)
    ready: int
    unready: int
    reported: int  # ready pods with a metric
    usage_milli: int  # total usage over the reported ready pods
    demand_milli: int = 0  # the script's demand at that request
    missing: int = 0  # the script's missing pods at that request


@dataclass
class MetricsServerStandIn:
    api: ApiClient
    certfile: Path
    keyfile: Path
    client_ca: Path
    port: int = field(default_factory=free_port)
    scripts: dict[tuple[str, str], Script] = field(default_factory=dict)
    fetches: list[Fetch] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def start(self) -> "MetricsServerStandIn":
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # http.server API
                try:
                    code, body = standin.handle(self.path)
                except Exception as exc:  # noqa: BLE001 - report, answer 500
                    standin.errors.append(repr(exc))
                    code, body = 500, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                                       "reason": "InternalError", "message": "stand-in error"}
                self._send(code, body)

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.certfile), str(self.keyfile))
        ctx.load_verify_locations(str(self.client_ca))
        ctx.verify_mode = ssl.CERT_REQUIRED  # only the aggregator (front-proxy client cert) gets in
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="metrics-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- the API
    def handle(self, raw_path: str) -> tuple[int, dict]:
        u = urllib.parse.urlsplit(raw_path)
        parts = [p for p in u.path.split("/") if p]
        if parts == ["apis", "metrics.k8s.io", "v1beta1"]:
            return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "metrics.k8s.io/v1beta1",
                         "resources": [{"name": "pods", "singularName": "", "namespaced": True, "kind": "PodMetrics",
                                        "verbs": ["get", "list"]}]}
        if len(parts) == 6 and parts[:3] == ["apis", "metrics.k8s.io", "v1beta1"] and parts[3] == "namespaces" \
                and parts[5] == "pods":
            selector = urllib.parse.parse_qs(u.query).get("labelSelector", [""])[0]
            return 200, self.pod_metrics(parts[4], selector)
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound",
                     "message": f"{u.path} not served by the metrics-server stand-in"}

    def pod_metrics(self, namespace: str, selector: str) -> dict:
        t = time.time()
        pods = self.api.json(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)["items"]
        pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        pods.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
        app = next(((p["metadata"].get("labels") or {}).get("app", "") for p in pods), "")
        script = self.scripts.get((namespace, app), Script())

        def ready(p):
            return p.get("status", {}).get("phase") == "Running" and any(
                c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])

        ready_pods = [p for p in pods if ready(p)]
        reporting = ready_pods[script.missing:]
        demand = int(round(script.demand_fn(t) * 1000)) if script.demand_fn else script.demand_milli
        each, rest = divmod(demand, max(1, len(reporting)))
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
        items = []
        for i, p in enumerate(reporting):
            items.append(self._item(p, each + (1 if i < rest else 0), stamp))
        # Pods still starting report a little usage, as real ones do; the HPA must ignore it.
        for p in pods:
            if p["status"].get("phase") == "Running" and not ready(p):
                items.append(self._item(p, 10, stamp))
        self.fetches.append(Fetch(t, namespace, app, len(pods), len(ready_pods), len(pods) - len(ready_pods),
                                  len(reporting), demand if reporting else 0, demand, script.missing))
        return {"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {}, "items": items}

    @staticmethod
    def _item(pod: dict, milli: int, stamp: str) -> dict:
        # window 0s: a pod's sample counts from the second it turned Ready (the HPA ignores samples
        # taken less than one window after a readiness change during a pod's first 5 minutes).
        return {"metadata": {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"],
                             "labels": pod["metadata"].get("labels") or {},
                             "creationTimestamp": stamp},
                "timestamp": stamp, "window": "0s",
                "containers": [{"name": c["name"], "usage": {"cpu": f"{milli // len(pod['spec']['containers'])}m",
                                                             "memory": "16Mi"}}
                               for c in pod["spec"]["containers"]]}
