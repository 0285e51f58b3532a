"""Embedded use: ``with accelnet.local() as cluster: cluster.submit(fn, ...).result()``.

:func:`local` starts a controller thread over the local backend (one worker process per
device it uses) on this machine's fabric, or on any fabric (``fabric="mixed-lab"``) whose
devices are then emulated on this machine's CPU. Jobs are Python callables (cloudpickled)
or job specs with a shell command or an entrypoint. A job may consume earlier jobs'
outputs (``inputs={"tiles": job}``): it waits for them and finds their output folders in
``ACCELNET_INPUT_<ALIAS>`` (:mod:`accelnet.runtime.local.handoff`). Devices are watched and
repaired (:mod:`accelnet.runtime.care.device_care`, docs/devices.md):
``local(policy=..., faults=...)``,
``cluster.devices()``, ``drain``, ``undrain``, ``reset_device``, ``probe``, ``inject``.
Every job's energy is accounted (``job.energy``); ``local(power_budget_w=...)`` keeps the
devices under a power budget by capping them and delaying starts (docs/power.md); the
telemetry history goes to the store (``cluster.store.history(...)``).
"""

from __future__ import annotations

import math
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import cloudpickle

from accelnet.devices.energy import JobEnergy
from accelnet.devices.faults import Fault
from accelnet.devices.power import PowerControl
from accelnet.devices.remediation import RemediationPolicy, load_policy
from accelnet.devices.reset import NvidiaSmiReset
from accelnet.devices.telemetry import Sampler
from accelnet.fabric import Fabric, load_fabric
from accelnet.runtime.care.device_care import DeviceCare
from accelnet.runtime.care.history_keeper import HISTORY_WIDTH_S, HistoryKeeper
from accelnet.runtime.care.power import PowerCare, default_controls
from accelnet.runtime.clock import SystemClock
from accelnet.runtime.control.controller import Controller
from accelnet.runtime.control.nccl_tuning import NcclTuning
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.runtime.control.store import Event, JobRecord, MemoryStore, Store
from accelnet.runtime.local.backend import LocalBackend, Recycle
from accelnet.runtime.local.runas import OsUser, TenantUsers
from accelnet.runtime.sdk_devices import DeviceOps, default_samplers
from accelnet.runtime.spec_memo import SpecMemo
from accelnet.sched import JobSpec, JobState, Scheduler
from accelnet.sched.jobfile import check_runnable, load_jobs
from accelnet.sched.reasons import Reason

if TYPE_CHECKING:
    from accelnet.runtime.pipeline.stages import (
        Pipeline,  # numpy: imported only where pipelines run
    )
    from accelnet.runtime.ray.backend import RayBackend
    from accelnet.runtime.ray.connect import RayOptions


class JobFailedError(RuntimeError):
    """A job ended FAILED or CANCELLED; the message has its error and log location."""


class Job:
    """A handle on a submitted job."""

    def __init__(self, cluster: LocalCluster, job_id: str) -> None:
        self.cluster = cluster
        self.id = job_id

    @property
    def record(self) -> JobRecord:
        """The job as stored now."""
        return self.cluster.store.get(self.id)

    @property
    def state(self) -> JobState:
        """The job's state now."""
        return self.record.state

    def wait(self, timeout: float | None = None) -> JobRecord:
        """Block until the job is finished (TimeoutError after ``timeout`` seconds)."""
        return self.cluster.wait_for(self.id, timeout)

    def result(self, timeout: float | None = None) -> Any:
        """The job's return value (a list with one entry per rank for gangs); raises
        JobFailedError if it failed or was cancelled, TimeoutError if not done in time."""
        rec = self.wait(timeout)
        if rec.state is not JobState.SUCCEEDED:
            raise JobFailedError(f"job {self.id} {rec.state.value}: {rec.error or 'cancelled'}")
        return rec.result

    @property
    def output(self) -> Path:
        """The job's output folder (``ACCELNET_OUTPUT`` of its tasks; it exists once a
        task has written to it)."""
        return Path(self.cluster.backend.output_location(self.id))

    def cancel(self) -> None:
        """Ask the controller to cancel the job (returns at once)."""
        self.cluster.cancel(self.id)

    def logs(self, rank: int = 0, stream: str = "out") -> str:
        """The rank's stdout (``out``) or stderr (``err``) of the job's last attempt (so far,
        while it runs)."""
        if stream not in ("out", "err"):
            raise ValueError(f"stream must be 'out' or 'err', got {stream!r}")
        rec = self.record
        controller = self.cluster.controller
        for _ in range(2):  # a task that ends meanwhile moves its output to its log file
            with self.cluster._lock:
                path = controller.log_path(self.id, rec.attempts, rank, stream)
            try:
                return path.read_text(errors="replace")
            except FileNotFoundError:
                continue
        return ""

    @property
    def energy(self) -> JobEnergy | None:
        """The job's energy so far (J: measured, modelled or mixed, by device): its ended
        attempts' and, while it runs, the current one's; None before it ran."""
        c = self.cluster
        with c._lock:
            return c.power.job_energy(c.store.get(self.id), c.controller.clock.now())

    def events(self) -> list[Event]:
        """The job's event log: its transitions with their causes (a move off a failing
        device: ``job:moved``, then ``job:admitted`` 'requeued ...'), its tasks' news."""
        return self.cluster.store.events(self.id)

    def __repr__(self) -> str:
        return f"Job({self.id!r}, {self.state.value})"


