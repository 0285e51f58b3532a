"""Quotas at admission: a tenant's committed devices per model, and the check a new job
must pass (pure: no I/O, no clock).

A tenant's *use* of a model is what its live jobs hold or ask for: a running job counts
``count x share`` devices of the model it runs on; a queued job counts them against every
model it may run on (it may land on any of them: the safe reading). ``*`` counts every
job once. A new job is admitted if, on at least one model it may run on, use plus its
request stays within the tenant's quota for that model, and use of ``*`` plus its request
within the quota for ``*`` (keys name catalog models: ``H100`` is ``H100-SXM``; see
:func:`accelnet.sched.scheduler.canonical_quota`). The scheduler enforces the same quotas
on running jobs when it places them; admission keeps a tenant from queueing more than its
share in the first place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from accelnet.sched.scheduler import canonical_quota

ALL = "*"
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Charge:
    """What one live job counts against its tenant: ``amount`` devices on each of
    ``models`` (its candidates while queued, the model it runs on while running)."""

    tenant: str
    amount: float
    candidates: tuple[str, ...]
    placed: str | None = None

    @property
    def models(self) -> tuple[str, ...]:
        """The models it counts against now."""
        return (self.placed,) if self.placed is not None else self.candidates


@dataclass(frozen=True, slots=True)
class OverQuota:
    """Why a job is refused: per model it could run on, the quota and the use."""

    tenant: str
    amount: float
    limits: tuple[tuple[str, float, float], ...]  # (model or '*', quota, use)

    def message(self) -> str:
        """``tenant vision is over its quota: L4 quota 2 devices, 2 in use or queued;
        this job needs 1 more``."""
        parts = [f"{'all models' if m == ALL else m} quota {q:g} device{'s' * (q != 1)}, "
                 f"{u:g} in use or queued" for m, q, u in self.limits]  # fmt: skip
        return (
            f"tenant {self.tenant} is over its quota: {'; '.join(parts)}; "
            f"this job needs {self.amount:g} more"
        )


class QuotaLedger:
    """Every live job's :class:`Charge`, by job id. Not thread-safe: callers lock."""

    def __init__(self) -> None:
        self._charges: dict[str, Charge] = {}

    def charge(self, job: str, charge: Charge) -> None:
        """A job is live (submitted, or found at start-up)."""
        self._charges[job] = charge

    def place(self, job: str, model: str) -> None:
        """A job started on ``model``."""
        found = self._charges.get(job)
        if found is not None:
            self._charges[job] = replace(found, placed=model)

    def unplace(self, job: str) -> None:
        """A job went back to the queue."""
        found = self._charges.get(job)
        if found is not None and found.placed is not None:
            self._charges[job] = replace(found, placed=None)

    def release(self, job: str) -> None:
        """A job finished."""
        self._charges.pop(job, None)

    def __contains__(self, job: object) -> bool:
        return job in self._charges

    def tenants(self) -> set[str]:
        """The tenants of the live jobs."""
        return {c.tenant for c in self._charges.values()}

    def use(self, tenant: str) -> dict[str, float]:
        """Devices per model (and ``*``) the tenant's live jobs count."""
        out: dict[str, float] = {}
        for c in self._charges.values():
            if c.tenant != tenant:
                continue
            out[ALL] = out.get(ALL, 0.0) + c.amount
            for m in c.models:
                out[m] = out.get(m, 0.0) + c.amount
        return out

    def check(
        self,
        tenant: str,
        quota: Mapping[str, float],
        amount: float,
        candidates: Iterable[str],
        pending: Iterable[Charge] = (),
    ) -> OverQuota | None:
        """None if a job asking ``amount`` devices of one of ``candidates`` fits the
        tenant's ``quota`` (with ``pending``: jobs of the same request admitted before it);
        else why not."""
        if not quota:
            return None
        limits = canonical_quota(quota)
        use = self.use(tenant)
        for c in pending:
            if c.tenant == tenant:
                use[ALL] = use.get(ALL, 0.0) + c.amount
                for m in c.models:
                    use[m] = use.get(m, 0.0) + c.amount
        total = limits.get(ALL)
        if total is not None and use.get(ALL, 0.0) + amount > total + _EPS:
            return OverQuota(tenant, amount, ((ALL, total, use.get(ALL, 0.0)),))
        blocked = []
        for m in candidates:
            limit = limits.get(m)
            if limit is None or use.get(m, 0.0) + amount <= limit + _EPS:
                return None
            blocked.append((m, limit, use.get(m, 0.0)))
        if not blocked:  # no candidate at all: the fabric check refuses it, not the quota
            return None
        return OverQuota(tenant, amount, tuple(blocked))
