"""Pod start latency on the real node: create -> Ready and create -> first request served,
per runtime class and image.

Starts the tests' control plane and real node (tests/cluster/node.py: containerd 1.6, CNI
bridge, kubelet and kube-proxy v1.35.4; root), then for each RuntimeClass and each of two images
creates pods in batches: busybox (a minimal image: its httpd) and foresight's app image
(``foresight demo-app``, Python), both with a readiness probe every second. Each pod is timed
from just before its POST to the first watch event that shows it Ready, and to the first HTTP 200
it answers on its pod address (polled every 20 ms from the moment the watch gives the address;
only addresses in the node's pod range are ever sent to). Batches are deleted before the next
one, so every pod starts on a node with the same load. Prints and saves p50/p90/p99 beside the
cold-start model's seed table (warmpool/coldstart.py), the node's start time and the image sizes
to bench/results/real_node.{json,md}. Then, per runtime class, warm claims against cold starts
through the warm-pool API, to the pod's address and through a Service (bench/real_node_claims.py).

    sudo .venv/bin/python -m bench.real_node            # 100 pods per runtime class, batches of 10
    sudo .venv/bin/python -m bench.real_node --quick    # 10 pods per runtime class, one batch

``autoscale``: predictive against reactive HPAs on the node, the same demand
(bench/real_node_autoscale.py; results bench/results/real_node_autoscale.{json,csv,png}):

    sudo .venv/bin/python -m bench.real_node autoscale            # 45 trace minutes, real time
    sudo .venv/bin/python -m bench.real_node autoscale --quick    # 20 minutes around the rise
    sudo .venv/bin/python -m bench.real_node autoscale --ramp     # a 9-minute synthetic daily step (make test)

``warmpool``: the chart's warm-pool controller on the node under an hour of the Azure Functions
trace, beside ``foresight warmpool simulate`` on the same functions and hour
(bench/real_node_warmpool.py; results bench/results/real_node_warmpool.json):

    sudo .venv/bin/python -m bench.real_node warmpool             # 12 functions, 60 minutes
    sudo .venv/bin/python -m bench.real_node warmpool --quick     # 3 functions, 4 minutes

``chart``: tests/node/test_chart.py (the chart on the node, its faults under polling, upgrade,
uninstall; make test runs it) with each step's figures saved to bench/results/real_node_chart.json:

    sudo .venv/bin/python -m bench.real_node chart
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import add_quick_args, results_dir, save_json, stop_on_sigterm  # noqa: E402

NS = "bench-start"
PORT = 8080
POLL_SECONDS = 0.02
# what each image's container runs: an HTTP server on PORT answering GET /
COMMANDS = {
    "busybox": ["/bin/sh", "-c", f"hostname > /www/index.html && exec httpd -f -p {PORT} -h /www"],
    "app": ["foresight", "demo-app", "--host", "0.0.0.0", "--port", str(PORT), "--cpu-ms-per-request", "1", "--workers", "1"],
}


def pod_body(name: str, image_ref: str, handler: str, image: str = "busybox") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": {"bench": "start"}},
            "spec": {"runtimeClassName": handler, "terminationGracePeriodSeconds": 0, "containers": [{
                "name": "web", "image": image_ref, "imagePullPolicy": "Never", "command": COMMANDS[image],
                "readinessProbe": {"httpGet": {"path": "/", "port": PORT}, "periodSeconds": 1}}]}}


class ReadyWatch:
    """A watch on the namespace's pods: the monotonic time each pod is first seen Ready, and its
    pod address once it has one."""

    def __init__(self, cp):
        self.cp, self.ready_at, self.ip, self._stop = cp, {}, {}, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self.cp.admin.http.stream("GET", f"/api/v1/namespaces/{NS}/pods",
                                               params={"watch": "1", "timeoutSeconds": "30"}, timeout=40) as r:
                    for line in r.iter_lines():
                        self._event(json.loads(line), time.monotonic())
                        if self._stop.is_set():
                            return
            except Exception:  # noqa: BLE001 - the watch reconnects; a missed pod times out below
                time.sleep(0.2)

    def _event(self, ev: dict, now: float) -> None:
        pod = ev.get("object", {})
        if pod.get("status", {}).get("podIP"):
            self.ip.setdefault(pod["metadata"]["name"], pod["status"]["podIP"])
        conds = pod.get("status", {}).get("conditions") or []
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conds):
            self.ready_at.setdefault(pod["metadata"]["name"], now)

    def stop(self) -> None:
        self._stop.set()


def _wait(what: str, ok, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s: {what}")
        time.sleep(0.2)


def first_served(name: str, watch: ReadyWatch, served_at: dict, deadline: float) -> None:
    """Poll the pod's own address (once the watch has it) until it answers GET / with 200;
    bounded by ``deadline``. Only addresses in the node's pod range are sent to."""
    import ipaddress

    import httpx

    from tests.cluster.nodenet import NODE_POD_RANGE

    pod_range = ipaddress.ip_network(NODE_POD_RANGE)
    with httpx.Client(timeout=0.5) as client:
        while time.monotonic() < deadline:
            ip = watch.ip.get(name)
            if ip is not None:
                if ipaddress.ip_address(ip) not in pod_range:
                    raise RuntimeError(f"pod {name} has address {ip}, outside the node's pod range {NODE_POD_RANGE}")
                try:
                    if client.get(f"http://{ip}:{PORT}/").status_code == 200:
                        served_at[name] = time.monotonic()
                        return
                except httpx.HTTPError:
                    pass  # not listening yet
            time.sleep(POLL_SECONDS)


