"""Local dispatch benchmark: many short tasks through the whole system, accelnet and Ray.

What is measured, all in one run so that the ratios are side by side on the same machine
(each configuration once per repeat, in turn, so that all see the same machine noise):

1. **accelnet, default settings**: ``LocalCluster()`` as a user gets it (the ``per-tenant``
   worker policy: a device's worker stays warm for the same tenant) on this machine's
   discovered fabric (one CPU device per core, one long-lived worker process each). After
   the cluster is up and warmed (``--warmup`` tasks, so that every worker has started), the
   main thread submits ``--tasks`` trivial tasks as fast as it can (``cluster.submit(stamp)``)
   and then waits for every one (``Job.wait``). Everything goes through the real path: job
   spec validation, cloudpickle, the store (``MemoryStore``, the SDK's default), the
   controller's reconcile loop and scheduler, energy accounting, the local backend and its
   worker processes, and the device refresh between jobs.
2. **accelnet, recycle="never"**: the same, workers never replaced.
3. **accelnet, 10 ms tasks**: default settings, ``--sleep-tasks`` tasks that sleep 10 ms.
4. **accelnet, recycle="after-python"** (the default until 2026-12-05: a device's worker
   restarted after every Python task), ``--recycle-tasks`` tasks: what recycling costs.
5. **bursts**: default settings, ``--bursts`` sizes (default 250, 1,000, 3,000 tasks), to
   show whether tasks/s stays flat as the burst grows (the main run is the largest).
6. **Ray, normal mode**: ``ray.init(num_cpus=2, include_dashboard=False)`` (``num_cpus`` is
   ``--ray-cpus``, by default this machine's core count, so both systems have the same
   number of worker processes), warmed the same way, then the same tasks as ``@ray.remote``
   calls from the main thread, then one ``ray.get``: for the trivial tasks, the 10 ms tasks
   and each burst. Ray's local mode is tried and recorded (recent versions removed it).

Each configuration's accelnet figure is divided by Ray's for the same tasks.

The task is ``stamp()``, a module-level function that returns ``time.time_ns()`` (an int):
the moment it started, read inside the worker. Figures of each run:

- **tasks/s**: tasks / wall time from just before the first submit until the driver holds
  every result (``Job.wait`` returned for all / ``ray.get`` returned).
- **submit -> start (in task)**: ``time.time()`` read in the main thread just before each
  submit call, to the ``time.time_ns()`` the task returns: the same method on both systems.
- **submit -> finish (driver)**: from the same submit stamp to the moment the driver learned
  the task was done: accelnet's ``record.finished_at`` (stamped by the controller when it
  handles the task's end), Ray's completion callback (``ObjectRef.future()``, attached
  right after the submit loop; a task already done by then is stamped when its callback is
  attached, so Ray's finish figures err on the slow side).
- accelnet only, from its job records (system clock): ``started_at - submitted_at`` and
  ``finished_at - submitted_at``. ``submitted_at`` is stamped inside ``submit`` (after the
  SDK's lock is taken) and ``started_at`` when the controller handles the STARTED event.

- **CPU per task**: the CPU time (user + system) of this process and every process under
  it (accelnet's workers; Ray's raylet, GCS and workers, which a local ``ray.init`` starts
  as its children) during the timed window, divided by the tasks: what a task costs the
  machine, whichever process pays it.

Percentiles are over the tasks of one run; every figure is then the median over
``--repeats`` runs, and each run gets a fresh cluster (accelnet) or a fresh ``ray.init``
(Ray). Start-up and warm-up are outside the timed window for both systems.

Diagnosis (always, under a second): one ``Scheduler.decide`` (full rescan) and one
``Session.decide`` (incremental, what the controller runs) on this machine's fabric with
100, 1,000, ``--tasks`` and 10,000 queued jobs of the same spec, every device READY (median
of 5), since the controller makes such a decision after every submission and task event.
``--profile`` adds one untimed accelnet pass of ``--profile-tasks`` tasks under
``cProfile`` (both the main thread and the controller thread) and prints where the time
goes; the top functions are saved in the JSON.

Run from the project root (Ray is optional: ``.venv/bin/pip install "ray[default]"``;
without it the Ray rows are skipped)::

    .venv/bin/python bench/dispatch_bench.py [--tasks 10000] [--repeats 3]
                                             [--sleep-tasks 1000] [--recycle-tasks 200]
                                             [--bursts 250,1000,3000] [--warmup 20]
                                             [--profile --profile-tasks 2000]

On a 2-core machine the defaults take about 8 minutes (most of it Ray's starts and the
recycling runs). It prints a table and writes
``bench/results/dispatch.json`` (per-run figures, the medians, the ratios, the diagnosis,
the command line, the versions and the machine).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import logging
import os
import platform
import pstats
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from accelnet.devices import DeviceState
from accelnet.fabric import load_fabric
from accelnet.runtime.control.store import JobRecord
from accelnet.runtime.local.backend import Recycle
from accelnet.runtime.sdk import LocalCluster
from accelnet.sched import JobSpec, JobState, Scheduler, Snapshot
from accelnet.sched.session import Session
from benchutil import run_and_report, source_state, src_label

RESULTS = Path(__file__).resolve().parent / "results" / "dispatch.json"
PERCENTILES = (50, 90, 99)
NS = 1e-9


def stamp() -> int:
    """The trivial task: when it started, in ns since the epoch (``time.time_ns()``)."""
    return time.time_ns()


def nap_stamp() -> int:
    """A 10 ms task: when it started (ns since the epoch), after sleeping 10 ms."""
    t = time.time_ns()
    time.sleep(0.01)
    return t


TASKS: dict[str, Callable[[], int]] = {"trivial": stamp, "10 ms": nap_stamp}


def tree_cpu_s() -> float:
    """CPU seconds (user + system) of this process and of every process under it now."""
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


@dataclass
class RunResult:
    """One timed run of one system: throughput and latency percentiles (ms)."""

    system: str
    mode: str
    tasks: int
    wall_s: float
    submit_s: float  # the submit loop alone
    tasks_per_s: float
    start_ms: dict[str, float]  # submit -> start, in task (client stamp to task's clock)
    finish_ms: dict[str, float]  # submit -> finish as the driver saw it
    record_start_ms: dict[str, float] = field(default_factory=dict)  # accelnet records
    record_finish_ms: dict[str, float] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    cpu_ms_per_task: float = 0.0  # this process and those under it, in the timed window


def percentiles(xs: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max of ``xs`` (seconds) in milliseconds."""
    qs = statistics.quantiles(xs, n=100, method="inclusive")
    out = {f"p{p}": qs[p - 1] * 1e3 for p in PERCENTILES}
    out["max"] = max(xs) * 1e3
    return out


