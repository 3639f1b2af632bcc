"""The one protocol every backend implements; the controller does not know which it drives.

A backend owns the truth about what exists: ``list`` is how a restarted controller adopts the
containers it left. Metadata the controller needs (state, idle_since, deadline, a claim's
lease expiry) is persisted by the backend with the container (a JSON file next to a crun
bundle, labels and annotations on a pod), so nothing lives only in the controller's memory: a
restarted controller neither frees a claimed container before its lease ends nor keeps it
past it.
"""

from __future__ import annotations

from typing import Mapping, Protocol, runtime_checkable

from warmpool.policy import PoolSpec
from warmpool.reconcile import Container


class BackendError(Exception):
    """A backend operation failed; retryable (the controller backs off and retries)."""


class CreateError(BackendError):
    """A container could not be created (image missing, runtime error). Nothing was left."""


class ClaimConflict(BackendError):
    """Someone else claimed this container first (e.g. a Kubernetes 409): try another."""


@runtime_checkable
class Backend(Protocol):
    name: str
    # what one start makes: "container" (a local OCI container: crun, runc) or "pod" (a
    # Kubernetes pod); the cold-start model keeps its figures per kind (warmpool.coldstart)
    start_kind: str

    def list(self, pool: PoolSpec) -> list[Container]:
        """Every container of the pool that exists, with its persisted state; a container
        whose process died is reported with state 'dead'. A backend that learns a start's
        duration only after the fact (a pod's create -> Ready) reports it as ``start_ms``."""

    def create(self, pool: PoolSpec, container_id: str, now: float, deadline: float) -> tuple[Container, Mapping[str, float]]:
        """Pre-warm one container (ready, user process not started). Returns the container
        (state 'warm' or 'creating') and the measured cold-start components in ms
        (keys runtime/image/sandbox, those it measured; none for a pod, whose start is known
        once it is Ready: ``Container.start_ms``). Raises CreateError, leaving nothing."""

    def claim(self, pool: PoolSpec, container: Container, now: float, lease_expires_at: float | None = None) -> Container:
        """Hand the container to one claimer (start its process), persisting the claim's lease
        expiry with it. Raises ClaimConflict when another claimer won, BackendError when the
        container is broken."""

    def renew(self, pool: PoolSpec, container: Container, lease_expires_at: float) -> Container:
        """Persist a claimed container's new lease expiry. BackendError when it is gone or no
        longer claimed."""

    def release(self, pool: PoolSpec, container: Container, now: float, deadline: float) -> Container:
        """Return a claimed container to the pool (warm again, aging from ``now``; no lease)."""

    def delete(self, pool: PoolSpec, container_id: str) -> None:
        """Remove the container and everything it used; deleting a missing one is fine."""

    def cold_start(self, pool: PoolSpec, container_id: str, now: float,
                   lease_expires_at: float | None = None) -> tuple[Container, Mapping[str, float]]:
        """Create and start a container for a claimer who found no warm one (claimed, with
        this lease expiry)."""
