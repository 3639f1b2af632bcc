"""The ``kubernetes`` Service for pods on the real node.

The control plane's kube-apiserver listens on loopback only, and Endpoints may not hold loopback
addresses, so in-cluster clients (``KUBERNETES_SERVICE_HOST`` = 198.19.0.1) would reach nothing.
A TCP relay on the node's address (198.18.255.1, the same port) forwards to the loopback
listener byte for byte (TLS stays end to end: the serving certificate carries 198.19.0.1 and
``kubernetes.default.svc``), and the ``kubernetes`` Service's Endpoints and EndpointSlice,
which ``--endpoint-reconciler-type=none`` leaves to us, point at it.
"""

from __future__ import annotations

import socket
import threading

from tests.cluster.controlplane import ControlPlane

MANAGER = "foresight-node-apirelay"


class ApiRelay:
    def __init__(self, listen_ip: str, port: int, target_port: int):
        self.listen, self.target = (listen_ip, port), ("127.0.0.1", target_port)
        self._sock = socket.create_server(self.listen, reuse_port=False)
        self._sock.settimeout(0.5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="api-relay", daemon=True)

    def start(self) -> "ApiRelay":
        self._thread.start()
        return self

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self._sock.close()
        self._thread.join(5)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    src.settimeout(None)
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def point_kubernetes_service_at(cp: ControlPlane, ip: str, port: int) -> None:
    """Endpoints (not mirrored: the apiserver's own reconciler marks them the same way) and the
    EndpointSlice that kube-proxy reads."""
    ports = [{"name": "https", "port": port, "protocol": "TCP"}]
    ep = {"apiVersion": "v1", "kind": "Endpoints",
          "metadata": {"name": "kubernetes", "namespace": "default",
                       "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
          "subsets": [{"addresses": [{"ip": ip}], "ports": ports}]}
    slice_ = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
              "metadata": {"name": "kubernetes", "namespace": "default",
                           "labels": {"kubernetes.io/service-name": "kubernetes",
                                      "endpointslice.kubernetes.io/managed-by": MANAGER}},
              "addressType": "IPv4", "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}], "ports": ports}
    for path, body in (("/api/v1/namespaces/default/endpoints/kubernetes", ep),
                       ("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes", slice_)):
        r = cp.admin.apply(path, body, MANAGER)
        if r.status_code not in (200, 201):
            raise RuntimeError(f"{path}: {r.status_code} {r.text}")
