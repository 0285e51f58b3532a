"""What the API needs from a running cluster (:class:`ClusterPort`), and the adapter over
the embedded one (:class:`LocalClusterPort`, over :class:`accelnet.runtime.sdk.LocalCluster`).

The services talk to the port only; tests may hand them any object of this shape. The
adapter is the one place that reaches into the local cluster beyond its SDK: the lock
that guards its controller (for a task's log path, the scheduler and the tenants) and its
thread's health. Two calls here would sit better on the controller itself:
``set_scheduler`` (swap the policy live: a new incremental session built from the old
one's jobs) and ``set_tenants``; they use only the controller's public attributes.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from accelnet.fabric import Fabric
from accelnet.runtime.care.device_care import Answer
from accelnet.runtime.care.device_view import DeviceStatus, from_store
from accelnet.runtime.control.controller import JobRejectedError
from accelnet.runtime.control.store import IdempotencyRecord, Store
from accelnet.runtime.sdk import LocalCluster
from accelnet.sched import JobSpec, Scheduler, Tenant
from accelnet.sched.reasons import Reason
from accelnet.sched.request import rejection
from accelnet.sched.rounds import RoundScheduler
from accelnet.sched.session import Session

if TYPE_CHECKING:
    from accelnet.serve.service import Service
    from accelnet.serve.spec import ServiceSpec

DEVICE_OPS = ("drain", "undrain", "reset", "probe")


class DeviceCareOffError(RuntimeError):
    """The cluster does not watch its devices: no device operations."""


class ClusterPort(Protocol):
    """A running cluster, as the API uses it. Every method is thread-safe."""

    @property
    def fabric(self) -> Fabric:
        """The fabric it runs on."""
        ...

    @property
    def store(self) -> Store:
        """Its store (thread-safe)."""
        ...

    def submit(self, spec: JobSpec, job_id: str) -> str:
        """Accept a job under ``job_id`` (durable on return); JobRejectedError if the
        fabric can never run it."""
        ...

    def submit_all(
        self,
        jobs: Sequence[tuple[JobSpec, str]],
        key: IdempotencyRecord | None = None,
        forget_before: float = -math.inf,
    ) -> None:
        """Accept the jobs ``(spec, job id)``, in order, and keep ``key`` (the request's
        idempotency key; keys older than ``forget_before`` are dropped), in one store
        transaction: all durable on return, or none stored. JobRejectedError (nothing
        stored) if the fabric can never run one."""
        ...

    def cancel(self, job_id: str) -> None:
        """Cancel a job (queued: at once; running: its tasks are stopped)."""
        ...

    def reason(self, job_id: str) -> Reason | None:
        """Why a queued job waits (None if it is not queued)."""
        ...

    def reasons(self, job_ids: Sequence[str]) -> dict[str, Reason | None]:
        """:meth:`reason` of each job, asked at once (one wait for the controller)."""
        ...

    def devices(self) -> list[DeviceStatus]:
        """Every device: state, remediation phase, health, jobs, latest sample."""
        ...

    def device_op(
        self, op: str, device: str, reason: str | None, level: int, wait_s: float
    ) -> Answer | None:
        """``drain``/``undrain``/``reset``/``probe`` a device; the answer, or None if it
        is still being carried out after ``wait_s`` (it goes on). DeviceCareOffError."""
        ...

    def log_path(self, job_id: str, attempt: int, rank: int, stream: str) -> Path:
        """Where a task's ``out``/``err`` stream is now (its live spool while it runs)."""
        ...

    def scheduler(self) -> Scheduler:
        """The scheduler deciding now."""
        ...

    def set_scheduler(self, scheduler: Scheduler) -> None:
        """Decide with ``scheduler`` from now on (queued and running jobs are kept)."""
        ...

    def set_tenants(self, tenants: Mapping[str, Tenant]) -> None:
        """The tenants the scheduler checks (weights, quotas); empty: no tenant checks."""
        ...

    def alive(self) -> bool:
        """Whether the controller is running."""
        ...

    def serve(self, spec: ServiceSpec) -> Service:
        """Start a service (its router and replicas); ValueError if its tenant runs one of
        that name already."""
        ...

    def services(self) -> list[Service]:
        """The running services."""
        ...


