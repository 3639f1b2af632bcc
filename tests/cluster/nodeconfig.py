"""Configuration files of the real node's parts (tests/cluster/node.py): containerd, the kubelet,
kube-proxy, and their credentials signed by the control plane's cluster CA."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from tests.cluster import nodenet
from tests.cluster.controlplane import ControlPlane, free_port, write_kubeconfig

if TYPE_CHECKING:
    from tests.cluster.node import Node

# Off: snapshotters this kernel/filesystem lacks (each logs an error at start otherwise).
_DISABLED = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
             "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]


def containerd_config(d: Path, cni_dir: Path, sandbox_image: str, runtimes: dict[str, str],
                      runsc_config: Path | None = None) -> str:
    """Every path of its own under ``d``; the CRI plugin with the home-built pause image; runc-type
    ``runtimes`` (handler -> OCI runtime binary) and, given ``runsc_config``, gVisor as ``gvisor``."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    lines = [
        "version = 2",
        f'root = "{d / "root"}"', f'state = "{d / "state"}"',
        "disabled_plugins = [" + ", ".join(f'"{p}"' for p in _DISABLED) + "]",
        "[grpc]", f'  address = "{d / "containerd.sock"}"',
        "[ttrpc]", f'  address = "{d / "containerd.sock.ttrpc"}"',
        "[debug]", '  address = ""', "[metrics]", '  address = ""',
        '[plugins."io.containerd.internal.v1.opt"]', f'  path = "{d / "opt"}"',
        f"[{cri}]",
        f'  sandbox_image = "{sandbox_image}"',
        # No CAP_SYS_RESOURCE here: nothing may lower oom_score_adj, or every sandbox fails.
        "  restrict_oom_score_adj = true",
        "  disable_apparmor = true",  # no AppArmor in this kernel
        "  netns_mounts_under_state_dir = true",  # pods' netns below the node's dir, not /run/netns
        '  stream_server_address = "127.0.0.1"', '  stream_server_port = "0"',
        f"[{cri}.cni]", '  bin_dir = "/usr/lib/cni"', f'  conf_dir = "{cni_dir}"', "  max_conf_num = 1",
        f"[{cri}.containerd]", '  default_runtime_name = "runc"', '  snapshotter = "overlayfs"',
    ]
    for handler, binary in runtimes.items():
        lines += [f"[{cri}.containerd.runtimes.{handler}]", '  runtime_type = "io.containerd.runc.v2"',
                  f"[{cri}.containerd.runtimes.{handler}.options]", f'  BinaryName = "{binary}"',
                  f'  Root = "{d / "runtime-root" / handler}"', "  SystemdCgroup = false"]
    if runsc_config is not None:
        # gVisor's own shim (containerd-shim-runsc-v1, found on containerd's PATH); its options
        # type is the CRI's generic one, which only points the shim at its runsc.toml.
        lines += [f"[{cri}.containerd.runtimes.gvisor]", '  runtime_type = "io.containerd.runsc.v1"',
                  f"[{cri}.containerd.runtimes.gvisor.options]", '  TypeUrl = "io.containerd.runsc.v1.options"',
                  f'  ConfigPath = "{runsc_config}"']
    return "\n".join(lines) + "\n"


def runsc_toml(runsc: Path, root: Path) -> str:
    """The gVisor shim's runsc.toml: which runsc, its state under the node's dir (never the
    default /run/containerd/runsc), and the systrap platform named, since KVM hangs on these
    nested-virtualization machines."""
    return "\n".join([f'binary_name = "{runsc}"', f'root = "{root}"', "[runsc_config]", '  platform = "systrap"']) + "\n"


def _load_ca(cp: ControlPlane):
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(cp.files["ca"].read_bytes())
    key = serialization.load_pem_private_key(cp.files["ca_key"].read_bytes(), password=None)
    return cert, key


def node_credentials(cp: ControlPlane, d: Path, node: str) -> dict[str, Path]:
    """Client certificates of the kubelet (system:node:NAME in system:nodes) and kube-proxy
    (system:kube-proxy, bound to system:node-proxier by default), and the RBAC a kubelet needs
    when the API server authorizes with RBAC alone (no Node authorizer)."""
    from adapter.tls import write_signed

    d.mkdir(parents=True, exist_ok=True)
    ca, key = _load_ca(cp)
    kcrt, kkey = write_signed(d, "kubelet-client", ca, key, cn=f"system:node:{node}", org="system:nodes", client=True)
    pcrt, pkey = write_signed(d, "kube-proxy", ca, key, cn="system:kube-proxy", client=True)
    for role in ("system:node", "system:auth-delegator"):  # auth-delegator: its Webhook authn/authz
        name = f"foresight-node:{role.partition(':')[2]}"
        body = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]}
        r = cp.admin.apply(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}", body, "foresight-node")
        if r.status_code not in (200, 201):
            raise RuntimeError(f"ClusterRoleBinding {name}: {r.status_code} {r.text}")
    return {
        "kubelet_kubeconfig": write_kubeconfig(d / "kubelet.kubeconfig", cp.server, cp.files["ca"], cert=kcrt, key=kkey,
                                               user=f"system:node:{node}"),
        "proxy_kubeconfig": write_kubeconfig(d / "kube-proxy.kubeconfig", cp.server, cp.files["ca"], cert=pcrt, key=pkey,
                                             user="system:kube-proxy"),
    }


def kubelet_config(node: "Node", creds: dict[str, Path]) -> str:
    d = node.dir
    (d / "pod-logs").mkdir(exist_ok=True)
    # Pods with dnsPolicy Default read this: the cluster DNS, never the host's resolvers.
    (d / "resolv.conf").write_text(f"nameserver {nodenet.CLUSTER_DNS}\n")
    cfg = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": nodenet.NODE_IP, "port": node.kubelet_port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": free_port(),
        "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupRoot": "/foresight-node",
        "containerRuntimeEndpoint": f"unix://{node.sock}",
        "failSwapOn": False, "protectKernelDefaults": False,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(node.cp.files["ca"])}},
        "authorization": {"mode": "Webhook"},
        "clusterDomain": "cluster.local", "clusterDNS": [nodenet.CLUSTER_DNS], "resolvConf": str(d / "resolv.conf"),
        "podLogsDir": str(d / "pod-logs"),
        # The images are imported, never pulled: no garbage collection of them, no disk evictions.
        # Absolute floors: the node shares the machine's disk, where 1% of a large volume can be
        # more than a tenant's whole free space (pods were evicted at 1 GB free of 252 GB).
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "256Mi", "imagefs.available": "256Mi",
                         "nodefs.inodesFree": "1%"},
        "serializeImagePulls": False, "maxPods": 250,
        "nodeStatusUpdateFrequency": "4s", "syncFrequency": "10s",
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def kube_proxy_config(node: "Node", healthz_port: int) -> str:
    cfg = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(node.dir / "pki" / "kube-proxy.kubeconfig")},
        "hostnameOverride": node.name, "bindAddress": nodenet.NODE_IP, "mode": "iptables",
        "healthzBindAddress": f"127.0.0.1:{healthz_port}", "metricsBindAddress": f"127.0.0.1:{free_port()}",
        "clusterCIDR": nodenet.POD_CIDR, "nodePortAddresses": [f"{nodenet.NODE_IP}/32"],
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False, "syncPeriod": "10s", "minSyncPeriod": "0s"},
        # 0: leave the host's conntrack sysctls as they are
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }
    return yaml.safe_dump(cfg, sort_keys=False)
