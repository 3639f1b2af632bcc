"""Pods on the real node: Running and Ready, answering HTTP on their 198.18.x address and
through a ClusterIP Service in 198.19.x (kube-proxy's iptables rules), for the busybox image and
the foresight app image, under each RuntimeClass (runc, crun, gvisor: a gVisor pod runs on
gVisor's own kernel, a runc pod on the host's); and the network rules: no default route in a pod,
the FORWARD guard first, no masquerade rule but kube-proxy's mark-gated one."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.cluster import nodenet
from tests.cluster.controlplane import wait_for

NS = "node-test"


def _deployment(name: str, image: str, command: list[str], port: int, replicas: int, path: str = "/",
                runtime_class: str | None = None) -> dict:
    spec: dict = {"containers": [{
        "name": "web", "image": image, "imagePullPolicy": "Never", "command": command,
        "ports": [{"containerPort": port}],
        "readinessProbe": {"httpGet": {"path": path, "port": port}, "periodSeconds": 1},
    }], "terminationGracePeriodSeconds": 1}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def _service(name: str, port: int) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": port}]}}


def _ready_pods(cp, app: str, want: int) -> list[dict]:
    pods = cp.admin.json(f"/api/v1/namespaces/{NS}/pods", labelSelector=f"app={app}")["items"]
    ready = [p for p in pods if p["status"].get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]
    return ready if len(ready) == want else []


def _pod_detail(cp, app: str) -> str:
    pods = cp.admin.json(f"/api/v1/namespaces/{NS}/pods", labelSelector=f"app={app}")["items"]
    return json.dumps([{"name": p["metadata"]["name"], "status": p["status"]} for p in pods])[:3000]


def _run(cp, node, name: str, image: str, command: list[str], port: int, replicas: int, path: str = "/", **kw):
    cp.ensure_namespace(NS)
    r = cp.admin.apply(f"/apis/apps/v1/namespaces/{NS}/deployments/{name}",
                       _deployment(name, image, command, port, replicas, path, **kw), "node-test")
    assert r.status_code in (200, 201), r.text
    r = cp.admin.apply(f"/api/v1/namespaces/{NS}/services/{name}", _service(name, port), "node-test")
    assert r.status_code in (200, 201), r.text
    pods = wait_for(f"{replicas} {name} pods Running and Ready", lambda: (node.check_alive(), _ready_pods(cp, name, replicas))[1],
                    timeout=180, detail=lambda: _pod_detail(cp, name))
    svc = cp.admin.json(f"/api/v1/namespaces/{NS}/services/{name}")
    return pods, svc["spec"]["clusterIP"]


def _ready_endpoints(cp, service: str) -> int:
    slices = cp.admin.json(f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices",
                           labelSelector=f"kubernetes.io/service-name={service}")["items"]
    return sum(1 for s in slices for e in s.get("endpoints") or [] if (e.get("conditions") or {}).get("ready"))


BUSYBOX_WEB = ["/bin/sh", "-c", "hostname > /www/index.html && exec httpd -f -p 8080 -h /www"]


def test_busybox_pods_answer_http_on_their_pod_ips_and_through_a_cluster_ip_service(node):
    cp = node.cp
    pods, cluster_ip = _run(cp, node, "web", node.images["busybox"]["ref"], BUSYBOX_WEB, 8080, 3)
    names = {p["metadata"]["name"] for p in pods}
    for p in pods:
        ip = p["status"]["podIP"]
        assert ipaddress.ip_address(ip) in ipaddress.ip_network(nodenet.NODE_POD_RANGE)
        assert p["spec"]["nodeName"] == node.name
        assert httpx.get(f"http://{ip}:8080/", timeout=5).text.strip() == p["metadata"]["name"]
    assert ipaddress.ip_address(cluster_ip) in ipaddress.ip_network(nodenet.SERVICE_CIDR)
    # Ready pods reach the EndpointSlice, then kube-proxy's rules, each a sync later: wait for all
    # three endpoints before judging kube-proxy's random choice
    wait_for("3 ready endpoints in the Service's EndpointSlice", lambda: _ready_endpoints(cp, "web") == 3, timeout=60)
    seen: set[str] = set()

    def two_answer():
        seen.add(httpx.get(f"http://{cluster_ip}/", timeout=3).text.strip())
        return len(seen) >= 2

    wait_for("two pods answering through the ClusterIP Service", two_answer, timeout=60, interval=0.2)
    assert seen <= names, seen


def test_the_foresight_app_image_serves_its_health_check_in_a_pod(node):
    cp = node.cp
    # --insecure: no authentication on a pod address (the pod network is the node's own, see nodenet)
    cmd = ["foresight", "serve", "--store", "memory://", "--plain-http", "--host", "0.0.0.0", "--insecure", "--port", "8080"]
    pods, cluster_ip = _run(cp, node, "adapter", node.images["app"]["ref"], cmd, 8080, 1, path="/healthz")
    ip = pods[0]["status"]["podIP"]
    assert httpx.get(f"http://{ip}:8080/healthz", timeout=5).text == "ok"
    assert wait_for("the adapter Service", lambda: httpx.get(f"http://{cluster_ip}/healthz", timeout=3).text, timeout=60) == "ok"


def _need_handler(node, handler: str) -> None:
    """Fail (never skip): every handler is expected on the test node, gvisor included."""
    if handler in node.runtime_handlers:
        return
    why = ""
    if handler == "gvisor":
        why = (f"; gVisor is built by tests/cluster/build_gvisor.sh (bin dir {node.gvisor_bin}): "
               f"{node.gvisor_error or 'see its output above'}")
    pytest.fail(f"runtime handler {handler} is not configured on the node: {node.runtime_handlers}{why}")


@pytest.mark.parametrize("handler", ["runc", "crun", "gvisor"])
def test_a_pod_starts_under_each_runtime_class(node, handler):
    _need_handler(node, handler)
    pods, _ = _run(node.cp, node, f"rc-{handler}", node.images["busybox"]["ref"], BUSYBOX_WEB, 8080, 1,
                   runtime_class=handler)
    assert pods[0]["spec"]["runtimeClassName"] == handler
    assert httpx.get(f"http://{pods[0]['status']['podIP']}:8080/", timeout=5).status_code == 200


# What the pod's kernel says about itself: served over HTTP and printed to the pod's log.
KERNEL_WEB = ["/bin/sh", "-c", "uname -r > /www/kernel && (dmesg 2>/dev/null | head -1 > /www/dmesg; true) && "
              "echo \"proc-version: $(cat /proc/version)\" && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"]


def _pod_log(node, pod: dict) -> str:
    """The container's log as the kubelet wrote it (podLogsDir), through the runtime's stdout."""
    m = pod["metadata"]
    (f,) = (node.dir / "pod-logs").glob(f"{m['namespace']}_{m['name']}_{m['uid']}/web/0.log")
    return f.read_text()


def _host_httpd_pods(uids: set[str]) -> set[str]:
    """Which of these pods have an httpd that is a process of the host's kernel (its cgroup names
    the pod): a runc container's processes are, a gVisor sandbox's are gVisor's own."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "comm").read_text().strip() == "httpd":
                cg = (proc / "cgroup").read_text()
                found |= {u for u in uids if f"pod{u}" in cg}
        except OSError:  # exited meanwhile
            pass
    return found