class LocalClusterPort:
    """:class:`ClusterPort` over a started :class:`LocalCluster` (see the module
    docstring). :meth:`close` stops its round ticker; closing the cluster is the owner's."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    @property
    def fabric(self) -> Fabric:
        """See :class:`ClusterPort`."""
        return self.cluster.fabric

    @property
    def store(self) -> Store:
        """See :class:`ClusterPort`."""
        return self.cluster.store

    def submit(self, spec: JobSpec, job_id: str) -> str:
        """See :class:`ClusterPort`."""
        return self.cluster.submit_spec(spec, job_id).id

    def submit_all(
        self,
        jobs: Sequence[tuple[JobSpec, str]],
        key: IdempotencyRecord | None = None,
        forget_before: float = -math.inf,
    ) -> None:
        """See :class:`ClusterPort`: under the cluster's lock (taken before the store's,
        as the controller's thread takes them), one :meth:`~accelnet.runtime.control.store.Store.
        atomic` around the controller's submissions and the key. Every spec is checked
        against the fabric first, so that a refusal never comes half-way."""
        c = self.cluster
        with c._lock:
            for spec, _ in jobs:
                never = rejection(spec, c.controller.topology)
                if never is not None:
                    raise JobRejectedError(
                        f"job {spec.name}: {never.key} = {never.value!r}: {never.message}"
                    )
            with c.store.atomic():
                for spec, job_id in jobs:
                    c.controller.submit(spec, None, job_id)
                if key is not None:
                    c.store.keep_idempotency(key, forget_before)
            c.controller.wake()
        c.backend.wakeup()  # end the controller's poll wait now

    def cancel(self, job_id: str) -> None:
        """See :class:`ClusterPort`."""
        self.cluster.cancel(job_id)
        self.cluster.backend.wakeup()

    def reason(self, job_id: str) -> Reason | None:
        """See :class:`ClusterPort`."""
        return self.cluster.reason(job_id)

    def reasons(self, job_ids: Sequence[str]) -> dict[str, Reason | None]:
        """See :class:`ClusterPort`: under the cluster's lock, taken once."""
        with self.cluster._lock:
            return {j: self.cluster.controller.reason(j) for j in job_ids}

    def devices(self) -> list[DeviceStatus]:
        """See :class:`ClusterPort` (from the store when device care is off)."""
        if self.cluster.care is None:
            return from_store(self.cluster.store, self.cluster.fabric)
        return self.cluster.devices()

    def device_op(
        self, op: str, device: str, reason: str | None, level: int, wait_s: float
    ) -> Answer | None:
        """See :class:`ClusterPort`."""
        c = self.cluster
        if c.care is None:
            raise DeviceCareOffError("device care is off in this cluster: no device operations")
        try:
            if op == "drain":
                return c.drain(device, reason, timeout=wait_s)
            if op == "undrain":
                return c.undrain(device, timeout=wait_s)
            if op == "reset":
                return c.reset_device(device, timeout=wait_s)
            if op == "probe":
                return c.probe(device, level, timeout=wait_s)
        except TimeoutError:
            return None
        raise ValueError(f"unknown device operation {op!r}; valid: {', '.join(DEVICE_OPS)}")

    def log_path(self, job_id: str, attempt: int, rank: int, stream: str) -> Path:
        """See :class:`ClusterPort`."""
        with self.cluster._lock:
            return self.cluster.controller.log_path(job_id, attempt, rank, stream)

    def scheduler(self) -> Scheduler:
        """See :class:`ClusterPort`."""
        return self.cluster.controller.scheduler

    def set_scheduler(self, scheduler: Scheduler) -> None:
        """See :class:`ClusterPort`: a new incremental session, given every job the old
        one knew; a round-based scheduler gets a ticker that wakes the controller when
        each round begins."""
        ctl = self.cluster.controller
        with self.cluster._lock:
            old = ctl.session
            new = Session(scheduler, ctl.fabric, ctl.device_states(), old.tenants)
            new.progress = old.progress
            for view in list(old.jobs()):
                new.put(view)
            ctl.scheduler = scheduler
            ctl.topology = scheduler.topology(ctl.fabric)
            ctl.session = new
            ctl.wake()
        self.cluster.backend.wakeup()
        if isinstance(scheduler, RoundScheduler) and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="accelnet-rounds", daemon=True)
            self._ticker.start()

    def set_tenants(self, tenants: Mapping[str, Tenant]) -> None:
        """See :class:`ClusterPort`."""
        ctl = self.cluster.controller
        with self.cluster._lock:
            ctl.tenants = dict(tenants)
            ctl.session.set_tenants(tenants)
            ctl.wake()
        self.cluster.backend.wakeup()

    def alive(self) -> bool:
        """See :class:`ClusterPort`."""
        thread = self.cluster._thread
        return thread is not None and thread.is_alive() and self.cluster._error is None

    def serve(self, spec: ServiceSpec) -> Service:
        """See :class:`ClusterPort`."""
        service: Service = self.cluster.serve(spec)
        return service

    def services(self) -> list[Service]:
        """See :class:`ClusterPort`."""
        return list(self.cluster.services())

    def close(self) -> None:
        """Stop the round ticker (idempotent)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)

    def _tick(self) -> None:
        clock = self.cluster.controller.clock
        while not self._stop.is_set():
            scheduler = self.cluster.controller.scheduler
            round_s = scheduler.round_s if isinstance(scheduler, RoundScheduler) else 60.0
            now = clock.now()
            if self._stop.wait(max(0.01, (math.floor(now / round_s) + 1) * round_s - now)):
                return
            if isinstance(self.cluster.controller.scheduler, RoundScheduler):
                with self.cluster._lock:
                    self.cluster.controller.wake()
                self.cluster.backend.wakeup()
