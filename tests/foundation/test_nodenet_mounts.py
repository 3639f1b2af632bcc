"""The node's leftover check reads mounts from /proc/self/mountinfo: its parsing, on sample text."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from tests.cluster import nodenet

TMP = str(Path(tempfile.gettempdir()).resolve())
BENCH = f"{TMP}/foresight-real-node-k3x9"
TEST_NODE = f"{TMP}/pytest-of-root/pytest-7/node0"

# proc(5): ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS
SAMPLE = f"""\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
25 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
410 22 0:4 net:[4026532801] {BENCH}/node/containerd/runtime-root/gvisor/k8s.io/null-netns rw shared:201 master:1 - nsfs nsfs rw
411 22 0:55 / {BENCH}/node/kubelet/pods/ab12/volumes/kubernetes.io~projected/kube-api-access rw - tmpfs tmpfs rw
412 22 0:56 / {TEST_NODE}/containerd/state/io.containerd.runtime.v2.task/k8s.io/c1/rootfs rw shared:5 - overlay overlay rw
413 22 0:57 / {TEST_NODE}/kubelet/pods/with\\040space/volumes rw - tmpfs my\\040tmpfs rw
414 22 0:58 / {TMP}/someone-else/mnt rw shared:300 - tmpfs tmpfs rw
415 22 0:59 / {TMP}/foresight-real-node-k3x9x rw - tmpfs tmpfs rw
"""


def test_mountinfo_lines_parse_with_any_number_of_optional_fields_and_escaped_paths():
    mounts = {m.point: m for m in nodenet.parse_mountinfo(SAMPLE + "not a mount line\n")}
    assert len(mounts) == 8
    assert mounts["/"] == nodenet.Mount("/", "ext4", "/dev/sda1")
    null_netns = mounts[f"{BENCH}/node/containerd/runtime-root/gvisor/k8s.io/null-netns"]
    assert (null_netns.fstype, null_netns.source) == ("nsfs", "nsfs")  # two optional fields before the "-"
    assert mounts[f"{TEST_NODE}/kubelet/pods/with space/volumes"].source == "my tmpfs"
    assert mounts[f"{BENCH}/node/kubelet/pods/ab12/volumes/kubernetes.io~projected/kube-api-access"].fstype == "tmpfs"


def test_node_mounts_are_those_under_a_bench_node_dir_or_a_given_root_deepest_first():
    bench_only = nodenet.node_mounts(mountinfo=SAMPLE)
    assert [m.point for m in bench_only] == [
        f"{BENCH}/node/kubelet/pods/ab12/volumes/kubernetes.io~projected/kube-api-access",
        f"{BENCH}/node/containerd/runtime-root/gvisor/k8s.io/null-netns",
    ]
    with_test_node = [m.point for m in nodenet.node_mounts([TEST_NODE], mountinfo=SAMPLE)]
    assert f"{TEST_NODE}/containerd/state/io.containerd.runtime.v2.task/k8s.io/c1/rootfs" in with_test_node
    assert f"{TEST_NODE}/kubelet/pods/with space/volumes" in with_test_node
    assert len(with_test_node) == 4
    depths = [p.count("/") for p in with_test_node]
    assert depths == sorted(depths, reverse=True)  # children before their parents
    # neither another program's mount in the temp dir nor a directory that only shares the prefix
    assert not {f"{TMP}/someone-else/mnt", f"{TMP}/foresight-real-node-k3x9x", "/", "/proc"} & set(with_test_node)


def test_the_teardown_unmounts_each_node_mount_and_reports_what_would_not_go(tmp_path, monkeypatch):
    info = tmp_path / "mountinfo"
    info.write_text(SAMPLE)
    monkeypatch.setattr(nodenet, "MOUNTINFO", info)
    calls = []

    def fake_run(*args, check=True, input=None):
        calls.append(args)
        busy = args[-1].endswith("null-netns")
        return subprocess.CompletedProcess(args, 32 if busy else 0, "", "target is busy" if busy else "")

    monkeypatch.setattr(nodenet, "run", fake_run)
    errors: list[str] = []
    nodenet.unmount_node_mounts(errors)
    assert [c[-1] for c in calls] == [m.point for m in nodenet.node_mounts(mountinfo=SAMPLE)]
    assert all(c[:2] == ("umount", "-l") for c in calls)
    assert errors == [f"umount {BENCH}/node/containerd/runtime-root/gvisor/k8s.io/null-netns (nsfs): target is busy"]
