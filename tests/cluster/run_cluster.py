"""``make cluster``: the tests' control plane and real node, for a user to try.

Builds what is missing (cached in ~/.cache/foresight), starts the control plane and the node in
a fresh directory with CoreDNS, metrics-server and Prometheus on it (``--bare``: without), prints the admin
kubeconfig's path, and runs until Ctrl-C (or SIGTERM); then
stops every process and removes the node's network state, mounts and cgroups.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, help="where the cluster's files go (default: a new temp dir)")
    ap.add_argument("--bare", action="store_true", help="without CoreDNS, metrics-server and Prometheus")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("make cluster: the real node needs root (network namespaces, iptables, cgroups, mounts)", file=sys.stderr)
        return 2
    from tests.cluster.node import NodeError, start_cluster

    d = args.dir or Path(tempfile.mkdtemp(prefix="foresight-cluster-"))
    stop = {"now": False}

    def on_signal(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    t0 = time.monotonic()
    try:
        cp, node = start_cluster(d)
    except NodeError as exc:
        print(f"make cluster: {exc}", file=sys.stderr)
        return 1
    prometheus = ""
    try:
        if not args.bare:
            from tests.cluster.addons import deploy_coredns, deploy_metrics_server, deploy_prometheus

            deploy_coredns(node)
            deploy_metrics_server(node)
            prometheus = f"prometheus (scraping the kubelet): {deploy_prometheus(node)}\n"
    except BaseException:
        node.stop()
        cp.stop()
        raise
    kubectl = cp.bin_dir / "kubectl"
    addons = "" if args.bare else ", CoreDNS, metrics-server and Prometheus"
    from tests.cluster import chart

    helm_cmd = " ".join([str(chart.helm_binary()), "--kubeconfig", str(cp.admin_kubeconfig), "install", chart.RELEASE,
                         str(chart.CHART), "-n", chart.NAMESPACE, "--create-namespace", *chart.node_values(node.images)])
    print(f"control plane, node {node.name}{addons} up in {time.monotonic() - t0:.0f} s (node {node.started_seconds:.1f} s)\n"
          f"kubeconfig: {cp.admin_kubeconfig}\n"
          f"  {kubectl} --kubeconfig {cp.admin_kubeconfig} get nodes -o wide\n"
          f"images on the node: {', '.join(i['ref'] for n, i in node.images.items() if n != 'base')}\n"
          f"{prometheus}install foresight's chart on it:\n  {helm_cmd}\n"
          f"logs: {cp.dir}/*.log   Ctrl-C stops and cleans up", flush=True)
    try:
        while not stop["now"]:
            node.check_alive()
            cp.check_alive()
            time.sleep(1)
    finally:
        errors = node.stop()
        cp.stop()
    for e in errors:
        print(f"cleanup: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
