"""Real local OCI containers with crun (or runc). The only module that runs them.

pre-warm = ``create`` (namespaces and rootfs ready, the user process not started),
claim = ``start``, expire = ``delete``.

On disk, under ``state_dir``:
- ``root/``            the runtime's own state (``--root``), so our containers never mix with
                       anyone else's on the machine;
- ``rootfs/``          one read-only busybox-static root shared by every bundle;
- ``bundles/<id>/``    config.json (+ the runtime's log);
- ``meta/<id>.json``   the controller's metadata (state, idle_since, deadline, a claim's lease
                       expiry), written atomically: ``creating`` before the runtime is called,
                       ``warm`` after.

``list`` reconciles the three, so a controller killed at any point adopts what it left:
a container without metadata is adopted as warm, metadata or bundles without a container are
removed, a warm container whose process exited is reported dead.

crun 1.8 refuses ``create`` on hosts with cgroup v1 and v2 mounted side by side ("cgroups in
hybrid mode not supported"); there ``create`` runs inside ``unshare -m`` with the v2 mount
unmounted and ``--cgroup-manager=disabled`` (see shared/reference/warm-pools.md). The mode is
probed once. Detached containers inherit the runtime's stdio, so it is never a pipe.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Mapping

from warmpool.backends.base import BackendError, ClaimConflict, CreateError
from warmpool.coldstart import CONTAINER
from warmpool.policy import PoolSpec
from warmpool.reconcile import Container

log = logging.getLogger(__name__)

_WRAP = 'umount /sys/fs/cgroup/unified 2>/dev/null; exec "$0" --cgroup-manager=disabled "$@"'
_probe_lock = threading.Lock()
_probe_cache: dict[str, tuple[bool, str, bool]] = {}


def busybox_path() -> str | None:
    for p in ("/bin/busybox", "/usr/bin/busybox"):
        if os.path.exists(p):
            return p
    return shutil.which("busybox")


def build_rootfs(rootfs: Path) -> None:
    """A busybox-static root: /bin/busybox plus symlinks for the applets we use."""
    bb = busybox_path()
    if bb is None:
        raise CreateError("busybox is not installed (apt-get install busybox-static)")
    (rootfs / "bin").mkdir(parents=True, exist_ok=True)
    for d in ("proc", "dev", "sys", "tmp", "etc"):
        (rootfs / d).mkdir(exist_ok=True)
    target = rootfs / "bin" / "busybox"
    if not target.exists():
        shutil.copy2(bb, target)
    for applet in ("sh", "sleep", "true", "false", "cat", "echo", "ls", "httpd", "nc", "env"):
        link = rootfs / "bin" / applet
        if not link.exists():
            link.symlink_to("busybox")


def oci_config(rootfs: Path, args: list[str], hostname: str) -> dict:
    """A minimal OCI runtime spec (what ``crun spec`` writes, trimmed; terminal off)."""
    return {
        "ociVersion": "1.0.0",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": list(args),
            "env": ["PATH=/bin", "TERM=xterm"],
            "cwd": "/",
            "capabilities": {k: ["CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_AUDIT_WRITE"] for k in ("bounding", "effective", "permitted")},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": str(rootfs), "readonly": True},
        "hostname": hostname,
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "size=16m"]},
        ],
        "linux": {
            "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list"],
            "readonlyPaths": ["/proc/sys", "/proc/sysrq-trigger"],
        },
    }


class CrunBackend:
    """``runtime`` is "crun" or "runc"."""

    start_kind = CONTAINER

    def __init__(self, state_dir: str | Path, runtime: str = "crun"):
        if runtime not in ("crun", "runc"):
            raise ValueError(f"runtime must be crun or runc, got {runtime!r}")
        self.name = runtime
        self.runtime = runtime
        self.binary = shutil.which(runtime) or runtime
        self.state_dir = Path(state_dir)
        self.root = self.state_dir / "root"
        self.rootfs = self.state_dir / "rootfs"
        self.bundles = self.state_dir / "bundles"
        self.meta = self.state_dir / "meta"
        for d in (self.root, self.bundles, self.meta):
            d.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._wrap: bool | None = None

    # --- runtime calls ---------------------------------------------------------------------

    def _base(self) -> list[str]:
        return [self.binary, "--root", str(self.root)]

    def _run(self, args: list[str], *, wrap: bool = False, timeout: float = 30.0, log_file: Path | None = None) -> str:
        """Run a runtime command. Detached children inherit stdio, so stdin/stdout are
        DEVNULL and stderr goes to a file, never a pipe."""
        cmd = self._base() + args
        if wrap:
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", _WRAP] + cmd
        with tempfile.TemporaryFile() if log_file is None else open(log_file, "w+b") as err:
            try:
                rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, timeout=timeout).returncode
            except subprocess.TimeoutExpired as exc:
                raise BackendError(f"{self.runtime} {args[0]} timed out after {timeout}s") from exc
            except OSError as exc:
                raise BackendError(f"cannot run {self.runtime}: {exc}") from exc
            err.seek(0)
            msg = err.read().decode(errors="replace").strip()
        if rc != 0:
            raise BackendError(f"{self.runtime} {args[0]} failed (exit {rc}): {msg[-400:]}")
        return msg

    def _query(self, args: list[str]) -> str:
        r = subprocess.run(self._base() + args, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        if r.returncode != 0:
            raise BackendError(f"{self.runtime} {args[0]} failed: {r.stderr.decode(errors='replace').strip()[-300:]}")
        return r.stdout.decode()

    def _create(self, cid: str, bundle: Path) -> None:
        log_file = bundle / "runtime.log"
        if self.runtime == "runc":
            self._run(["create", "--bundle", str(bundle), cid], log_file=log_file)
            return
        if self._wrap is None:
            self._wrap = needs_wrapper(self.runtime)
        self._run(["create", "--bundle", str(bundle), cid], wrap=self._wrap, log_file=log_file)

    def _states(self) -> dict[str, dict]:
        out = self._query(["list", "--format", "json"]).strip()
        if not out or out == "null":
            return {}
        try:
            items = json.loads(out)
        except ValueError as exc:
            raise BackendError(f"{self.runtime} list printed something that is not JSON: {out[:200]}") from exc
        return {i["id"]: i for i in items or []}

    # --- metadata --------------------------------------------------------------------------

    def _meta_path(self, cid: str) -> Path:
        return self.meta / f"{cid}.json"

    def _write_meta(self, c: Container) -> None:
        tmp = self.meta / f".{c.id}.tmp"
        tmp.write_text(json.dumps(c.__dict__))
        os.replace(tmp, self._meta_path(c.id))

    def _read_meta(self, cid: str) -> Container | None:
        try:
            return Container(**json.loads(self._meta_path(cid).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _remove_files(self, cid: str) -> None:
        shutil.rmtree(self.bundles / cid, ignore_errors=True)
        try:
            self._meta_path(cid).unlink()
        except FileNotFoundError:
            pass

    # --- protocol --------------------------------------------------------------------------

    def list(self, pool: PoolSpec) -> list[Container]:
        prefix = f"fs-{pool.name}-"
        with self._lock:
            states = {k: v for k, v in self._states().items() if k.startswith(prefix)}
            ids = set(states)
            ids |= {p.stem for p in self.meta.glob(f"{prefix}*.json")}
            ids |= {p.name for p in self.bundles.glob(f"{prefix}*")}
            out: list[Container] = []
            for cid in sorted(ids):
                st = states.get(cid)
                meta = self._read_meta(cid)
                if st is None:
                    # killed before the runtime created it, or removed behind our back
                    self._remove_files(cid)
                    continue
                status = st.get("status", "")
                if meta is None or meta.state == "creating":
                    # killed between create and the metadata write: adopt it
                    now = time.time()
                    meta = Container(cid, pool.name, "warm", created_at=now, idle_since=now, deadline=None, endpoint=f"{self.runtime}://{cid}")
                    if status not in ("created", "running"):
                        meta = meta.replace(state="dead")
                    self._write_meta(meta)
                if status not in ("created", "running") and meta.state != "dead":
                    meta = meta.replace(state="dead")
                if status == "running" and not meta.started:
                    meta = meta.replace(started=True)  # started just before a crash
                out.append(meta)
            return out

    def _prepare_bundle(self, pool: PoolSpec, cid: str) -> Path:
        if not (self.rootfs / "bin" / "busybox").exists():
            build_rootfs(self.rootfs)
        bundle = self.bundles / cid
        bundle.mkdir(parents=True, exist_ok=True)
        cfg = oci_config(self.rootfs, list(pool.template.command), cid[:63])
        (bundle / "config.json").write_text(json.dumps(cfg))
        return bundle

    def create(self, pool: PoolSpec, container_id: str, now: float, deadline: float) -> tuple[Container, Mapping[str, float]]:
        c = Container(container_id, pool.name, "creating", created_at=now, idle_since=now, deadline=deadline, endpoint=f"{self.runtime}://{container_id}")
        self._write_meta(c)
        t0 = time.perf_counter()
        try:
            bundle = self._prepare_bundle(pool, container_id)
            t1 = time.perf_counter()
            self._create(container_id, bundle)
            t2 = time.perf_counter()
        except (BackendError, OSError) as exc:
            self._cleanup_failed(container_id)
            raise CreateError(str(exc)) from exc
        c = c.replace(state="warm")
        self._write_meta(c)
        return c, {"image": (t1 - t0) * 1000.0, "sandbox": (t2 - t1) * 1000.0}

    def _cleanup_failed(self, cid: str) -> None:
        try:
            self._run(["delete", "-f", cid], timeout=10)
        except BackendError:
            pass
        self._remove_files(cid)

    def claim(self, pool: PoolSpec, container: Container, now: float, lease_expires_at: float | None = None) -> Container:
        if not container.started:
            # the hot path: one `start` and nothing else (state is only read when it fails)
            try:
                self._run(["start", container.id])
            except BackendError as exc:
                st = self._states().get(container.id)
                if st is None:
                    raise BackendError(f"container {container.id} no longer exists") from exc
                if st.get("status") == "running":
                    raise ClaimConflict(f"container {container.id} was started by someone else") from exc
                raise
        else:
            st = self._states().get(container.id)
            if st is None or st.get("status") != "running":
                raise BackendError(f"container {container.id} is {st.get('status') if st else 'gone'}")
        c = container.replace(state="claimed", claimed_since_idle=True, started=True, lease_expires_at=lease_expires_at)
        self._write_meta(c)
        return c

    def renew(self, pool: PoolSpec, container: Container, lease_expires_at: float) -> Container:
        with self._lock:
            cur = self._read_meta(container.id)
            if cur is None or cur.state != "claimed":
                raise BackendError(f"container {container.id} is {cur.state if cur else 'gone'}, not claimed")
            c = cur.replace(lease_expires_at=lease_expires_at)
            self._write_meta(c)
            return c

    def release(self, pool: PoolSpec, container: Container, now: float, deadline: float) -> Container:
        c = container.replace(state="warm", idle_since=now, deadline=deadline, claimed_since_idle=False,
                              lease_expires_at=None)
        self._write_meta(c)
        return c

    def delete(self, pool: PoolSpec, container_id: str) -> None:
        try:
            self._run(["delete", "-f", container_id], timeout=30)
        except BackendError as exc:
            if "does not exist" not in str(exc) and "not exist" not in str(exc).lower():
                if container_id in self._states():
                    raise
        self._remove_files(container_id)

    def cold_start(self, pool: PoolSpec, container_id: str, now: float,
                   lease_expires_at: float | None = None) -> tuple[Container, Mapping[str, float]]:
        c, timings = self.create(pool, container_id, now, deadline=now)
        t0 = time.perf_counter()
        c = self.claim(pool, c, now, lease_expires_at)
        timings = dict(timings)
        timings["runtime"] = (time.perf_counter() - t0) * 1000.0
        return c, timings

    def container_ids(self) -> list[str]:
        """Every container in our runtime root (for leak checks)."""
        return sorted(self._states())


def needs_wrapper(runtime: str = "crun") -> bool:
    """True when plain ``crun create`` fails on this host with the cgroup hybrid-mode error."""
    ok, why, wrap = probe(runtime)
    return wrap


def probe(runtime: str = "crun") -> tuple[bool, str, bool]:
    """Can we create/start/delete a container here? Returns (works, reason, needs_wrapper).
    Cached per process."""
    with _probe_lock:
        if runtime in _probe_cache:
            return _probe_cache[runtime]
        result = _probe(runtime)
        _probe_cache[runtime] = result
        return result


def _probe(runtime: str) -> tuple[bool, str, bool]:
    binary = shutil.which(runtime)
    if binary is None:
        return False, f"{runtime} is not installed (apt-get install {runtime})", False
    if os.geteuid() != 0:
        return False, f"{runtime} containers need root here (running as uid {os.geteuid()})", False
    if busybox_path() is None:
        return False, "busybox-static is not installed (apt-get install busybox-static)", False
    tmp = Path(tempfile.mkdtemp(prefix="foresight-probe-"))
    try:
        root = tmp / "root"
        root.mkdir()
        build_rootfs(tmp / "rootfs")
        bundle = tmp / "b"
        bundle.mkdir()
        (bundle / "config.json").write_text(json.dumps(oci_config(tmp / "rootfs", ["true"], "probe")))
        cid = f"foresight-probe-{os.getpid()}"
        last = ""
        for wrap in ((False, True) if runtime == "crun" else (False,)):
            cmd = [binary, "--root", str(root), "create", "--bundle", str(bundle), cid]
            if wrap:
                cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", _WRAP] + cmd
            with tempfile.TemporaryFile() as err:
                rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, timeout=30).returncode
                err.seek(0)
                last = err.read().decode(errors="replace").strip()
            if rc == 0:
                subprocess.run([binary, "--root", str(root), "delete", "-f", cid], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
                return True, f"{runtime} works" + (" (through the unshare/umount wrapper)" if wrap else ""), wrap
        return False, f"{runtime} create fails here: {last[-300:]}", False
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{runtime} probe failed: {exc}", False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