# ----- accelnet -------------------------------------------------------------------------


def warm_accelnet(cluster: LocalCluster, n: int) -> None:
    """Run ``n`` tasks at once, so that every device's worker has started."""
    for job in [cluster.submit(stamp) for _ in range(n)]:
        job.result(timeout=120)


def submit_all(submit: Callable[[], Any], n: int) -> tuple[list[Any], list[float], float, float]:
    """Call ``submit`` ``n`` times; handles, client stamps, start (perf_counter), loop time."""
    handles: list[Any] = []
    stamps: list[float] = []
    now = time.time
    t0 = time.perf_counter()
    for _ in range(n):
        stamps.append(now())
        handles.append(submit())
    return handles, stamps, t0, time.perf_counter() - t0


def run_accelnet(
    tasks: int,
    recycle: Recycle | None,
    warmup: int,
    timeout: float,
    workdir: Path,
    kind: str = "trivial",
) -> RunResult:
    """One timed accelnet run on a fresh cluster (``recycle`` None: the default policy)."""
    fn = TASKS[kind]
    extra: dict[str, Any] = {} if recycle is None else {"recycle": recycle}
    with LocalCluster(workdir=workdir, **extra) as cluster:
        warm_accelnet(cluster, warmup)
        gc.collect()
        cpu0 = tree_cpu_s()
        jobs, stamps, t0, submit_s = submit_all(lambda: cluster.submit(fn), tasks)
        end = time.monotonic() + timeout
        records = [job.wait(max(0.0, end - time.monotonic())) for job in jobs]
        wall = time.perf_counter() - t0
        cpu = tree_cpu_s() - cpu0
        devices = len(cluster.fabric.devices)
    bad = [r for r in records if r.state is not JobState.SUCCEEDED]
    if bad:
        raise RuntimeError(f"{len(bad)} accelnet tasks did not succeed, e.g. {bad[0]}")
    start = [r.result * NS - s for r, s in zip(records, stamps, strict=True)]
    finish = [_at(r.finished_at) - s for r, s in zip(records, stamps, strict=True)]
    rec_start = [_at(r.started_at) - r.submitted_at for r in records]
    rec_finish = [_at(r.finished_at) - r.submitted_at for r in records]
    return RunResult(
        system="accelnet",
        mode=f"{kind}, " + ("default settings" if recycle is None else f"recycle={recycle}"),
        tasks=tasks,
        wall_s=wall,
        submit_s=submit_s,
        tasks_per_s=tasks / wall,
        start_ms=percentiles(start),
        finish_ms=percentiles(finish),
        record_start_ms=percentiles(rec_start),
        record_finish_ms=percentiles(rec_finish),
        notes={"devices": devices, "recycle": recycle or "per-tenant (the default)"},
        cpu_ms_per_task=cpu / tasks * 1e3,
    )


