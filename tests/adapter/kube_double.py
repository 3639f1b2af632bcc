"""A small test double of the Kubernetes API over real HTTP: the TokenReview and
SubjectAccessReview endpoints, with an RBAC-like policy written as data, and the reads of the
adapter's pod watch (a paged pod list with ``limit``/``continue``, a pod watch fed by the test,
workloads' selectors). It records every review and every GET it answers, so tests can see what
the adapter asked and how often."""

from __future__ import annotations

import json
import queue
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

HPA = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"


@dataclass
class Policy:
    # token -> (username, groups)
    tokens: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    # username or group -> namespaces whose external metrics and forecasts it may read ("*": all)
    namespaces: dict[str, set[str]] = field(default_factory=dict)

    def allowed(self, spec: dict) -> bool:
        subjects = [spec.get("user", ""), *spec.get("groups", [])]
        if "nonResourceAttributes" in spec:
            # system:discovery and the like: any authenticated caller may GET them
            return "system:authenticated" in spec.get("groups", []) and spec["nonResourceAttributes"]["verb"] == "get"
        ra = spec["resourceAttributes"]
        if ra.get("group") != "external.metrics.k8s.io" or ra.get("verb") not in ("get", "list"):
            return False
        for s in subjects:
            allowed = self.namespaces.get(s, set())
            if "*" in allowed or (ra.get("namespace") and ra["namespace"] in allowed):
                return True
        return False


class KubeDouble:
    def __init__(self, policy: Policy, tls: tuple[str, str] | None = None) -> None:
        self.policy = policy
        self.token_reviews: list[dict] = []
        self.access_reviews: list[dict] = []
        self.bearer_seen: list[str | None] = []
        self.pods = PodStore()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                double.bearer_seen.append(self.headers.get("Authorization"))
                url = urlsplit(self.path)
                q = {k: v[-1] for k, v in parse_qs(url.query).items()}
                double.pods.gets.append((url.path, q))
                if url.path == "/api/v1/pods" and q.get("watch") in ("1", "true", "True"):
                    return double.pods.serve_watch(self, q)
                code, body = double.pods.answer(url.path, q)
                _send_json(self, code, body)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                double.bearer_seen.append(self.headers.get("Authorization"))
                if self.path == "/apis/authentication.k8s.io/v1/tokenreviews":
                    double.token_reviews.append(body)
                    hit = double.policy.tokens.get(body["spec"]["token"])
                    status = ({"authenticated": True, "user": {"username": hit[0], "uid": "u-" + hit[0], "groups": hit[1]}}
                              if hit else {"authenticated": False, "error": "invalid bearer token"})
                elif self.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
                    double.access_reviews.append(body)
                    ok = double.policy.allowed(body["spec"])
                    status = {"allowed": ok, "reason": "RBAC: allowed" if ok else ""}
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                out = json.dumps({**body, "status": status}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if tls is not None:  # (certificate, key): HTTPS, as an API server answers
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> "KubeDouble":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.pods.closing = True  # ends open watches, so shutdown does not wait on them
        self.server.shutdown()
        self.server.server_close()


def _send_json(handler: BaseHTTPRequestHandler, code: int, body: dict) -> None:
    out = json.dumps(body).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(out)))
    handler.end_headers()
    handler.wfile.write(out)


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message}


class PodStore:
    """The pods and workloads the double serves. A list is paged as the API server pages it (a
    continue token names the snapshot and the offset); a watch streams the events the test
    queues with ``emit`` (``gone()`` queues a 410 ERROR event, ``expire_continue`` makes the
    next continued page answer 410); ``closing`` ends every stream at once."""

    def __init__(self) -> None:
        self.items: dict[str, dict] = {}  # uid -> pod
        self.workloads: dict[str, dict] = {}  # path of an object or a list (a workload's, autoscalers) -> it
        self.rv = 1000
        self.gets: list[tuple[str, dict]] = []
        self.forbidden: set[str] = set()  # paths answered 403 (RBAC without the grant)
        self.events: queue.Queue = queue.Queue()
        self.expire_continue = False
        self.closing = False
        self._snapshots: dict[str, list[dict]] = {}
        self._lock = threading.Lock()

    def add(self, pod: dict) -> None:
        with self._lock:
            self.rv += 1
            pod.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            self.items[pod["metadata"]["uid"]] = pod

    def emit(self, typ: str, pod: dict) -> None:
        """A change the next (or current) watch reports, applied to the list too."""
        with self._lock:
            self.rv += 1
            pod.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            if typ == "DELETED":
                self.items.pop(pod["metadata"]["uid"], None)
            else:
                self.items[pod["metadata"]["uid"]] = pod
        self.events.put({"type": typ, "object": pod})

    def gone(self) -> None:
        self.events.put({"type": "ERROR", "object": _status(410, "Expired", "too old resource version")})

    def lists(self) -> list[dict]:
        """The query of every list request (not watches), in order."""
        return [q for p, q in self.gets if p == "/api/v1/pods" and q.get("watch") not in ("1", "true", "True")]

    def watches(self) -> list[dict]:
        return [q for p, q in self.gets if p == "/api/v1/pods" and q.get("watch") in ("1", "true", "True")]

    def answer(self, path: str, q: dict) -> tuple[int, dict]:
        if path in self.forbidden:
            return 403, _status(403, "Forbidden", f"{path} is forbidden")
        if path == "/api/v1/pods":
            return self._page(q)
        if path in self.workloads:
            return 200, self.workloads[path]
        return 404, _status(404, "NotFound", f"{path} not found")

    def _page(self, q: dict) -> tuple[int, dict]:
        with self._lock:
            token = q.get("continue")
            if token:
                if self.expire_continue:
                    self.expire_continue = False
                    return 410, _status(410, "Expired", "the provided continue parameter is too old")
                snap_rv, _, offset = token.partition(":")
                snap, start = self._snapshots[snap_rv], int(offset)
            else:
                snap_rv, start = str(self.rv), 0
                snap = self._snapshots[snap_rv] = [json.loads(json.dumps(p)) for p in self.items.values()]
            limit = int(q.get("limit") or 0) or len(snap) or 1
            page = snap[start:start + limit]
            meta = {"resourceVersion": snap_rv}
            if start + limit < len(snap):
                meta["continue"] = f"{snap_rv}:{start + limit}"
        return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": page}

    def serve_watch(self, handler: BaseHTTPRequestHandler, q: dict) -> None:
        """Stream queued events as JSON lines, one chunk each (chunked encoding, as the API
        server streams a watch), until ``timeoutSeconds``, a 410 ERROR, or ``closing``."""
        handler.protocol_version = "HTTP/1.1"
        handler.close_connection = True
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

        def chunk(data: bytes) -> None:
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            handler.wfile.flush()

        deadline = time.monotonic() + float(q.get("timeoutSeconds") or 30)
        try:
            while not self.closing and time.monotonic() < deadline:
                try:
                    ev = self.events.get(timeout=0.05)
                except queue.Empty:
                    continue
                chunk(json.dumps(ev).encode() + b"\n")
                if ev["type"] == "ERROR":
                    break
            handler.wfile.write(b"0\r\n\r\n")
        except OSError:
            return