class LocalCluster(DeviceOps):
    """A controller running in a background thread; use as a context manager.

    ``health`` (default on) watches the devices and repairs them as ``policy`` says (a
    :class:`RemediationPolicy` or a YAML file; docs/devices.md); ``faults`` are injected
    on their schedule, timed from the start. ``power_budget_w`` (W, the devices' draw)
    caps devices and delays starts to stay under it, through ``power_control`` for its
    devices (default: NVML for NVIDIA GPUs where permitted, else recorded caps);
    ``history_s``: the width of the telemetry buckets kept in the store. With ``ray``
    (docs/ray.md) tasks run on a Ray cluster's nodes, whose devices make the fabric (or
    those of ``fabric``, which then declares the machines); their telemetry is not
    sampled and power caps are recorded, not enforced. ``run_as`` maps tenants to the users
    of this machine their tasks run as (a :class:`TenantUsers` also makes a user per
    tenant; :mod:`accelnet.runtime.local.runas`; needs root);
    ``task_cwd`` where tasks start (:class:`LocalBackend`)."""

    def __init__(
        self,
        fabric: Fabric | str | None = None,
        workdir: str | Path | None = None,
        db: str | Path | None = None,
        scheduler: Scheduler | None = None,
        recycle: Recycle = "per-tenant",
        *,
        policy: RemediationPolicy | str | Path | None = None,
        faults: Iterable[Fault] = (),
        health: bool = True,
        sample_period_s: float = 2.0,
        power_budget_w: float | None = None,
        power_control: PowerControl | None = None,
        history_s: float = HISTORY_WIDTH_S,
        ray: RayOptions | None = None,
        run_as: Mapping[str, OsUser] | TenantUsers | None = None,
        task_cwd: Literal["inherit", "scratch"] = "inherit",
    ) -> None:
        users = run_as if isinstance(run_as, TenantUsers) else TenantUsers(run_as)
        self.users = users  # who each tenant's tasks run as (services check their listeners)
        if users.active and ray is not None:
            raise ValueError("run_as: tasks run as another user on the local backend only")
        if isinstance(policy, str | Path):
            policy = load_policy(policy)
        self._tmp = None if workdir is not None else tempfile.TemporaryDirectory(prefix="accelnet-")
        self.workdir = Path(workdir if workdir is not None else self._tmp.name)  # type: ignore[union-attr]
        self.workdir.mkdir(parents=True, exist_ok=True)
        clock = SystemClock()
        self.backend: LocalBackend | RayBackend
        samplers: list[Sampler] = []
        if ray is not None:  # the fabric: the Ray cluster's nodes (or the one declared)
            self.backend = ray.connect(fabric, self.workdir, clock)
            self.fabric, emulated = self.backend.fabric, True
        else:
            emulated = fabric is not None and fabric != "local"
            self.fabric = fabric if isinstance(fabric, Fabric) else load_fabric(fabric)
            self.backend = local = LocalBackend(
                self.fabric.devices,
                self.workdir,
                clock,
                recycle=recycle,
                emulated=emulated,
                device_reset=NvidiaSmiReset(),  # real NVIDIA GPUs only, where permitted
                run_as=run_as,
                task_cwd=task_cwd,
            )
            samplers = default_samplers(self.fabric, local, emulated) if health else []
        self.store: Store = SqliteStore(db) if db is not None else MemoryStore()
        self.controller = Controller(
            self.fabric, self.store, self.backend, clock, self.workdir, scheduler
        )
        self.controller.nccl = NcclTuning(self.fabric, self.workdir / "nccl")
        self.care: DeviceCare | None = None
        if health:
            self.care = DeviceCare(
                self.controller,
                policy,
                samplers=samplers,
                sample_period_s=sample_period_s,
                faults=faults,
                store_requests=db is not None,
            )
        controls, owned = (
            default_controls(self.fabric, emulated, power_control)
            if power_budget_w is not None
            else ({}, [])
        )
        self.power = PowerCare(
            self.fabric, self.store, budget_w=power_budget_w, controls=controls, owned=owned,
            wake=self.controller.wake,
        )  # fmt: skip
        self.controller.power = self.power
        self.history = HistoryKeeper(self.store, history_s)
        if self.care is not None:
            self.care.listeners += [self.power, self.history]
        self._lock = threading.Lock()
        self._specs = SpecMemo()  # submit()'s specs, by the fields they were made from
        self._services: dict[tuple[str, str], Any] = {}  # (tenant, name) -> Service
        self._services_lock = threading.Lock()
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # ----- lifecycle ----------------------------------------------------------------
    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the controller thread."""
        self._thread = threading.Thread(target=self._loop, name="accelnet-controller", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the services, the controller, the workers and their tasks; keep the store's
        contents."""
        for service in self.services():
            service.close()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.care is not None:
            self.care.close()
        self.power.close(self.controller.clock.now())  # caps back to their defaults
        self.history.close()  # the open buckets, as they stand
        self.backend.close()
        self.store.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    def _loop(self) -> None:
        controller = self.controller
        round_s: float | None = getattr(controller.scheduler, "round_s", None)
        # rounds begin at multiples of round_s (as the round scheduler counts them)
        next_round = (
            (math.floor(controller.clock.now() / round_s) + 1) * round_s if round_s else None
        )
        try:
            while not self._stop.is_set():
                events = self.backend.poll(0.02)  # wait without holding the lock
                with self._lock:
                    if next_round is not None and round_s and controller.clock.now() >= next_round:
                        controller.wake()  # a round-based policy decides at every round
                        next_round += round_s
                    changed = controller.apply(events)
                if changed:
                    with self._changed:
                        self._changed.notify_all()
        except BaseException as exc:  # surface controller crashes to waiting callers
            self._error = exc
            with self._changed:
                self._changed.notify_all()
            raise

    # ----- jobs ---------------------------------------------------------------------
    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        accelerators: str | dict[str, Any] = "any:1",
        name: str | None = None,
        inputs: Mapping[str, Job | str] | None = None,
        **spec: Any,
    ) -> Job:
        """Run ``fn(*args)`` on each device of a gang (``accelerators``); ``inputs`` maps
        aliases to the jobs (handles, ids or names) whose outputs it consumes: it runs once
        they have succeeded. Other keyword arguments are job-spec fields (``priority``,
        ``topology``, ``max_retries``, ...). Raises pydantic's ValidationError or
        JobRejectedError for a bad request."""
        fields: dict[str, Any] = {
            "name": name or getattr(fn, "__name__", "job").strip("<>") or "job",
            "run": "python (submitted callable)",
            **spec,
        }
        if inputs:
            fields["inputs"] = {a: j.id if isinstance(j, Job) else j for a, j in inputs.items()}
        resources = dict(fields.pop("resources", {}))
        resources["accelerators"] = accelerators
        fields["resources"] = resources
        job_spec = self._specs.spec(fields)  # validated once per distinct call
        payload = cloudpickle.dumps((fn, args, {}))
        return self._submit(job_spec, payload)

    def submit_pipeline(
        self,
        pipeline: Pipeline,
        name: str = "pipeline",
        accelerators: str | dict[str, Any] | None = None,
        **spec: Any,
    ) -> Job:
        """Run a :class:`~accelnet.runtime.pipeline.stages.Pipeline` as one gang job, by default
        on as many devices as it has stages (at most as many as one machine of the fabric
        has; every stage on that machine): each stage in a process of its own, frames
        through shared memory. The job's result
        holds the pipeline's report (:func:`~accelnet.runtime.pipeline.stages.find_report`).
        Other keyword arguments as for :meth:`submit`."""
        if accelerators is None:
            most = max(len(h.device_ids) for h in self.fabric.hosts)
            accelerators = f"any:{max(1, min(len(pipeline.stages), most))}"
        spec.setdefault("topology", {"required": "host"})  # stages share memory: one machine
        return self.submit(pipeline.run_task, accelerators=accelerators, name=name, **spec)

    def submit_spec(self, spec: JobSpec, job_id: str | None = None) -> Job:
        """Run a job spec (shell ``run`` or ``entrypoint``); ``job_id`` names the job (by
        default its name and a random suffix). StoreError if that id exists."""
        return self._submit(spec, None, job_id)

    def serve(self, spec: Any, tick_s: float = 0.2, **options: Any) -> Any:
        """Start a service (a :class:`~accelnet.serve.spec.ServiceSpec`, or its dict form):
        its replicas as jobs of this cluster behind a router on 127.0.0.1; the running
        :class:`~accelnet.serve.service.Service` (its ``url``; ``close()`` it, or use it as a
        context manager); ``options`` go to it (``choose_model``, ``drain_s``). pydantic's
        ValidationError for a bad spec, nothing started."""
        from accelnet.serve.service import Service  # noqa: PLC0415 (services are optional)
        from accelnet.serve.spec import ServiceSpec  # noqa: PLC0415

        parsed = spec if isinstance(spec, ServiceSpec) else ServiceSpec.model_validate(spec)
        key = (parsed.tenant, parsed.name)
        with self._services_lock:
            if key in self._services:
                raise ValueError(f"tenant {parsed.tenant!r} runs a service named "
                                 f"{parsed.name!r} already")  # fmt: skip
            service = Service(self, parsed, tick_s=tick_s,
                              on_close=lambda: self._forget(key), **options)  # fmt: skip
            self._services[key] = service
        try:
            service.start()
        except BaseException:
            service.close()
            raise
        return service

    def services(self) -> list[Any]:
        """The running services (:class:`~accelnet.serve.service.Service`), by tenant and
        name."""
        with self._services_lock:
            return [self._services[k] for k in sorted(self._services)]

    def service(self, name: str, tenant: str = "default") -> Any:
        """Tenant ``tenant``'s running service ``name``; KeyError if there is none."""
        with self._services_lock:
            if (tenant, name) not in self._services:
                raise KeyError(f"tenant {tenant!r} runs no service named {name!r}")
            return self._services[tenant, name]

    def _forget(self, key: tuple[str, str]) -> None:
        with self._services_lock:
            self._services.pop(key, None)

    def submit_file(self, path: str | Path) -> list[Job]:
        """Run every job of a YAML/JSON job file (each after the jobs it consumes);
        JobSpecError names what is wrong (and nothing is submitted then)."""
        specs = load_jobs(path)
        check_runnable(specs, self.controller.topology, str(path))
        return [self._submit(s, None) for s in specs]

    def job(self, job_id: str) -> Job:
        """A handle on an existing job (StoreError if unknown)."""
        self.store.get(job_id)
        return Job(self, job_id)

    def _submit(self, spec: JobSpec, payload: bytes | None, job_id: str | None = None) -> Job:
        with self._lock:
            jid = self.controller.submit(spec, payload, job_id)
            self.controller.wake()
        self.backend.wakeup()  # end the controller's poll wait now
        return Job(self, jid)

    def reason(self, job_id: str) -> Reason | None:
        """Why a queued job is waiting (None if it is not queued)."""
        with self._lock:
            return self.controller.reason(job_id)

    def cancel(self, job_id: str) -> None:
        """Cancel a job."""
        with self._lock:
            self.controller.cancel(job_id)

    def wait_for(self, job_id: str, timeout: float | None = None) -> JobRecord:
        """Block until ``job_id`` is finished (TimeoutError after ``timeout`` seconds)."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while True:
                if self._error is not None:
                    raise RuntimeError("the controller stopped") from self._error
                rec = self.store.get(job_id)
                if rec.state.is_finished():
                    return rec
                if end is not None and time.monotonic() >= end:
                    raise TimeoutError(f"job {job_id} still {rec.state.value} after {timeout} s")
                self._changed.wait(0.1)

    def wait_all(self, jobs: Iterable[Job], timeout: float | None = None) -> list[JobRecord]:
        """Wait for every job."""
        return [j.wait(timeout) for j in jobs]


def local(
    fabric: Fabric | str | None = None,
    workdir: str | Path | None = None,
    db: str | Path | None = None,
    scheduler: Scheduler | None = None,
    *,
    policy: RemediationPolicy | str | Path | None = None,
    faults: Iterable[Fault] = (),
    health: bool = True,
    power_budget_w: float | None = None,
    power_control: PowerControl | None = None,
    ray: RayOptions | None = None,
) -> LocalCluster:
    """An embedded cluster on this machine (or an emulated ``fabric``); a context manager.
    Devices are watched and repaired as ``policy`` says; ``faults`` are injected; with
    ``power_budget_w`` the devices are capped and starts delayed to stay within it. With
    ``ray`` (``RayOptions(address="auto")``) the tasks run on a Ray cluster (docs/ray.md)."""
    return LocalCluster(fabric, workdir, db, scheduler, policy=policy, faults=faults,
                        health=health, power_budget_w=power_budget_w,
                        power_control=power_control, ray=ray)  # fmt: skip