def _at(t: float | None) -> float:
    """A time stamp that a finished job must have."""
    if t is None:
        raise RuntimeError("a finished job without a start or finish time")
    return t


def profile_accelnet(
    tasks: int, warmup: int, timeout: float, workdir: Path, top: int
) -> dict[str, Any]:
    """One untimed pass (default settings) under cProfile: where each thread's time goes.

    cProfile sees one thread per profiler, so the controller thread gets its own, by
    wrapping ``LocalCluster._loop`` on the instance (``src/`` is not touched); the main
    thread's covers the submit loop and the waiting.
    """
    loop_prof, main_prof = cProfile.Profile(), cProfile.Profile()
    cluster = LocalCluster(workdir=workdir)
    inner = cluster._loop

    def profiled_loop() -> None:
        loop_prof.enable()
        try:
            inner()
        finally:
            loop_prof.disable()

    cluster._loop = profiled_loop  # type: ignore[method-assign]
    with cluster:
        warm_accelnet(cluster, warmup)
        t0 = time.perf_counter()
        main_prof.enable()
        jobs = [cluster.submit(stamp) for _ in range(tasks)]
        submit_s = time.perf_counter() - t0
        end = time.monotonic() + timeout
        for job in jobs:
            job.wait(max(0.0, end - time.monotonic()))
        main_prof.disable()
        wall = time.perf_counter() - t0
    return {
        "tasks": tasks,
        "wall_s": wall,
        "submit_s": submit_s,
        "note": "cProfile slows Python code down; these times are not the benchmark's",
        "controller_thread": top_functions(loop_prof, top),
        "main_thread": top_functions(main_prof, top),
    }


def top_functions(prof: cProfile.Profile, top: int) -> dict[str, Any]:
    """The ``top`` functions by cumulative and by own time, as text and as rows."""
    stats = pstats.Stats(prof)
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    total = max((ct for _, _, _, ct, _ in raw.values()), default=0.0)
    rows: list[dict[str, Any]] = [
        {
            "function": f"{Path(file).name}:{line}({name})",
            "calls": nc,
            "own_s": tt,
            "cumulative_s": ct,
        }
        for (file, line, name), (_, nc, tt, ct, _) in raw.items()
    ]
    text = io.StringIO()
    pstats.Stats(prof, stream=text).strip_dirs().sort_stats("cumulative").print_stats(top)
    return {
        "total_s": total,
        "by_cumulative": sorted(rows, key=lambda r: -r["cumulative_s"])[:top],
        "by_own": sorted(rows, key=lambda r: -r["own_s"])[:top],
        "text": text.getvalue(),
    }