def test_a_gvisor_pod_runs_on_gvisors_kernel_and_a_runc_pod_on_the_hosts(node):
    _need_handler(node, "gvisor")
    host = os.uname().release
    pods = {h: _run(node.cp, node, f"kernel-{h}", node.images["busybox"]["ref"], KERNEL_WEB, 8080, 1,
                    runtime_class=h)[0][0] for h in ("gvisor", "runc")}
    kernel = {h: httpx.get(f"http://{p['status']['podIP']}:8080/kernel", timeout=5).text.strip() for h, p in pods.items()}
    assert kernel["runc"] == host
    assert "gvisor" in kernel["gvisor"] and kernel["gvisor"] != host, kernel
    # gVisor's own boot messages: the sandbox's kernel is the Sentry, not the host's
    assert "Starting gVisor" in httpx.get(f"http://{pods['gvisor']['status']['podIP']}:8080/dmesg", timeout=5).text
    log = _pod_log(node, pods["gvisor"])
    assert "proc-version: Linux version " in log and "gvisor" in log, log
    assert host in _pod_log(node, pods["runc"])
    uids = {h: p["metadata"]["uid"] for h, p in pods.items()}
    assert _host_httpd_pods(set(uids.values())) == {uids["runc"]}
    gv = pods["gvisor"]
    assert ipaddress.ip_address(gv["status"]["podIP"]) in ipaddress.ip_network(nodenet.NODE_POD_RANGE)
    assert httpx.get(f"http://{gv['status']['podIP']}:8080/", timeout=5).text.strip() == gv["metadata"]["name"]


