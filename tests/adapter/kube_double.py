"""A small test double of the Kubernetes API's TokenReview and SubjectAccessReview endpoints,
over real HTTP, with an RBAC-like policy written as data. It records every review it answers,
so tests can see what the adapter asked and how often."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.token_reviews: list[dict] = []
        self.access_reviews: list[dict] = []
        self.bearer_seen: list[str | None] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

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
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> "KubeDouble":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