def measure(cp, node, handler: str, image: str, pods: int, batch: int, watch: ReadyWatch) -> dict[str, list[float]]:
    """Seconds from each pod's POST to Ready and to its first answered request."""
    ref = node.images[image]["ref"]
    out: dict[str, list[float]] = {"ready": [], "served": []}
    for start in range(0, pods, batch):
        names = [f"{handler}-{image}-{i:04d}" for i in range(start, min(start + batch, pods))]
        created: dict[str, float] = {}
        served_at: dict[str, float] = {}
        pollers = []
        for n in names:
            created[n] = time.monotonic()
            r = cp.admin.post(f"/api/v1/namespaces/{NS}/pods", pod_body(n, ref, handler, image))
            if r.status_code != 201:
                raise RuntimeError(f"create pod {n}: {r.status_code} {r.text[:300]}")
            t = threading.Thread(target=first_served, args=(n, watch, served_at, created[n] + 300), daemon=True)
            t.start()
            pollers.append(t)
        _wait(f"{len(names)} {handler} {image} pods Ready", lambda: all(n in watch.ready_at for n in names), 300)
        for t in pollers:
            t.join(300)
        missing = [n for n in names if n not in served_at]
        if missing:
            raise RuntimeError(f"pods Ready but never answered GET / on their address: {missing}")
        out["ready"] += [watch.ready_at[n] - created[n] for n in names]
        out["served"] += [served_at[n] - created[n] for n in names]
        for n in names:
            cp.admin.delete(f"/api/v1/namespaces/{NS}/pods/{n}")
        _wait("the batch's pods gone", lambda: not cp.admin.json(f"/api/v1/namespaces/{NS}/pods")["items"], 300)
        node.check_alive()
    return out


def summary(lat: list[float]) -> dict:
    a = np.array(lat)
    return {"pods": len(lat), "p50_s": float(np.percentile(a, 50)), "p90_s": float(np.percentile(a, 90)),
            "p99_s": float(np.percentile(a, 99)), "max_s": float(a.max()), "mean_s": float(a.mean())}


def seed_table() -> dict[str, dict[str, float]]:
    """The cold-start model's container-start seeds (ms), for comparison (its pod-start seeds
    are this benchmark's own earlier figures)."""
    from warmpool.coldstart import CONTAINER, ColdStartModel

    model = ColdStartModel()  # nothing observed: its estimates are the seed's totals
    # runc has no published seed (it starts from crun's figures): only the seed's own two
    return {rc: model.estimate(CONTAINER, rc).as_dict()["total_ms"] for rc in ("crun", "kata")}


