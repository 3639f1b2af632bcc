"""A boundary fake of the Kubernetes API: the subset the warm pool's kubernetes backend uses
(pods: list with equality label selectors, get, create, merge-patch with resourceVersion
preconditions -> 409 Conflict, delete), served over real HTTP so the real `kubernetes` client
drives it."""

from __future__ import annotations

import calendar
import copy
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

_ALL_PODS = "/api/v1/pods"
_OBJECT = re.compile(r"^/apis/([^/]+/[^/]+)/namespaces/([^/]+)/([^/]+)/([^/]+)$")
_PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?$")


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}


def _merge(dst: dict, patch: dict) -> dict:
    for k, v in patch.items():
        if v is None:
            dst.pop(k, None)
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)
    return dst


class FakeKubernetes:
    def __init__(self, initial_phase: str = "Running"):
        self.pods: dict[tuple[str, str], dict] = {}
        self.rv = 1000
        self.lock = threading.Lock()
        self.initial_phase = initial_phase
        self.requests: list[tuple[str, str]] = []
        self.conflicts = 0
        self.fail_creates = 0
        self.tokens: dict[str, dict] = {}  # TokenReview: token -> {"username", "groups"}
        self.reviews = 0
        self.objects: dict[tuple[str, str, str, str], dict] = {}  # (apiVersion, namespace, plural, name) -> object
        self.fail_reviews = False  # answer TokenReviews with 503 (API server overloaded or down)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"{}")

            def _route(self, method: str) -> None:
                u = urlparse(self.path)
                fake.requests.append((method, u.path))
                if method == "POST" and u.path == "/apis/authentication.k8s.io/v1/tokenreviews":
                    body = self._body()
                    if fake.fail_reviews:
                        return self._send(503, _status(503, "ServiceUnavailable", "simulated outage"))
                    fake.reviews += 1
                    user = fake.tokens.get((body.get("spec") or {}).get("token", ""))
                    status = {"authenticated": True, "user": user} if user else {"authenticated": False}
                    return self._send(201, {**body, "status": status})
                if method == "GET" and u.path == _ALL_PODS:
                    sel = (parse_qs(u.query).get("labelSelector") or [""])[0]
                    want = dict(p.split("=", 1) for p in sel.split(",") if "=" in p)
                    with fake.lock:
                        items = [copy.deepcopy(p) for _, p in sorted(fake.pods.items())
                                 if all(p["metadata"].get("labels", {}).get(k) == v for k, v in want.items())]
                    return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
                mo = _OBJECT.match(u.path)
                if method == "GET" and mo:
                    obj = fake.objects.get(mo.groups())
                    return self._send(200, obj) if obj else self._send(404, _status(404, "NotFound", f"{u.path} not found"))
                m = _PODS.match(u.path)
                if not m:
                    return self._send(404, _status(404, "NotFound", f"no route {u.path}"))
                ns, name = m.group(1), m.group(2)
                code, body = fake.handle(method, ns, name, parse_qs(u.query), self._body() if method in ("POST", "PATCH") else None, self.headers.get("Content-Type", ""))
                self._send(code, body)

            def do_GET(self):
                self._route("GET")

            def do_POST(self):
                self._route("POST")

            def do_PATCH(self):
                self._route("PATCH")

            def do_DELETE(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                self._route("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> "FakeKubernetes":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _bump(self, pod: dict) -> None:
        self.rv += 1
        pod["metadata"]["resourceVersion"] = str(self.rv)

    def set_phase(self, ns: str, name: str, phase: str) -> None:
        with self.lock:
            pod = self.pods[(ns, name)]
            pod["status"]["phase"] = phase
            self._bump(pod)

    def set_ready(self, ns: str, name: str, after_seconds: float) -> None:
        """The kubelet's part: the pod runs and its Ready condition turned True
        ``after_seconds`` after its creationTimestamp (server timestamps: whole seconds)."""
        with self.lock:
            pod = self.pods[(ns, name)]
            created = calendar.timegm(time.strptime(pod["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))
            ready = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created + after_seconds))
            pod["status"]["phase"] = "Running"
            pod["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": ready}]
            self._bump(pod)

    def handle(self, method, ns, name, query, body, content_type):
        with self.lock:
            if method == "GET" and name is None:
                sel = (query.get("labelSelector") or [""])[0]
                want = dict(p.split("=", 1) for p in sel.split(",") if "=" in p)
                items = [
                    copy.deepcopy(p) for (pns, _), p in sorted(self.pods.items())
                    if pns == ns and all(p["metadata"].get("labels", {}).get(k) == v for k, v in want.items())
                ]
                return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)}, "items": items}
            if method == "POST" and name is None:
                if self.fail_creates > 0:
                    self.fail_creates -= 1
                    return 500, _status(500, "InternalError", "simulated failure")
                pname = body.get("metadata", {}).get("name")
                if not pname:
                    return 422, _status(422, "Invalid", "metadata.name is required")
                if (ns, pname) in self.pods:
                    return 409, _status(409, "AlreadyExists", f'pods "{pname}" already exists')
                pod = copy.deepcopy(body)
                pod.setdefault("apiVersion", "v1")
                pod.setdefault("kind", "Pod")
                md = pod["metadata"]
                md["namespace"] = ns
                md["uid"] = str(uuid.uuid4())
                md["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                pod["status"] = {"phase": self.initial_phase, "podIP": f"10.0.0.{len(self.pods) % 250 + 2}"}
                self._bump(pod)
                self.pods[(ns, pname)] = pod
                return 201, copy.deepcopy(pod)
            pod = self.pods.get((ns, name))
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            if method == "GET":
                return 200, copy.deepcopy(pod)
            if method == "DELETE":
                del self.pods[(ns, name)]
                return 200, copy.deepcopy(pod)
            if method == "PATCH":
                if "json-patch" in content_type:
                    return 415, _status(415, "UnsupportedMediaType", "this fake speaks merge patches only")
                want_rv = (body.get("metadata") or {}).get("resourceVersion")
                if want_rv is not None and want_rv != pod["metadata"]["resourceVersion"]:
                    self.conflicts += 1
                    return 409, _status(409, "Conflict", f'Operation cannot be fulfilled on pods "{name}": the object has been modified; please apply your changes to the latest version and try again')
                patch = copy.deepcopy(body)
                (patch.get("metadata") or {}).pop("resourceVersion", None)
                _merge(pod, patch)
                self._bump(pod)
                return 200, copy.deepcopy(pod)
            return 405, _status(405, "MethodNotAllowed", method)
