"""``drf``: dominant-resource fair sharing across tenants (Ghodsi et al., NSDI'11), each
device model being one resource.

A tenant's *share* of model ``m`` is the devices of ``m`` its planned jobs use over the
capacity of ``m``; its *dominant share* is the largest of those, and its *weighted* dominant
share that over its weight (``RoundContext.weights``; 1.0 when absent). A tenant that uses
half the H100s and a quarter of the T4s has a dominant share of 1/2, whichever model the
next job asks for.

Each round the order is built by *progressive filling*, the round mechanism then realises it
greedily:

1. Pick the tenant with the smallest weighted dominant share that still has a job not
   considered (ties: the tenant's name) and take its oldest job (submission time, then
   queue order).
2. Offer the job its models fastest first, leaving out any model its tenant's quota does not
   allow any more (per model, keys are catalog names or aliases such as ``H100``, and ``*``
   for all models together).
3. Charge the tenant as if the job got the first offered model that still has room for its
   gang: that is exactly what the greedy realisation does with the same order, so the
   shares here are the shares of the plan. A job no offered model has room for is charged
   nothing; its pairs come after everyone else's (work conservation: the room the greedy
   sees can differ between rounds, when running jobs keep their devices).

Borrowing is built in: a tenant with nothing to run is never picked, so the devices it
does not use go to the others, but never beyond their quotas. A tenant not among the
known tenants (when some are known) is offered nothing, as with the queue policies.

Quotas need the tenants: they come from the context (``RoundContext.tenants``, the
snapshot's) and, where the context has none, from the constructor.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping
from types import MappingProxyType

from accelnet.sched.rounds import Allocation, RoundContext, RoundPolicy
from accelnet.sched.scheduler import canonical_quota
from accelnet.sched.snapshot import JobView, Tenant

_ALL = "*"


class _Account:
    """One tenant during a filling: its jobs still to consider (oldest first), its quota
    (canonical keys) and the devices charged to it per model and in all (``*``)."""

    def __init__(self, weight: float, quota: Mapping[str, float], jobs: list[JobView]) -> None:
        self.weight = weight
        self.quota = quota
        self.jobs = deque(jobs)
        self.used: dict[str, float] = {}

    def share(self, capacity: Mapping[str, int]) -> float:
        """Weighted dominant share: the largest used/capacity over models, over the weight."""
        dominant = max(
            (n / capacity[m] for m, n in self.used.items() if m != _ALL and capacity.get(m)),
            default=0.0,
        )
        return dominant / self.weight

    def allows(self, model: str, need: float) -> bool:
        """Whether ``need`` more devices of ``model`` (a share counts by its part) stay
        within the quota (per model and in all)."""
        for key in (model, _ALL):
            limit = self.quota.get(key)
            if limit is not None and self.used.get(key, 0) + need > limit + 1e-9:
                return False
        return True

    def charge(self, model: str, need: float) -> None:
        """Count ``need`` devices of ``model`` (and in all) against the tenant."""
        for key in (model, _ALL):
            self.used[key] = self.used.get(key, 0) + need


class Drf(RoundPolicy):
    """Weighted dominant-resource fairness across tenants, with per-model quotas (see the
    module docstring). ``tenants``: weights and quotas used when the context carries none."""

    name = "drf"
    timeless = True  # no allocation

    def __init__(self, tenants: Mapping[str, Tenant] | None = None) -> None:
        self.tenants: Mapping[str, Tenant] = MappingProxyType(dict(tenants or {}))

    def allocate(self, ctx: RoundContext) -> Allocation:
        """No allocation: the order is the policy."""
        return {}

    def order(self, ctx: RoundContext, x: Allocation) -> list[tuple[str, str]]:
        """(job, model) pairs by progressive filling of weighted dominant shares; pairs of
        jobs that found no room come last, and no pair exceeds its tenant's quota."""
        accounts = self._accounts(ctx)
        room = {m: float(c) for m, c in ctx.capacity.items()}
        heap = [(0.0, name) for name in accounts]
        heapq.heapify(heap)
        out: list[tuple[str, str]] = []
        unfit: list[tuple[_Account, JobView]] = []
        while heap:
            _, name = heapq.heappop(heap)
            account = accounts[name]
            job = account.jobs.popleft()
            need = ctx.holds(job.id)  # devices, a share by its part
            offered = [m for m in _fastest_first(ctx, job) if account.allows(m, need)]
            fits = next((m for m in offered if room.get(m, 0.0) >= need - 1e-9), None)
            if fits is not None:
                out += [(job.id, m) for m in offered]
                room[fits] -= need
                account.charge(fits, need)
            elif offered:
                unfit.append((account, job))
            if account.jobs:
                # rounded so that equal shares reached by different sums tie by name
                heapq.heappush(heap, (round(account.share(ctx.capacity), 12), name))
        for account, job in unfit:
            need = ctx.holds(job.id)
            out += [(job.id, m) for m in _fastest_first(ctx, job) if account.allows(m, need)]
        return out

    def _accounts(self, ctx: RoundContext) -> dict[str, _Account]:
        """An account per tenant with jobs, its jobs oldest first; tenants not known (when
        some are) get none, so their jobs are never offered a model."""
        tenants = ctx.tenants or self.tenants
        jobs: dict[str, list[tuple[float, int, JobView]]] = {}
        for pos, job in enumerate(ctx.jobs):
            name = job.spec.tenant
            if not tenants or name in tenants:
                jobs.setdefault(name, []).append((job.submitted_at, pos, job))
        accounts: dict[str, _Account] = {}
        for name, mine in jobs.items():
            mine.sort(key=lambda p: (p[0], p[1]))
            known = tenants.get(name)
            first = mine[0][2].id
            weight = ctx.weights.get(first, known.weight if known is not None else 1.0)
            quota = canonical_quota(known.quota) if known is not None else {}
            accounts[name] = _Account(weight, quota, [j for _, _, j in mine])
        return accounts


def _fastest_first(ctx: RoundContext, job: JobView) -> list[str]:
    """The models the job can run on (a positive rate), fastest first, then by name."""
    rates = ctx.tput[job.id]
    return sorted((m for m, r in rates.items() if r > 0), key=lambda m: (-rates[m], m))
