"""A round's plan: which model each job runs on this round, and who runs packed with whom.

The round scheduler (:mod:`accelnet.sched.rounds`) asks its policy for an order of units
(a job alone, or a packed pair, each on a model) and plans them greedily here, within the
room the fabric has (counted device by device, :mod:`accelnet.sched.planroom`) and within
the tenants' quotas. Realising the plan into placements is the scheduler's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from accelnet.sched.colocate import PACKED_SHARE
from accelnet.sched.jobstate import JobState
from accelnet.sched.planroom import PlanRoom
from accelnet.sched.scheduler import canonical_quota

if TYPE_CHECKING:
    from accelnet.sched.rounds import RoundContext


def make_plan(
    ctx: RoundContext,
    units: Iterable[tuple[tuple[str, ...], str]],
    keep: Mapping[str, str],
    kept_mates: Mapping[str, str],
    halves: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """Greedy: each unit (a job, or a packed pair) takes the model of its first entry
    in ``units`` (the policy's order) with room for its gang (a pair needs one gang's
    devices).
    ``keep``: jobs that keep their model (between rounds: the running ones and those
    planned before), ``kept_mates`` their mates; ``halves``: running packed jobs whose
    mate has gone, and the model they run on (a pair of one of them, kept, and a job
    not planned yet takes no more room: the newcomer joins it; on its own model such a
    job holds half of its devices against its tenant's quota, though a whole job could
    not use the other half). A running job whose first fitting entry is its
    current model keeps its devices. Returns the plan and the mates."""
    quotas = _Quotas(ctx)
    halves = halves or {}
    plan: dict[str, str] = {}
    mates: dict[str, str] = {}
    room = PlanRoom(ctx.capacity)

    def quota_part(jid: str, model: str) -> float:
        return PACKED_SHARE if jid in mates or halves.get(jid) == model else 1.0

    def share(jid: str) -> float:
        return ctx.holds(jid) / ctx.gang[jid]

    # shares that keep running stay on their devices: the room beside them is what it is
    on_devices: dict[str, list[tuple[tuple[str, ...], float]]] = {}
    counted: set[str] = set()
    for job in ctx.jobs:
        model, p = keep.get(job.id), job.placement
        if (model is not None and p is not None and p.model == model
                and job.state in (JobState.STARTING, JobState.RUNNING)
                and share(job.id) < 1):  # fmt: skip
            on_devices.setdefault(model, []).append((p.devices, share(job.id)))
            counted.add(job.id)
    for model, held in on_devices.items():
        room.hold(model, held)
    for jid, model in keep.items():
        if jid in ctx.gang:
            plan[jid] = model
            mate = kept_mates.get(jid)
            if mate is not None and mate in keep and kept_mates.get(mate) == jid:
                mates[jid] = mate
                if mate not in plan:  # a kept pair takes one gang's devices
                    room.take(model, ctx.gang[jid], 1.0)
            elif jid not in counted:
                room.take(model, ctx.gang[jid], share(jid))
            quotas.charge(jid, model, quota_part(jid, model))

    def place(unit: tuple[str, ...], model: str, part: float) -> bool:
        count, part_of_one = ctx.gang[unit[0]], share(unit[0])
        if not (room.fits(model, count, part_of_one) and quotas.allows(unit, model, part)):
            return False
        for jid in unit:
            plan[jid] = model
            quotas.charge(jid, model, part)
        if len(unit) == 2:
            mates[unit[0]], mates[unit[1]] = unit[1], unit[0]
        room.take(model, count, part_of_one)
        return True

    # a newcomer may still join a kept half (it takes no room): then no early end
    joinable, tput = bool(halves), ctx.tput
    if not joinable and room.full():
        return plan, mates  # the kept jobs fill every device: nothing else can be planned
    for unit, model in units:
        if len(unit) == 1:  # a job alone (most units): the checks below, shortened
            if (unit[0] not in plan and tput.get(unit[0], {}).get(model)
                    and place(unit, model, quota_part(unit[0], model))
                    and not joinable and room.full()):  # fmt: skip
                break  # every device is planned: no later unit fits
            continue
        if any(not tput.get(j, {}).get(model) for j in unit):
            continue
        joins = [j for j in unit if j not in plan]
        if len(unit) == 2 and len(joins) == 1:
            host = unit[0] if joins[0] == unit[1] else unit[1]
            if (halves.get(host) == model and host not in mates and plan[host] == model
                    and quotas.allows(joins, model, PACKED_SHARE)):  # fmt: skip
                plan[joins[0]], mates[host], mates[joins[0]] = model, joins[0], host
                quotas.charge(joins[0], model, PACKED_SHARE)
            continue
        if (len(joins) == len(unit) and place(unit, model, PACKED_SHARE)
                and not joinable and room.full()):  # fmt: skip
            break
    return plan, mates


class _Quotas:
    """Tenants' quotas (devices per model and in all) while a plan is made: a job of a
    tenant that is not known (when tenants are given) is never planned, and no tenant's
    planned devices exceed its quota, borrowing of idle devices included."""

    def __init__(self, ctx: RoundContext) -> None:
        self.ctx = ctx
        self.tenant_of = {j.id: j.spec.tenant for j in ctx.jobs}
        self.limits = {name: canonical_quota(t.quota) for name, t in ctx.tenants.items()}
        self.used: dict[str, dict[str, float]] = {}

    def allows(self, unit: Sequence[str], model: str, part: float = 1.0) -> bool:
        """Whether every job of ``unit`` (each holding ``part`` of its devices) fits its
        tenant's quota, the unit's jobs of one tenant counted together."""
        if not self.ctx.tenants:
            return True
        need: dict[str, float] = {}
        for jid in unit:
            tenant = self.tenant_of[jid]
            need[tenant] = need.get(tenant, 0.0) + self.ctx.holds(jid) * part
        for tenant, more in need.items():
            limits = self.limits.get(tenant)
            if limits is None:
                return False  # unknown tenant: it does not run (as with the queue policies)
            used = self.used.get(tenant, {})
            for key in (model, "*"):
                limit = limits.get(key)
                if limit is not None and used.get(key, 0) + more > limit + 1e-9:
                    return False
        return True

    def charge(self, jid: str, model: str, part: float = 1.0) -> None:
        if not self.ctx.tenants:
            return  # no quotas: nothing reads what is used
        used = self.used.setdefault(self.tenant_of.get(jid, ""), {})
        need = self.ctx.holds(jid) * part
        for key in (model, "*"):
            used[key] = used.get(key, 0) + need


def standing_plan(
    ctx: RoundContext, units: Iterable[tuple[tuple[str, ...], str]] | None
) -> dict[str, str] | None:
    """The plan :func:`make_plan` makes when every job of ``ctx`` runs (none queued or
    being stopped, none packed) and each keeps the model it runs on, found without making
    it: each job -> its model. ``units``: the policy's order when a round begins (None
    between rounds, when every running job is kept and the order is not read).

    A round's plan keeps them all, whichever jobs it must keep, when each job's first unit
    in the order is its own model: greedy in that order, each job then finds the room its
    model's running gangs leave it, provided they fit the model's schedulable devices
    together (whole devices, every gang of at least one). None where that is not sure
    (a fractional share, a tenant's quota or an unknown tenant, more running than the room,
    a job whose first unit is another model): then the plan is made."""
    plan = running_plan(ctx)
    if plan is None or units is None or leads_home(plan, units):
        return plan
    return None


def running_plan(ctx: RoundContext) -> dict[str, str] | None:
    """The part of :func:`standing_plan` that does not read the order: each job -> the
    model it runs on, if every job runs whole on room enough and no quota or unknown tenant
    may refuse one (else None). It reads the jobs, the devices and the tenants only."""
    plan: dict[str, str] = {}
    load: dict[str, int] = {}
    for job in ctx.jobs:
        p, jid = job.placement, job.id
        if p is None or job.state not in (JobState.STARTING, JobState.RUNNING) or p.share < 1:
            return None
        gang = ctx.gang[jid]
        if gang < 1 or ctx.holds(jid) != gang or not ctx.tput.get(jid, {}).get(p.model):
            return None
        plan[jid] = p.model
        load[p.model] = load.get(p.model, 0) + gang
    if any(n > ctx.capacity.get(m, 0) for m, n in load.items()):
        return None
    if ctx.tenants and (
        any(canonical_quota(t.quota) for t in ctx.tenants.values())
        or any(j.spec.tenant not in ctx.tenants for j in ctx.jobs)
    ):
        return None
    return plan


def leads_home(plan: Mapping[str, str], units: Iterable[tuple[tuple[str, ...], str]]) -> bool:
    """Whether each job of ``plan`` has its first unit of ``units`` on its own model (a
    job alone, not a packed pair), the other part of :func:`standing_plan`."""
    seen: set[str] = set()
    for unit, model in units:
        if len(unit) != 1:
            return False
        jid = unit[0]
        if jid in seen:
            continue
        if plan.get(jid) != model:
            return False
        seen.add(jid)
        if len(seen) == len(plan):
            break
    return len(seen) == len(plan)