def decide_cost(queues: Sequence[int], repeats: int) -> list[dict[str, Any]]:
    """One decision on this machine's fabric with ``q`` queued 1-device jobs, both ways:
    ``Scheduler.decide`` on a snapshot (a full rescan) and ``Session.decide`` (the
    incremental scheduler the controller uses).

    The jobs are what ``cluster.submit(stamp)`` queues (the same spec fields); every device
    is READY, so each decision starts as many jobs as there are devices. The median of
    ``repeats`` decisions, each on a fresh snapshot (the session is built once per queue
    length, outside the timing; a decision leaves it unchanged).
    """
    fabric = load_fabric(None)
    spec = JobSpec.model_validate(
        {"name": "stamp", "run": "python (submitted callable)",
         "resources": {"accelerators": "any:1"}}
    )  # fmt: skip
    scheduler = Scheduler()
    rows = []
    for q in queues:
        jobs = tuple(
            JobRecord(f"stamp-{i}", spec, JobState.ADMITTED, 1.0 + i).view() for i in range(q)
        )
        times, starts = [], 0
        for _ in range(repeats):
            snapshot = Snapshot.all_ready(fabric, jobs, now=float(q + 1))
            t0 = time.perf_counter()
            starts = len(scheduler.decide(snapshot).starts)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        session = Session(scheduler, fabric, dict.fromkeys(fabric.devices, DeviceState.READY))
        for job in jobs:
            session.put(job)
        session_times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            decision = session.decide(float(q + 1))
            session_times.append(time.perf_counter() - t0)
            del decision
        rows.append({"queued": q, "decide_ms": med * 1e3, "us_per_queued_job": med / q * 1e6,
                     "session_decide_ms": statistics.median(session_times) * 1e3,
                     "starts": starts})  # fmt: skip
    return rows


# ----- Ray ------------------------------------------------------------------------------


def ray_version() -> str | None:
    """Ray's version, or None if it is not installed."""
    try:
        return version("ray")
    except PackageNotFoundError:
        return None


def init_ray(cpus: int, local_mode: bool) -> None:
    """``ray.init`` for one run: a fresh local instance on 127.0.0.1, quiet, no dashboard."""
    import ray

    from accelnet.runtime.ray.connect import LOOPBACK, keep_loopback

    keep_loopback()  # else Ray takes this machine's network address for the node
    kwargs: dict[str, Any] = {"local_mode": True} if local_mode else {}
    ray.init(
        num_cpus=cpus,
        include_dashboard=False,
        _node_ip_address=LOOPBACK,
        log_to_driver=False,
        logging_level=logging.ERROR,
        **kwargs,
    )


def run_ray(
    tasks: int, cpus: int, warmup: int, local_mode: bool = False, kind: str = "trivial"
) -> RunResult:
    """One timed Ray run on a fresh ``ray.init`` (normal mode: worker processes)."""
    import ray

    init_ray(cpus, local_mode)
    try:
        remote_stamp = ray.remote(TASKS[kind])
        ray.get([remote_stamp.remote() for _ in range(warmup)], timeout=120)
        gc.collect()
        done_at: list[float] = [0.0] * tasks
        cpu0 = tree_cpu_s()
        refs, stamps, t0, submit_s = submit_all(remote_stamp.remote, tasks)
        # Completion stamps: callbacks set after the submit loop, so that they do not slow it
        # down; a task already done when its callback is set is stamped at once, late by at
        # most the time this loop takes (reported as notes.callbacks_s).
        t_cb = time.perf_counter()
        for i, ref in enumerate(refs):
            ref.future().add_done_callback(_stamper(done_at, i))
        callbacks_s = time.perf_counter() - t_cb
        starts: list[int] = ray.get(refs)
        wall = time.perf_counter() - t0
        cpu = tree_cpu_s() - cpu0
        _settle_callbacks(done_at)
    finally:
        ray.shutdown()
    start = [st * NS - s for st, s in zip(starts, stamps, strict=True)]
    finish = [d - s for d, s in zip(done_at, stamps, strict=True)]
    return RunResult(
        system="ray",
        mode=f"{kind}, " + ("local mode" if local_mode else "normal") + f" (num_cpus={cpus})",
        tasks=tasks,
        wall_s=wall,
        submit_s=submit_s,
        tasks_per_s=tasks / wall,
        start_ms=percentiles(start),
        finish_ms=percentiles(finish),
        notes={"num_cpus": cpus, "callbacks_s": callbacks_s},
        cpu_ms_per_task=cpu / tasks * 1e3,
    )