def markdown(doc: dict) -> str:
    lines = ["# Pod start latency on the real node", "",
             f"Node start (containerd, images imported, kubelet Ready and untainted, kube-proxy up): "
             f"{doc['node_start_seconds']:.1f} s; control plane start: {doc['control_plane_start_seconds']:.1f} s. "
             f"Batches of {doc['batch']} pods, each batch deleted before the next; readiness probe every 1 s, so "
             f"Ready trails the first answered request by up to a probe period. busybox: its httpd (a minimal "
             f"image); app: `foresight demo-app` from foresight's app image (Python). Load average at the end: "
             f"{doc['load_average']}.", "",
             "| runtime class | image | pods | create -> Ready p50 / p90 / p99 s | create -> first request p50 / p90 / p99 s |",
             "|---|---|---|---|---|"]
    for h, by_image in doc["runtime_classes"].items():
        for image, m in by_image.items():
            r, f = m["ready"], m["served"]
            lines.append(f"| {h} | {image} | {r['pods']} | {r['p50_s']:.2f} / {r['p90_s']:.2f} / {r['p99_s']:.2f} | "
                         f"{f['p50_s']:.2f} / {f['p90_s']:.2f} / {f['p99_s']:.2f} |")
    lines += ["", "The cold-start model's seed table (warmpool/coldstart.py; a container's start, not a pod's "
              "create -> serving through the API server, kubelet and CNI):", "",
              "| runtime class | p50 ms | p90 ms | p99 ms |", "|---|---|---|---|"]
    for h, q in doc["seed_ms"].items():
        lines.append(f"| {h} (seed) | {q['p50']:g} | {q['p90']:g} | {q['p99']:g} |")
    lines += ["", "Claims through the warm-pool API (Kubernetes backend), timed from the POST to the first answer "
              "at the pod's address (the claim's endpoint) and through the pool's Service (busybox httpd):", "",
              "| runtime class | claim | claims | -> pod answering p50 / p90 / p99 s | -> Service answering p50 / p90 / p99 s "
              "| API answer p50 s |", "|---|---|---|---|---|---|"]
    for h, by_kind in doc.get("claims", {}).items():
        for kind, m in by_kind.items():
            f, a = m["served"], m["pod"]
            lines.append(f"| {h} | {kind} | {f['pods']} | {a['p50_s']:.2f} / {a['p90_s']:.2f} / {a['p99_s']:.2f} | "
                         f"{f['p50_s']:.2f} / {f['p90_s']:.2f} / {f['p99_s']:.2f} | {m['api']['p50_s']:.3f} |")
    lines += ["", "| image | archive MB | unpacked |", "|---|---|---|"]
    for n, i in doc["images"].items():
        lines.append(f"| {n} ({i['ref']}) | {i['archive_bytes'] / 1e6:.1f} | {i['unpacked']} |")
    return "\n".join(lines) + "\n"


def autoscale_main(argv: list[str]) -> int:
    from bench.real_node_autoscale import experiment
    from bench.real_node_report import plot, summarise, table, timeline, write_csvs

    ap = argparse.ArgumentParser(prog="bench.real_node autoscale", description="predictive against reactive on the node")
    ap.add_argument("--start", help="trace time the live segment starts (default: full 2017-01-28T15:00:00Z, quick 15:05)")
    ap.add_argument("--minutes", type=float, help="live segment length in trace minutes = wall minutes (default 45, quick 20)")
    add_quick_args(ap, "20 minutes around the rise")
    ap.add_argument("--ramp", action="store_true", help="the short run make test runs: a synthetic daily step (14 days of "
                    "history, 9 live minutes: 2 flat, a 3-minute rise to the peak, 4 at the peak) instead of the trace; "
                    "writes where --quick does")
    args = ap.parse_args(argv)
    if args.ramp and (args.start or args.minutes):
        ap.error("--ramp plays its own synthetic segment: leave --start and --minutes out")
    args.quick = args.quick or args.ramp  # a short run never replaces the committed results
    if args.minutes is not None and args.minutes < 5:
        ap.error(f"--minutes {args.minutes:g}: give at least 5 (the rise and the HPAs' answer to it)")
    out = results_dir(args)

    stop_on_sigterm()  # the node and control plane are cleaned up as on Ctrl-C
    raw = experiment(args.quick, start=args.start, minutes=args.minutes, ramp=args.ramp)
    doc = summarise(raw)
    tl = timeline(raw)
    name = "real_node_autoscale"
    p = save_json(name, doc, out)
    paths = [p, *write_csvs(doc, tl, out, name)]
    plot(doc, tl, out / f"{name}.png")
    print(table(doc), flush=True)
    print(f"saved {', '.join(str(x) for x in paths)}, {out / (name + '.png')}", flush=True)
    if raw["cleanup_errors"]:
        print(f"node cleanup left: {raw['cleanup_errors']}", file=sys.stderr)
        return 1
    return 0


