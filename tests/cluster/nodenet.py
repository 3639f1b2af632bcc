"""The real node's network, and the host state it changes, set up and taken down again.

Rules (issue 21): pods and Services live only inside what this module and the node's own
containerd create: pod CIDR 198.18.0.0/16 (this node: 198.18.0.0/24 on the bridge ``fsbr0``),
Service CIDR 198.19.0.0/16, the node's own address 198.18.255.1 on ``fsnode0``, a bridge
without ports (this kernel has no ``dummy`` driver; a portless bridge holds an address and
drops what is routed to it). There is no masquerade (the CNI bridge runs with ``ipMasq: false``; kube-proxy's
masquerade mark is only set for traffic from outside the cluster CIDR, and every local sender
uses 198.18.255.1), pods get no default route, and the ``FORESIGHT-NODE`` chain first in FORWARD
drops anything that would leave the bridge for another interface. Service addresses are routed
to ``fsnode0``, so a packet for a Service with no endpoint dies on the node instead of
following the default route off it.

:func:`teardown` is idempotent and also removes what a killed run left behind: the next
start calls it first. It also unmounts what is still mounted under the benches' node
directories (gVisor's ``nsfs`` ``null-netns`` outlived a node bench once), and
:func:`leftovers` lists those mounts, so a run that leaves one fails its check.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

POD_CIDR = "198.18.0.0/16"
SERVICE_CIDR = "198.19.0.0/16"
NODE_POD_RANGE = "198.18.0.0/24"
GATEWAY = "198.18.0.1"
NODE_IP = "198.18.255.1"
CLUSTER_DNS = "198.19.0.10"
BRIDGE = "fsbr0"
DUMMY = "fsnode0"
GUARD_CHAIN = "FORESIGHT-NODE"
NETWORK_NAME = "foresight-node"
# Host settings the node changes: kube-proxy needs bridged traffic to cross iptables, and
# Service traffic between two pods of the bridge is routed through the host. The kubelet
# (protectKernelDefaults: false) sets the other ones. All are restored on teardown.
SYSCTLS = {"net/bridge/bridge-nf-call-iptables": "1", "net/ipv4/ip_forward": "1"}
KUBELET_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                   "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")
TABLES = ("filter", "nat", "mangle")
# Chains of kube-proxy, the kubelet and the CNI plugins (only this node runs them here: the node
# holds a machine-wide lock), removed on teardown.
OWNED_PREFIXES = ("KUBE-", "CNI-", GUARD_CHAIN)
# The node benches' work directories (bench/real_node*.py: tempfile.mkdtemp with this prefix);
# a test's node lives in its tmp_path instead, which its caller passes as a root.
BENCH_NODE_DIRS = "foresight-real-node-*"
MOUNTINFO = Path("/proc/self/mountinfo")


class NodeNetworkError(RuntimeError):
    pass


def run(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run(list(args), capture_output=True, text=True, input=input, timeout=60)
    if check and r.returncode != 0:
        raise NodeNetworkError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name


def check_ranges_are_free() -> None:
    """Refuse to start where the host already routes the test ranges (another network)."""
    routes = json.loads(run("ip", "-j", "route", "show").stdout or "[]")
    ours = [ipaddress.ip_network(POD_CIDR), ipaddress.ip_network(SERVICE_CIDR)]
    for r in routes:
        dst = r.get("dst", "")
        if dst in ("default", "") or r.get("dev") in (BRIDGE, DUMMY):
            continue
        net = ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False)
        if any(net.overlaps(o) for o in ours):
            raise NodeNetworkError(f"the host already routes {dst} (dev {r.get('dev')}), inside the node's test ranges "
                                   f"{POD_CIDR} / {SERVICE_CIDR}: refusing to start the node")


@dataclass
class NodeNetwork:
    """Host-side network state of one node; ``saved`` holds the sysctls to restore."""

    state_file: Path
    saved: dict[str, str] = field(default_factory=dict)

    def setup(self) -> None:
        check_ranges_are_free()
        self._save_sysctls()
        for name, value in SYSCTLS.items():
            _sysctl_path(name).write_text(value)
        run("ip", "link", "add", DUMMY, "type", "bridge")
        run("ip", "addr", "add", f"{NODE_IP}/32", "dev", DUMMY)
        run("ip", "link", "set", DUMMY, "up")
        run("ip", "route", "add", SERVICE_CIDR, "dev", DUMMY, "src", NODE_IP)
        run("iptables", "-w", "-N", GUARD_CHAIN)
        run("iptables", "-w", "-A", GUARD_CHAIN, "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT")
        run("iptables", "-w", "-A", GUARD_CHAIN, "-i", BRIDGE, "-j", "DROP")
        run("iptables", "-w", "-A", GUARD_CHAIN, "-o", BRIDGE, "-j", "DROP")
        run("iptables", "-w", "-I", "FORWARD", "1", "-j", GUARD_CHAIN)

    def _save_sysctls(self) -> None:
        """Written to disk first, so a later run can restore them after a crash."""
        prev = json.loads(self.state_file.read_text()) if self.state_file.exists() else {}
        for name in (*SYSCTLS, *KUBELET_SYSCTLS):
            p = _sysctl_path(name)
            if p.exists():
                self.saved[name] = prev.get(name) or p.read_text().strip()
        self.state_file.write_text(json.dumps(self.saved))


def cni_conflist(data_dir: Path) -> dict:
    """bridge + host-local + portmap, and loopback (containerd runs it for every sandbox)."""
    return {
        "cniVersion": "1.0.0", "name": NETWORK_NAME,
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(data_dir),
                      "ranges": [[{"subnet": NODE_POD_RANGE, "gateway": GATEWAY}]],
                      # no default route: pods reach pods and Services, nothing else
                      "routes": [{"dst": POD_CIDR}, {"dst": SERVICE_CIDR}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": False},
        ],
    }


def _chains(table: str) -> list[str]:
    out = run("iptables", "-w", "-t", table, "-S", check=False).stdout.splitlines()
    return [ln.split()[1] for ln in out if ln.startswith("-N ")]


def remove_owned_chains(errors: list[str]) -> None:
    """Every rule that jumps to an owned chain, then the chains themselves."""
    for table in TABLES:
        owned = [c for c in _chains(table) if c.startswith(OWNED_PREFIXES)]
        if not owned:
            continue
        for ln in run("iptables", "-w", "-t", table, "-S", check=False).stdout.splitlines():
            parts = shlex.split(ln)  # comments are quoted: "kubernetes service portals"
            if parts[:1] == ["-A"] and parts[1] not in owned and any(p in owned for p in parts):
                r = run("iptables", "-w", "-t", table, "-D", *parts[1:], check=False)
                if r.returncode:
                    errors.append(f"iptables -t {table} -D {' '.join(parts[1:])}: {r.stderr.strip()}")
        for c in owned:
            run("iptables", "-w", "-t", table, "-F", c, check=False)
        for c in owned:
            r = run("iptables", "-w", "-t", table, "-X", c, check=False)
            if r.returncode:
                errors.append(f"iptables -t {table} -X {c}: {r.stderr.strip()}")


def netns_of_ranges() -> list[str]:
    """Network namespaces whose interfaces hold an address of the pod range (the node's pods)."""
    found = []
    for ns in sorted(p.name for p in Path("/run/netns").glob("*")) if Path("/run/netns").is_dir() else []:
        out = run("ip", "-n", ns, "-j", "addr", "show", check=False).stdout or "[]"
        try:
            addrs = [a["local"] for link in json.loads(out) for a in link.get("addr_info", [])]
        except (ValueError, KeyError):
            continue
        if any(ipaddress.ip_address(a) in ipaddress.ip_network(POD_CIDR) for a in addrs if ":" not in a):
            found.append(ns)
    return found


def teardown(state_file: Path, extra_netns: list[str] = (), errors: list[str] | None = None) -> list[str]:
    """Remove the node's network state and the mounts under the benches' node directories from the
    host; returns what could not be removed."""
    errors = [] if errors is None else errors
    for ns in sorted({*extra_netns, *netns_of_ranges()}):
        r = run("ip", "netns", "delete", ns, check=False)
        if r.returncode and "No such file" not in r.stderr:
            errors.append(f"ip netns delete {ns}: {r.stderr.strip()}")
    for link in (BRIDGE, DUMMY):
        if Path(f"/sys/class/net/{link}").exists():
            r = run("ip", "link", "delete", link, check=False)
            if r.returncode:
                errors.append(f"ip link delete {link}: {r.stderr.strip()}")
    remove_owned_chains(errors)
    unmount_node_mounts(errors)
    if state_file.exists():
        for name, value in json.loads(state_file.read_text()).items():
            try:
                _sysctl_path(name).write_text(value)
            except OSError as exc:
                errors.append(f"sysctl {name}={value}: {exc}")
        state_file.unlink()
    return errors


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    source: str


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a /proc/<pid>/mountinfo text (proc(5)): ``ID PARENT MAJ:MIN ROOT POINT OPTIONS
    [OPTIONAL FIELDS...] - FSTYPE SOURCE SUPER-OPTIONS``; the optional fields vary in number,
    so the file system type is found after the ``-`` separator, not at a fixed column."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        try:
            sep = fields.index("-", 6)
        except ValueError:
            continue  # not a mount line
        if len(fields) < sep + 3:
            continue
        mounts.append(Mount(_unescape(fields[4]), fields[sep + 1], _unescape(fields[sep + 2])))
    return mounts


def node_mounts(roots: Iterable[Path | str] = (), mountinfo: str | None = None) -> list[Mount]:
    """Mounts below ``roots`` or below a bench's node directory in the temp dir, deepest first
    (the order to unmount them in). ``mountinfo``: the text to read instead of this process's."""
    text = MOUNTINFO.read_text() if mountinfo is None else mountinfo
    prefixes = tuple(str(Path(r).resolve()) + "/" for r in roots)
    bench = str(Path(tempfile.gettempdir()).resolve() / BENCH_NODE_DIRS) + "/*"
    found = {m.point: m for m in parse_mountinfo(text)
             if m.point.startswith(prefixes) or fnmatch.fnmatchcase(m.point, bench)}
    return [found[p] for p in sorted(found, key=lambda p: (-p.count("/"), p))]


def unmount_node_mounts(errors: list[str], roots: Iterable[Path | str] = ()) -> None:
    """Lazily unmount every node mount (:func:`node_mounts`); what fails is added to ``errors``."""
    for m in node_mounts(roots):
        r = run("umount", "-l", m.point, check=False)
        if r.returncode and "not mounted" not in r.stderr:
            errors.append(f"umount {m.point} ({m.fstype}): {r.stderr.strip()}")


def leftovers(roots: Iterable[Path | str] = ()) -> list[str]:
    """What of the node is on the host now (empty after a clean teardown): its network, and
    mounts under a bench's node directory or under ``roots`` (a test's node directory)."""
    left = [f"link {ln}" for ln in (BRIDGE, DUMMY) if Path(f"/sys/class/net/{ln}").exists()]
    left += [f"mount {m.fstype} on {m.point}" for m in node_mounts(roots)]
    left += [f"netns {ns}" for ns in netns_of_ranges()]
    left += [f"iptables -t {t} chain {c}" for t in TABLES for c in _chains(t) if c.startswith(OWNED_PREFIXES)]
    routes = run("ip", "-j", "route", "show").stdout or "[]"
    left += [f"route {r.get('dst')}" for r in json.loads(routes)
             if r.get("dst", "").startswith(("198.18.", "198.19."))]
    return left
