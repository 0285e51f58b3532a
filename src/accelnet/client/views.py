"""Rich renderings of what the API answers: job and device tables, one job's details,
and the ``accelnet top`` screen. Pure: data in, renderables out (``now`` is given)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from accelnet.client.models import DeviceOut, EventOut, JobOut, PolicyOut, ServiceOut, WhoAmI

STATE_STYLE = {
    "succeeded": "green",
    "failed": "red",
    "cancelled": "red",
    "running": "cyan",
    "starting": "cyan",
    "preempting": "yellow",
    "pending": "yellow",
    "admitted": "yellow",
}
HEALTH_STYLE = {"pass": "green", "warn": "yellow", "fail": "red", "unknown": "dim"}
DEVICE_STYLE = {"ready": "green", "allocated": "cyan", "refreshing": "yellow",
                "draining": "yellow", "drained": "yellow", "unhealthy": "red",
                "offline": "red"}  # fmt: skip


def duration(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``2h10m``, ``3d04h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def clock(at: float | None) -> str:
    """Local time of an epoch timestamp (``-`` for None)."""
    if at is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def state_text(state: str) -> Text:
    """A job state, coloured."""
    return Text(state, style=STATE_STYLE.get(state, ""))


def _where(job: JobOut) -> str:
    if not job.devices:
        return "-"
    shown = ", ".join(job.devices[:3]) + (
        f" +{len(job.devices) - 3}" if len(job.devices) > 3 else ""
    )
    share = f" ({job.share:g} each)" if job.share is not None and job.share < 1 else ""
    return shown + share


def _age(job: JobOut, now: float) -> float | None:
    """Run time of a started job (to its end), wait so far of a queued one."""
    if job.started_at is not None:
        return (job.finished_at or now) - job.started_at
    return (job.finished_at or now) - job.submitted_at


def jobs_table(jobs: Sequence[JobOut], now: float, title: str | None = None) -> Table:
    """Jobs: id, tenant, state, where, time (running or waited), why it waits or failed."""
    table = Table(title=title, title_justify="left", expand=False)
    for col in ("job", "tenant", "state", "devices", "time", "reason / error"):
        table.add_column(col, no_wrap=col in ("job", "state"), overflow="fold")
    for j in jobs:
        table.add_row(j.id, j.tenant, state_text(j.state), _where(j), duration(_age(j, now)),
                      _note(j))  # fmt: skip
    return table


def _note(job: JobOut) -> Text:
    """Why a job waits (dim), why it failed (red, once it has ended so), or what failed in
    an earlier attempt of a job that is being retried (yellow: it may yet succeed). A job
    that succeeded shows no error, whatever its earlier attempts did."""
    if job.state == "succeeded":
        return Text("")
    if job.error and job.finished_at is not None:
        return Text(job.error, style="red")
    if job.queued and job.reason:
        return Text(job.reason, style="dim")
    if job.error:
        return Text(f"retried after failure {job.failures}: {job.error}", style="yellow")
    return Text(job.reason or "", style="dim")


def job_detail(job: JobOut, events: Sequence[EventOut], now: float) -> Group:
    """One job: its fields, then its event log."""
    info = Table.grid(padding=(0, 2))
    info.add_column(style="bold")
    info.add_column()
    rows: list[tuple[str, str | Text]] = [
        ("job", job.id), ("name", job.name), ("tenant", job.tenant),
        ("state", state_text(job.state)),
        ("devices", _where(job) + (f"  [{job.model}]" if job.model else "")),
        ("submitted", clock(job.submitted_at)), ("started", clock(job.started_at)),
        ("finished", clock(job.finished_at)),
        ("time", duration(_age(job, now))),
        ("attempts", f"{job.attempts} ({job.failures} failed)"),
    ]  # fmt: skip
    if job.inputs:
        rows.append(("inputs", ", ".join(f"{k}={v}" for k, v in job.inputs.items())))
    if job.reason:
        rows.append(("waits", Text(job.reason, style="yellow")))
    if job.error and job.state != "succeeded":
        ended = job.finished_at is not None
        rows.append(("error" if ended else "last failure",
                     Text(job.error, style="red" if ended else "yellow")))  # fmt: skip
    run = job.spec.get("run") or job.spec.get("entrypoint")
    if run:
        rows.append(("run", str(run)))
    for key, value in rows:
        info.add_row(key, value)
    parts: list[RenderableType] = [info]
    if events:
        log = Table(title="events", title_justify="left")
        for col in ("at", "kind", "detail"):
            log.add_column(col, overflow="fold")
        for e in events:
            log.add_row(time.strftime("%H:%M:%S", time.localtime(e.at)), e.kind, e.detail)
        parts.append(log)
    return Group(*parts)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _replica_models(svc: ServiceOut) -> str:
    counts = Counter(r.model or "any" for r in svc.replicas if r.ready and not r.stopping)
    return ", ".join(f"{n}x {m}" for m, n in sorted(counts.items())) or "-"


def services_table(services: Sequence[ServiceOut], title: str | None = None) -> Table:
    """Services: replicas ready of min..max and on which models, requests/s, p50/p95/p99
    (red past the goal), errors, the address."""
    table = Table(title=title, title_justify="left", expand=False)
    for col in ("service", "tenant", "replicas", "on", "req/s", "p50", "p95", "p99",
                "errors", "url"):  # fmt: skip
        table.add_column(col, no_wrap=col in ("service", "url"), overflow="fold")
    for s in services:
        st = s.stats
        over = s.goal_p95_ms is not None and st.p95_ms is not None and st.p95_ms > s.goal_p95_ms
        p95 = Text(_ms(st.p95_ms), style="red" if over else "")
        errors = Text(str(st.errors + st.rejected), style="red" if st.errors else "")
        replicas = f"{s.ready}/{len(s.replicas)} ({s.min_replicas}..{s.max_replicas})"
        name = s.name + (f" v{s.version}" + (" (updating)" if s.updating else "")
                         if s.version > 1 else "")  # fmt: skip
        table.add_row(name, s.tenant, replicas, _replica_models(s), f"{st.rate:.1f}",
                      _ms(st.p50_ms), p95, _ms(st.p99_ms), errors, s.url)  # fmt: skip
    return table


def service_detail(svc: ServiceOut) -> Group:
    """One service: its summary, its replicas, its latest events."""
    parts: list[RenderableType] = [services_table([svc])]
    reps = Table(title="replicas", title_justify="left")
    for col in ("replica", "job", "model", "port", "state"):
        reps.add_column(col)
    for r in svc.replicas:
        state = "stopping" if r.stopping else "ready" if r.ready else "starting"
        style = {"ready": "green", "starting": "yellow", "stopping": "dim"}[state]
        reps.add_row(r.id, r.job, r.model or "any", str(r.port), Text(state, style=style))
    parts.append(reps)
    if svc.events:
        log = Table(title="events", title_justify="left")
        for col in ("ago", "what", "detail"):
            log.add_column(col, overflow="fold")
        for e in svc.events[-15:]:
            log.add_row(duration(e.ago_s), e.what, e.detail)
        parts.append(log)
    return Group(*parts)


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**30:.1f}"


def _num(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.0f}{unit}"


def _memory(d: DeviceOut) -> str:
    if d.memory_used_bytes is None:
        return "-" if d.memory_total_bytes is None else f"-/{_gib(d.memory_total_bytes)}"
    if d.memory_total_bytes is None:
        return _gib(d.memory_used_bytes)
    return f"{_gib(d.memory_used_bytes)}/{_gib(d.memory_total_bytes)}"


def devices_table(devices: Sequence[DeviceOut], title: str | None = None) -> Table:
    """Devices: state (and remediation phase unless healthy), health, then the readings
    some device has (utilization, memory GiB used/total, power, temperature), jobs."""
    readings = [
        (name, fmt)
        for name, attr, fmt in (
            ("util", "utilization_pct", lambda d: _num(d.utilization_pct, "%")),
            ("mem GiB", "memory_used_bytes", _memory),
            ("power", "power_w", lambda d: _num(d.power_w, " W")),
            ("temp", "temperature_c", lambda d: _num(d.temperature_c, " C")),
        )
        if any(getattr(d, attr) is not None for d in devices)
        or (attr == "memory_used_bytes" and any(d.memory_total_bytes for d in devices))
    ]
    table = Table(title=title, title_justify="left")
    for col in ("device", "model", "state", "health"):
        table.add_column(col, no_wrap=True)
    for name, _ in readings:
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("jobs", overflow="fold")
    for d in devices:
        jobs = ", ".join(d.jobs) if d.jobs else ("busy" if d.busy else "")
        state = Text(d.state, style=DEVICE_STYLE.get(d.state, ""))
        if d.phase != "healthy":
            state.append(f" ({d.phase})", style="yellow")
        health = Text(d.health, style=HEALTH_STYLE.get(d.health, ""))
        table.add_row(d.id, d.model, state, health, *(fmt(d) for _, fmt in readings), jobs)
    return table


@dataclass(frozen=True, slots=True)
class TopView:
    """What one ``accelnet top`` frame shows."""

    url: str
    now: float
    who: WhoAmI | None = None
    policy: PolicyOut | None = None
    devices: Sequence[DeviceOut] = ()
    jobs: Sequence[JobOut] = ()  # live jobs (queued and running)
    error: str | None = None
    max_rows: int = 30
    notes: list[str] = field(default_factory=list)


def top_screen(view: TopView) -> Group:
    """Header (server, who, policy, counts), devices, then the queue: running jobs first,
    then queued ones oldest first, each with why it waits."""
    counts = Counter(j.state for j in view.jobs)
    busy = sum(1 for d in view.devices if d.busy)
    head = Text.assemble(("accelnet top", "bold"), f"  {view.url}  ",
                         (time.strftime("%H:%M:%S", time.localtime(view.now)), "dim"))  # fmt: skip
    if view.who is not None:
        head.append(f"  as {view.who.tenant}/{view.who.role}")
    if view.policy is not None:
        head.append(f"  policy {view.policy.policy} ({view.policy.placement})")
    summary = Text(
        f"devices {len(view.devices)} ({busy} busy)  running "
        f"{counts['running'] + counts['starting'] + counts['preempting']}  queued "
        f"{counts['pending'] + counts['admitted']}"
    )
    parts: list[RenderableType] = [head, summary]
    if view.error:
        parts.append(Text(view.error, style="bold red"))
    parts.append(devices_table(view.devices[: view.max_rows], title="devices"))
    running = [j for j in view.jobs if not j.queued]
    queued = sorted((j for j in view.jobs if j.queued), key=lambda j: j.submitted_at)
    shown = (running + queued)[: view.max_rows]
    more = len(view.jobs) - len(shown)
    title = "queue" + (f" (first {len(shown)}; {more} more)" if more > 0 else "")
    parts.append(jobs_table(shown, view.now, title=title))
    parts += [Text(n, style="dim") for n in view.notes]
    return Group(*parts)