def warmpool_main(argv: list[str]) -> int:
    from bench.common import serverless_dir
    from bench.real_node_warmpool import experiment, table
    from tests.cluster import chart
    from tests.cluster.addons import deploy_coredns, deploy_prometheus
    from tests.cluster.node import start_cluster

    ap = argparse.ArgumentParser(prog="bench.real_node warmpool",
                                 description="the warm pool on the node under an hour of the Azure Functions trace, beside the simulator")
    add_quick_args(ap, "3 functions, 4 minutes, the bundled trace slice")
    args = ap.parse_args(argv)
    out = results_dir(args)
    work = Path(tempfile.mkdtemp(prefix="foresight-real-node-"))
    cp, node = start_cluster(work)
    try:
        deploy_coredns(node)
        deploy_prometheus(node)
        seconds = chart.install(node, chart.helm_binary(), *chart.WARMPOOL_VALUES, want=chart.WARMPOOL_PODS)
        print(f"helm install with the warm pool: every pod Ready in {seconds:.1f} s", flush=True)
        doc = experiment(node, chart.NAMESPACE, args.quick, serverless_dir(args.quick), progress=lambda m: print(m, flush=True))
    finally:
        errors = stop_cluster(cp, node, work)
    doc["load_average"] = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    p = save_json("real_node_warmpool", doc, out)
    print(table(doc), flush=True)
    print(f"saved {p}", flush=True)
    if doc["left_after_delete"]:
        print(f"pods left 180 s after their WarmPools were deleted (then deleted): {doc['left_after_delete']}", file=sys.stderr)
    if errors:
        print(f"node cleanup left: {errors}", file=sys.stderr)
    return 1 if errors or doc["left_after_delete"] or doc["node"]["failed"] else 0


def stop_cluster(cp, node, work: Path) -> list:
    """Stop the node and the control plane; remove their directory (containerd's root with the
    imported images: about 1.5 GB a run) unless the node's clean-up left something to look at."""
    errors = node.stop()
    cp.stop()
    if not errors:
        shutil.rmtree(work, ignore_errors=True)
    return errors