def _stamper(out: list[float], i: int) -> Callable[[Any], None]:
    """A done-callback that writes the time it ran into ``out[i]``."""

    def done(_: Any) -> None:
        out[i] = time.time()

    return done


def _settle_callbacks(done_at: list[float], timeout: float = 60.0) -> None:
    """Wait until every completion callback has run (Ray runs them on its own thread)."""
    end = time.monotonic() + timeout
    while not all(done_at):
        if time.monotonic() > end:
            raise RuntimeError("Ray's completion callbacks did not all run")
        time.sleep(0.01)


def ray_local_mode_support(cpus: int) -> dict[str, Any]:
    """Whether this Ray still accepts ``ray.init(local_mode=True)`` (and its message if not)."""
    import ray

    try:
        init_ray(cpus, local_mode=True)
    except (RuntimeError, TypeError, ValueError) as e:
        return {"supported": False, "error": f"{type(e).__name__}: {e}"}
    ray.shutdown()
    return {"supported": True, "error": None}


# ----- the run --------------------------------------------------------------------------


def median_run(runs: Sequence[RunResult]) -> dict[str, Any]:
    """Medians over repeats of every figure of a series of runs of one configuration."""

    def med(get: Callable[[RunResult], dict[str, float]]) -> dict[str, float]:
        keys = get(runs[0]).keys()
        return {k: statistics.median(get(r)[k] for r in runs) for k in keys}

    return {
        "system": runs[0].system,
        "mode": runs[0].mode,
        "tasks": runs[0].tasks,
        "repeats": len(runs),
        "tasks_per_s": statistics.median(r.tasks_per_s for r in runs),
        "wall_s": statistics.median(r.wall_s for r in runs),
        "submit_s": statistics.median(r.submit_s for r in runs),
        "submits_per_s": statistics.median(r.tasks / r.submit_s for r in runs),
        "cpu_ms_per_task": statistics.median(r.cpu_ms_per_task for r in runs),
        "start_ms": med(lambda r: r.start_ms),
        "finish_ms": med(lambda r: r.finish_ms),
        "record_start_ms": med(lambda r: r.record_start_ms) if runs[0].record_start_ms else {},
        "record_finish_ms": med(lambda r: r.record_finish_ms) if runs[0].record_finish_ms else {},
    }