def _container_pid(node, pod_ip: str) -> int:
    """The host pid of a container whose network namespace holds ``pod_ip`` (read, not sent to)."""
    for line in node.ctr("tasks", "ls").stdout.splitlines()[1:]:
        pid = int(line.split()[1])
        out = subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-j", "addr"], capture_output=True, text=True).stdout
        if pod_ip in out:
            return pid
    raise AssertionError(f"no container with {pod_ip}")


def test_pods_have_no_default_route_and_the_node_neither_masquerades_nor_forwards_off_the_bridge(node):
    pods, _ = _run(node.cp, node, "web", node.images["busybox"]["ref"], BUSYBOX_WEB, 8080, 3)
    pid = _container_pid(node, pods[0]["status"]["podIP"])
    routes = json.loads(subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-j", "route"], capture_output=True,
                                       text=True, check=True).stdout)
    assert routes and not [r for r in routes if r["dst"] == "default"], routes
    assert {r["dst"] for r in routes} <= {nodenet.NODE_POD_RANGE, nodenet.POD_CIDR, nodenet.SERVICE_CIDR}
    forward = subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True, check=True).stdout.splitlines()
    assert forward[1] == f"-A FORWARD -j {nodenet.GUARD_CHAIN}" or f"-A FORWARD -j {nodenet.GUARD_CHAIN}" in forward
    nat = subprocess.run(["iptables", "-w", "-t", "nat", "-S"], capture_output=True, text=True, check=True).stdout.splitlines()
    masq = [ln for ln in nat if "MASQUERADE" in ln]
    # kube-proxy's rule masquerades only packets it marked (from outside the cluster CIDR: none here)
    assert all(ln.startswith("-A KUBE-POSTROUTING") for ln in masq), masq
    routes = subprocess.run(["ip", "-j", "route"], capture_output=True, text=True, check=True).stdout
    ours = [r for r in json.loads(routes) if r.get("dst", "").startswith(("198.18.", "198.19."))]
    assert {(r["dst"], r["dev"]) for r in ours} == {(nodenet.NODE_POD_RANGE, nodenet.BRIDGE),
                                                    (nodenet.SERVICE_CIDR, nodenet.DUMMY)}, ours


def test_a_second_node_on_the_same_machine_is_refused_while_one_runs(node, tmp_path):
    from tests.cluster.node import Node, NodeError

    with pytest.raises(NodeError, match="another foresight node runs on this machine"):
        Node(node.cp, tmp_path / "second", node.images, lock_wait_seconds=0).start()
    node.check_alive()
    assert node.ready()


IN_CLUSTER = """
import os, ssl, json, urllib.request
sa = '/var/run/secrets/kubernetes.io/serviceaccount'
ctx = ssl.create_default_context(cafile=sa + '/ca.crt')
url = 'https://%s:%s/version' % (os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT'])
req = urllib.request.Request(url, headers={'Authorization': 'Bearer ' + open(sa + '/token').read()})
v = json.load(urllib.request.urlopen(req, context=ctx, timeout=10))
open('/dev/termination-log', 'w').write(os.environ['KUBERNETES_SERVICE_HOST'] + ' ' + v['gitVersion'])
"""


def test_a_pod_reaches_the_api_server_through_the_kubernetes_service_with_its_service_account(node):
    cp = node.cp
    cp.ensure_namespace(NS)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "in-cluster", "namespace": NS},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "c", "image": node.images["app"]["ref"], "imagePullPolicy": "Never",
                "command": ["python3", "-c", IN_CLUSTER]}]}}
    r = cp.admin.post(f"/api/v1/namespaces/{NS}/pods", body)
    assert r.status_code == 201, r.text
    pod = wait_for("the in-cluster pod to finish", lambda: (lambda p: p if p["status"].get("phase") in ("Succeeded", "Failed")
                   else None)(cp.admin.json(f"/api/v1/namespaces/{NS}/pods/in-cluster")), timeout=180)
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert pod["status"]["phase"] == "Succeeded", state
    host, version = state["message"].split()
    assert ipaddress.ip_address(host) in ipaddress.ip_network(nodenet.SERVICE_CIDR)
    assert version == "v1.35.4"


