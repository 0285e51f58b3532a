"""The tenant table: each tenant's weight (fair-share policies) and quota (devices per
model, ``*`` for all models together).

A tenant exists once an admin has set it (``PUT /api/v1/tenants/{name}``) or a token was
created for it (``accelnet token create --tenant T`` registers T with weight 1 and no
quota). The server keeps the table in memory and reads it again when it meets a tenant it
does not know (a token created by another process since).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from accelnet.api.db import ApiDb
from accelnet.api.tokens import check_name
from accelnet.sched import Tenant


@dataclass(frozen=True, slots=True)
class TenantRecord:
    """A tenant as stored."""

    name: str
    weight: float = 1.0
    quota: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def tenant(self) -> Tenant:
        """The scheduler's view (ValueError for a weight or quota it refuses)."""
        return Tenant(self.name, self.weight, dict(self.quota))

    @property
    def plain(self) -> bool:
        """Weight 1 and no quota: the scheduler needs no tenant checks for it."""
        return self.weight == 1.0 and not self.quota


class Tenants:
    """The tenant table, cached (thread-safe)."""

    def __init__(self, db: ApiDb) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._cache: dict[str, TenantRecord] = {}
        self.reload()

    def reload(self) -> dict[str, TenantRecord]:
        """Read the table again; returns it."""
        rows = self._db.query("SELECT name, weight, quota FROM api_tenants ORDER BY name")
        found = {
            name: TenantRecord(name, float(weight), MappingProxyType(json.loads(quota)))
            for name, weight, quota in rows
        }
        with self._lock:
            self._cache = found
            return dict(found)

    def all(self) -> dict[str, TenantRecord]:
        """Every tenant (cached)."""
        with self._lock:
            return dict(self._cache)

    def get(self, name: str, refresh: bool = True) -> TenantRecord | None:
        """A tenant, or None; an unknown name reads the table again first (``refresh``)."""
        with self._lock:
            found = self._cache.get(name)
        if found is None and refresh:
            found = self.reload().get(name)
        return found

    def put(self, record: TenantRecord, now: float) -> TenantRecord:
        """Create or replace a tenant (ValueError for a bad name, weight or quota)."""
        check_name(record.name, "tenant")
        record.tenant()  # the scheduler's checks: weight > 0, quotas >= 0 and finite
        self._db.write(
            "INSERT INTO api_tenants(name, weight, quota, updated_at) VALUES(?,?,?,?) "
            "ON CONFLICT(name) DO UPDATE SET weight=excluded.weight, quota=excluded.quota, "
            "updated_at=excluded.updated_at",
            (record.name, record.weight, json.dumps(dict(record.quota)), now),
        )
        with self._lock:
            self._cache[record.name] = record
        return record

    def ensure(self, name: str, now: float) -> TenantRecord:
        """The tenant, registered with weight 1 and no quota if it was not."""
        check_name(name, "tenant")
        self._db.write(
            "INSERT OR IGNORE INTO api_tenants(name, weight, quota, updated_at) "
            "VALUES(?, 1.0, '{}', ?)",
            (name, now),
        )
        found = self.get(name)
        assert found is not None
        return found