def chart_main(argv: list[str]) -> int:
    """tests/node/test_chart.py as a benchmark: the chart installed on a node, its faults under
    polling of the metric, upgrade and uninstall; what each step measured is saved."""
    import subprocess

    ap = argparse.ArgumentParser(prog="bench.real_node chart", description=chart_main.__doc__.split(":")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="where real_node_chart.json goes")
    args = ap.parse_args(argv)
    path = args.out / "real_node_chart.json"
    env = {**os.environ, "FORESIGHT_CHART_RESULTS": str(path)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider", str(ROOT / "tests" / "node" / "test_chart.py")],
                       env=env, cwd=ROOT)
    if path.exists():
        for step, figs in json.loads(path.read_text())["steps"].items():
            print(f"{step:45s} {figs}", flush=True)
        print(f"saved {path}", flush=True)
    return r.returncode


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["chart"]:
        return chart_main(argv[1:])
    if argv[:1] == ["autoscale"]:
        return autoscale_main(argv[1:])
    if argv[:1] == ["warmpool"]:
        return warmpool_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=100, help="pods per runtime class (default 100)")
    ap.add_argument("--batch", type=int, default=10, help="pods created together (default 10)")
    ap.add_argument("--claims", type=int, default=30, help="warm and cold claims per runtime class (default 30)")
    add_quick_args(ap, "10 pods per runtime class, one batch")
    args = ap.parse_args(argv)
    if args.pods < 1 or args.batch < 1:
        ap.error(f"--pods {args.pods} and --batch {args.batch} must be at least 1")
    pods, batch, claims = (10, 10, 3) if args.quick else (args.pods, args.batch, args.claims)
    out = results_dir(args)
    from tests.cluster.node import start_cluster

    work = Path(tempfile.mkdtemp(prefix="foresight-real-node-"))
    cp, node = start_cluster(work)
    try:
        cp.ensure_namespace(NS)
        watch = ReadyWatch(cp)
        results: dict[str, dict] = {}
        for handler in node.runtime_handlers:
            for image in COMMANDS:
                got = {k: summary(v) for k, v in measure(cp, node, handler, image, pods, batch, watch).items()}
                results.setdefault(handler, {})[image] = got
                r, f = got["ready"], got["served"]
                print(f"{handler:6s} {image:7s} {r['pods']:4d} pods  Ready p50 {r['p50_s']:.2f} s  p90 {r['p90_s']:.2f} s  "
                      f"p99 {r['p99_s']:.2f} s;  first request p50 {f['p50_s']:.2f} s  p90 {f['p90_s']:.2f} s  "
                      f"p99 {f['p99_s']:.2f} s", flush=True)
        watch.stop()
        from bench.real_node_claims import measure_claims

        claim_results: dict[str, dict] = {}
        # the quick run (make test) leaves gVisor's claims out: on this node they are erratic (warm
        # claims answering after 0.4 s or after 50 s, a cold one not within 120 s), not understood yet
        claim_handlers = [h for h in node.runtime_handlers if not (args.quick and h == "gvisor")]
        for handler in claim_handlers:
            for kind in ("warm", "cold"):
                got = {k: summary(v) for k, v in measure_claims(cp, node, handler, kind, claims).items()}
                claim_results.setdefault(handler, {})[kind] = got
                f, a = got["served"], got["pod"]
                print(f"{handler:6s} {kind} claims {f['pods']:3d}  -> pod answering p50 {a['p50_s']:.2f} s  p90 {a['p90_s']:.2f} s;  "
                      f"-> serving p50 {f['p50_s']:.2f} s  p90 {f['p90_s']:.2f} s  p99 {f['p99_s']:.2f} s (Service);  "
                      f"API answer p50 {got['api']['p50_s']:.3f} s", flush=True)
        # the issue's yardstick: a warm claim's serving time (at the address the claim returns)
        # against a cold pod's create -> first request
        ratios = {h: claim_results[h]["warm"]["pod"]["p50_s"] / results[h]["busybox"]["served"]["p50_s"]
                  for h in claim_results}
        # and against a cold claim's pod, started alone on a quieter node than a batch of ten
        to_cold_claim = {h: c["warm"]["pod"]["p50_s"] / c["cold"]["pod"]["p50_s"] for h, c in claim_results.items()}
        for h, x in ratios.items():
            print(f"{h:6s} warm claim -> its pod answering p50 is {x:.1%} of a cold busybox pod's create -> first request p50"
                  f" ({to_cold_claim[h]:.1%} of a cold claim's)" + ("  (target <= 10% for crun)" if h == "crun" else ""), flush=True)
    finally:
        errors = stop_cluster(cp, node, work)
    if errors:
        print(f"node cleanup left: {errors}", file=sys.stderr)
        return 1
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())  # 1/5/15 min: the machine is shared
    doc = {"node_start_seconds": node.started_seconds, "control_plane_start_seconds": cp.start_seconds,
           "builds_seconds": cp.build_seconds, "batch": batch, "load_average": load, "runtime_classes": results, "seed_ms": seed_table(),
           "claims": claim_results, "warm_claim_to_cold_start_p50": ratios, "warm_claim_to_cold_claim_p50": to_cold_claim,
           "images": node.images}
    p = save_json("real_node", doc, out)
    (out / "real_node.md").write_text(markdown(json.loads(p.read_text())))
    print(f"node start {node.started_seconds:.1f} s, control plane start {cp.start_seconds:.1f} s "
          f"(builds and cache checks before them {cp.build_seconds:.1f} s); saved {p}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