def test_the_real_metrics_server_serves_a_running_pods_cpu_and_memory_from_the_kubelet(node):
    from tests.cluster.addons import deploy_metrics_server, pod_usage

    cp = node.cp
    pods, _ = _run(cp, node, "web", node.images["busybox"]["ref"], BUSYBOX_WEB, 8080, 3)
    deploy_metrics_server(node)
    name = pods[0]["metadata"]["name"]
    # metric-resolution 15 s: the first scrape with two samples per container takes up to ~30 s
    m = wait_for(f"PodMetrics of {name}", lambda: pod_usage(cp, NS, name), timeout=120, interval=2)
    (c,) = m["containers"]
    assert c["name"] == "web"
    assert c["usage"]["memory"].endswith(("Ki", "Mi")) and int(c["usage"]["memory"][:-2]) > 0
    nodes = cp.admin.json("/apis/metrics.k8s.io/v1beta1/nodes")["items"]
    assert [n["metadata"]["name"] for n in nodes] == [node.name]
    assert nodes[0]["usage"]["cpu"] != "0"


# Up to 30 tries a second apart: CoreDNS Ready does not yet mean kube-proxy has programmed the
# DNS Service's address on the node (a single try failed there once in a CI run).
DNS_CLIENT = """
import socket, time, urllib.request
for attempt in range(30):
    try:
        ip = socket.gethostbyname('web')
        body = urllib.request.urlopen('http://web/', timeout=5).read().decode().strip()
        break
    except OSError:
        if attempt == 29:
            raise
        time.sleep(1)
open('/dev/termination-log', 'w').write(ip + ' ' + body)
"""


def test_coredns_resolves_a_service_name_for_a_pod(node):
    from tests.cluster.addons import deploy_coredns

    cp = node.cp
    pods, _ = _run(cp, node, "web", node.images["busybox"]["ref"], BUSYBOX_WEB, 8080, 3)
    deploy_coredns(node)
    # the short name through the pod's search path (node-test.svc.cluster.local), by glibc's
    # resolver in the app image (busybox-static's wget cannot resolve: static glibc has no NSS)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dns-client", "namespace": NS},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "c", "image": node.images["app"]["ref"], "imagePullPolicy": "Never",
                "command": ["python3", "-c", DNS_CLIENT]}]}}
    r = cp.admin.post(f"/api/v1/namespaces/{NS}/pods", body)
    assert r.status_code == 201, r.text
    pod = wait_for("the DNS client to finish", lambda: (lambda p: p if p["status"].get("phase") in ("Succeeded", "Failed")
                   else None)(cp.admin.json(f"/api/v1/namespaces/{NS}/pods/dns-client")), timeout=120)
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert pod["status"]["phase"] == "Succeeded", state
    ip, body = state["message"].split()
    assert ip == cp.admin.json(f"/api/v1/namespaces/{NS}/services/web")["spec"]["clusterIP"]
    assert body in {p["metadata"]["name"] for p in pods}


def test_prometheus_in_a_pod_scrapes_the_kubelets_cadvisor_and_resource_endpoints(node):
    from tests.cluster.addons import deploy_prometheus

    cp = node.cp
    pods, _ = _run(cp, node, "web", node.images["busybox"]["ref"], BUSYBOX_WEB, 8080, 3)
    url = deploy_prometheus(node)
    name = pods[0]["metadata"]["name"]

    def series(query: str) -> list:
        r = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=5)
        return r.json()["data"]["result"] if r.status_code == 200 else []

    # cAdvisor labels the pod's cgroup (namespace, pod); per-container labels need cAdvisor to
    # reach containerd, which it looks for only at /run/containerd/containerd.sock (the node's
    # containerd has a private socket). The resource endpoint (CRI stats) has the container.
    cadvisor = f'container_cpu_usage_seconds_total{{job="kubelet-cadvisor",namespace="{NS}",pod="{name}"}}'
    resource = f'container_memory_working_set_bytes{{job="kubelet-resource",namespace="{NS}",pod="{name}",container="web"}}'
    (c,) = wait_for("cAdvisor series of the pod", lambda: series(cadvisor), timeout=120, interval=2)
    (m,) = wait_for("resource series of the pod", lambda: series(resource), timeout=120, interval=2)
    assert float(c["value"][1]) > 0 and float(m["value"][1]) > 0
    up = series('up{job=~"kubelet-.*"}')
    assert sorted(s["metric"]["job"] for s in up) == ["kubelet-cadvisor", "kubelet-resource"]
    assert all(s["value"][1] == "1" for s in up), up