def ratios(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    """accelnet / Ray: tasks/s (above 1: accelnet faster), latencies (above 1: slower)."""
    out = {"tasks_per_s": a["tasks_per_s"] / b["tasks_per_s"],
           "cpu_per_task": a["cpu_ms_per_task"] / b["cpu_ms_per_task"]}  # fmt: skip
    for kind in ("start_ms", "finish_ms"):
        for p in ("p50", "p99"):
            out[f"{kind[:-3]}_{p}"] = a[kind][p] / b[kind][p]
    return out


@dataclass(frozen=True)
class Config:
    """One configuration timed once per repeat: a label, the system and how to run it,
    and (accelnet) the Ray configuration it is compared with."""

    name: str
    label: str
    system: str  # "accelnet" or "ray"
    kind: str  # a key of TASKS
    tasks: int
    recycle: Recycle | None = None  # accelnet: None is the default policy
    versus: str | None = None  # accelnet: the Ray config of the same tasks


def configs(args: argparse.Namespace, with_ray: bool) -> list[Config]:
    """Every configuration of a repeat, in the order they run."""
    out = [
        Config("accelnet", "accelnet, default settings", "accelnet", "trivial", args.tasks,
               versus="ray"),
        Config("ray", "Ray", "ray", "trivial", args.tasks),
        Config("accelnet_never", "accelnet, recycle=never", "accelnet", "trivial", args.tasks,
               recycle="never", versus="ray"),
        Config("accelnet_sleep", "accelnet, 10 ms tasks", "accelnet", "10 ms", args.sleep_tasks,
               versus="ray_sleep"),
        Config("ray_sleep", "Ray, 10 ms tasks", "ray", "10 ms", args.sleep_tasks),
        Config("accelnet_recycle", "accelnet, recycle=after-python", "accelnet", "trivial",
               args.recycle_tasks, recycle="after-python", versus="ray"),
    ]  # fmt: skip
    for n in args.bursts:
        out += [
            Config(f"accelnet_burst_{n}", f"accelnet, a burst of {n:,}", "accelnet", "trivial",
                   n, versus=f"ray_burst_{n}"),
            Config(f"ray_burst_{n}", f"Ray, a burst of {n:,}", "ray", "trivial", n),
        ]  # fmt: skip
    return [c for c in out if with_ray or c.system == "accelnet"]


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Run every measurement; the JSON-ready result."""
    source = source_state()
    load_before = os.getloadavg()
    ray_ver = None if args.no_ray else ray_version()
    plan = configs(args, ray_ver is not None)
    runs: dict[str, list[RunResult]] = {c.name: [] for c in plan}
    local_mode: dict[str, Any] = {"supported": None, "error": "Ray not installed or --no-ray"}
    workdir = Path(args.workdir) if args.workdir else None
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with (
        tempfile.TemporaryDirectory(prefix="accelnet-dispatch-") as tmp,
        Progress(*columns, console=console, transient=True, refresh_per_second=2) as progress,
    ):
        base = workdir or Path(tmp)  # each run's logs, scratch dirs and worker logs
        if ray_ver is not None:
            task = progress.add_task("Ray local mode: is it still there?", total=1)
            local_mode = ray_local_mode_support(args.ray_cpus)
            progress.advance(task)
        task = progress.add_task("runs", total=args.repeats * len(plan))
        for i in range(args.repeats):
            for c in plan:
                progress.update(task, description=f"repeat {i + 1}: {c.label}, {c.tasks:,} tasks")
                if c.system == "accelnet":
                    r = run_accelnet(c.tasks, c.recycle, args.warmup, args.timeout,
                                     base / f"{c.name}-{i}", c.kind)  # fmt: skip
                else:
                    r = run_ray(c.tasks, args.ray_cpus, args.warmup, kind=c.kind)
                runs[c.name].append(r)
                progress.advance(task)
        task = progress.add_task("Scheduler.decide vs queue length", total=1)
        decide = decide_cost(sorted({100, 1000, args.tasks, 10_000}), repeats=5)
        progress.advance(task)
        profile = None
        if args.profile:
            task = progress.add_task(
                f"cProfile: accelnet, {args.profile_tasks:,} tasks (untimed)", total=1
            )
            profile = profile_accelnet(
                args.profile_tasks, args.warmup, args.timeout, base / "profile", args.top
            )
            progress.advance(task)
    medians = {name: median_run(rs) for name, rs in runs.items() if rs}
    result_ratios = {
        f"{c.name}_over_ray": ratios(medians[c.name], medians[c.versus])
        for c in plan
        if c.versus is not None and c.versus in medians
    }
    accel_devices = runs["accelnet"][0].notes["devices"]
    return {
        "schema": "accelnet.bench.dispatch/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(sys.orig_argv),
        "argv": sys.argv,
        "parameters": {
            "tasks": args.tasks,
            "sleep_tasks": args.sleep_tasks,
            "bursts": args.bursts,
            "recycle_tasks": args.recycle_tasks,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "ray_cpus": args.ray_cpus,
            "task": "stamp(): return time.time_ns(); nap_stamp(): the same, then sleep 10 ms",
            "configs": [asdict(c) for c in plan],
        },
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "platform": platform.platform(),
            "accelnet": version("accelnet"),
            "accelnet_devices": accel_devices,
            "ray": ray_ver,
            "loadavg_before": load_before,  # 1, 5, 15 min: other work on a shared machine
            "loadavg_after": os.getloadavg(),
        },
        "source": source,
        "ray_local_mode": local_mode,
        "runs": {name: [asdict(r) for r in rs] for name, rs in runs.items()},
        "medians": medians,
        "ratios": result_ratios,
        "decide_cost": decide,
        "profile": profile,
    }


# ----- output ---------------------------------------------------------------------------


def report(result: dict[str, Any], console: Console) -> None:
    """Print the figures as a rich table (and the profile, if one was taken)."""
    p, m, med = result["parameters"], result["machine"], result["medians"]
    table = Table(
        title="Local dispatch: short tasks through the whole system, accelnet and Ray",
        caption=f"medians of {p['repeats']} repeats, side by side in one run; "
        f"{m['cpu_count']} cores, accelnet {m['accelnet']} ({m['accelnet_devices']} devices), "
        f"Ray {m['ray'] or 'not run'}, Python {m['python']}; src at {src_label(result['source'])}",
    )
    for col in ("configuration", "tasks", "tasks/s", "vs Ray", "CPU ms/task"):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for col in ("start p50", "start p99", "finish p50", "finish p99"):
        table.add_column(f"{col} (ms)", justify="right")
    for c in p["configs"]:
        r = med.get(c["name"])
        if r is None:
            continue
        ratio = result["ratios"].get(f"{c['name']}_over_ray")
        table.add_row(
            c["label"], f"{r['tasks']:,}", f"{r['tasks_per_s']:,.0f}",
            "" if ratio is None else f"{ratio['tasks_per_s']:.2f}x",
            f"{r['cpu_ms_per_task']:.2f}",
            f"{r['start_ms']['p50']:,.1f}", f"{r['start_ms']['p99']:,.1f}",
            f"{r['finish_ms']['p50']:,.1f}", f"{r['finish_ms']['p99']:,.1f}",
        )  # fmt: skip
    console.print(table)
    console.print(
        "start = submit call -> the task's own time.time_ns(); finish = submit call -> the "
        "driver knows it is done (accelnet: record.finished_at; Ray: completion callback). "
        "vs Ray: accelnet's tasks/s over Ray's for the same tasks (above 1: accelnet faster). "
        "CPU: this process and every process under it during the timed window."
    )
    lm = result["ray_local_mode"]
    if lm["supported"] is False:
        console.print(
            f"Ray local mode not measured: ray.init(local_mode=True) raised {lm['error']}"
        )
    decide = Table(
        title="One decision on this fabric (every device READY) vs queued jobs",
        caption="the controller decides again after every submission and every task event, "
        "through the incremental Session",
    )
    for col in ("queued jobs", "Scheduler.decide (ms)", "µs per queued job",
                "Session.decide (ms)", "starts"):  # fmt: skip
        decide.add_column(col, justify="right")
    for r in result["decide_cost"]:
        decide.add_row(
            f"{r['queued']:,}", f"{r['decide_ms']:,.2f}", f"{r['us_per_queued_job']:.2f}",
            f"{r['session_decide_ms']:,.3f}", str(r["starts"]),
        )  # fmt: skip
    console.print(decide)
    prof = result["profile"]
    if prof is not None:
        console.print(
            f"\ncProfile of {prof['tasks']:,} accelnet tasks (untimed pass, "
            f"{prof['wall_s']:.1f} s under the profiler): controller thread"
        )
        console.print(prof["controller_thread"]["text"], markup=False, highlight=False)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks per throughput run")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each configuration")
    parser.add_argument(
        "--recycle-tasks", type=int, default=200, help="tasks of the recycle=after-python run"
    )
    parser.add_argument("--sleep-tasks", type=int, default=1000, help="tasks of 10 ms per run")
    parser.add_argument(
        "--bursts",
        type=lambda v: [int(x) for x in v.split(",") if x.strip()],
        default=[250, 1000, 3000],
        help="burst sizes, comma-separated (empty: none)",
    )
    parser.add_argument("--warmup", type=int, default=20, help="untimed tasks before timing")
    parser.add_argument(
        "--ray-cpus", type=int, default=os.cpu_count() or 1, help="num_cpus for ray.init"
    )
    parser.add_argument("--no-ray", action="store_true", help="skip Ray even if installed")
    parser.add_argument(
        "--timeout", type=float, default=3600.0, help="give up on an accelnet run after (s)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="add an untimed accelnet pass under cProfile"
    )
    parser.add_argument("--profile-tasks", type=int, default=2000, help="tasks of that pass")
    parser.add_argument("--top", type=int, default=25, help="functions kept from the profile")
    parser.add_argument("--workdir", help="accelnet work dirs under here (default: a tmp dir)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    for name in ("tasks", "repeats", "recycle_tasks", "sleep_tasks", "warmup", "ray_cpus",
                 "profile_tasks"):  # fmt: skip
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if any(n < 1 for n in args.bursts):
        parser.error(f"--bursts: sizes must be >= 1, got {args.bursts}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark, print the table, write the JSON."""
    args = parse_args(argv)
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
